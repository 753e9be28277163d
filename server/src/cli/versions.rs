//! `sless versions NAME` and `sless rollback NAME VERSION`.

use std::time::{Duration, Instant};

use clap::Args;
use sless_api::{Phase, VersionResponse, human_bytes};

use super::{Connection, POLL_INTERVAL, require_workload, table};

#[derive(Args)]
pub struct VersionsArgs {
    /// A function or service.
    pub name: String,
    #[command(flatten)]
    pub connection: Connection,
}

#[derive(Args)]
pub struct RollbackArgs {
    /// A function or service.
    pub name: String,
    /// One of the versions `sless versions NAME` lists.
    pub version: String,
    /// Seconds to wait for the version to serve.
    #[arg(long, default_value_t = 300)]
    pub wait_timeout: u64,
    #[command(flatten)]
    pub connection: Connection,
}

pub async fn list(args: VersionsArgs) -> anyhow::Result<()> {
    let client = args.connection.client()?;
    let (collection, workload) = require_workload(&client, &args.name).await?;
    let versions = client.versions(collection, &workload.name).await?;
    print!("{}", versions_table(&versions));
    Ok(())
}

/// Newest first; `*` marks the active version.
pub fn versions_table(versions: &[VersionResponse]) -> String {
    let rows: Vec<Vec<String>> = versions
        .iter()
        .map(|v| {
            let unknown = || "-".to_string();
            vec![
                if v.active { "*" } else { "" }.to_string(),
                v.version.clone(),
                v.created_at.clone(),
                v.size.map(human_bytes).unwrap_or_else(unknown),
                v.uploaded_by.clone().unwrap_or_else(unknown),
                v.sha256
                    .as_deref()
                    .map(|s| s.chars().take(12).collect())
                    .unwrap_or_else(unknown),
            ]
        })
        .collect();
    table(
        &["", "VERSION", "CREATED", "SIZE", "UPLOADED BY", "SHA256"],
        &rows,
    )
}

pub async fn rollback(args: RollbackArgs) -> anyhow::Result<()> {
    let client = args.connection.client()?;
    let (collection, workload) = require_workload(&client, &args.name).await?;
    let (kind, name) = (collection.noun(), &workload.name);
    client.rollback(collection, name, &args.version).await?;
    eprintln!("{kind} {name}: switching to version {}", args.version);
    // Ready read after the rollback's answer means the version serves (docs/api.md).
    let deadline = Instant::now() + Duration::from_secs(args.wait_timeout);
    loop {
        let workload = client.get_workload(collection, name).await?;
        if workload.version.as_deref() != Some(args.version.as_str()) {
            anyhow::bail!(
                "{kind} {name:?} moved on to version {} meanwhile (another upload or rollback)",
                workload.version.as_deref().unwrap_or("none")
            );
        }
        match workload.phase {
            Phase::Ready => {
                println!("{kind} {name}: version {} serving", args.version);
                return Ok(());
            }
            Phase::Failed => anyhow::bail!(
                "{kind} {name:?} did not start version {}: {} (its output: sless logs {name})",
                args.version,
                sless_api::text::first_line(workload.message.as_deref().unwrap_or_default())
            ),
            _ if Instant::now() >= deadline => anyhow::bail!(
                "{kind} {name:?} is not serving version {} after {} s; see sless describe {name}",
                args.version,
                args.wait_timeout
            ),
            _ => tokio::time::sleep(POLL_INTERVAL).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_active_version_is_starred() {
        let version = |v: &str, active: bool, sha256: Option<&str>| VersionResponse {
            version: v.into(),
            created_at: "2026-01-02T03:04:05+00:00".into(),
            sha256: sha256.map(String::from),
            size: sha256.map(|_| 2048),
            uploaded_by: sha256.map(|_| "alice".into()),
            active,
        };
        let text = versions_table(&[
            version("20260102030405-1", true, Some("0123456789abcdef")),
            version("20260102030405", false, None),
        ]);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].starts_with("*  20260102030405-1"), "{text}");
        assert!(
            lines[1].contains("alice") && lines[1].ends_with("0123456789ab"),
            "{text}"
        );
        assert!(lines[2].starts_with("   20260102030405 "), "{text}");
    }
}
