use std::collections::BTreeMap;
use std::time::Duration;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sless_api::validation::{
    CPU_MILLIS_MAX, CPU_MILLIS_MIN, DISK_MB_MAX, DISK_MB_MIN, ENTRYPOINT_PATTERN,
    MAX_EVENT_CONCURRENCY, MAX_EVENT_RETRIES, MAX_INSTANCES, MAX_NAME_LEN, MAX_REPLICAS,
    MAX_TARGET_CONCURRENCY, MAX_TIMEOUT_SEC, MEMORY_MB_MAX, MEMORY_MB_MIN, NAME_PATTERN,
    SCHEDULE_PATTERN,
};
pub use sless_api::{
    DEFAULT_CPU_MILLIS, DEFAULT_DISK_MB, DEFAULT_ENTRYPOINT, DEFAULT_EVENT_CONCURRENCY,
    DEFAULT_EVENT_RETRIES, DEFAULT_MAX_INSTANCES, DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_SEC, Egress,
    JobPhase, Kind, Phase, Runtime, TriggerType, WorkloadKind,
};

pub const API_GROUP: &str = "sless.kube5s.ru";
pub const API_VERSION: &str = "v1alpha1";
/// The s3Key a Function was last built from; the same upload is never built twice.
pub const ANNOTATION_LAST_BUILT_S3KEY: &str = "sless.kube5s.ru/last-built-s3key";
/// The versions (upload stamps) whose image was built, oldest first, space-separated: a
/// rollback to one of them deploys its image without building it again.
pub const ANNOTATION_BUILT_VERSIONS: &str = "sless.kube5s.ru/built-versions";
/// The build Job currently running for a Function.
pub const ANNOTATION_BUILD_JOB: &str = "sless.kube5s.ru/build-job";

/// Kubernetes mode writes a standard `Ready` condition next to the phase (see
/// `sless-operator`'s `controller::write_status`); the CRD schema must name it or the API server
/// prunes it.
fn with_ready_condition(schema: &mut schemars::Schema) {
    let condition = serde_json::json!({
        "type": "object",
        "required": ["type", "status"],
        "properties": {
            "type": {"type": "string"},
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "reason": {"type": "string"},
            "message": {"type": "string"},
            "lastTransitionTime": {"type": "string", "format": "date-time"},
            "observedGeneration": {"type": "integer", "format": "int64"},
        },
    });
    if let Some(properties) = schema
        .get_mut("properties")
        .and_then(serde_json::Value::as_object_mut)
    {
        properties.insert(
            "conditions".into(),
            serde_json::json!({
                "type": "array",
                "items": condition,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            }),
        );
    }
}

/// [`validate_env`]'s names rule as a CEL rule on the env map.
pub fn env_names_rule(schema: &mut schemars::Schema) {
    schema.insert(
        "x-kubernetes-validations".into(),
        serde_json::json!([{
            "rule": "self.all(k, k.matches('^[A-Za-z_][A-Za-z0-9_]*$') && k != 'PORT' && !k.startsWith('SLESS_'))",
            "message": "env names use letters, digits and '_', not starting with a digit; PORT and SLESS_* are reserved",
        }]),
    );
}

/// A timestamp as the statuses and the store write them: RFC 3339, UTC, whole seconds.
pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn default_cpu_millis() -> u32 {
    DEFAULT_CPU_MILLIS
}

fn default_disk_mb() -> u32 {
    DEFAULT_DISK_MB
}

/// What Functions and Services have in common: code, how to call it, its limits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSpec {
    pub runtime: Runtime,
    #[schemars(regex(pattern = ENTRYPOINT_PATTERN))]
    pub entrypoint: String,
    #[schemars(range(min = MEMORY_MB_MIN, max = MEMORY_MB_MAX))]
    pub memory_mb: u32,
    /// Thousandths of a core; objects stored before the field get the default.
    #[serde(default = "default_cpu_millis")]
    #[schemars(range(min = CPU_MILLIS_MIN, max = CPU_MILLIS_MAX))]
    pub cpu_millis: u32,
    /// Scratch space in MiB.
    #[serde(default = "default_disk_mb")]
    #[schemars(range(min = DISK_MB_MIN, max = DISK_MB_MAX))]
    pub disk_mb: u32,
    /// 0 = no limit, else 1–900.
    #[schemars(range(max = MAX_TIMEOUT_SEC))]
    pub timeout_sec: u32,
    #[serde(default)]
    #[schemars(transform = env_names_rule)]
    pub env: BTreeMap<String, String>,
    /// Build context key in S3, set by upload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_REPLICAS))]
    pub replicas: Option<i32>,
    /// Instances kept running; unset: 0 for a Function, 1 for a Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_INSTANCES))]
    pub min_instances: Option<u32>,
    /// Instances started at most; unset: 4.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_INSTANCES))]
    pub max_instances: Option<u32>,
    /// Calls in flight per instance before another is started; unset: the runtime's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_TARGET_CONCURRENCY))]
    pub target_concurrency: Option<u32>,
    /// Where its code may connect (default `"internet"`: public addresses only).
    #[serde(default, skip_serializing_if = "Egress::is_internet")]
    pub egress: Egress,
}

/// How many instances a workload runs, defaults filled in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scaling {
    pub min_instances: u32,
    pub max_instances: u32,
    pub target_concurrency: u32,
}

impl WorkloadSpec {
    /// The scaling of a workload of `kind`. `replicas` (sless's own field, from before
    /// the scaling fields) still means min = max = replicas where those are unset.
    pub fn scaling(&self, kind: Kind) -> Scaling {
        let replicas = self.replicas.map(|r| u32::try_from(r).unwrap_or(0));
        let default_min = if kind == Kind::Service { 1 } else { 0 };
        let min_instances = self.min_instances.or(replicas).unwrap_or(default_min);
        let max_instances = self
            .max_instances
            .or(replicas.filter(|r| *r > 0))
            // Room for the instances kept, when only those are given.
            .unwrap_or(DEFAULT_MAX_INSTANCES.max(min_instances))
            .max(1);
        Scaling {
            min_instances,
            max_instances,
            target_concurrency: self
                .target_concurrency
                .unwrap_or(self.runtime.descriptor().target_concurrency),
        }
    }

    /// How long a call may take; `None` = no limit.
    pub fn timeout(&self) -> Option<Duration> {
        (self.timeout_sec > 0).then(|| Duration::from_secs(self.timeout_sec.into()))
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = with_ready_condition)]
pub struct WorkloadStatus {
    #[serde(default)]
    pub phase: Phase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_ref: Option<String>,
    /// Build error tail or readiness note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_built_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// A function: code run on demand through its triggers.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "sless.kube5s.ru",
    version = "v1alpha1",
    kind = "Function",
    namespaced,
    status = "WorkloadStatus",
    shortname = "slfn",
    printcolumn = r#"{"name":"Runtime","type":"string","jsonPath":".spec.runtime"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#
)]
pub struct FunctionSpec {
    #[serde(flatten)]
    pub workload: WorkloadSpec,
}

/// An always-on HTTP function.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "sless.kube5s.ru",
    version = "v1alpha1",
    kind = "Service",
    namespaced,
    status = "WorkloadStatus",
    shortname = "slsvc",
    printcolumn = r#"{"name":"Runtime","type":"string","jsonPath":".spec.runtime"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#
)]
pub struct ServiceSpec {
    #[serde(flatten)]
    pub workload: WorkloadSpec,
}

fn enabled_by_default() -> bool {
    true
}

/// How a function gets called: over HTTP, on a schedule, or from a queue.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "sless.kube5s.ru",
    version = "v1alpha1",
    kind = "Trigger",
    namespaced,
    status = "TriggerStatus",
    shortname = "sltr",
    printcolumn = r#"{"name":"Type","type":"string","jsonPath":".spec.type"}"#,
    printcolumn = r#"{"name":"Function","type":"string","jsonPath":".spec.functionRef"}"#,
    printcolumn = r#"{"name":"Enabled","type":"boolean","jsonPath":".spec.enabled"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.type != 'cron' || has(self.schedule)",
     "message": "schedule is required for a cron trigger (5-field cron, e.g. \"*/5 * * * *\")"},
    {"rule": "self.type != 'event' || (has(self.queue) && self.queue.trim().size() > 0)",
     "message": "queue is required for an event trigger"},
    {"rule": "self.type == 'event' || (!has(self.concurrency) && !has(self.maxRetries))",
     "message": "concurrency and maxRetries apply to event triggers only"},
]))]
pub struct TriggerSpec {
    #[serde(rename = "type")]
    pub trigger_type: TriggerType,
    #[schemars(regex(pattern = NAME_PATTERN), length(max = MAX_NAME_LEN))]
    pub function_ref: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = SCHEDULE_PATTERN))]
    pub schedule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    #[serde(default = "enabled_by_default")]
    pub enabled: bool,
    /// Event triggers: messages handled at once (the consumer's prefetch); default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_EVENT_CONCURRENCY))]
    pub concurrency: Option<u32>,
    /// Event triggers: retries of a failed message before `<queue>.dead`; default 5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_EVENT_RETRIES))]
    pub max_retries: Option<u32>,
}

impl TriggerSpec {
    pub fn concurrency_or_default(&self) -> u32 {
        self.concurrency.unwrap_or(DEFAULT_EVENT_CONCURRENCY)
    }

    pub fn max_retries_or_default(&self) -> u32 {
        self.max_retries.unwrap_or(DEFAULT_EVENT_RETRIES)
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = with_ready_condition)]
pub struct TriggerStatus {
    #[serde(default)]
    pub active: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<String>,
    /// Why the trigger is not active (e.g. its function is missing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Event triggers: messages the function answered 2xx (then acked).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub delivered: u64,
    /// Event triggers: calls that did not answer 2xx (each attempt counts).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed: u64,
    /// Event triggers: messages moved to `<queue>.dead` after their last retry.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dead_lettered: u64,
    /// Event triggers: when a message was last handled, RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_message_time: Option<String>,
}

/// A one-shot run of a function's code with a JSON event.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "sless.kube5s.ru",
    version = "v1alpha1",
    kind = "FunctionJob",
    namespaced,
    status = "FunctionJobStatus",
    shortname = "sljob",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Run","type":"integer","jsonPath":".spec.runId"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.functionRef) != has(self.runtime)",
     "message": "give either functionRef (run a function's code) or runtime and entrypoint (a self-contained job), not both"},
]))]
pub struct FunctionJobSpec {
    /// Run an existing function's code; otherwise the job carries its own code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = NAME_PATTERN), length(max = MAX_NAME_LEN))]
    pub function_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<Runtime>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = ENTRYPOINT_PATTERN))]
    pub entrypoint: Option<String>,
    #[serde(default)]
    #[schemars(transform = env_names_rule)]
    pub env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3_key: Option<String>,
    /// The event, a JSON document as a string.
    pub event_json: String,
    /// 0 = created but not run; raising it runs the job again.
    #[serde(default)]
    pub run_id: i64,
    /// 0 = no limit, else 1–900.
    #[serde(default)]
    #[schemars(range(max = MAX_TIMEOUT_SEC))]
    pub timeout_sec: u32,
    /// Unset: the function's (functionRef) or the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = CPU_MILLIS_MIN, max = CPU_MILLIS_MAX))]
    pub cpu_millis: Option<u32>,
    /// Unset: the function's (functionRef) or the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = DISK_MB_MIN, max = DISK_MB_MAX))]
    pub disk_mb: Option<u32>,
    /// Absent: the function's (`functionRef`), else `"internet"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<Egress>,
}

impl FunctionJobSpec {
    /// The handler a self-contained job calls: its own, or the default.
    pub fn entrypoint_or_default(&self) -> String {
        self.entrypoint
            .clone()
            .unwrap_or_else(|| DEFAULT_ENTRYPOINT.to_string())
    }

    /// The egress a run gets: its own, else its function's (`function_ref`), else
    /// `"internet"`.
    pub fn egress_or(&self, function: Option<&WorkloadSpec>) -> Egress {
        self.egress
            .clone()
            .or_else(|| function.map(|f| f.egress.clone()))
            .unwrap_or_default()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = with_ready_condition)]
pub struct FunctionJobStatus {
    #[serde(default)]
    pub phase: JobPhase,
    /// The run this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_run_id: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<String>,
    /// The handler's result (JSON) or the failure reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_tail: Option<String>,
    /// The run's id, given to its handler as the event's `_request_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// How long the run took, once it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// The version of the code the run executes, once it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Every run kept, this one included, newest first (see [`FunctionJobStatus::advance`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<super::JobRun>,
}
