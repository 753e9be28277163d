//! `sless_job`: a one-shot run of a function (or of its own code) with a JSON event;
//! raising `run_id` runs it again in place, and apply waits for the result.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sless_api::validation::{
    parse_runtime, validate_cpu_millis, validate_disk_mb, validate_entrypoint, validate_env,
    validate_event_json, validate_name, validate_timeout_sec,
};
use sless_api::{DEFAULT_ENTRYPOINT, DEFAULT_TIMEOUT_SEC};
use sless_api::{JobPatch, JobPhase, JobRequest, JobResponse, Runtime};
use sless_client::client::{Client, Kind, RunWait};
use tf_provider::schema::AttributeConstraint::{Computed, Optional, OptionalComputed, Required};
use tf_provider::schema::{AttributeType, Schema};
use tf_provider::value::{Value, ValueEmpty};
use tf_provider::{AttributePath, Diagnostics, Resource};

use crate::common::{
    DEFAULT_WAIT_SEC, POLL_INTERVAL, Shared, attribute, block, check, client, function_setting,
    is_not_found, plan_function, plan_source_hash, planned_code, report, text, to_u32,
};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct JobState {
    id: Value<String>,
    name: Value<String>,
    function: Value<String>,
    function_ref: Value<String>,
    runtime: Value<String>,
    entrypoint: Value<String>,
    env_vars: Value<BTreeMap<String, String>>,
    source_dir: Value<String>,
    source_zip: Value<String>,
    source_hash: Value<String>,
    event_json: Value<String>,
    run_id: Value<i64>,
    timeout_sec: Value<i64>,
    cpu_millis: Value<i64>,
    disk_mb: Value<i64>,
    wait: Value<bool>,
    wait_timeout_sec: Value<i64>,
    phase: Value<String>,
    message: Value<String>,
    job_message: Value<String>,
    log_tail: Value<String>,
}

impl JobState {
    /// The fields whose change needs a full replace (PUT) rather than a run bump.
    fn spec(&self) -> impl PartialEq + '_ {
        (
            &self.function,
            &self.runtime,
            &self.entrypoint,
            &self.env_vars,
            &self.timeout_sec,
            &self.cpu_millis,
            &self.disk_mb,
        )
    }

    fn run_id(&self) -> i64 {
        self.run_id.as_ref_option().copied().unwrap_or(0)
    }
}

pub struct JobResource {
    client: Shared,
}

impl JobResource {
    pub fn new(client: Shared) -> Self {
        Self { client }
    }
}

fn request(diags: &mut Diagnostics, state: &JobState, run_id: i64) -> JobRequest {
    JobRequest {
        name: state.name.as_ref_option().cloned(),
        function_ref: state.function.as_ref_option().cloned(),
        runtime: state.runtime.as_ref_option().cloned(),
        entrypoint: state.entrypoint.as_ref_option().cloned(),
        env_vars: state.env_vars.as_ref_option().cloned(),
        event_json: state.event_json.as_ref_option().cloned(),
        run_id: Some(run_id),
        timeout_sec: to_u32(diags, "timeout_sec", &state.timeout_sec),
        cpu_millis: to_u32(diags, "cpu_millis", &state.cpu_millis),
        disk_mb: to_u32(diags, "disk_mb", &state.disk_mb),
        egress: None,
        resource_version: None,
    }
}

/// Settings as the plan has them, for a new job or a changed one.
fn plan_settings(diags: &mut Diagnostics, planned: &mut JobState, config: &JobState) {
    planned.id = planned.name.clone();
    planned.source_hash = plan_source_hash(diags, &planned.source_dir, &planned.source_zip);
    plan_function(
        diags,
        (&mut planned.function, &mut planned.function_ref),
        (&config.function, &config.function_ref),
    );
    default_settings(planned, config);
}

/// What the run reports, known after apply.
fn unknown_results(state: &mut JobState) {
    state.phase = Value::Unknown;
    state.message = Value::Unknown;
    state.job_message = Value::Unknown;
    state.log_tail = Value::Unknown;
}

/// Settings left out of the configuration get the server's defaults in the plan (not
/// the last value, which Terraform proposes for them), so taking one out sets it back.
fn default_settings(planned: &mut JobState, config: &JobState) {
    if config.entrypoint.is_null() {
        // Only a self-contained job has an entrypoint of its own.
        planned.entrypoint = if config.runtime.is_null() {
            Value::Null
        } else {
            Value::Value(DEFAULT_ENTRYPOINT.into())
        };
    }
    if config.event_json.is_null() {
        planned.event_json = Value::Value("{}".into());
    }
    if config.run_id.is_null() {
        planned.run_id = Value::Value(0);
    }
}

/// Copies the server's view; optional settings left unset stay null at their default.
fn fill(state: &mut JobState, job: &JobResponse) {
    state.id = Value::Value(job.name.clone());
    state.name = Value::Value(job.name.clone());
    state.function = job.function_ref.clone().into();
    state.function_ref = state.function.clone();
    state.runtime = job.runtime.clone().into();
    state.entrypoint = job.entrypoint.clone().into();
    if !(state.env_vars.is_null() && job.env_vars.is_empty()) {
        state.env_vars = Value::Value(job.env_vars.clone());
    }
    state.event_json = Value::Value(job.event_json.clone());
    state.run_id = Value::Value(job.run_id);
    if !(state.timeout_sec.is_null() && job.timeout_sec == DEFAULT_TIMEOUT_SEC) {
        state.timeout_sec = Value::Value(job.timeout_sec.into());
    }
    state.cpu_millis = job.cpu_millis.map(i64::from).into();
    state.disk_mb = job.disk_mb.map(i64::from).into();
    state.phase = Value::Value(job.phase.to_string());
    state.message = job.message.clone().into();
    state.job_message = state.message.clone();
    state.log_tail = job.log_tail.clone().into();
}

/// Waits for the run that `started` began; a failed run is an error with its output.
async fn wait_for_run(
    diags: &mut Diagnostics,
    client: &Client,
    started: JobResponse,
    limit: Duration,
) -> JobResponse {
    let name = started.name.clone();
    let job = match client
        .wait_for_run(&started, limit, POLL_INTERVAL, |_| {})
        .await
    {
        Ok(RunWait::Finished(job)) => job,
        Ok(RunWait::Superseded(job)) => {
            diags.root_error_short(format!(
                "job {name} was started again (run {}) while apply waited for run {}",
                job.run_id, started.run_id
            ));
            return job;
        }
        Ok(RunWait::TimedOut(job)) => {
            diags.root_error(
                format!(
                    "job {name} is still {} after {} s",
                    job.phase,
                    limit.as_secs()
                ),
                "raise wait_timeout_sec, or set wait = false to not wait for runs",
            );
            return job;
        }
        Err(e) => {
            report(diags, format!("waiting for job {name}"), &e);
            return started;
        }
    };
    if job.phase == JobPhase::Failed {
        let mut detail = job
            .message
            .clone()
            .unwrap_or_else(|| "no reason given".into());
        if let Some(tail) = job.log_tail.as_deref().filter(|t| !t.trim().is_empty()) {
            detail.push_str(&format!("\n\noutput:\n{tail}"));
        }
        diags.root_error(format!("job {name} failed (run {})", job.run_id), detail);
    }
    job
}

impl JobResource {
    /// Waits for the run when one was started and the configuration asks to.
    async fn finish(
        &self,
        diags: &mut Diagnostics,
        client: &Client,
        mut state: JobState,
        started: JobResponse,
        ran: bool,
    ) -> JobState {
        let wait = state.wait.as_ref_option().copied().unwrap_or(true);
        let job = if ran && wait {
            let limit = Duration::from_secs(
                state.wait_timeout_sec.unwrap_or(DEFAULT_WAIT_SEC).max(0) as u64,
            );
            wait_for_run(diags, client, started, limit).await
        } else {
            started
        };
        fill(&mut state, &job);
        state
    }

    async fn upload(
        &self,
        diags: &mut Diagnostics,
        client: &Client,
        state: &mut JobState,
    ) -> Option<()> {
        let code = planned_code(
            diags,
            &state.source_dir,
            &state.source_zip,
            &mut state.source_hash,
        )?;
        let name = text(&state.name);
        match client.upload(Kind::FunctionJob, name, code.zip).await {
            Ok(_) => Some(()),
            Err(e) => {
                report(diags, format!("uploading the code of job {name}"), &e);
                None
            }
        }
    }
}

#[async_trait]
impl Resource for JobResource {
    type State<'a> = JobState;
    type PrivateState<'a> = ValueEmpty;
    type ProviderMetaState<'a> = ValueEmpty;

    fn schema(&self, _diags: &mut Diagnostics) -> Option<Schema> {
        use AttributeType::{Bool, Map, Number, String};
        let mut env_vars = attribute(
            Map(Box::new(String)),
            Optional,
            "Environment variables (self-contained job).",
        );
        env_vars.sensitive = true;
        Some(Schema {
            version: 1,
            block: block(
                "A one-shot run with a JSON event: of an existing function, or of its own code (runtime + source_dir).",
                HashMap::from([
                    ("id".into(), attribute(String, Computed, "The name.")),
                    (
                        "name".into(),
                        attribute(
                            String,
                            Required,
                            "DNS-1123 label; changing it replaces the job.",
                        ),
                    ),
                    (
                        "function".into(),
                        attribute(
                            String,
                            OptionalComputed,
                            "Run this function's code (or set runtime and source_dir).",
                        ),
                    ),
                    (
                        "function_ref".into(),
                        attribute(
                            String,
                            OptionalComputed,
                            "The same as function, under the original provider's name.",
                        ),
                    ),
                    (
                        "runtime".into(),
                        attribute(
                            String,
                            Optional,
                            &format!("Runtime of a self-contained job: {}.", Runtime::choices()),
                        ),
                    ),
                    (
                        "entrypoint".into(),
                        attribute(
                            String,
                            OptionalComputed,
                            "module.function of a self-contained job (default handler.handle).",
                        ),
                    ),
                    ("env_vars".into(), env_vars),
                    (
                        "source_dir".into(),
                        attribute(
                            String,
                            Optional,
                            "Folder with a self-contained job's code, zipped like sless deploy does.",
                        ),
                    ),
                    (
                        "source_zip".into(),
                        attribute(String, Optional, "A zip with a self-contained job's code."),
                    ),
                    (
                        "source_hash".into(),
                        attribute(String, Computed, "SHA-256 of the code's files."),
                    ),
                    (
                        "event_json".into(),
                        attribute(
                            String,
                            OptionalComputed,
                            "The event, a JSON document (default {}).",
                        ),
                    ),
                    (
                        "run_id".into(),
                        attribute(
                            Number,
                            OptionalComputed,
                            "0 = do not run; a higher value runs the job again (default 0).",
                        ),
                    ),
                    (
                        "timeout_sec".into(),
                        attribute(
                            Number,
                            Optional,
                            "Run time limit, 0 = none (server default 60 when unset).",
                        ),
                    ),
                    (
                        "cpu_millis".into(),
                        attribute(
                            Number,
                            Optional,
                            "CPU limit in thousandths of a core, 50-16000 (unset: the function's, or 1000).",
                        ),
                    ),
                    (
                        "disk_mb".into(),
                        attribute(
                            Number,
                            Optional,
                            "Scratch space in MiB, 16-65536 (unset: the function's, or 512).",
                        ),
                    ),
                    (
                        "wait".into(),
                        attribute(
                            Bool,
                            Optional,
                            "Wait for the run to finish on apply (default true).",
                        ),
                    ),
                    (
                        "wait_timeout_sec".into(),
                        attribute(
                            Number,
                            Optional,
                            "How long apply waits for a run (default 900).",
                        ),
                    ),
                    (
                        "phase".into(),
                        attribute(
                            String,
                            Computed,
                            "Pending, Skipped, Building, Running, Succeeded or Failed.",
                        ),
                    ),
                    (
                        "message".into(),
                        attribute(
                            String,
                            Computed,
                            "The handler's result as JSON, or why the run failed.",
                        ),
                    ),
                    (
                        "job_message".into(),
                        attribute(
                            String,
                            Computed,
                            "The same as message, under the original provider's name.",
                        ),
                    ),
                    (
                        "log_tail".into(),
                        attribute(String, Computed, "The end of the run's output."),
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
        if let Value::Value(event) = &config.event_json {
            check(diags, validate_event_json("event_json", event));
        }
        if let Some(timeout) = to_u32(diags, "timeout_sec", &config.timeout_sec) {
            check(diags, validate_timeout_sec("timeout_sec", timeout));
        }
        if let Some(cpu) = to_u32(diags, "cpu_millis", &config.cpu_millis) {
            check(diags, validate_cpu_millis("cpu_millis", cpu));
        }
        if let Some(disk) = to_u32(diags, "disk_mb", &config.disk_mb) {
            check(diags, validate_disk_mb("disk_mb", disk));
        }
        if let Value::Value(env) = &config.env_vars {
            check(diags, validate_env("env_vars", env));
        }
        if config.run_id.as_ref_option().is_some_and(|r| *r < 0) {
            diags.error_short(
                "run_id must be 0 or a positive run number",
                AttributePath::new("run_id"),
            );
        }
        let (field, function) = function_setting(diags, &config.function, &config.function_ref);
        let has_code = config.source_dir.is_value() || config.source_zip.is_value();
        if function.is_value() && (config.runtime.is_value() || has_code) {
            diags.error_short(
                format!("set {field}, or runtime with source_dir/source_zip, not both"),
                AttributePath::new(field),
            );
        }
        if function.is_null() && config.runtime.is_null() {
            diags.error_short(
                "set function (or function_ref), or runtime with source_dir",
                AttributePath::new("function"),
            );
        }
        if config.runtime.is_value() && config.source_dir.is_null() && config.source_zip.is_null() {
            diags.error_short(
                "a self-contained job needs source_dir or source_zip",
                AttributePath::new("source_dir"),
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
        match client.get_job(text(&state.name)).await {
            Ok(job) => fill(&mut state, &job),
            Err(e) if is_not_found(&e) => return None,
            Err(e) => report(diags, format!("reading job {}", text(&state.name)), &e),
        }
        Some((state, private))
    }

    async fn plan_create<'a>(
        &self,
        diags: &mut Diagnostics,
        mut proposed: Self::State<'a>,
        config: Self::State<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        plan_settings(diags, &mut proposed, &config);
        unknown_results(&mut proposed);
        Some((proposed, ValueEmpty::default()))
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
        plan_settings(diags, &mut proposed, &config);
        if proposed != prior {
            unknown_results(&mut proposed);
        }
        let mut replace = Vec::new();
        if proposed.name != prior.name {
            replace.push(AttributePath::new("name"));
        }
        // A lower run_id cannot be run "again": start over with a new job.
        if proposed.run_id() < prior.run_id() {
            replace.push(AttributePath::new("run_id"));
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
        mut planned: Self::State<'a>,
        _config: Self::State<'a>,
        private: Self::PrivateState<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        let client = client(&self.client, diags)?;
        let name = text(&planned.name).to_string();
        let run_id = planned.run_id();
        let self_contained = !planned.source_hash.is_null();
        let body = request(diags, &planned, if self_contained { 0 } else { run_id });
        let mut started = match client.create_job(&body).await {
            Ok(job) => job,
            Err(e) => {
                report(diags, format!("creating job {name}"), &e);
                return None;
            }
        };
        // Own code goes up before the run that needs it starts.
        if self_contained {
            self.upload(diags, &client, &mut planned).await;
            if run_id > 0 {
                let patch = JobPatch {
                    run_id: Some(run_id),
                    event_json: None,
                };
                match client.patch_job(&name, &patch).await {
                    Ok(job) => started = job,
                    Err(e) => report(diags, format!("running job {name}"), &e),
                }
            }
        }
        let state = self
            .finish(diags, &client, planned, started, run_id > 0)
            .await;
        Some((state, private))
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
        let mut planned = planned;
        if planned.source_hash != prior.source_hash && !planned.source_hash.is_null() {
            self.upload(diags, &client, &mut planned).await?;
        }
        let run_id = planned.run_id();
        let result = if planned.spec() != prior.spec() {
            let body = JobRequest {
                name: None,
                ..request(diags, &planned, run_id)
            };
            client.replace_job(&name, &body).await
        } else {
            let patch = JobPatch {
                run_id: Some(run_id),
                event_json: planned.event_json.as_ref_option().cloned(),
            };
            client.patch_job(&name, &patch).await
        };
        let started = match result {
            Ok(job) => job,
            Err(e) => {
                report(diags, format!("updating job {name}"), &e);
                return None;
            }
        };
        let ran = run_id > prior.run_id();
        let state = self.finish(diags, &client, planned, started, ran).await;
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
        match client.delete(Kind::FunctionJob, name).await {
            Ok(()) => Some(()),
            Err(e) if is_not_found(&e) => Some(()),
            Err(e) => {
                report(diags, format!("deleting job {name}"), &e);
                None
            }
        }
    }

    async fn import<'a>(
        &self,
        diags: &mut Diagnostics,
        id: String,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        let client = client(&self.client, diags)?;
        match client.get_job(&id).await {
            Ok(job) => {
                let mut state = JobState::default();
                fill(&mut state, &job);
                Some((state, ValueEmpty::default()))
            }
            Err(e) => {
                report(diags, format!("importing job {id}"), &e);
                None
            }
        }
    }
}
