//! The developer commands of the `sless` binary: deploy a folder, list, describe, invoke,
//! logs, remove, start/stop triggers, run jobs. Every API call goes through
//! [`sless_client::client::Client`]; progress goes to stderr, results to stdout.

mod connection;
mod deploy;
mod invoke;
mod jobs;
mod logs;
mod remove;
mod show;
mod triggers;
mod versions;

use std::time::Duration;

use clap::Subcommand;
use sless_api::WorkloadResponse;
use sless_client::client::{Client, ClientError, Kind};

pub use connection::Connection;

/// How often the commands that wait poll the API.
const POLL_INTERVAL: Duration = Duration::from_millis(300);

#[derive(Subcommand)]
pub enum CliCommand {
    /// Check an endpoint and a token and store them in the user's config dir (mode 0600).
    Login(connection::LoginArgs),
    /// Zip a folder, create or update a function (or service), build it, wait for Ready,
    /// create its triggers and print its URL.
    Deploy(Box<deploy::DeployArgs>),
    /// List functions and services with their phase, triggers and URL.
    #[command(visible_alias = "list")]
    Ls(show::LsArgs),
    /// Show every field of a function or service, its triggers and its last invocations.
    Describe(show::DescribeArgs),
    /// Call a function or service through /fn and print the answer's body.
    Invoke(invoke::InvokeArgs),
    /// Print what a function or service printed (stdout and stderr).
    Logs(logs::LogsArgs),
    /// Delete a function or service and its triggers.
    #[command(visible_alias = "delete")]
    Rm(remove::RmArgs),
    /// Start or stop a trigger in place.
    Trigger(triggers::TriggerArgs),
    /// Run one-shot jobs.
    Job(jobs::JobArgs),
    /// List the versions (uploads) a function or service keeps, newest first.
    Versions(versions::VersionsArgs),
    /// Make a kept version the code of a function or service again and wait until it
    /// serves.
    Rollback(versions::RollbackArgs),
}

/// Runs a command and answers the process exit code; errors are one line on stderr.
pub async fn run(command: CliCommand) -> i32 {
    let result = match command {
        CliCommand::Login(args) => connection::login(args).await,
        CliCommand::Deploy(args) => deploy::run(*args).await,
        CliCommand::Ls(args) => show::ls(args).await,
        CliCommand::Describe(args) => show::describe(args).await,
        CliCommand::Invoke(args) => invoke::run(args).await,
        CliCommand::Logs(args) => logs::run(args).await,
        CliCommand::Rm(args) => remove::run(args).await,
        CliCommand::Trigger(args) => triggers::run(args).await,
        CliCommand::Job(args) => jobs::run(args).await,
        CliCommand::Versions(args) => versions::list(args).await,
        CliCommand::Rollback(args) => versions::rollback(args).await,
    };
    match result {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("error: {}", report(&error));
            1
        }
    }
}

/// The error chain as one line, with API errors turned into advice a person can act on.
fn report(error: &anyhow::Error) -> String {
    error
        .chain()
        .map(|cause| match cause.downcast_ref::<ClientError>() {
            Some(client_error) => explain(client_error),
            None => cause.to_string(),
        })
        .collect::<Vec<_>>()
        .join(": ")
}

fn explain(error: &ClientError) -> String {
    match error {
        ClientError::Api {
            status: 401,
            message,
        } => format!(
            "the token was refused: {message}; get a new one with sless token / sless login"
        ),
        ClientError::Config(message) => {
            format!("{message}; get a new token with sless token / sless login")
        }
        other => other.to_string(),
    }
}

fn is_not_found(error: &ClientError) -> bool {
    error.status() == Some(404)
}

/// A function or a service of that name (they share one name space), or None.
async fn find_workload(
    client: &Client,
    name: &str,
) -> Result<Option<(Kind, WorkloadResponse)>, ClientError> {
    for collection in [Kind::Function, Kind::Service] {
        match client.get_workload(collection, name).await {
            Ok(workload) => return Ok(Some((collection, workload))),
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

async fn require_workload(client: &Client, name: &str) -> anyhow::Result<(Kind, WorkloadResponse)> {
    find_workload(client, name).await?.ok_or_else(|| {
        anyhow::anyhow!(
            "no function or service named {name:?} in namespace {}; see sless ls",
            client.namespace()
        )
    })
}

/// Columns separated by two spaces, each as wide as its widest cell.
fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        let mut out = String::new();
        for (i, cell) in cells.into_iter().enumerate() {
            out.push_str(cell);
            if i < last {
                let pad = widths[i] - cell.chars().count() + 2;
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.trim_end().to_string()
    };
    let mut out = line(headers.to_vec());
    out.push('\n');
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns() {
        let rows = vec![
            vec!["hello".to_string(), "function".to_string(), "-".to_string()],
            vec!["a".to_string(), "service".to_string(), "x".to_string()],
        ];
        assert_eq!(
            table(&["NAME", "KIND", "URL"], &rows),
            "NAME   KIND      URL\nhello  function  -\na      service   x\n"
        );
    }

    #[test]
    fn refused_tokens_get_advice() {
        let error = anyhow::Error::new(ClientError::Api {
            status: 401,
            message: "bad signature".into(),
        });
        assert_eq!(
            report(&error),
            "the token was refused: bad signature; get a new one with sless token / sless login"
        );
        let error = anyhow::Error::new(ClientError::Api {
            status: 404,
            message: "function \"x\" not found".into(),
        });
        assert_eq!(
            report(&error.context("deploying")),
            "deploying: function \"x\" not found (HTTP 404)"
        );
    }
}
