//! `sless job run NAME --function F --event JSON`: run a function once with an event and
//! print its result.

use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use sless_api::{JobPatch, JobPhase, JobRequest, JobResponse};
use sless_client::client::{Kind, RunWait};

use super::{Connection, POLL_INTERVAL, is_not_found};

#[derive(Args)]
pub struct JobArgs {
    #[command(subcommand)]
    pub action: JobAction,
}

#[derive(Subcommand)]
pub enum JobAction {
    /// Create the job (or bump its run_id), wait for it and print its result.
    Run(RunArgs),
}

#[derive(Args)]
pub struct RunArgs {
    /// The job's name.
    pub name: String,
    /// The function whose code the job runs.
    #[arg(long)]
    pub function: String,
    /// The event, a JSON document (`@file` reads a file).
    #[arg(long, default_value = "{}")]
    pub event: String,
    /// The run's time limit in seconds (0 = none; default 60 for a new job).
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<u32>,
    /// Give up waiting after this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 900)]
    pub wait_timeout: u64,
    #[command(flatten)]
    pub connection: Connection,
}

pub async fn run(args: JobArgs) -> anyhow::Result<()> {
    let JobAction::Run(args) = args.action;
    let client = args.connection.client()?;
    let name = args.name.as_str();
    let event = match args.event.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("reading the event from {path}"))?,
        None => args.event.clone(),
    };
    // A job of a function that does not exist could only fail: nothing is created.
    match client.get_workload(Kind::Function, &args.function).await {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => bail!(
            "function {:?} not found; deploy it first with sless deploy DIR --name {}",
            args.function,
            args.function
        ),
        Err(e) => return Err(e.into()),
    }
    let existing = match client.get_job(name).await {
        Ok(job) => Some(job),
        Err(e) if is_not_found(&e) => None,
        Err(e) => return Err(e.into()),
    };
    let started = match existing {
        None => client
            .create_job(&JobRequest {
                name: Some(name.to_string()),
                function_ref: Some(args.function.clone()),
                event_json: Some(event),
                run_id: Some(1),
                timeout_sec: args.timeout,
                ..Default::default()
            })
            .await
            .with_context(|| format!("creating job {name:?}"))?,
        Some(job)
            if job.function_ref.as_deref() != Some(args.function.as_str())
                || args.timeout.is_some_and(|t| t != job.timeout_sec) =>
        {
            client
                .replace_job(
                    name,
                    &JobRequest {
                        name: Some(name.to_string()),
                        function_ref: Some(args.function.clone()),
                        env_vars: Some(job.env_vars.clone()),
                        event_json: Some(event),
                        run_id: Some(job.run_id + 1),
                        timeout_sec: Some(args.timeout.unwrap_or(job.timeout_sec)),
                        cpu_millis: job.cpu_millis,
                        disk_mb: job.disk_mb,
                        resource_version: Some(job.resource_version.clone()),
                        ..Default::default()
                    },
                )
                .await
                .with_context(|| format!("updating job {name:?}"))?
        }
        Some(job) => client
            .patch_job(
                name,
                &JobPatch {
                    run_id: Some(job.run_id + 1),
                    event_json: Some(event),
                },
            )
            .await
            .with_context(|| format!("running job {name:?} again"))?,
    };
    eprintln!(
        "job {name}: run {} of function {}",
        started.run_id, args.function
    );

    let finished = wait(&client, &started, Duration::from_secs(args.wait_timeout)).await?;
    if finished.phase == JobPhase::Succeeded {
        println!("{}", finished.message.unwrap_or_else(|| "null".into()));
        return Ok(());
    }
    if let Some(tail) = finished
        .log_tail
        .as_deref()
        .filter(|t| !t.trim().is_empty())
    {
        eprintln!("job {name} output:");
        for line in tail.lines() {
            eprintln!("  {line}");
        }
    }
    bail!(
        "job {name:?} failed (run {}): {}",
        started.run_id,
        finished
            .message
            .as_deref()
            .unwrap_or("no reason given")
            .trim()
    );
}

/// Waits for the run that `started` began, printing its phases as they change.
async fn wait(
    client: &sless_client::client::Client,
    started: &JobResponse,
    limit: Duration,
) -> anyhow::Result<JobResponse> {
    let mut shown = None;
    let print_phase = |job: &JobResponse| {
        if Some(job.phase) != shown {
            eprintln!("job {}: {}", job.name, job.phase);
            shown = Some(job.phase);
        }
    };
    match client
        .wait_for_run(started, limit, POLL_INTERVAL, print_phase)
        .await?
    {
        RunWait::Finished(job) => Ok(job),
        RunWait::Superseded(job) => bail!(
            "job {:?} was started again (run {}) while waiting for run {}",
            job.name,
            job.run_id,
            started.run_id
        ),
        RunWait::TimedOut(job) => bail!(
            "job {:?} is still {} after the wait timeout{}",
            job.name,
            job.phase,
            job.message.map(|m| format!(" ({m})")).unwrap_or_default()
        ),
    }
}
