//! `sless invoke NAME`: one call through the public `/fn` proxy.

use std::io::{Read, Write};

use anyhow::{Context, bail};
use clap::Args;

use sless_client::client::Client;

use super::Connection;

#[derive(Args)]
pub struct InvokeArgs {
    /// A function or service.
    pub name: String,
    /// The request body: JSON text, `@file` to read a file, `@-` for stdin.
    #[arg(long, short = 'd')]
    pub data: Option<String>,
    /// HTTP method (default POST with --data, GET without).
    #[arg(long, short = 'X')]
    pub method: Option<String>,
    /// Path (and query) after /fn/<namespace>/<name>, e.g. /items?limit=5.
    #[arg(long, default_value = "")]
    pub path: String,
    /// The call's X-Request-Id (1-64 of A-Z a-z 0-9 . _ -); sless makes one otherwise.
    /// `sless logs NAME --request-id ID` shows what the call printed.
    #[arg(long)]
    pub request_id: Option<String>,
    #[command(flatten)]
    pub connection: Connection,
}

fn read_body(data: &str) -> anyhow::Result<Vec<u8>> {
    match data.strip_prefix('@') {
        Some("-") => {
            let mut body = Vec::new();
            std::io::stdin()
                .read_to_end(&mut body)
                .context("reading the body from stdin")?;
            Ok(body)
        }
        Some(path) => std::fs::read(path).with_context(|| format!("reading the body from {path}")),
        None => Ok(data.as_bytes().to_vec()),
    }
}

pub async fn run(args: InvokeArgs) -> anyhow::Result<()> {
    let client = args.connection.client()?;
    let body = args.data.as_deref().map(read_body).transpose()?;
    let method = match &args.method {
        Some(method) => reqwest::Method::from_bytes(method.to_ascii_uppercase().as_bytes())
            .map_err(|_| anyhow::anyhow!("{method:?} is not an HTTP method"))?,
        None if body.is_some() => reqwest::Method::POST,
        None => reqwest::Method::GET,
    };
    let answer = client
        .invoke(
            &args.name,
            method,
            &args.path,
            body,
            args.request_id.as_deref(),
        )
        .await?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&answer.body)?;
    if !answer.body.is_empty() && !answer.body.ends_with(b"\n") {
        stdout.write_all(b"\n")?;
    }
    stdout.flush()?;
    if !(200..300).contains(&answer.status) {
        let reason = serde_json::from_slice::<serde_json::Value>(&answer.body)
            .ok()
            .and_then(|v| v["error"].as_str().map(String::from));
        let status = reqwest::StatusCode::from_u16(answer.status)
            .map(|s| s.to_string())
            .unwrap_or_else(|_| answer.status.to_string());
        let hint = if answer.status == 503 {
            start_hint(&client, &args.name).await
        } else if let Some(id) = answer.request_id() {
            format!(
                "; what it printed: sless logs {} --request-id {id}",
                args.name
            )
        } else {
            String::new()
        };
        match reason {
            Some(reason) => bail!("HTTP {status} from {}: {reason}{hint}", args.name),
            None => bail!("HTTP {status} from {}{hint}", args.name),
        }
    }
    Ok(())
}

/// How to start a function whose http triggers are all stopped: the proxy's 503 only
/// states the fact (its callers are often anonymous); the CLI knows who is asking.
async fn start_hint(client: &Client, function: &str) -> String {
    let Ok(triggers) = client.list_triggers().await else {
        return String::new();
    };
    let http: Vec<_> = triggers
        .iter()
        .filter(|t| t.function_ref == function && t.trigger_type == "http")
        .collect();
    match http.first() {
        Some(stopped) if !http.iter().any(|t| t.enabled) => {
            format!("; start it with: sless trigger enable {}", stopped.name)
        }
        _ => String::new(),
    }
}
