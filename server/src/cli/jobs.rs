//! `sless job run NAME --function F --event JSON`: run a function once with an event and
//! print its result; `sless job runs NAME`: the runs the job keeps.

use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use sless_api::text::first_line_cut;
use sless_api::{JobPatch, JobPhase, JobRequest, JobResponse, JobRunResponse, human_duration_ms};
use sless_client::client::{Kind, RunWait};

use super::{Connection, POLL_INTERVAL, is_not_found, table};

#[derive(Args)]
pub struct JobArgs {
    #[command(subcommand)]
    pub action: JobAction,
}

#[derive(Subcommand)]
pub enum JobAction {
    /// Create the job (or bump its run_id), wait for it and print its result.
    Run(RunArgs),
    /// List the job's kept runs, newest first.
    Runs(RunsArgs),
}

#[derive(Args)]
pub struct RunsArgs {
    /// The job's name.
    pub name: String,
    /// Only the newest N runs.
    #[arg(long, value_name = "N")]
    pub tail: Option<usize>,
    #[command(flatten)]
    pub connection: Connection,
}

/// A result longer than this is cut in the table.
const RESULT_CHARS: usize = 60;

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
    match args.action {
        JobAction::Run(args) => run_job(args).await,
        JobAction::Runs(args) => {
            let client = args.connection.client()?;
            let runs = client.job_runs(&args.name, args.tail).await?;
            print!("{}", runs_table(&runs));
            Ok(())
        }
    }
}

/// RUN, PHASE, STARTED, DURATION and the result's first line.
fn runs_table(runs: &[JobRunResponse]) -> String {
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|run| {
            vec![
                run.run_id.to_string(),
                run.phase.to_string(),
                run.start_time.clone().unwrap_or_else(|| "-".into()),
                run.duration_ms
                    .map_or_else(|| "-".into(), human_duration_ms),
                first_line_cut(run.message.as_deref().unwrap_or_default(), RESULT_CHARS),
            ]
        })
        .collect();
    table(&["RUN", "PHASE", "STARTED", "DURATION", "RESULT"], &rows)
}

async fn run_job(args: RunArgs) -> anyhow::Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_table_cuts_results_to_a_line() {
        let run = |run_id, message: &str, duration_ms| JobRunResponse {
            run_id,
            request_id: None,
            event_json: "{}".into(),
            phase: JobPhase::Succeeded,
            message: Some(message.into()),
            start_time: Some("2026-01-01T00:00:00Z".into()),
            completion_time: None,
            duration_ms,
            log_tail: None,
        };
        let text = runs_table(&[
            run(2, &format!("{}\nsecond line", "x".repeat(80)), Some(1500)),
            run(1, "{\"ok\": true}", None),
        ]);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("RUN  PHASE"), "{text}");
        assert!(lines[1].starts_with("2    Succeeded  2026-01-01T00:00:00Z  1.5 s"));
        assert!(lines[1].ends_with(&format!("{}...", "x".repeat(60))));
        assert!(lines[2].ends_with("-         {\"ok\": true}"), "{text}");
    }
}
