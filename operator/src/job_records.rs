//! Job runs among their function's call records, in the data plane: the controllers
//! run jobs and keep each run in the FunctionJob's status ([`FunctionJobStatus::runs`]);
//! every data-plane replica follows those statuses and records each ended run once,
//! so `GET .../functions/{name}/invocations` lists it beside the `/fn` calls whichever
//! replica answers, and after a restart (the runs the status keeps come back).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinHandle;

use sless_core::model::{FunctionJob, JobPhase, JobRun as RunRecord, Kind};
use sless_core::routes::{JobOutcome, JobRun, TriggerCalls};
use sless_core::store::{Object, Store, StoreExt};

/// Statuses are listed again this often, in case a change was missed.
const RESYNC: Duration = Duration::from_secs(60);

/// The request ids of the runs recorded, per job (namespace, name): only the runs its
/// status still keeps, so the set stays as small as the history.
type Recorded = HashMap<(String, String), HashSet<String>>;

/// Follows the FunctionJobs of `store` and records their ended runs through `calls`.
pub fn spawn(store: Arc<dyn Store>, calls: Arc<dyn TriggerCalls>) -> JoinHandle<()> {
    let mut changes = store.subscribe();
    tokio::spawn(async move {
        let mut recorded = Recorded::new();
        let mut tick = tokio::time::interval(RESYNC);
        loop {
            tokio::select! {
                _ = tick.tick() => all(&*store, &*calls, &mut recorded).await,
                change = changes.recv() => match change {
                    Ok(change) if change.kind == Kind::FunctionJob => {
                        let key = (change.namespace, change.name);
                        match store.get_typed::<FunctionJob>(&key.0, &key.1).await {
                            Ok(Some(job)) => record(&*calls, recorded.entry(key).or_default(), &job),
                            Ok(None) => {
                                recorded.remove(&key);
                            }
                            Err(e) => tracing::warn!(namespace = %key.0, job = %key.1, error = %e, "job records: cannot read the job"),
                        }
                    }
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => all(&*store, &*calls, &mut recorded).await,
                    Err(RecvError::Closed) => return,
                },
            }
        }
    })
}

async fn all(store: &dyn Store, calls: &dyn TriggerCalls, recorded: &mut Recorded) {
    let jobs = match store.list_typed::<FunctionJob>(None).await {
        Ok(jobs) => jobs,
        Err(e) => {
            tracing::warn!(error = %e, "job records: cannot list jobs");
            return;
        }
    };
    let mut next = Recorded::new();
    for job in jobs {
        let key = (job.meta.namespace.clone(), job.meta.name.clone());
        let mut seen = recorded.remove(&key).unwrap_or_default();
        record(calls, &mut seen, &job);
        next.insert(key, seen);
    }
    *recorded = next;
}

/// Records the ended runs of `job` not in `seen` (oldest first, as they happened), and
/// leaves in `seen` those its status keeps.
fn record(calls: &dyn TriggerCalls, seen: &mut HashSet<String>, job: &Object<FunctionJob>) {
    let Some(function) = &job.spec.function_ref else {
        seen.clear();
        return;
    };
    let mut kept = HashSet::new();
    for run in job.status.runs.iter().rev() {
        let Some(run) = ended(&job.meta.namespace, function, &job.meta.name, run) else {
            continue;
        };
        if !seen.contains(&run.request_id) {
            calls.record_job_run(run.clone());
        }
        kept.insert(run.request_id);
    }
    *seen = kept;
}

/// A run that started and ended, as a call record takes it.
fn ended(namespace: &str, function: &str, job: &str, run: &RunRecord) -> Option<JobRun> {
    let outcome = match run.phase {
        JobPhase::Succeeded => JobOutcome::Succeeded,
        JobPhase::Failed
            if run
                .message
                .as_deref()
                .is_some_and(|m| m.starts_with(crate::controller::job::TIMED_OUT)) =>
        {
            JobOutcome::TimedOut
        }
        JobPhase::Failed => JobOutcome::Failed,
        _ => return None,
    };
    // A run refused before its Job was made (no function, a failed build) never ran.
    let started: DateTime<Utc> = run.start_time.as_deref()?.parse().ok()?;
    Some(JobRun {
        namespace: namespace.to_string(),
        function: function.to_string(),
        job: job.to_string(),
        request_id: run.request_id.clone()?,
        started,
        duration: Duration::from_millis(run.duration_ms.unwrap_or(0)),
        outcome,
        version: run.version.clone(),
    })
}
