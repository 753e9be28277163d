//! `sless logs NAME [--tail N] [--follow]`.

use std::collections::HashMap;
use std::time::Duration;

use clap::Args;
use sless_api::LogLineResponse;

use super::{Connection, require_workload};

/// How often `--follow` asks for new lines.
const FOLLOW_INTERVAL: Duration = Duration::from_secs(1);
/// The window `--follow` fetches each time; lines are told apart by (time, line).
const FOLLOW_WINDOW: usize = 1000;

#[derive(Args)]
pub struct LogsArgs {
    /// A function or service.
    pub name: String,
    /// How many of the last lines to print.
    #[arg(long, short = 'n', default_value_t = 100)]
    pub tail: usize,
    /// Keep printing new lines until interrupted.
    #[arg(long, short = 'f')]
    pub follow: bool,
    #[command(flatten)]
    pub connection: Connection,
}

fn format(line: &LogLineResponse) -> String {
    format!("{} {} {}", line.time, line.stream, line.line)
}

type Key = (String, String);

fn key(line: &LogLineResponse) -> Key {
    (line.time.clone(), line.line.clone())
}

fn counts(lines: &[LogLineResponse]) -> HashMap<Key, usize> {
    let mut counts = HashMap::new();
    for line in lines {
        *counts.entry(key(line)).or_default() += 1;
    }
    counts
}

/// The lines of `window` not in the previous window (a multiset, so two equal lines in
/// the same millisecond both print).
fn fresh<'a>(
    previous: &HashMap<Key, usize>,
    window: &'a [LogLineResponse],
) -> Vec<&'a LogLineResponse> {
    let mut left = previous.clone();
    window
        .iter()
        .filter(|line| match left.get_mut(&key(line)) {
            Some(n) if *n > 0 => {
                *n -= 1;
                false
            }
            _ => true,
        })
        .collect()
}

pub async fn run(args: LogsArgs) -> anyhow::Result<()> {
    let client = args.connection.client()?;
    let (collection, workload) = require_workload(&client, &args.name).await?;
    let window = if args.follow {
        FOLLOW_WINDOW.max(args.tail)
    } else {
        args.tail
    };
    let lines = client.logs(collection, &workload.name, window).await?;
    for line in &lines[lines.len().saturating_sub(args.tail)..] {
        println!("{}", format(line));
    }
    if !args.follow {
        return Ok(());
    }
    let mut previous = counts(&lines);
    loop {
        tokio::time::sleep(FOLLOW_INTERVAL).await;
        let window = client
            .logs(collection, &workload.name, FOLLOW_WINDOW)
            .await?;
        for line in fresh(&previous, &window) {
            println!("{}", format(line));
        }
        previous = counts(&window);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(time: &str, text: &str) -> LogLineResponse {
        LogLineResponse {
            time: time.into(),
            stream: "stdout".into(),
            version: "v1".into(),
            line: text.into(),
        }
    }

    #[test]
    fn follow_prints_each_line_once() {
        let first = vec![line("t1", "a"), line("t2", "b"), line("t2", "b")];
        let second = vec![
            line("t2", "b"),
            line("t2", "b"),
            line("t3", "c"),
            line("t3", "c"),
        ];
        let new: Vec<String> = fresh(&counts(&first), &second)
            .into_iter()
            .map(|l| l.line.clone())
            .collect();
        assert_eq!(new, ["c", "c"]);
    }
}
