//! `sless rm NAME`: a function or service and the triggers that call it.

use clap::Args;

use super::{Connection, is_not_found, require_workload};
use sless_client::client::Kind;

#[derive(Args)]
pub struct RmArgs {
    /// A function or service.
    pub name: String,
    #[command(flatten)]
    pub connection: Connection,
}

pub async fn run(args: RmArgs) -> anyhow::Result<()> {
    let client = args.connection.client()?;
    let (collection, workload) = require_workload(&client, &args.name).await?;
    // Triggers first: none is left pointing at a missing function.
    let mut removed = Vec::new();
    for trigger in client.list_triggers().await? {
        if trigger.function_ref != workload.name {
            continue;
        }
        match client.delete(Kind::Trigger, &trigger.name).await {
            Ok(()) => removed.push(trigger.name),
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    client.delete(collection, &workload.name).await?;
    if removed.is_empty() {
        eprintln!("deleted {} {}", collection.noun(), workload.name);
    } else {
        eprintln!(
            "deleted {} {} and its triggers {}",
            collection.noun(),
            workload.name,
            removed.join(", ")
        );
    }
    Ok(())
}
