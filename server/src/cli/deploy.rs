//! `sless deploy DIR`: zip, create or update, upload, follow the build, create the
//! triggers, print the URL.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use sless_api::keys::version_of;
use sless_api::text::{first_line, last_lines};
use sless_api::{
    Phase, Runtime, TriggerRequest, TriggerResponse, WorkloadRequest, WorkloadResponse,
};
use sless_client::archive;
use sless_client::client::{Client, Kind};

use super::{Connection, POLL_INTERVAL, is_not_found};

/// How long a new trigger may take to become active before deploy stops waiting for it.
const TRIGGER_WAIT: Duration = Duration::from_secs(60);
/// How the embedded runner marks its own lines in a workload's log.
const RUNNER_PREFIX: &str = "[sless] ";
/// Log lines searched for the runner's rollout report.
const ROLLOUT_WINDOW: usize = 200;
/// With no runner line in the log this long, the platform does not report rollouts.
const ROLLOUT_SILENCE: Duration = Duration::from_secs(5);
/// The message the API sets on upload, before a builder picks the upload up.
const BUILD_QUEUED: &str = "build queued";

#[derive(Args)]
pub struct DeployArgs {
    #[arg(help = format!(
        "The folder with the code (zipped without {} and whatever its .slessignore names)",
        archive::skipped_dirs().join(", ")
    ))]
    pub dir: PathBuf,
    /// Name of the function or service (lowercase letters, digits and '-').
    #[arg(long)]
    pub name: String,
    #[arg(long, help = format!(
        "{}; required to create, kept on update when omitted",
        Runtime::choices()
    ))]
    pub runtime: Option<String>,
    /// module.function (default handler.handle).
    #[arg(long)]
    pub entrypoint: Option<String>,
    /// Memory in MB (64–4096, default 128).
    #[arg(long, value_name = "MB")]
    pub memory: Option<u32>,
    /// CPU in thousandths of a core (50-16000, default 1000 = one core).
    #[arg(long, value_name = "MILLICORES")]
    pub cpu_millis: Option<u32>,
    /// Scratch space (HOME/TMPDIR) in MiB (16-65536, default 512).
    #[arg(long, value_name = "MB")]
    pub disk: Option<u32>,
    /// Request timeout in seconds (0 = none, default 60).
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<u32>,
    /// Instances kept running (0-100; default 0 for a function, which then stops when
    /// idle, 1 for a service); kept on update when omitted.
    #[arg(long, value_name = "N")]
    pub min_instances: Option<u32>,
    /// Instances started at most under load (1-100, default 4); kept on update when omitted.
    #[arg(long, value_name = "N")]
    pub max_instances: Option<u32>,
    /// Calls in flight per instance before another starts (default per runtime:
    /// python3.11 8, nodejs20 and go1.23 32); kept on update when omitted.
    #[arg(long, value_name = "CALLS")]
    pub target_concurrency: Option<u32>,
    /// An environment variable; repeat for more. Given at all, it replaces all of them.
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// Where its code may connect: `internet` (public addresses only, the default on
    /// create), `none`, or comma-separated host:port, ip:port or CIDR[:port] entries;
    /// kept on update when omitted.
    #[arg(long, value_name = "internet|none|ENTRY,...")]
    pub egress: Option<sless_api::Egress>,
    /// `http`, `cron:"<5-field schedule>"` or `event:<queue>` (a RabbitMQ queue);
    /// repeat for more (default: http).
    #[arg(long = "trigger", value_name = "http|cron:SCHEDULE|event:QUEUE", value_parser = parse_trigger)]
    pub triggers: Vec<WantedTrigger>,
    /// Create no trigger (the function runs as a job, or gets triggers later); existing
    /// triggers are kept.
    #[arg(long, conflicts_with = "triggers")]
    pub no_trigger: bool,
    /// Deploy an always-on service instead of a function.
    #[arg(long)]
    pub service: bool,
    /// Give up waiting for the build after this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 900)]
    pub wait_timeout: u64,
    #[command(flatten)]
    pub connection: Connection,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WantedTrigger {
    Http,
    Cron(String),
    Event(String),
}

fn parse_env(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
        _ => Err(format!("{text:?} is not NAME=VALUE")),
    }
}

fn parse_trigger(text: &str) -> Result<WantedTrigger, String> {
    if text == "http" {
        return Ok(WantedTrigger::Http);
    }
    let cron = text.strip_prefix("cron:").map(str::trim);
    let queue = text.strip_prefix("event:").map(str::trim);
    match (cron, queue) {
        (Some(schedule), _) if !schedule.is_empty() => {
            Ok(WantedTrigger::Cron(schedule.to_string()))
        }
        (_, Some(queue)) if !queue.is_empty() => Ok(WantedTrigger::Event(queue.to_string())),
        _ => Err(format!(
            "{text:?} is not a trigger; use http, cron:\"<5-field schedule>\" (e.g. cron:\"*/5 * * * *\") \
             or event:<queue>"
        )),
    }
}

pub async fn run(args: DeployArgs) -> anyhow::Result<()> {
    if args.service && (!args.triggers.is_empty() || args.no_trigger) {
        bail!(
            "a service is always on and served at /fn/<namespace>/<name>; --trigger is for functions"
        );
    }
    let client = args.connection.client()?;
    let archive = archive::zip_folder(&args.dir)?;
    let collection = if args.service {
        Kind::Service
    } else {
        Kind::Function
    };
    let kind = collection.noun();
    let name = args.name.as_str();
    eprintln!(
        "packed {} file{} ({:.1} KiB) from {}",
        archive.files.len(),
        if archive.files.len() == 1 { "" } else { "s" },
        archive.zip.len() as f64 / 1024.0,
        args.dir.display()
    );

    let existing = match client.get_workload(collection, name).await {
        Ok(workload) => Some(workload),
        Err(e) if is_not_found(&e) => None,
        Err(e) => return Err(e.into()),
    };
    let env = (!args.env.is_empty()).then(|| args.env.iter().cloned().collect::<BTreeMap<_, _>>());
    match &existing {
        None => {
            let Some(runtime) = args.runtime.clone() else {
                bail!(
                    "--runtime is required to create {kind} {name:?} ({})",
                    Runtime::choices()
                );
            };
            let request = WorkloadRequest {
                name: Some(name.to_string()),
                runtime: Some(runtime),
                entrypoint: args.entrypoint.clone(),
                memory_mb: args.memory,
                cpu_millis: args.cpu_millis,
                disk_mb: args.disk,
                timeout_sec: args.timeout,
                env_vars: env,
                egress: args.egress.clone(),
                min_instances: args.min_instances,
                max_instances: args.max_instances,
                target_concurrency: args.target_concurrency,
                resource_version: None,
            };
            client
                .create_workload(collection, &request)
                .await
                .with_context(|| format!("creating {kind} {name:?}"))?;
            eprintln!("created {kind} {name}");
        }
        Some(current) => {
            let request = WorkloadRequest {
                name: Some(name.to_string()),
                runtime: Some(
                    args.runtime
                        .clone()
                        .unwrap_or_else(|| current.runtime.clone()),
                ),
                entrypoint: Some(
                    args.entrypoint
                        .clone()
                        .unwrap_or_else(|| current.entrypoint.clone()),
                ),
                memory_mb: Some(args.memory.unwrap_or(current.memory_mb)),
                cpu_millis: Some(args.cpu_millis.unwrap_or(current.cpu_millis)),
                disk_mb: Some(args.disk.unwrap_or(current.disk_mb)),
                timeout_sec: Some(args.timeout.unwrap_or(current.timeout_sec)),
                env_vars: Some(env.unwrap_or_else(|| current.env_vars.clone())),
                egress: Some(
                    args.egress
                        .clone()
                        .unwrap_or_else(|| current.egress.clone()),
                ),
                min_instances: Some(args.min_instances.unwrap_or(current.min_instances)),
                max_instances: Some(args.max_instances.unwrap_or(current.max_instances)),
                target_concurrency: Some(
                    args.target_concurrency
                        .unwrap_or(current.target_concurrency),
                ),
                resource_version: Some(current.resource_version.clone()),
            };
            client
                .replace_workload(collection, name, &request)
                .await
                .with_context(|| format!("updating {kind} {name:?}"))?;
            eprintln!("updated {kind} {name}");
        }
    }

    let uploaded = client
        .upload(collection, name, archive.zip)
        .await
        .with_context(|| format!("uploading the code of {kind} {name:?}"))?;
    let key = uploaded["s3_key"].as_str().map(String::from);
    let deadline = Instant::now() + Duration::from_secs(args.wait_timeout);
    let (workload, streamed) =
        follow_build(&client, collection, name, key.as_deref(), deadline).await?;
    if workload.phase == Phase::Failed {
        let message = workload.message.unwrap_or_default();
        // The streamed log already shows the tail; without it, the message carries it.
        if !streamed {
            for line in last_lines(&message, 20) {
                eprintln!("  {line}");
            }
        }
        // Both platforms put the build's cause first.
        let reason = Some(first_line(&message))
            .filter(|l| !l.is_empty())
            .unwrap_or("no reason given");
        bail!("{kind} {name:?} failed to build: {reason}");
    }

    let version = key.as_deref().map(version_of);
    if args.service {
        if let Some(version) = version {
            wait_for_rollout(&client, collection, name, version, deadline).await?;
        }
        eprintln!("{kind} {name}: Ready");
        println!("{}", url_of(&client, &workload, None));
        return Ok(());
    }
    let wanted = if args.no_trigger {
        Vec::new()
    } else if args.triggers.is_empty() {
        vec![WantedTrigger::Http]
    } else {
        args.triggers.clone()
    };
    let enabled = ensure_triggers(&client, name, &wanted).await?;
    let triggers = wait_until_active(&client, name, &enabled, deadline).await?;
    if let Some(version) = version
        && !enabled.is_empty()
    {
        wait_for_rollout(&client, collection, name, version, deadline).await?;
    }
    let workload = client.get_workload(collection, name).await?;
    let all_active = triggers
        .iter()
        .all(|t| !enabled.contains(&t.name) || t.active);
    if workload.phase == Phase::Ready && all_active {
        eprintln!("{kind} {name}: Ready");
    }
    let http = triggers
        .iter()
        .find(|t| t.function_ref == name && t.trigger_type == "http");
    match http {
        Some(trigger) => println!("{}", url_of(&client, &workload, Some(trigger))),
        None if triggers.is_empty() => eprintln!(
            "{kind} {name} has no trigger: run it with sless job run JOB --function {name}, or add one with --trigger"
        ),
        None => eprintln!(
            "{kind} {name} has no http trigger: it runs on its schedule or queue only (add --trigger http to call it)"
        ),
    }
    Ok(())
}

/// Polls until the upload is built (Ready) or failed, printing phase changes and the
/// build log as it grows. Answers the workload and whether any of the log was printed.
async fn follow_build(
    client: &Client,
    collection: Kind,
    name: &str,
    key: Option<&str>,
    deadline: Instant,
) -> anyhow::Result<(WorkloadResponse, bool)> {
    let kind = collection.noun();
    let mut shown: Option<(Phase, Option<String>)> = None;
    let mut printed = String::new();
    let mut building = false;
    loop {
        let workload = client.get_workload(collection, name).await?;
        // Before the builder starts, the newest build log is the previous upload's.
        building |=
            workload.phase == Phase::Building && workload.message.as_deref() != Some(BUILD_QUEUED);
        let ours = key.is_none() || workload.s3_key.as_deref() == key;
        let done = ours && (workload.phase == Phase::Ready || workload.phase == Phase::Failed);
        let message = workload.message.as_deref().map(first_line);
        let state = (
            workload.phase,
            message.filter(|l| !l.is_empty()).map(String::from),
        );
        let changed = shown.as_ref() != Some(&state);
        // The log of a finished build comes before the phase that ends it.
        if changed && !done {
            print_phase(kind, name, &state);
        }
        if building || done {
            print_new_log(client, collection, name, &mut printed, done).await;
        }
        if changed && done {
            print_phase(kind, name, &state);
        }
        shown = Some(state);
        if done {
            return Ok((workload, !printed.is_empty()));
        }
        if Instant::now() >= deadline {
            bail!(
                "{kind} {name:?} is still {} after the wait timeout; follow it with sless describe {name}",
                workload.phase
            );
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

fn print_phase(kind: &str, name: &str, (phase, message): &(Phase, Option<String>)) {
    match message {
        // Ready ends the build here; whether it starts is told after the triggers.
        _ if *phase == Phase::Ready => eprintln!("{kind} {name}: built"),
        // A failure's message is the log tail: it is printed on its own.
        Some(message) if *phase != Phase::Failed => eprintln!("{kind} {name}: {phase} ({message})"),
        _ => eprintln!("{kind} {name}: {phase}"),
    }
}

/// The error of a built workload whose instance did not start: its status message is
/// the one line of the cause; the process's output is in its logs.
fn did_not_start(kind: &str, name: &str, message: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "{kind} {name:?} was built but did not start: {} (its output: sless logs {name})",
        first_line(message)
    )
}

/// Prints the part of the build log not printed yet (whole lines, unless `all`).
async fn print_new_log(
    client: &Client,
    collection: Kind,
    name: &str,
    printed: &mut String,
    all: bool,
) {
    // The log is progress only: a platform without one must not fail the deploy.
    let Ok(log) = client.build_log(collection, name).await else {
        return;
    };
    if !log.starts_with(printed.as_str()) {
        printed.clear();
    }
    let fresh = &log[printed.len()..];
    let end = if all {
        fresh.len()
    } else {
        fresh.rfind('\n').map_or(0, |i| i + 1)
    };
    for line in fresh[..end].lines() {
        eprintln!("  {line}");
    }
    printed.push_str(&fresh[..end]);
}

/// Creates the wanted triggers, updates ones whose spec differs, skips the same ones.
/// Answers the names of the enabled ones.
async fn ensure_triggers(
    client: &Client,
    function: &str,
    wanted: &[WantedTrigger],
) -> anyhow::Result<Vec<String>> {
    let existing = client.list_triggers().await?;
    let mut enabled = Vec::new();
    let mut counts = std::collections::HashMap::new();
    let mut seen = Vec::new();
    for trigger in wanted {
        if seen.contains(&trigger) {
            continue;
        }
        seen.push(trigger);
        let (kind, schedule, queue) = match trigger {
            WantedTrigger::Http => ("http", None, None),
            WantedTrigger::Cron(schedule) => ("cron", Some(schedule.clone()), None),
            WantedTrigger::Event(queue) => ("event", None, Some(queue.clone())),
        };
        // `<function>-cron`, `<function>-cron-2`, ... per kind.
        let count: &mut u32 = counts.entry(kind).or_default();
        *count += 1;
        let name = match count {
            1 => format!("{function}-{kind}"),
            n => format!("{function}-{kind}-{n}"),
        };
        let mut request = TriggerRequest {
            name: Some(name.clone()),
            trigger_type: Some(kind.to_string()),
            function_ref: Some(function.to_string()),
            schedule,
            queue,
            ..Default::default()
        };
        match existing.iter().find(|t| t.name == name) {
            Some(current)
                if current.trigger_type == kind
                    && current.function_ref == function
                    && current.schedule == request.schedule
                    && current.queue == request.queue =>
            {
                if current.enabled {
                    enabled.push(name);
                } else {
                    eprintln!(
                        "trigger {name} is stopped; start it with sless trigger enable {name}"
                    );
                }
            }
            Some(current) => {
                request.enabled = Some(current.enabled);
                request.resource_version = Some(current.resource_version.clone());
                client
                    .replace_trigger(&name, &request)
                    .await
                    .with_context(|| format!("updating trigger {name:?}"))?;
                eprintln!("updated trigger {name}");
                if current.enabled {
                    enabled.push(name);
                }
            }
            None => {
                client
                    .create_trigger(&request)
                    .await
                    .with_context(|| format!("creating trigger {name:?}"))?;
                eprintln!("created trigger {name}");
                enabled.push(name);
            }
        }
    }
    Ok(enabled)
}

/// Waits until the enabled triggers are active (the function is running), so the URL
/// answers when deploy returns. Answers the function's triggers.
async fn wait_until_active(
    client: &Client,
    function: &str,
    names: &[String],
    deadline: Instant,
) -> anyhow::Result<Vec<TriggerResponse>> {
    let until = deadline.min(Instant::now() + TRIGGER_WAIT);
    loop {
        let triggers: Vec<TriggerResponse> = client
            .list_triggers()
            .await?
            .into_iter()
            .filter(|t| t.function_ref == function)
            .collect();
        let waiting: Vec<&TriggerResponse> = triggers
            .iter()
            .filter(|t| names.contains(&t.name) && !t.active)
            .collect();
        if waiting.is_empty() {
            return Ok(triggers);
        }
        let workload = client.get_workload(Kind::Function, function).await?;
        if workload.phase == Phase::Failed {
            let message = workload.message.unwrap_or_default();
            return Err(did_not_start("function", function, &message));
        }
        if Instant::now() >= until {
            for trigger in waiting {
                eprintln!(
                    "warning: trigger {} is not active yet{}",
                    trigger.name,
                    trigger
                        .message
                        .as_deref()
                        .map(|m| format!(": {m}"))
                        .unwrap_or_default()
                );
            }
            return Ok(triggers);
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Ready means built; a running instance switches to the new code a moment later. The
/// embedded runner reports the switch in the workload's log (`[sless] version <v> is
/// serving ...`): wait for that line, so the next call reaches the new code. A platform
/// that writes no such lines is not waited for.
async fn wait_for_rollout(
    client: &Client,
    collection: Kind,
    name: &str,
    version: &str,
    deadline: Instant,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let until = deadline.min(started + TRIGGER_WAIT);
    let serving = format!("{RUNNER_PREFIX}version {version} is serving");
    loop {
        let lines = client
            .logs(collection, name, ROLLOUT_WINDOW)
            .await
            .unwrap_or_default();
        if lines.iter().any(|l| l.line.starts_with(&serving)) {
            return Ok(());
        }
        let reports = lines.iter().any(|l| l.line.starts_with(RUNNER_PREFIX));
        if !reports && started.elapsed() >= ROLLOUT_SILENCE {
            return Ok(());
        }
        let workload = client.get_workload(collection, name).await?;
        if workload.phase == Phase::Failed {
            let message = workload.message.unwrap_or_default();
            return Err(did_not_start(collection.noun(), name, &message));
        }
        if Instant::now() >= until {
            eprintln!("warning: version {version} of {name} is not serving yet");
            return Ok(());
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// The URL the platform reports, else the one the proxy serves it at.
fn url_of(
    client: &Client,
    workload: &WorkloadResponse,
    trigger: Option<&TriggerResponse>,
) -> String {
    trigger
        .and_then(|t| t.url.clone())
        .or_else(|| workload.url.clone())
        .unwrap_or_else(|| {
            format!(
                "{}/fn/{}/{}",
                client.endpoint(),
                client.namespace(),
                workload.name
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_triggers_and_env() {
        assert_eq!(parse_trigger("http"), Ok(WantedTrigger::Http));
        assert_eq!(
            parse_trigger("cron:*/5 * * * *"),
            Ok(WantedTrigger::Cron("*/5 * * * *".into()))
        );
        assert!(parse_trigger("cron:").is_err());
        assert_eq!(
            parse_trigger("event:orders"),
            Ok(WantedTrigger::Event("orders".into()))
        );
        assert!(parse_trigger("event: ").is_err());
        assert!(parse_trigger("amqp").is_err());
        assert_eq!(parse_env("A=b=c"), Ok(("A".into(), "b=c".into())));
        assert!(parse_env("=x").is_err());
        assert!(parse_env("NOVALUE").is_err());
    }
}
