//! The REST API's JSON types (snake_case, the Terraform attribute names).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{Egress, WorkloadKind};

pub const DEFAULT_MEMORY_MB: u32 = 128;
/// One core.
pub const DEFAULT_CPU_MILLIS: u32 = 1000;
pub const DEFAULT_DISK_MB: u32 = 512;
pub const DEFAULT_ENTRYPOINT: &str = "handler.handle";
/// Applied when a request gives no timeout; 0 (no limit) must be asked for.
pub const DEFAULT_TIMEOUT_SEC: u32 = 60;

/// Instances a Function or Service may run when the request does not say.
pub const DEFAULT_MAX_INSTANCES: u32 = 4;

pub const DEFAULT_EVENT_CONCURRENCY: u32 = 1;
pub const DEFAULT_EVENT_RETRIES: u32 = 5;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum TriggerType {
    Http,
    Cron,
    Event,
}

impl TriggerType {
    pub fn as_str(self) -> &'static str {
        match self {
            TriggerType::Http => "http",
            TriggerType::Cron => "cron",
            TriggerType::Event => "event",
        }
    }
}

/// Where a Function or Service is: its upload built and served, or not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum Phase {
    #[default]
    Pending,
    Building,
    Ready,
    Failed,
}

impl Phase {
    pub const ALL: [Phase; 4] = [Phase::Pending, Phase::Building, Phase::Ready, Phase::Failed];

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Building => "Building",
            Phase::Ready => "Ready",
            Phase::Failed => "Failed",
        }
    }
}

/// Where the current run of a job is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum JobPhase {
    #[default]
    Pending,
    Skipped,
    Building,
    Running,
    Succeeded,
    Failed,
}

impl JobPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            JobPhase::Pending => "Pending",
            JobPhase::Skipped => "Skipped",
            JobPhase::Building => "Building",
            JobPhase::Running => "Running",
            JobPhase::Succeeded => "Succeeded",
            JobPhase::Failed => "Failed",
        }
    }

    pub fn is_finished(self) -> bool {
        matches!(self, JobPhase::Succeeded | JobPhase::Failed)
    }
}

macro_rules! display_as_str {
    ($($t:ty),*) => {$(
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    )*};
}
display_as_str!(Phase, JobPhase);

/// Create (POST) or replace (PUT) a Function or a Service.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u32>,
    /// Thousandths of a core (default 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_millis: Option<u32>,
    /// Scratch space in MiB (default 512).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_mb: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_sec: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_vars: Option<BTreeMap<String, String>>,
    /// Where its code may connect; absent = `"internet"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<Egress>,
    /// Instances kept running (0-100; default 0 for a Function, 1 for a Service).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_instances: Option<u32>,
    /// Instances started at most (1-100; default 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_instances: Option<u32>,
    /// Calls in flight per instance before another is started (default per runtime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_concurrency: Option<u32>,
    /// Optional optimistic-concurrency guard for PUT: a stale value is a 409.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkloadResponse {
    pub namespace: String,
    pub name: String,
    pub kind: WorkloadKind,
    pub runtime: String,
    pub entrypoint: String,
    pub memory_mb: u32,
    pub cpu_millis: u32,
    pub disk_mb: u32,
    pub timeout_sec: u32,
    pub env_vars: BTreeMap<String, String>,
    #[serde(default)]
    pub egress: Egress,
    /// The scaling in effect, defaults filled in.
    #[serde(default)]
    pub min_instances: u32,
    #[serde(default)]
    pub max_instances: u32,
    #[serde(default)]
    pub target_concurrency: u32,
    /// Instances running now (0: scaled to zero, the next call starts one); None
    /// where the platform does not count them.
    #[serde(default)]
    pub instances: Option<u32>,
    pub phase: Phase,
    pub message: Option<String>,
    pub image_ref: Option<String>,
    pub s3_key: Option<String>,
    /// The version its code is (of `s3_key`); None before the first upload.
    #[serde(default)]
    pub version: Option<String>,
    pub last_built_at: Option<String>,
    pub url: Option<String>,
    pub resource_version: String,
    pub created_at: String,
}

/// One kept upload of a function or service (`GET .../{name}/versions`, newest first).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VersionResponse {
    /// The upload's version stamp, as in `s3_key`, logs and `image_ref`.
    pub version: String,
    pub created_at: String,
    /// Hex sha256 of the uploaded zip; None for uploads stored before sless kept
    /// versions (as are `size` and `uploaded_by`).
    pub sha256: Option<String>,
    pub size: Option<u64>,
    /// The `sub` of the token that uploaded it.
    pub uploaded_by: Option<String>,
    /// The version the workload's code is now (the one serving once it is Ready).
    pub active: bool,
}

/// `POST .../{name}/rollback`: make a kept version the workload's code again.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RollbackRequest {
    pub version: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub trigger_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Event triggers: messages handled at once (1-64, default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// Event triggers: retries before `<queue>.dead` (0-100, default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
}

/// `PATCH .../triggers/{name}`: start or stop in place.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerPatch {
    pub enabled: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TriggerResponse {
    pub namespace: String,
    pub name: String,
    #[serde(rename = "type")]
    pub trigger_type: String,
    pub function_ref: String,
    pub schedule: Option<String>,
    pub queue: Option<String>,
    pub enabled: bool,
    pub active: bool,
    pub url: Option<String>,
    pub last_schedule_time: Option<String>,
    pub message: Option<String>,
    /// Event triggers only (with their defaults filled in), like the counters below.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    /// Messages the function answered 2xx.
    #[serde(default)]
    pub delivered: u64,
    /// Calls that did not answer 2xx, each attempt counted.
    #[serde(default)]
    pub failed: u64,
    /// Messages moved to `<queue>.dead`.
    #[serde(default)]
    pub dead_lettered: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_message_time: Option<String>,
    pub resource_version: String,
    pub created_at: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_vars: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_json: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_sec: Option<u32>,
    /// Unset: the function's (function_ref) or the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_millis: Option<u32>,
    /// Unset: the function's (function_ref) or the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_mb: Option<u32>,
    /// Absent: the function's (`function_ref`), else `"internet"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<Egress>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
}

/// `PATCH .../jobs/{name}`: bump `run_id` (and optionally change the event).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobPatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_json: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobResponse {
    pub namespace: String,
    pub name: String,
    pub function_ref: Option<String>,
    pub runtime: Option<String>,
    pub entrypoint: Option<String>,
    pub env_vars: BTreeMap<String, String>,
    pub event_json: String,
    pub run_id: i64,
    pub timeout_sec: u32,
    /// As given; unset means the function's (function_ref) or the default.
    #[serde(default)]
    pub cpu_millis: Option<u32>,
    #[serde(default)]
    pub disk_mb: Option<u32>,
    /// `None`: the function's (`function_ref`), else `"internet"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<Egress>,
    pub s3_key: Option<String>,
    pub phase: JobPhase,
    pub message: Option<String>,
    pub job_name: Option<String>,
    pub start_time: Option<String>,
    pub completion_time: Option<String>,
    pub log_tail: Option<String>,
    /// The current run's id, its event's `_request_id`.
    #[serde(default)]
    pub request_id: Option<String>,
    #[serde(default)]
    pub duration_ms: Option<u64>,
    pub resource_version: String,
    pub created_at: String,
}

/// One run of a job from its history: `GET .../jobs/{name}/runs` (newest first, without
/// log tails) and `GET .../jobs/{name}/runs/{run_id}`. `event_json` and `message` are
/// cut to 2 KiB, `log_tail` to 4 KiB.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobRunResponse {
    pub run_id: i64,
    pub request_id: Option<String>,
    pub event_json: String,
    pub phase: JobPhase,
    /// The result (JSON) or why the run failed.
    pub message: Option<String>,
    pub start_time: Option<String>,
    pub completion_time: Option<String>,
    pub duration_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_tail: Option<String>,
}

/// `GET /v1/namespaces` (admins only).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NamespaceListResponse {
    /// Every namespace holding an object, by name.
    pub namespaces: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NamespaceResponse {
    pub namespace: String,
    /// "created" or "exists".
    pub status: String,
}

/// One file of an upload, as the source endpoint returns it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SourceFileResponse {
    pub name: String,
    /// None for binary files.
    pub content: Option<String>,
    pub binary: bool,
    pub truncated: bool,
    pub size: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
}

/// One captured line of a workload's output (`GET .../logs?tail=N`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogLineResponse {
    pub time: String,
    /// "stdout" or "stderr".
    pub stream: String,
    pub version: String,
    /// The call that printed the line; None for lines printed outside any call.
    #[serde(default)]
    pub request_id: Option<String>,
    pub line: String,
}

/// Which lines of a workload's output to read (`GET .../logs?tail=&request_id=&q=`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogFilter {
    pub tail: usize,
    /// Only the lines the call with this request id printed.
    pub request_id: Option<String>,
    /// Only lines containing this text (case-insensitive).
    pub search: Option<String>,
}

impl LogFilter {
    pub fn tail(tail: usize) -> Self {
        Self {
            tail,
            ..Self::default()
        }
    }

    /// Whether a line printed by the call `request_id` (None: outside calls) is kept.
    pub fn keeps(&self, request_id: Option<&str>, line: &str) -> bool {
        self.request_id
            .as_deref()
            .is_none_or(|id| request_id == Some(id))
            && self
                .search
                .as_deref()
                .is_none_or(|text| line.to_lowercase().contains(&text.to_lowercase()))
    }
}

impl LogLineResponse {
    /// `<time> <stream> [<request id>] <line>`, the id only on lines a call printed.
    pub fn text(&self) -> String {
        match &self.request_id {
            Some(id) => format!("{} {} [{id}] {}", self.time, self.stream, self.line),
            None => format!("{} {} {}", self.time, self.stream, self.line),
        }
    }
}
