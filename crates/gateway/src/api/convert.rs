//! Model ⇄ API JSON.

use sless_api::*;
use sless_core::model::*;
use sless_core::store::{Object, WorkloadResource};

/// Entrypoint and memory get defaults on create; PUT must name them (no zero values).
pub fn workload_spec(
    request: &WorkloadRequest,
    is_replace: bool,
) -> Result<WorkloadSpec, ValidationError> {
    let required = |field: &str| ValidationError::new(field, "required (must not be empty or 0)");
    let runtime = match request.runtime.as_deref() {
        Some(r) if !r.is_empty() => parse_runtime("runtime", r)?,
        _ => return Err(required("runtime")),
    };
    let entrypoint = match request.entrypoint.as_deref() {
        Some(e) if !e.is_empty() => e.to_string(),
        _ if is_replace => return Err(required("entrypoint")),
        _ => DEFAULT_ENTRYPOINT.to_string(),
    };
    let memory_mb = match request.memory_mb {
        Some(0) | None if is_replace => return Err(required("memory_mb")),
        Some(m) => m,
        None => DEFAULT_MEMORY_MB,
    };
    let spec = WorkloadSpec {
        runtime,
        entrypoint,
        memory_mb,
        // Absent on PUT too: clients written before these fields keep working.
        cpu_millis: request.cpu_millis.unwrap_or(DEFAULT_CPU_MILLIS),
        disk_mb: request.disk_mb.unwrap_or(DEFAULT_DISK_MB),
        timeout_sec: request.timeout_sec.unwrap_or(DEFAULT_TIMEOUT_SEC),
        env: request.env_vars.clone().unwrap_or_default(),
        s3_key: None,
        replicas: None,
        min_instances: request.min_instances,
        max_instances: request.max_instances,
        target_concurrency: request.target_concurrency,
        egress: request.egress.clone().unwrap_or_default(),
    };
    spec.validate()?;
    Ok(spec)
}

/// `instances`: how many run now, where the runner counts them.
pub fn workload_response<R: WorkloadResource>(
    object: &Object<R>,
    instances: Option<u32>,
) -> WorkloadResponse {
    let spec = R::workload(&object.spec);
    let scaling = spec.scaling(R::WORKLOAD.into());
    let status = &object.status;
    WorkloadResponse {
        namespace: object.meta.namespace.clone(),
        name: object.meta.name.clone(),
        kind: R::WORKLOAD,
        runtime: spec.runtime.to_string(),
        entrypoint: spec.entrypoint.clone(),
        memory_mb: spec.memory_mb,
        cpu_millis: spec.cpu_millis,
        disk_mb: spec.disk_mb,
        timeout_sec: spec.timeout_sec,
        env_vars: spec.env.clone(),
        egress: spec.egress.clone(),
        min_instances: scaling.min_instances,
        max_instances: scaling.max_instances,
        target_concurrency: scaling.target_concurrency,
        instances,
        phase: status.phase,
        message: status.message.clone(),
        image_ref: status.image_ref.clone(),
        s3_key: spec.s3_key.clone(),
        version: spec
            .s3_key
            .as_deref()
            .map(|key| keys::version_of(key).to_string()),
        last_built_at: status.last_built_at.clone(),
        url: status.url.clone(),
        resource_version: object.meta.resource_version.clone(),
        created_at: object.meta.created_at.clone(),
    }
}

pub fn trigger_spec(request: &TriggerRequest) -> Result<TriggerSpec, ValidationError> {
    let trigger_type = match request.trigger_type.as_deref() {
        Some(t) => parse_trigger_type("type", t)?,
        None => {
            return Err(ValidationError::new(
                "type",
                "required: http, cron or event",
            ));
        }
    };
    let function_ref = request
        .function_ref
        .clone()
        .ok_or_else(|| ValidationError::new("function_ref", "required: the function to call"))?;
    let spec = TriggerSpec {
        trigger_type,
        function_ref,
        schedule: request.schedule.clone().filter(|s| !s.is_empty()),
        queue: request.queue.clone().filter(|q| !q.is_empty()),
        enabled: request.enabled.unwrap_or(true),
        concurrency: request.concurrency,
        max_retries: request.max_retries,
    };
    spec.validate()?;
    Ok(spec)
}

pub fn trigger_response(object: &Object<Trigger>) -> TriggerResponse {
    let event = object.spec.trigger_type == TriggerType::Event;
    TriggerResponse {
        namespace: object.meta.namespace.clone(),
        name: object.meta.name.clone(),
        trigger_type: object.spec.trigger_type.as_str().to_string(),
        function_ref: object.spec.function_ref.clone(),
        schedule: object.spec.schedule.clone(),
        queue: object.spec.queue.clone(),
        enabled: object.spec.enabled,
        active: object.status.active,
        url: object.status.url.clone(),
        last_schedule_time: object.status.last_schedule_time.clone(),
        message: object.status.message.clone(),
        concurrency: event.then(|| object.spec.concurrency_or_default()),
        max_retries: event.then(|| object.spec.max_retries_or_default()),
        delivered: object.status.delivered,
        failed: object.status.failed,
        dead_lettered: object.status.dead_lettered,
        last_message_time: object.status.last_message_time.clone(),
        resource_version: object.meta.resource_version.clone(),
        created_at: object.meta.created_at.clone(),
    }
}

pub fn job_spec(request: &JobRequest) -> Result<FunctionJobSpec, ValidationError> {
    let runtime = match request.runtime.as_deref() {
        Some(r) if !r.is_empty() => Some(parse_runtime("runtime", r)?),
        _ => None,
    };
    // A self-contained job gets the usual default entrypoint.
    let entrypoint = request
        .entrypoint
        .clone()
        .filter(|e| !e.is_empty())
        .or_else(|| runtime.map(|_| DEFAULT_ENTRYPOINT.to_string()));
    let spec = FunctionJobSpec {
        function_ref: request.function_ref.clone().filter(|f| !f.is_empty()),
        runtime,
        entrypoint,
        env: request.env_vars.clone().unwrap_or_default(),
        s3_key: None,
        event_json: request
            .event_json
            .clone()
            .unwrap_or_else(|| "{}".to_string()),
        run_id: request.run_id.unwrap_or(0),
        timeout_sec: request.timeout_sec.unwrap_or(DEFAULT_TIMEOUT_SEC),
        cpu_millis: request.cpu_millis,
        disk_mb: request.disk_mb,
        egress: request.egress.clone(),
    };
    spec.validate()?;
    Ok(spec)
}

pub fn job_response(object: &Object<FunctionJob>) -> JobResponse {
    let spec = &object.spec;
    let status = &object.status;
    JobResponse {
        namespace: object.meta.namespace.clone(),
        name: object.meta.name.clone(),
        function_ref: spec.function_ref.clone(),
        runtime: spec.runtime.map(|r| r.to_string()),
        entrypoint: spec.entrypoint.clone(),
        env_vars: spec.env.clone(),
        event_json: spec.event_json.clone(),
        run_id: spec.run_id,
        timeout_sec: spec.timeout_sec,
        cpu_millis: spec.cpu_millis,
        disk_mb: spec.disk_mb,
        egress: spec.egress.clone(),
        s3_key: spec.s3_key.clone(),
        phase: status.phase,
        message: status.message.clone(),
        job_name: status.job_name.clone(),
        start_time: status.start_time.clone(),
        completion_time: status.completion_time.clone(),
        log_tail: status.log_tail.clone(),
        request_id: status.request_id.clone(),
        duration_ms: status.duration_ms,
        resource_version: object.meta.resource_version.clone(),
        created_at: object.meta.created_at.clone(),
    }
}

/// A run from a job's history; its log tail only when asked for (one run, not a list).
pub fn job_run_response(run: &JobRun, with_log: bool) -> JobRunResponse {
    JobRunResponse {
        run_id: run.run_id,
        request_id: run.request_id.clone(),
        event_json: run.event_json.clone(),
        phase: run.phase,
        message: run.message.clone(),
        start_time: run.start_time.clone(),
        completion_time: run.completion_time.clone(),
        duration_ms: run.duration_ms,
        log_tail: run.log_tail.clone().filter(|_| with_log),
    }
}
