//! FunctionJobs: `runId` 0 is Skipped; every higher `runId` is one Job in the deploy
//! namespace, polled until it ends (watching Jobs across namespaces is not relied on),
//! its result the last line of the pod's log.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{ListParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event, finalizer};
use kube::{Api, ResourceExt};

use super::build::{BuildState, BuildTarget, build};
use super::{
    Context, Error, JobOutcome, Result, annotate, apply, delete_labelled, ensure_finalizer,
    job_outcome, namespace_of, write_status,
};
use crate::health::stuck;
use crate::manifests::run::{COMPONENT as RUN_COMPONENT, RUN_CONTAINER};
use crate::manifests::{self, RunJob};
use crate::names::{
    ANNOTATION_BUILD_FAILED, ANNOTATION_VERSION, FINALIZER, component_labels, owner_selector,
    run_job_name, selector,
};
use crate::store::is_already_exists;
use sless_api::Egress;
use sless_core::logs::last_bytes;
use sless_core::model::{
    ANNOTATION_BUILD_JOB, ANNOTATION_LAST_BUILT_S3KEY, DEFAULT_CPU_MILLIS, DEFAULT_DISK_MB,
    DEFAULT_MEMORY_MB, Function, FunctionJob, FunctionJobStatus, JOB_LOG_TAIL_BYTES, JobPhase,
    Kind, Phase, build_namespace, deploy_namespace, now, run_event, workload_image,
};
use sless_core::upload::version_of;
use sless_core::workload::no_code;

pub async fn reconcile_job(job: Arc<FunctionJob>, ctx: Arc<Context>) -> Result<Action> {
    let namespace = namespace_of(&*job)?;
    let api: Api<FunctionJob> = Api::namespaced(ctx.client.clone(), &namespace);
    let job = ensure_finalizer(&api, job).await?;
    finalizer(&api, FINALIZER, job, |event| async {
        match event {
            Event::Apply(job) => apply_job(&job, &ctx).await,
            Event::Cleanup(job) => cleanup_job(&job, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::FinalizerError(Box::new(e)))
}

/// What a run executes.
struct Plan {
    image: String,
    entrypoint: String,
    env: BTreeMap<String, String>,
    memory_mb: u32,
    cpu_millis: u32,
    disk_mb: u32,
    read_only_root: bool,
    /// Where the run may connect: the job's own `egress`, else its function's.
    egress: Egress,
    /// The version of the code, for the run's record.
    version: String,
}

enum Planned {
    Ready(Plan),
    /// Not yet (a build or the function is on its way): poll again.
    Wait(FunctionJobStatus),
    /// This run cannot happen.
    Fail(String),
    /// No code: nothing to poll for until the object changes.
    Idle(FunctionJobStatus),
}

/// The last non-empty line of a job's log: the handler's result (docs/spec.md §8, job mode).
pub fn result_line(log: &str) -> Option<&str> {
    log.lines().rev().map(str::trim).find(|l| !l.is_empty())
}

/// Why a run failed: the runtime prints `{"error": ...}` last when the handler raised.
fn failure_message(log: &str, reason: &str, timeout_sec: u32) -> String {
    if reason.starts_with("DeadlineExceeded") {
        return format!(
            "{TIMED_OUT}: the job ran longer than its timeout_sec ({timeout_sec} s) and was stopped"
        );
    }
    result_line(log)
        .and_then(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(String::from))
        .unwrap_or_else(|| format!("the job failed: {reason}"))
}

/// How the message of a run stopped at its deadline begins.
pub const TIMED_OUT: &str = "timed out";

/// The label the Job controller puts on a Job's pods.
const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";

async fn apply_job(job: &FunctionJob, ctx: &Context) -> Result<Action> {
    let namespace = namespace_of(job)?;
    let name = job.name_any();
    let api: Api<FunctionJob> = Api::namespaced(ctx.client.clone(), &namespace);
    let spec = &job.spec;
    let run_id = spec.run_id;
    let current = job.status.clone().unwrap_or_default();
    // Every status written carries the run history over and records the run in it.
    let advance =
        |next: FunctionJobStatus| current.advance(next, &spec.event_json, ctx.config.job_runs_kept);
    let deploy_ns = deploy_namespace(&namespace);
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &deploy_ns);
    let runs = selector(&component_labels(
        Kind::FunctionJob,
        &namespace,
        &name,
        RUN_COMPONENT,
    ));

    if run_id == 0 {
        delete_labelled(&jobs, &runs, None).await?;
        let status = advance(FunctionJobStatus {
            phase: JobPhase::Skipped,
            observed_run_id: Some(0),
            message: Some("run_id is 0: raise it to run the job".into()),
            ..FunctionJobStatus::default()
        });
        if status != current {
            write_status(ctx, &api, job, &status).await?;
        }
        return Ok(Action::await_change());
    }
    // A new run starts from a blank status; `advance` carries the history over.
    let mut status = if current.observed_run_id == Some(run_id) {
        current.clone()
    } else {
        FunctionJobStatus {
            observed_run_id: Some(run_id),
            ..FunctionJobStatus::default()
        }
    };
    if status.phase.is_finished() {
        return Ok(Action::await_change());
    }
    let job_name = run_job_name(&name, run_id);
    delete_labelled(&jobs, &runs, Some(&job_name)).await?;

    if let Some(running) = jobs.get_opt(&job_name).await? {
        status.phase = JobPhase::Running;
        status.job_name = Some(job_name.clone());
        if status.start_time.is_none() {
            status.start_time = Some(now());
        }
        if status.version.is_none() {
            status.version = running.annotations().get(ANNOTATION_VERSION).cloned();
        }
        let mut outcome = job_outcome(&running);
        // A pod that cannot start (a bad image, a missing secret) or was OOMKilled says
        // why, which the Job's own status does not.
        let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &deploy_ns);
        let pods = pods
            .list(&ListParams::default().labels(&format!("{JOB_NAME_LABEL}={job_name}")))
            .await?;
        if let Some((reason, message)) = stuck(&pods.items) {
            match &mut outcome {
                JobOutcome::Running => {
                    // It would wait until its deadline, or forever without one.
                    delete_labelled(&jobs, &runs, None).await?;
                    outcome = JobOutcome::Failed {
                        reason: message.clone(),
                    };
                }
                JobOutcome::Failed { reason: why } if reason == "OOMKilled" => *why = message,
                _ => {}
            }
        }
        let log = match outcome {
            JobOutcome::Running => String::new(),
            _ => ctx
                .logs
                .job_log(&deploy_ns, &job_name, RUN_CONTAINER)
                .await
                .unwrap_or_default(),
        };
        let poll = match outcome {
            JobOutcome::Running => true,
            JobOutcome::Succeeded => {
                status.phase = JobPhase::Succeeded;
                status.message = Some(result_line(&log).unwrap_or("null").to_string());
                false
            }
            JobOutcome::Failed { reason } => {
                status.phase = JobPhase::Failed;
                status.message = Some(failure_message(&log, &reason, spec.timeout_sec));
                false
            }
        };
        if !poll {
            status.completion_time = Some(now());
            status.log_tail = Some(last_bytes(&log, JOB_LOG_TAIL_BYTES));
        }
        let status = advance(status);
        if !poll && status != current {
            let failed = status.phase == JobPhase::Failed;
            let reason = if failed { "RunFailed" } else { "RunSucceeded" };
            let note = format!(
                "run {run_id}: {}",
                status.message.as_deref().unwrap_or_default()
            );
            ctx.event(job, failed, reason, &note).await;
        }
        if status != current {
            write_status(ctx, &api, job, &status).await?;
        }
        return Ok(if poll {
            Action::requeue(ctx.config.poll_interval)
        } else {
            Action::await_change()
        });
    }
    if status.phase == JobPhase::Running && status.job_name.as_deref() == Some(job_name.as_str()) {
        status.phase = JobPhase::Failed;
        status.message = Some(format!(
            "the Job {job_name} disappeared before it finished; raise run_id to run it again"
        ));
        status.completion_time = Some(now());
        write_status(ctx, &api, job, &advance(status)).await?;
        return Ok(Action::await_change());
    }

    let (waiting, action) = match plan(job, &namespace, ctx).await? {
        Planned::Ready(plan) => return start_run(job, ctx, plan, advance).await,
        Planned::Wait(waiting) => (waiting, Action::requeue(ctx.config.poll_interval)),
        Planned::Idle(idle) => (idle, Action::await_change()),
        Planned::Fail(message) => {
            status.phase = JobPhase::Failed;
            status.message = Some(message);
            status.completion_time = Some(now());
            (status, Action::await_change())
        }
    };
    let waiting = advance(waiting);
    if waiting != current {
        write_status(ctx, &api, job, &waiting).await?;
    }
    Ok(action)
}

/// Creates the Job of the run `plan` describes and records it as Running.
async fn start_run(
    job: &FunctionJob,
    ctx: &Context,
    plan: Plan,
    advance: impl Fn(FunctionJobStatus) -> FunctionJobStatus,
) -> Result<Action> {
    let namespace = namespace_of(job)?;
    let name = job.name_any();
    let api: Api<FunctionJob> = Api::namespaced(ctx.client.clone(), &namespace);
    let spec = &job.spec;
    let run_id = spec.run_id;
    let job_name = run_job_name(&name, run_id);
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &deploy_namespace(&namespace));
    let status = advance(FunctionJobStatus {
        phase: JobPhase::Running,
        observed_run_id: Some(run_id),
        job_name: Some(job_name.clone()),
        start_time: Some(now()),
        version: Some(plan.version.clone()),
        ..FunctionJobStatus::default()
    });
    let event_json = run_event(
        &spec.event_json,
        status.request_id.as_deref().unwrap_or_default(),
    );
    let mut manifest = manifests::run_job(
        &RunJob {
            namespace: &namespace,
            name: &name,
            run_id,
            image: &plan.image,
            entrypoint: &plan.entrypoint,
            env: &plan.env,
            event_json: &event_json,
            timeout_sec: spec.timeout_sec,
            memory_mb: plan.memory_mb,
            cpu_millis: plan.cpu_millis,
            disk_mb: plan.disk_mb,
            read_only_root: plan.read_only_root,
        },
        &ctx.config,
    );
    manifest
        .metadata
        .annotations
        .get_or_insert_default()
        .insert(ANNOTATION_VERSION.into(), plan.version.clone());
    ctx.prepare_deploy_namespace(&namespace, &deploy_namespace(&namespace))
        .await?;
    // Before the run's pod exists, so it never runs unconstrained.
    let policies: Api<NetworkPolicy> =
        Api::namespaced(ctx.client.clone(), &deploy_namespace(&namespace));
    let egress = manifests::egress_policy(
        Kind::FunctionJob,
        &namespace,
        &name,
        RUN_COMPONENT,
        &plan.egress,
    );
    apply(&policies, &egress).await?;
    match jobs.create(&PostParams::default(), &manifest).await {
        Ok(_) => {
            tracing::info!(%namespace, %name, run_id, job = %job_name, "job run started");
            let note = format!("run {run_id} in Job {job_name}");
            ctx.event(job, false, "RunStarted", &note).await;
        }
        Err(e) if is_already_exists(&e) => {}
        Err(e) => return Err(e.into()),
    }
    write_status(ctx, &api, job, &status).await?;
    Ok(Action::requeue(ctx.config.poll_interval))
}

/// Which image a run executes: its function's, or its own after a build.
async fn plan(job: &FunctionJob, namespace: &str, ctx: &Context) -> Result<Planned> {
    let spec = &job.spec;
    let name = job.name_any();
    let waiting = |message: String| FunctionJobStatus {
        phase: JobPhase::Pending,
        observed_run_id: Some(spec.run_id),
        message: Some(message),
        ..FunctionJobStatus::default()
    };
    if let Some(function_name) = &spec.function_ref {
        let functions: Api<Function> = Api::namespaced(ctx.client.clone(), namespace);
        let Some(function) = functions
            .get_opt(function_name)
            .await?
            .filter(|f| f.metadata.deletion_timestamp.is_none())
        else {
            return Ok(Planned::Fail(format!(
                "function {function_name:?} not found in {namespace}"
            )));
        };
        let workload = &function.spec.workload;
        let status = function.status.clone().unwrap_or_default();
        // The current upload is built: its image runs, whatever its Deployment does
        // (a crash-looping or still rolling out function still has a runnable image).
        let built = workload
            .s3_key
            .as_deref()
            .map(|key| {
                let image = workload_image(&ctx.config.registry, namespace, function_name, key);
                (image, version_of(key))
            })
            .filter(|(image, _)| status.image_ref.as_deref() == Some(image.as_str()));
        return Ok(match (status.phase, built) {
            (_, Some((image, version))) => {
                let mut env = workload.env.clone();
                env.extend(spec.env.clone());
                Planned::Ready(Plan {
                    image,
                    entrypoint: workload.entrypoint.clone(),
                    env,
                    memory_mb: workload.memory_mb,
                    cpu_millis: spec.cpu_millis.unwrap_or(workload.cpu_millis),
                    disk_mb: spec.disk_mb.unwrap_or(workload.disk_mb),
                    read_only_root: workload.runtime.descriptor().read_only_root,
                    egress: spec.egress_or(Some(workload)),
                    version: version.to_string(),
                })
            }
            (Phase::Failed, _) => {
                Planned::Fail(format!("function {function_name:?} failed to build"))
            }
            (phase, _) => Planned::Wait(waiting(format!(
                "waiting for function {function_name:?} to be built (it is {})",
                phase.as_str()
            ))),
        });
    }

    let (Some(runtime), Some(key)) = (spec.runtime, spec.s3_key.as_deref()) else {
        return Ok(Planned::Idle(waiting(no_code(Kind::FunctionJob, &name))));
    };
    let annotations = job.annotations();
    let image = workload_image(&ctx.config.registry, namespace, &name, key);
    let api: Api<FunctionJob> = Api::namespaced(ctx.client.clone(), namespace);
    let built = annotations
        .get(ANNOTATION_LAST_BUILT_S3KEY)
        .map(String::as_str)
        == Some(key);
    if built {
        if annotations.contains_key(ANNOTATION_BUILD_FAILED) {
            return Ok(Planned::Fail(format!(
                "the build of version {} failed; upload the code again",
                version_of(key)
            )));
        }
    } else {
        let target = BuildTarget {
            kind: Kind::FunctionJob,
            namespace,
            name: &name,
            s3_key: key,
            image: &image,
            egress: &spec.egress_or(None),
        };
        ctx.prepare_deploy_namespace(namespace, &deploy_namespace(namespace))
            .await?;
        match build(ctx, &target).await? {
            BuildState::Running { job } => {
                if annotations.get(ANNOTATION_BUILD_JOB) != Some(&job) {
                    annotate(&api, &name, &[(ANNOTATION_BUILD_JOB, Some(&job))]).await?;
                }
                let mut building =
                    waiting(format!("building version {} (job {job})", version_of(key)));
                building.phase = JobPhase::Building;
                return Ok(Planned::Wait(building));
            }
            BuildState::Failed { message } => {
                annotate(
                    &api,
                    &name,
                    &[
                        (ANNOTATION_LAST_BUILT_S3KEY, Some(key)),
                        (ANNOTATION_BUILD_JOB, None),
                        (ANNOTATION_BUILD_FAILED, Some("true")),
                    ],
                )
                .await?;
                return Ok(Planned::Fail(message));
            }
            BuildState::Succeeded => {
                annotate(
                    &api,
                    &name,
                    &[
                        (ANNOTATION_LAST_BUILT_S3KEY, Some(key)),
                        (ANNOTATION_BUILD_JOB, None),
                        (ANNOTATION_BUILD_FAILED, None),
                    ],
                )
                .await?;
            }
        }
    }
    Ok(Planned::Ready(Plan {
        image,
        entrypoint: spec.entrypoint_or_default(),
        env: spec.env.clone(),
        memory_mb: DEFAULT_MEMORY_MB,
        cpu_millis: spec.cpu_millis.unwrap_or(DEFAULT_CPU_MILLIS),
        disk_mb: spec.disk_mb.unwrap_or(DEFAULT_DISK_MB),
        read_only_root: runtime.descriptor().read_only_root,
        egress: spec.egress_or(None),
        version: version_of(key).to_string(),
    }))
}

async fn cleanup_job(job: &FunctionJob, ctx: &Context) -> Result<Action> {
    let namespace = namespace_of(job)?;
    // Its runs, and the build of a self-contained job.
    let owned = owner_selector(Kind::FunctionJob, &namespace, &job.name_any());
    for job_namespace in [deploy_namespace(&namespace), build_namespace(&namespace)] {
        let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &job_namespace);
        delete_labelled(&jobs, &owned, None).await?;
        let policies: Api<NetworkPolicy> = Api::namespaced(ctx.client.clone(), &job_namespace);
        delete_labelled(&policies, &owned, None).await?;
    }
    Ok(Action::await_change())
}
