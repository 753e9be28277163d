//! `sless logs NAME [--tail N] [--follow] [--request-id ID] [--search TEXT]`.

use clap::Args;
use futures::StreamExt;
use sless_client::client::{Followed, LogFilter};

use super::{Connection, require_workload};

#[derive(Args)]
pub struct LogsArgs {
    /// A function or service.
    pub name: String,
    /// How many of the last lines to print.
    #[arg(long, short = 'n', default_value_t = 100)]
    pub tail: usize,
    /// Keep printing new lines as they are printed, until interrupted.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Only the lines of one call (its X-Request-Id, as `sless invoke` prints it).
    #[arg(long)]
    pub request_id: Option<String>,
    /// Only lines containing this text (case-insensitive).
    #[arg(long, short = 'q')]
    pub search: Option<String>,
    #[command(flatten)]
    pub connection: Connection,
}

pub async fn run(args: LogsArgs) -> anyhow::Result<()> {
    let client = args.connection.client()?;
    let (collection, workload) = require_workload(&client, &args.name).await?;
    let filter = LogFilter {
        tail: args.tail,
        request_id: args.request_id,
        search: args.search,
    };
    if !args.follow {
        for line in client
            .find_logs(collection, &workload.name, &filter)
            .await?
        {
            println!("{}", line.text());
        }
        return Ok(());
    }
    let mut stream = std::pin::pin!(
        client
            .follow_logs(collection, &workload.name, &filter)
            .await?
    );
    while let Some(followed) = stream.next().await {
        match followed? {
            Followed::Line(line) => println!("{}", line.text()),
            Followed::Missed(n) => eprintln!("sless: {n} lines went by too fast to show"),
        }
    }
    anyhow::bail!(
        "the log stream ended (the {} was deleted, sless stopped, or it was open an hour); run the command again to go on",
        collection.noun()
    )
}
