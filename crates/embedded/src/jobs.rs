//! The actor of one FunctionJob: `run_id` 0 is Skipped, every higher `run_id` is one run
//! of the handler in job mode, its last stdout line the result.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::AsyncRead;
use tokio::process::Command;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::Shared;
use crate::egress::{self, Egress, ProxyLimits};
use crate::process::die_with_parent;
use crate::sandbox::Confinement;
use sless_core::logs::last_bytes;
use sless_core::model::{
    DEFAULT_CPU_MILLIS, DEFAULT_DISK_MB, DEFAULT_MEMORY_MB, Function, FunctionJob,
    FunctionJobStatus, JOB_LOG_TAIL_BYTES, JobPhase, Kind, Phase, Runtime, now, run_event,
};
use sless_core::routes::{JobOutcome, JobRun};
use sless_core::store::{StoreError, StoreExt, modify_status};
use sless_core::upload::version_of;
use sless_core::workload::no_code;

/// While a job waits for its function's build, it looks again this often.
const RECHECK: Duration = Duration::from_secs(1);
/// Output read from a job at most; the rest is dropped.
const MAX_OUTPUT_BYTES: usize = 1024 * 1024;

struct Run {
    run_id: i64,
    task: JoinHandle<()>,
}

/// What to execute for one run.
struct Plan {
    dir: PathBuf,
    /// The version whose build runs, for the run's record.
    version: String,
    runtime: Runtime,
    entrypoint: String,
    env: BTreeMap<String, String>,
    memory_mb: u32,
    cpu_millis: u32,
    /// The scratch quota (applied by the scratch mount).
    disk_mb: u32,
    egress: Egress,
    /// Its HOME and TMPDIR, the one place it may write.
    scratch: PathBuf,
}

enum Next {
    Idle,
    Recheck,
    Deleted,
}

pub(super) async fn run(
    shared: Arc<Shared>,
    ns: String,
    name: String,
    mut pokes: mpsc::Receiver<()>,
) {
    let mut current: Option<Run> = None;
    loop {
        let next = match reconcile(&shared, &ns, &name, &mut current).await {
            Ok(next) => next,
            Err(e) => {
                tracing::warn!(%ns, %name, error = %e, "job reconcile failed; retrying");
                Next::Recheck
            }
        };
        match next {
            Next::Deleted => {
                if let Some(run) = current.take() {
                    run.task.abort();
                }
                return;
            }
            Next::Idle => {
                if pokes.recv().await.is_none() {
                    return;
                }
            }
            Next::Recheck => {
                tokio::select! {
                    poke = pokes.recv() => if poke.is_none() { return },
                    _ = tokio::time::sleep(RECHECK) => {}
                }
            }
        }
    }
}

async fn reconcile(
    shared: &Arc<Shared>,
    ns: &str,
    name: &str,
    current: &mut Option<Run>,
) -> Result<Next, StoreError> {
    let store = &*shared.store;
    let Some(job) = store.get_typed::<FunctionJob>(ns, name).await? else {
        return Ok(Next::Deleted);
    };
    let run_id = job.spec.run_id;
    if let Some(run) = current {
        if run.run_id == run_id && !run.task.is_finished() {
            return Ok(Next::Idle);
        }
        if run.run_id != run_id {
            // A newer run replaces this one; aborting drops (and kills) its process.
            run.task.abort();
        }
        *current = None;
    }
    if run_id == 0 {
        write(shared, ns, name, 0, |s| {
            s.phase = JobPhase::Skipped;
            s.message = Some("run_id is 0: raise it to run the job".into());
        })
        .await?;
        return Ok(Next::Idle);
    }
    if job.status.observed_run_id == Some(run_id) {
        match job.status.phase {
            JobPhase::Succeeded | JobPhase::Failed | JobPhase::Skipped => return Ok(Next::Idle),
            JobPhase::Running => {
                write(shared, ns, name, run_id, |s| {
                    s.phase = JobPhase::Failed;
                    s.message = Some(
                        "interrupted: sless restarted while the job ran; raise run_id to run it again"
                            .into(),
                    );
                })
                .await?;
                return Ok(Next::Idle);
            }
            JobPhase::Pending | JobPhase::Building => {}
        }
    }

    let spec = &job.spec;
    let plan = match &spec.function_ref {
        Some(function) => match store.get_typed::<Function>(ns, function).await? {
            None => {
                fail(
                    shared,
                    ns,
                    name,
                    run_id,
                    format!("function {function:?} not found in {ns}"),
                )
                .await?;
                return Ok(Next::Idle);
            }
            Some(f) => {
                let workload = &f.spec.workload;
                let version = workload.s3_key.as_deref().map(version_of);
                let dir = version.map(|version| {
                    shared
                        .builds_root(Kind::Function, ns, function)
                        .join(version)
                });
                match (f.status.phase, dir, version) {
                    // A built version runs as a job even while the function's instance
                    // crash-loops (Failed, restarting): the run is a process of its own.
                    (Phase::Ready | Phase::Failed, Some(dir), Some(version)) if dir.is_dir() => {
                        let mut env = workload.env.clone();
                        env.extend(spec.env.clone());
                        Plan {
                            dir,
                            version: version.to_string(),
                            runtime: workload.runtime,
                            entrypoint: workload.entrypoint.clone(),
                            env,
                            memory_mb: workload.memory_mb,
                            cpu_millis: spec.cpu_millis.unwrap_or(workload.cpu_millis),
                            disk_mb: spec.disk_mb.unwrap_or(workload.disk_mb),
                            egress: spec.egress_or(Some(workload)),
                            scratch: shared.scratch(Kind::FunctionJob, ns, name),
                        }
                    }
                    (Phase::Failed, _, _) => {
                        fail(
                            shared,
                            ns,
                            name,
                            run_id,
                            format!("function {function:?} failed to build"),
                        )
                        .await?;
                        return Ok(Next::Idle);
                    }
                    (phase, _, _) => {
                        write(shared, ns, name, run_id, |s| {
                            s.phase = JobPhase::Pending;
                            s.message = Some(format!(
                                "waiting for function {function:?} to be built (it is {})",
                                phase.as_str()
                            ));
                        })
                        .await?;
                        return Ok(Next::Recheck);
                    }
                }
            }
        },
        None => {
            let (Some(runtime), Some(key)) = (spec.runtime, spec.s3_key.clone()) else {
                write(shared, ns, name, run_id, |s| {
                    s.phase = JobPhase::Pending;
                    s.message = Some(no_code(Kind::FunctionJob, name));
                })
                .await?;
                return Ok(Next::Idle);
            };
            write(shared, ns, name, run_id, |s| {
                s.phase = JobPhase::Building;
                s.message = Some(format!("building version {}", version_of(&key)));
            })
            .await?;
            let root = shared.builds_root(Kind::FunctionJob, ns, name);
            match shared.builder.build(&root, &key, runtime).await {
                Ok(dir) => Plan {
                    dir,
                    version: version_of(&key).to_string(),
                    runtime,
                    entrypoint: spec.entrypoint_or_default(),
                    env: spec.env.clone(),
                    memory_mb: DEFAULT_MEMORY_MB,
                    cpu_millis: spec.cpu_millis.unwrap_or(DEFAULT_CPU_MILLIS),
                    disk_mb: spec.disk_mb.unwrap_or(DEFAULT_DISK_MB),
                    egress: spec.egress_or(None),
                    scratch: shared.scratch(Kind::FunctionJob, ns, name),
                },
                Err(e) => {
                    fail(shared, ns, name, run_id, format!("build failed:\n{e}")).await?;
                    return Ok(Next::Idle);
                }
            }
        }
    };

    let started = now();
    let running = write(shared, ns, name, run_id, |s| {
        s.phase = JobPhase::Running;
        s.job_name = Some(format!("{name}-{run_id}"));
        s.start_time = Some(started.clone());
        s.completion_time = None;
        s.message = None;
        s.log_tail = None;
        s.version = Some(plan.version.clone());
    })
    .await?;
    let Some(request_id) = running.and_then(|s| s.request_id) else {
        // A newer run took over meanwhile, or the job is gone.
        return Ok(Next::Recheck);
    };
    let event = run_event(&spec.event_json, &request_id);
    let timeout = (spec.timeout_sec > 0).then(|| Duration::from_secs(spec.timeout_sec.into()));
    let task_shared = shared.clone();
    let (task_ns, task_name) = (ns.to_string(), name.to_string());
    let function = spec.function_ref.clone();
    let task = tokio::spawn(async move {
        let (clock, started_at) = (Instant::now(), chrono::Utc::now());
        let outcome = execute(&task_shared, &task_ns, &task_name, &plan, &event, timeout).await;
        let elapsed = clock.elapsed();
        let took = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        // A run of a function is one of its calls too.
        if let (Some(function), Some(calls)) = (function, task_shared.trigger_calls.get()) {
            calls.record_job_run(JobRun {
                namespace: task_ns.clone(),
                function,
                job: task_name.clone(),
                request_id: request_id.clone(),
                started: started_at,
                duration: elapsed,
                outcome: outcome.end,
                version: Some(plan.version.clone()),
            });
        }
        let result = write(&task_shared, &task_ns, &task_name, run_id, |s| {
            s.phase = if outcome.end == JobOutcome::Succeeded {
                JobPhase::Succeeded
            } else {
                JobPhase::Failed
            };
            s.message = Some(outcome.message.clone());
            s.log_tail = Some(outcome.log_tail.clone());
            s.completion_time = Some(now());
            s.duration_ms = Some(took);
        })
        .await;
        if let Err(e) = result {
            tracing::warn!(ns = %task_ns, name = %task_name, error = %e, "job result not written");
        }
    });
    *current = Some(Run { run_id, task });
    Ok(Next::Idle)
}

struct Outcome {
    end: JobOutcome,
    message: String,
    log_tail: String,
}

/// Output lines in arrival order, stdout ones flagged.
type Output = Arc<Mutex<(Vec<(bool, String)>, usize)>>;

fn collect(
    reader: impl AsyncRead + Unpin + Send + 'static,
    stdout: bool,
    output: Output,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        // The result is one line: a line may be as long as the whole output allowance.
        sless_core::logs::read_lines(reader, MAX_OUTPUT_BYTES, |line| {
            let mut output = output.lock().unwrap_or_else(|e| e.into_inner());
            if output.1 + line.len() <= MAX_OUTPUT_BYTES {
                output.1 += line.len();
                output.0.push((stdout, line));
            }
        })
        .await;
    })
}

async fn execute(
    shared: &Shared,
    ns: &str,
    name: &str,
    plan: &Plan,
    event: &str,
    timeout: Option<Duration>,
) -> Outcome {
    // Held for the whole run: a job counts against its namespace's running memory.
    let _memory = match shared.memory.reserve(ns, u64::from(plan.memory_mb), None) {
        Ok(reservation) => reservation,
        Err(e) => {
            return Outcome {
                end: JobOutcome::Failed,
                message: e.to_string(),
                log_tail: String::new(),
            };
        }
    };
    let (program, args) =
        shared
            .builder
            .wrappers
            .command(&shared.config.toolchain, plan.runtime, &plan.dir);
    let mut command = Command::new(&program);
    die_with_parent(&mut command);
    let output: Output = Arc::new(Mutex::new((Vec::new(), 0)));
    let refusals = output.clone();
    let confinement = Confinement {
        read: &[&plan.dir],
        write: &[&plan.scratch],
        memory_mb: Some(plan.memory_mb),
        cpu_millis: Some(plan.cpu_millis),
        disk_mb: Some(plan.disk_mb),
        egress: Some(egress::Policy {
            owner: format!("{ns}/{name}"),
            egress: plan.egress.clone(),
            // A refusal is a line of the run's log, as the function's own stderr.
            log: Arc::new(move |line: &str| {
                let mut output = refusals.lock().unwrap_or_else(|e| e.into_inner());
                output.0.push((false, line.to_string()));
            }),
            limits: ProxyLimits::default(),
        }),
    };
    tracing::debug!(
        memory_mb = plan.memory_mb,
        cpu_millis = plan.cpu_millis,
        disk_mb = plan.disk_mb,
        "starting a job run"
    );
    let mut guard = match shared.builder.sandbox.confine(&mut command, &confinement) {
        Ok(guard) => guard,
        Err(e) => {
            return Outcome {
                end: JobOutcome::Failed,
                message: e.to_string(),
                log_tail: String::new(),
            };
        }
    };
    let spawned = command
        .args(&args)
        .current_dir(&plan.dir)
        .envs(&plan.env)
        .env("SLESS_MODE", "job")
        .env("SLESS_EVENT_JSON", event)
        .env("SLESS_ENTRYPOINT", &plan.entrypoint)
        .env("SLESS_FUNCTION_DIR", &plan.dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            return Outcome {
                end: JobOutcome::Failed,
                message: format!("cannot start {program}: {e}; is it installed?"),
                log_tail: String::new(),
            };
        }
    };
    if let Err(e) = guard.spawned() {
        return Outcome {
            end: JobOutcome::Failed,
            message: format!("cannot start the run's egress proxy: {e}"),
            log_tail: String::new(),
        };
    }
    let mut readers = Vec::new();
    if let Some(stdout) = child.stdout.take() {
        readers.push(collect(stdout, true, output.clone()));
    }
    if let Some(stderr) = child.stderr.take() {
        readers.push(collect(stderr, false, output.clone()));
    }
    let waited = match timeout {
        Some(limit) => tokio::time::timeout(limit, child.wait()).await.ok(),
        None => Some(child.wait().await),
    };
    let status = match waited {
        Some(status) => status,
        None => {
            let _ = child.kill().await;
            for reader in readers {
                let _ = reader.await;
            }
            return Outcome {
                end: JobOutcome::TimedOut,
                message: format!(
                    "timed out: the job ran longer than its timeout_sec ({} s) and was killed",
                    timeout.map_or(0, |t| t.as_secs())
                ),
                log_tail: log_tail(&output),
            };
        }
    };
    for reader in readers {
        let _ = reader.await;
    }
    let last_stdout = {
        let output = output.lock().unwrap_or_else(|e| e.into_inner());
        output
            .0
            .iter()
            .rev()
            .find(|(stdout, line)| *stdout && !line.trim().is_empty())
            .map(|(_, line)| line.clone())
    };
    if let Some(reason) = guard.out_of_memory() {
        return Outcome {
            end: JobOutcome::Failed,
            message: reason,
            log_tail: log_tail(&output),
        };
    }
    let pids = guard.pids_limit();
    if let Some(reason) = &pids {
        output
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .push((false, format!("[sless] {reason}")));
    }
    match status {
        Ok(status) if status.success() => Outcome {
            end: JobOutcome::Succeeded,
            message: last_stdout.unwrap_or_else(|| "null".into()),
            log_tail: log_tail(&output),
        },
        Ok(status) => {
            // The runtime prints {"error": ...} last when the handler raised.
            let reason = last_stdout
                .as_deref()
                .and_then(|line| serde_json::from_str::<serde_json::Value>(line).ok())
                .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(String::from))
                .unwrap_or_else(|| format!("the job exited with {status}"));
            let message = match pids {
                Some(limit) => format!("{limit}: {reason}"),
                None => reason,
            };
            Outcome {
                end: JobOutcome::Failed,
                message,
                log_tail: log_tail(&output),
            }
        }
        Err(e) => Outcome {
            end: JobOutcome::Failed,
            message: format!("waiting for the job: {e}"),
            log_tail: log_tail(&output),
        },
    }
}

fn log_tail(output: &Output) -> String {
    let output = output.lock().unwrap_or_else(|e| e.into_inner());
    let text: String = output
        .0
        .iter()
        .map(|(_, line)| format!("{line}\n"))
        .collect();
    last_bytes(&text, JOB_LOG_TAIL_BYTES)
}

/// Writes the status of run `run_id` (unless a newer run took over) when it changes,
/// recording the run in the job's history. Returns the run's status, `None` when the
/// job is gone or runs another run.
async fn write(
    shared: &Shared,
    ns: &str,
    name: &str,
    run_id: i64,
    change: impl Fn(&mut FunctionJobStatus) + Send,
) -> Result<Option<FunctionJobStatus>, StoreError> {
    let Some(job) = shared.store.get_typed::<FunctionJob>(ns, name).await? else {
        return Ok(None);
    };
    if job.spec.run_id != run_id {
        return Ok(None);
    }
    let mut next = job.status.clone();
    if next.observed_run_id != Some(run_id) {
        next = FunctionJobStatus {
            observed_run_id: Some(run_id),
            ..Default::default()
        };
    }
    change(&mut next);
    let wanted = job
        .status
        .advance(next, &job.spec.event_json, shared.config.job_runs_kept);
    if wanted == job.status {
        return Ok(Some(wanted));
    }
    let written = modify_status::<FunctionJob, _>(&*shared.store, ns, name, |o| {
        if o.spec.run_id == run_id {
            o.status = wanted.clone();
        }
    })
    .await;
    match written {
        Ok(o) if o.spec.run_id == run_id => Ok(Some(o.status)),
        Ok(_) | Err(StoreError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

async fn fail(
    shared: &Shared,
    ns: &str,
    name: &str,
    run_id: i64,
    message: String,
) -> Result<(), StoreError> {
    write(shared, ns, name, run_id, |s| {
        s.phase = JobPhase::Failed;
        s.message = Some(message.clone());
        s.completion_time = Some(now());
    })
    .await
    .map(|_| ())
}
