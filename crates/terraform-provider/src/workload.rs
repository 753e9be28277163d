//! `sless_function` and `sless_service`: the spec, the code (uploaded when its content
//! changes) and a wait until the build is `Ready`.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sless_api::text::{first_line, last_lines};
use sless_api::validation::{
    parse_runtime, validate_cpu_millis, validate_disk_mb, validate_entrypoint, validate_env,
    validate_memory_mb, validate_name, validate_scaling, validate_timeout_sec,
};
use sless_api::{
    DEFAULT_CPU_MILLIS, DEFAULT_DISK_MB, DEFAULT_ENTRYPOINT, DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_SEC,
};
use sless_api::{Egress, Phase, Runtime, WorkloadRequest, WorkloadResponse};
use sless_client::archive::skipped_dirs;
use sless_client::client::{Client, Kind};
use tf_provider::schema::AttributeConstraint::{Computed, Optional, OptionalComputed, Required};
use tf_provider::schema::{AttributeType, Schema};
use tf_provider::value::{Value, ValueEmpty};
use tf_provider::{AttributePath, Diagnostics, Resource};

use crate::common::{
    DEFAULT_WAIT_SEC, POLL_INTERVAL, Shared, attribute, block, check, client, is_not_found,
    plan_source_hash, planned_code, remote_digest, report, text, to_u32,
};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkloadState {
    id: Value<String>,
    name: Value<String>,
    runtime: Value<String>,
    entrypoint: Value<String>,
    memory_mb: Value<i64>,
    cpu_millis: Value<i64>,
    disk_mb: Value<i64>,
    timeout_sec: Value<i64>,
    min_instances: Value<i64>,
    max_instances: Value<i64>,
    target_concurrency: Value<i64>,
    env_vars: Value<BTreeMap<String, String>>,
    egress: Value<String>,
    source_dir: Value<String>,
    source_zip: Value<String>,
    source_hash: Value<String>,
    wait_timeout_sec: Value<i64>,
    url: Value<String>,
    phase: Value<String>,
    image_ref: Value<String>,
    last_built_at: Value<String>,
    version: Value<String>,
}

/// Kept in the state but not shown: the upload the state's `source_hash` stands for, so
/// a later upload by someone else shows up as a change.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Uploaded {
    s3_key: Value<String>,
}

/// `source_hash` after code was uploaded outside Terraform: never a real digest.
const CHANGED_OUTSIDE: &str = "changed outside Terraform";

pub struct WorkloadResource {
    kind: Kind,
    client: Shared,
}

impl WorkloadResource {
    pub fn new(kind: Kind, client: Shared) -> Self {
        Self { kind, client }
    }

    fn request(&self, diags: &mut Diagnostics, state: &WorkloadState) -> WorkloadRequest {
        WorkloadRequest {
            name: state.name.as_ref_option().cloned(),
            runtime: state.runtime.as_ref_option().cloned(),
            entrypoint: state.entrypoint.as_ref_option().cloned(),
            memory_mb: to_u32(diags, "memory_mb", &state.memory_mb),
            cpu_millis: to_u32(diags, "cpu_millis", &state.cpu_millis),
            disk_mb: to_u32(diags, "disk_mb", &state.disk_mb),
            timeout_sec: to_u32(diags, "timeout_sec", &state.timeout_sec),
            env_vars: state.env_vars.as_ref_option().cloned(),
            egress: parse_egress(diags, &state.egress),
            min_instances: to_u32(diags, "min_instances", &state.min_instances),
            max_instances: to_u32(diags, "max_instances", &state.max_instances),
            target_concurrency: to_u32(diags, "target_concurrency", &state.target_concurrency),
            resource_version: None,
        }
    }

    /// The spec fields the user sets, to tell whether a PUT is needed.
    fn spec_changed(prior: &WorkloadState, planned: &WorkloadState) -> bool {
        prior.runtime != planned.runtime
            || prior.entrypoint != planned.entrypoint
            || prior.memory_mb != planned.memory_mb
            || prior.cpu_millis != planned.cpu_millis
            || prior.disk_mb != planned.disk_mb
            || prior.timeout_sec != planned.timeout_sec
            || prior.min_instances != planned.min_instances
            || prior.max_instances != planned.max_instances
            || prior.target_concurrency != planned.target_concurrency
            || prior.env_vars != planned.env_vars
            || prior.egress != planned.egress
    }

    /// Uploads the code and waits for its build; errors name the build log's end.
    async fn deploy_code(
        &self,
        diags: &mut Diagnostics,
        client: &Client,
        state: &mut WorkloadState,
    ) -> Option<String> {
        let code = planned_code(
            diags,
            &state.source_dir,
            &state.source_zip,
            &mut state.source_hash,
        )?;
        let name = text(&state.name);
        let uploaded = match client.upload(self.kind, name, code.zip).await {
            Ok(uploaded) => uploaded,
            Err(e) => {
                report(
                    diags,
                    format!("uploading the code of {} {name}", self.kind.noun()),
                    &e,
                );
                return None;
            }
        };
        let key = uploaded["s3_key"].as_str().map(String::from);
        let wait = wait_limit(state);
        self.wait_ready(diags, client, name, key.as_deref(), wait)
            .await;
        key
    }

    async fn wait_ready(
        &self,
        diags: &mut Diagnostics,
        client: &Client,
        name: &str,
        key: Option<&str>,
        wait: Duration,
    ) {
        let noun = self.kind.noun();
        let deadline = Instant::now() + wait;
        loop {
            let workload = match client.get_workload(self.kind, name).await {
                Ok(workload) => workload,
                Err(e) => return report(diags, format!("waiting for {noun} {name}"), &e),
            };
            let ours = key.is_none() || workload.s3_key.as_deref() == key;
            if ours && workload.phase == Phase::Ready {
                return;
            }
            if ours && workload.phase == Phase::Failed {
                // The message ends with the reason: a failed build's output, or why the
                // built version did not start (then with the instance's output).
                let message = workload.message.unwrap_or_default();
                let log = client.build_log(self.kind, name).await.unwrap_or_default();
                // The message's last line is the build's own when the build failed.
                let cause = last_lines(&message, 1).join("\n");
                let (summary, detail) = if !cause.trim().is_empty() && log.contains(cause.trim()) {
                    (
                        format!(
                            "{noun} {name} failed to build: {}",
                            last_lines(&message, 1).join("\n")
                        ),
                        format!("end of the build log:\n{}", last_lines(&log, 20).join("\n")),
                    )
                } else {
                    (
                        format!("{noun} {name} failed: {}", first_line(&message)),
                        last_lines(&message, 20).join("\n"),
                    )
                };
                diags.root_error(summary, detail);
                return;
            }
            if Instant::now() >= deadline {
                diags.root_error(
                    format!("{noun} {name} is not Ready after {} s", wait.as_secs()),
                    format!(
                        "phase {}{}; raise wait_timeout_sec to wait longer",
                        workload.phase,
                        workload
                            .message
                            .map(|m| format!(": {m}"))
                            .unwrap_or_default()
                    ),
                );
                return;
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// The state after a change: what was planned, with the server's computed values.
    async fn settle(
        &self,
        diags: &mut Diagnostics,
        client: &Client,
        mut state: WorkloadState,
    ) -> WorkloadState {
        match client.get_workload(self.kind, text(&state.name)).await {
            Ok(workload) => fill(&mut state, &workload),
            Err(e) => report(
                diags,
                format!("reading {} {}", self.kind.noun(), text(&state.name)),
                &e,
            ),
        }
        // Anything still unknown stays empty rather than unknown after apply.
        for value in [
            &mut state.url,
            &mut state.phase,
            &mut state.image_ref,
            &mut state.last_built_at,
            &mut state.version,
        ] {
            if value.is_unknown() {
                *value = Value::Null;
            }
        }
        state
    }
}

/// Settings left out of the configuration get the server's defaults in the plan (not
/// the last value, which Terraform proposes for them), so taking one out sets it back.
fn default_settings(planned: &mut WorkloadState, config: &WorkloadState) {
    if config.entrypoint.is_null() {
        planned.entrypoint = Value::Value(DEFAULT_ENTRYPOINT.into());
    }
    if config.memory_mb.is_null() {
        planned.memory_mb = Value::Value(DEFAULT_MEMORY_MB.into());
    }
    if config.cpu_millis.is_null() {
        planned.cpu_millis = Value::Value(DEFAULT_CPU_MILLIS.into());
    }
    if config.disk_mb.is_null() {
        planned.disk_mb = Value::Value(DEFAULT_DISK_MB.into());
    }
}

/// `egress` as the API takes it; a bad value is reported on the attribute.
fn parse_egress(diags: &mut Diagnostics, egress: &Value<String>) -> Option<Egress> {
    let parsed = egress.as_ref_option()?.parse::<Egress>();
    check(diags, parsed.as_ref().map(|_| ()).map_err(Clone::clone));
    parsed.ok()
}

/// How long apply waits for a build.
fn wait_limit(state: &WorkloadState) -> Duration {
    Duration::from_secs(state.wait_timeout_sec.unwrap_or(DEFAULT_WAIT_SEC).max(0) as u64)
}

/// Copies what the server decided into the state. Optional settings left unset stay
/// null while the server holds its default, so they never show as a phantom change.
fn fill(state: &mut WorkloadState, workload: &WorkloadResponse) {
    state.id = Value::Value(workload.name.clone());
    state.name = Value::Value(workload.name.clone());
    state.runtime = Value::Value(workload.runtime.clone());
    state.entrypoint = Value::Value(workload.entrypoint.clone());
    state.memory_mb = Value::Value(workload.memory_mb.into());
    state.cpu_millis = Value::Value(workload.cpu_millis.into());
    state.disk_mb = Value::Value(workload.disk_mb.into());
    if !(state.timeout_sec.is_null() && workload.timeout_sec == DEFAULT_TIMEOUT_SEC) {
        state.timeout_sec = Value::Value(workload.timeout_sec.into());
    }
    // Scaling left unset stays null: the server's default depends on kind and runtime.
    for (field, value) in [
        (&mut state.min_instances, workload.min_instances),
        (&mut state.max_instances, workload.max_instances),
        (&mut state.target_concurrency, workload.target_concurrency),
    ] {
        if !field.is_null() {
            *field = Value::Value(value.into());
        }
    }
    if !(state.env_vars.is_null() && workload.env_vars.is_empty()) {
        state.env_vars = Value::Value(workload.env_vars.clone());
    }
    // The configuration's spelling stays while it means what the server holds.
    let same = state
        .egress
        .as_ref_option()
        .and_then(|e| e.parse::<Egress>().ok());
    if same.as_ref() != Some(&workload.egress)
        && !(state.egress.is_null() && workload.egress.is_internet())
    {
        state.egress = Value::Value(workload.egress.to_string());
    }
    state.url = workload.url.clone().into();
    state.phase = Value::Value(workload.phase.to_string());
    state.image_ref = workload.image_ref.clone().into();
    state.last_built_at = workload.last_built_at.clone().into();
    state.version = workload.version.clone().into();
}

#[async_trait]
impl Resource for WorkloadResource {
    type State<'a> = WorkloadState;
    type PrivateState<'a> = Uploaded;
    type ProviderMetaState<'a> = ValueEmpty;

    fn schema(&self, _diags: &mut Diagnostics) -> Option<Schema> {
        use AttributeType::{Map, Number, String};
        let noun = self.kind.noun();
        let mut env_vars = attribute(
            Map(Box::new(String)),
            Optional,
            "Environment variables of the instances.",
        );
        env_vars.sensitive = true;
        let description = match self.kind {
            Kind::Service => "An always-on HTTP service, reachable at /fn/<namespace>/<name>.",
            _ => "A function: code called through its triggers (http, cron, event).",
        };
        Some(Schema {
            version: 1,
            block: block(
                description,
                HashMap::from([
                    ("id".into(), attribute(String, Computed, "The name.")),
                    (
                        "name".into(),
                        attribute(
                            String,
                            Required,
                            "DNS-1123 label; changing it replaces the resource.",
                        ),
                    ),
                    (
                        "runtime".into(),
                        attribute(String, Required, &format!("{}.", Runtime::choices())),
                    ),
                    (
                        "entrypoint".into(),
                        attribute(
                            String,
                            OptionalComputed,
                            "module.function (default handler.handle).",
                        ),
                    ),
                    (
                        "memory_mb".into(),
                        attribute(
                            Number,
                            OptionalComputed,
                            "Memory limit, 64-4096 (default 128).",
                        ),
                    ),
                    (
                        "cpu_millis".into(),
                        attribute(
                            Number,
                            OptionalComputed,
                            "CPU limit in thousandths of a core, 50-16000 (default 1000).",
                        ),
                    ),
                    (
                        "disk_mb".into(),
                        attribute(
                            Number,
                            OptionalComputed,
                            "Scratch space (HOME/TMPDIR) in MiB, 16-65536 (default 512).",
                        ),
                    ),
                    (
                        "timeout_sec".into(),
                        attribute(
                            Number,
                            Optional,
                            "Request timeout, 0 = none, 1-900 (server default 60 when unset).",
                        ),
                    ),
                    (
                        "min_instances".into(),
                        attribute(
                            Number,
                            Optional,
                            "Instances kept running, 0-100 (default 0 for a function: it \
                             stops when idle; 1 for a service).",
                        ),
                    ),
                    (
                        "max_instances".into(),
                        attribute(
                            Number,
                            Optional,
                            "Instances started at most under load, 1-100 (default 4).",
                        ),
                    ),
                    (
                        "target_concurrency".into(),
                        attribute(
                            Number,
                            Optional,
                            "Calls in flight per instance before another starts, 1-1000 \
                             (default per runtime).",
                        ),
                    ),
                    ("env_vars".into(), env_vars),
                    (
                        "egress".into(),
                        attribute(
                            String,
                            Optional,
                            "Where its code may connect: internet (public addresses only, \
                             the default), none, or comma-separated host:port, ip:port or \
                             CIDR[:port] entries.",
                        ),
                    ),
                    (
                        "source_dir".into(),
                        attribute(
                            String,
                            Optional,
                            &format!(
                                "Folder zipped and uploaded (skips {} and what .slessignore lists).",
                                skipped_dirs().join(", ")
                            ),
                        ),
                    ),
                    (
                        "source_zip".into(),
                        attribute(
                            String,
                            Optional,
                            "A zip file uploaded as it is (instead of source_dir).",
                        ),
                    ),
                    (
                        "source_hash".into(),
                        attribute(
                            String,
                            Computed,
                            "SHA-256 of the code's files: a change uploads and rebuilds.",
                        ),
                    ),
                    (
                        "wait_timeout_sec".into(),
                        attribute(
                            Number,
                            Optional,
                            "How long apply waits for Ready (default 900).",
                        ),
                    ),
                    (
                        "url".into(),
                        attribute(String, Computed, &format!("Where the {noun} answers.")),
                    ),
                    (
                        "phase".into(),
                        attribute(String, Computed, "Pending, Building, Ready or Failed."),
                    ),
                    (
                        "image_ref".into(),
                        attribute(String, Computed, "The built image or version."),
                    ),
                    (
                        "last_built_at".into(),
                        attribute(String, Computed, "When the code was last built."),
                    ),
                    (
                        "version".into(),
                        attribute(
                            String,
                            Computed,
                            "The version its code is (sless versions NAME lists them).",
                        ),
                    ),
                ]),
            ),
        })
    }

    async fn validate<'a>(&self, diags: &mut Diagnostics, config: Self::State<'a>) -> Option<()> {
        if let Value::Value(name) = &config.name {
            check(diags, validate_name("name", name));
        }
        if let Value::Value(runtime) = &config.runtime {
            check(diags, parse_runtime("runtime", runtime).map(|_| ()));
        }
        if let Value::Value(entrypoint) = &config.entrypoint {
            check(diags, validate_entrypoint("entrypoint", entrypoint));
        }
        if let Some(memory) = to_u32(diags, "memory_mb", &config.memory_mb) {
            check(diags, validate_memory_mb("memory_mb", memory));
        }
        if let Some(cpu) = to_u32(diags, "cpu_millis", &config.cpu_millis) {
            check(diags, validate_cpu_millis("cpu_millis", cpu));
        }
        if let Some(disk) = to_u32(diags, "disk_mb", &config.disk_mb) {
            check(diags, validate_disk_mb("disk_mb", disk));
        }
        if let Some(timeout) = to_u32(diags, "timeout_sec", &config.timeout_sec) {
            check(diags, validate_timeout_sec("timeout_sec", timeout));
        }
        let scaling = validate_scaling(
            to_u32(diags, "min_instances", &config.min_instances),
            to_u32(diags, "max_instances", &config.max_instances),
            to_u32(diags, "target_concurrency", &config.target_concurrency),
        );
        check(diags, scaling);
        if let Value::Value(env) = &config.env_vars {
            check(diags, validate_env("env_vars", env));
        }
        parse_egress(diags, &config.egress);
        if config.source_dir.is_value() && config.source_zip.is_value() {
            diags.error_short(
                "set source_dir or source_zip, not both",
                AttributePath::new("source_zip"),
            );
        }
        Some(())
    }

    async fn read<'a>(
        &self,
        diags: &mut Diagnostics,
        mut state: Self::State<'a>,
        private: Self::PrivateState<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        let client = client(&self.client, diags)?;
        let name = text(&state.name).to_string();
        let workload = match client.get_workload(self.kind, &name).await {
            Ok(workload) => workload,
            Err(e) if is_not_found(&e) => return None,
            Err(e) => {
                report(diags, format!("reading {} {name}", self.kind.noun()), &e);
                return Some((state, private));
            }
        };
        // Code uploaded by someone else: the next plan uploads ours again.
        if private.s3_key.is_value() && workload.s3_key.as_ref() != private.s3_key.as_ref_option() {
            state.source_hash = Value::Value(CHANGED_OUTSIDE.into());
        }
        fill(&mut state, &workload);
        Some((state, private))
    }

    async fn plan_create<'a>(
        &self,
        diags: &mut Diagnostics,
        mut proposed: Self::State<'a>,
        config: Self::State<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        proposed.id = proposed.name.clone();
        proposed.source_hash = plan_source_hash(diags, &proposed.source_dir, &proposed.source_zip);
        default_settings(&mut proposed, &config);
        proposed.url = Value::Unknown;
        proposed.phase = Value::Unknown;
        proposed.image_ref = Value::Unknown;
        proposed.last_built_at = Value::Unknown;
        proposed.version = Value::Unknown;
        Some((proposed, Uploaded::default()))
    }

    async fn plan_update<'a>(
        &self,
        diags: &mut Diagnostics,
        prior: Self::State<'a>,
        mut proposed: Self::State<'a>,
        config: Self::State<'a>,
        private: Self::PrivateState<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>, Vec<AttributePath>)> {
        proposed.id = proposed.name.clone();
        proposed.source_hash = plan_source_hash(diags, &proposed.source_dir, &proposed.source_zip);
        default_settings(&mut proposed, &config);
        let code_changed = proposed.source_hash != prior.source_hash;
        // A change restarts the instances: the URL comes and goes with them (a function
        // that did not start has none).
        if code_changed || Self::spec_changed(&prior, &proposed) || proposed.name != prior.name {
            proposed.phase = Value::Unknown;
            proposed.image_ref = Value::Unknown;
            proposed.last_built_at = Value::Unknown;
            proposed.version = Value::Unknown;
            proposed.url = Value::Unknown;
        }
        let mut replace = Vec::new();
        if proposed.name != prior.name {
            replace.push(AttributePath::new("name"));
        }
        Some((proposed, private, replace))
    }

    async fn plan_destroy<'a>(
        &self,
        _diags: &mut Diagnostics,
        _prior: Self::State<'a>,
        private: Self::PrivateState<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<Self::PrivateState<'a>> {
        Some(private)
    }

    async fn create<'a>(
        &self,
        diags: &mut Diagnostics,
        planned: Self::State<'a>,
        _config: Self::State<'a>,
        _private: Self::PrivateState<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        let client = client(&self.client, diags)?;
        let name = text(&planned.name).to_string();
        let request = self.request(diags, &planned);
        if let Err(e) = client.create_workload(self.kind, &request).await {
            let mut summary = format!("creating {} {name}", self.kind.noun());
            if e.status() == Some(409) {
                summary.push_str(&format!(
                    " (it exists: `terraform import` it, e.g. terraform import sless_{}.<label> {name})",
                    self.kind.noun()
                ));
            }
            report(diags, summary, &e);
            return None;
        }
        let mut planned = planned;
        let key = if planned.source_hash.is_null() {
            None
        } else {
            self.deploy_code(diags, &client, &mut planned).await
        };
        let state = self.settle(diags, &client, planned).await;
        Some((state, Uploaded { s3_key: key.into() }))
    }

    async fn update<'a>(
        &self,
        diags: &mut Diagnostics,
        prior: Self::State<'a>,
        planned: Self::State<'a>,
        _config: Self::State<'a>,
        private: Self::PrivateState<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        let client = client(&self.client, diags)?;
        let name = text(&planned.name).to_string();
        let mut private = private;
        let code_changed = planned.source_hash != prior.source_hash;
        if Self::spec_changed(&prior, &planned) {
            let request = WorkloadRequest {
                name: None,
                ..self.request(diags, &planned)
            };
            let updated = match client.replace_workload(self.kind, &name, &request).await {
                Ok(updated) => updated,
                Err(e) => {
                    report(diags, format!("updating {} {name}", self.kind.noun()), &e);
                    return None;
                }
            };
            // A new runtime or entrypoint makes the server rebuild the stored code under a
            // new key: still ours, so it must not read as an upload by someone else.
            if !code_changed
                && updated.s3_key.is_some()
                && updated.s3_key.as_ref() != private.s3_key.as_ref_option()
            {
                let wait = wait_limit(&planned);
                self.wait_ready(diags, &client, &name, updated.s3_key.as_deref(), wait)
                    .await;
                private.s3_key = updated.s3_key.into();
            }
        }
        let mut planned = planned;
        if code_changed && !planned.source_hash.is_null() {
            private.s3_key = self.deploy_code(diags, &client, &mut planned).await.into();
        }
        let state = self.settle(diags, &client, planned).await;
        Some((state, private))
    }

    async fn destroy<'a>(
        &self,
        diags: &mut Diagnostics,
        prior: Self::State<'a>,
        _private: Self::PrivateState<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<()> {
        let client = client(&self.client, diags)?;
        let name = text(&prior.name);
        match client.delete(self.kind, name).await {
            Ok(()) => Some(()),
            Err(e) if is_not_found(&e) => Some(()),
            Err(e) => {
                report(diags, format!("deleting {} {name}", self.kind.noun()), &e);
                None
            }
        }
    }

    /// `NAME`, or `NAME,SOURCE_DIR` to adopt code already uploaded from that folder
    /// (the import then plans no upload when the folder holds the same files).
    async fn import<'a>(
        &self,
        diags: &mut Diagnostics,
        id: String,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        let client = client(&self.client, diags)?;
        let (name, source_dir) = match id.split_once(',') {
            Some((name, dir)) => (name.to_string(), Some(dir.to_string())),
            None => (id.clone(), None),
        };
        let workload = match client.get_workload(self.kind, &name).await {
            Ok(workload) => workload,
            Err(e) => {
                report(diags, format!("importing {} {name}", self.kind.noun()), &e);
                return None;
            }
        };
        let mut state = WorkloadState::default();
        fill(&mut state, &workload);
        if let Some(dir) = source_dir {
            state.source_dir = Value::Value(dir);
            state.source_hash = remote_digest(&client, self.kind, &name)
                .await
                .unwrap_or_else(|| CHANGED_OUTSIDE.into())
                .into();
        }
        Some((
            state,
            Uploaded {
                s3_key: workload.s3_key.into(),
            },
        ))
    }
}
