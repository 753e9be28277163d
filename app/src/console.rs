//! The console's server-side actions: everything goes through the REST API with the
//! user's own token (so the API's authorization is the console's), plus the source cache.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use percent_encoding::percent_decode_str;
use serde::{Deserialize, Serialize};
use sless_api::{JobPatch, JobResponse, JobRunResponse, WorkloadResponse};
use sless_client::client::{
    Client, ClientError, Invocation, Kind, LogFilter, RunWait, TriggerWait,
};

use crate::diff::{FileDiff, diff_files};
use crate::forms::{
    CreateForm, EnvChange, SAVED_EVENTS_MAX, SettingsForm, TriggerForm, validate_event_body,
    validate_event_name,
};
use crate::function::{
    CallSummary, FETCHED_CALLS, FunctionView, INVOKE_BODY_LIMIT, InvokeOutcome, TriggerRuns,
};
use crate::highlight::render_file;
use crate::listing::{Entry, Listing, TriggerView, WorkloadKind};
use crate::source_cache::{RenderedSource, SourceCache};

/// Why a view could not be built: the API refused or failed, or highlighting did.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    #[error(transparent)]
    Api(#[from] ClientError),
    #[error("highlighting failed: {0}")]
    Highlight(String),
    #[error("{0}")]
    Data(String),
}

impl ViewError {
    /// The status to answer with: the API's own for API errors, 502 when it is unreachable.
    pub fn status(&self) -> u16 {
        match self {
            ViewError::Api(ClientError::Api { status, .. }) => *status,
            ViewError::Api(ClientError::Unreachable { .. } | ClientError::Decode { .. }) => 502,
            ViewError::Api(ClientError::Config(_)) | ViewError::Highlight(_) => 500,
            ViewError::Data(_) => 502,
        }
    }
}

/// Why an action failed: the status a script gets and the message everyone gets.
#[derive(Debug)]
pub struct ActionFailure {
    pub status: u16,
    pub message: String,
}

impl ActionFailure {
    pub fn bad_request(message: impl Into<String>) -> Self {
        ActionFailure {
            status: 400,
            message: message.into(),
        }
    }
}

impl From<sless_api::validation::ValidationError> for ActionFailure {
    fn from(e: sless_api::validation::ValidationError) -> Self {
        ActionFailure::bad_request(e.to_string())
    }
}

impl From<ClientError> for ActionFailure {
    fn from(e: ClientError) -> Self {
        ViewError::from(e).into()
    }
}

impl From<ViewError> for ActionFailure {
    fn from(e: ViewError) -> Self {
        ActionFailure {
            status: e.status(),
            message: e.to_string(),
        }
    }
}

pub type Result<T, E = ViewError> = std::result::Result<T, E>;

/// What the job page shows: the job, its kept runs (newest first) and the run opened
/// with `?run=N`.
#[derive(Clone, Debug)]
pub struct JobPage {
    pub job: JobResponse,
    pub runs: Vec<JobRunResponse>,
    pub run: Option<JobRunResponse>,
}

/// The diff page's data: the kept versions (newest first) and the files compared.
#[derive(Clone, Debug)]
pub struct VersionDiff {
    pub versions: Vec<sless_api::VersionResponse>,
    pub files: Vec<FileDiff>,
}

#[derive(Clone, Debug)]
pub struct ConsoleOptions {
    /// The REST API the console acts through (in `sless up`: its own address).
    pub api_endpoint: String,
    /// The list page inlines the highlighted source of this many entries (the first ones
    /// shown); the rest link to their source page, so 1,000 entries cost 1,000 rows, not
    /// 1,000 source fetches.
    pub inline_sources: usize,
    /// Uploads larger than this (bytes of source, all files) are not inlined: their
    /// highlighted HTML is ~25× the source, and a list page should stay light.
    pub inline_source_bytes: u64,
    /// Cap of the highlighted-source cache, in bytes.
    pub source_cache_bytes: usize,
}

impl Default for ConsoleOptions {
    fn default() -> Self {
        ConsoleOptions {
            api_endpoint: "http://127.0.0.1:8080".into(),
            inline_sources: 20,
            inline_source_bytes: 32 * 1024,
            source_cache_bytes: 64 * 1024 * 1024,
        }
    }
}

pub struct Console {
    options: ConsoleOptions,
    cache: SourceCache,
    /// One connection pool for every user's requests; each acts with its own token.
    api: Client,
    /// How the Invoke form calls; over HTTP to `/fn` when none is given.
    invoker: Option<Arc<dyn Invoker>>,
    /// Where the saved test events are kept; none without a place (the list is empty).
    events: Option<Arc<dyn SavedEvents>>,
}

/// One function's saved test event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SavedEvent {
    pub name: String,
    pub body: String,
}

/// Which function a saved event belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionKey {
    pub namespace: String,
    pub kind: WorkloadKind,
    pub name: String,
}

/// What saving an event did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Saved {
    Added,
    Replaced,
    /// The function has `max` events already and this name is new.
    Full,
}

/// Where saved test events live: beside the console's sessions, on the server (the
/// `sless` binary implements it on its SQLite file). Errors are for the log and the flash.
#[async_trait::async_trait]
pub trait SavedEvents: Send + Sync + 'static {
    /// By name.
    async fn list(&self, key: &FunctionKey) -> Result<Vec<SavedEvent>, String>;
    /// Adds or replaces `event`; a new name past `max` events is refused (`Full`).
    async fn save(
        &self,
        key: &FunctionKey,
        event: &SavedEvent,
        max: usize,
    ) -> Result<Saved, String>;
    /// Whether there was one of that name.
    async fn delete(&self, key: &FunctionKey, name: &str) -> Result<bool, String>;
    /// All of a deleted function's events.
    async fn forget(&self, key: &FunctionKey) -> Result<(), String>;
}

/// One call of the Invoke form: `method` `/fn/{namespace}/{name}{path}` with `body`.
pub struct InvokeCall {
    pub namespace: String,
    pub name: String,
    pub method: reqwest::Method,
    pub path: String,
    pub body: Option<Vec<u8>>,
}

/// How the Invoke form reaches a function. `sless` gives the console its proxy, so the
/// call is made in process and recorded as the console's (a header saying so could be
/// forged by anyone calling `/fn`).
#[async_trait::async_trait]
pub trait Invoker: Send + Sync + 'static {
    /// The answer, its body read up to [`INVOKE_BODY_LIMIT`]; or why there is none.
    async fn invoke(&self, call: InvokeCall) -> Result<Invocation, String>;
}

impl Console {
    pub fn new(options: ConsoleOptions) -> Result<Self> {
        crate::highlight::warm_up();
        crate::setup::init_executor();
        Ok(Console {
            cache: SourceCache::new(options.source_cache_bytes),
            api: Client::for_namespace(&options.api_endpoint, "", "")?,
            options,
            invoker: None,
            events: None,
        })
    }

    /// Saved test events are kept in `events` from now on.
    pub fn with_saved_events(mut self, events: Arc<dyn SavedEvents>) -> Self {
        self.events = Some(events);
        self
    }

    /// The Invoke form calls through `invoker` from now on.
    pub fn with_invoker(mut self, invoker: Arc<dyn Invoker>) -> Self {
        self.invoker = Some(invoker);
        self
    }

    pub fn options(&self) -> &ConsoleOptions {
        &self.options
    }

    pub fn cache(&self) -> &SourceCache {
        &self.cache
    }

    /// A client acting as the caller on `namespace`, on the shared pool.
    pub fn client(&self, token: &str, namespace: &str) -> Client {
        self.api.acting_as(token, namespace)
    }

    /// Every namespace holding something (the API answers admins only).
    pub async fn namespaces(&self, token: &str) -> Result<Vec<String>> {
        Ok(self.client(token, "").list_namespaces().await?)
    }

    /// Functions, Services and Triggers, fetched concurrently.
    pub async fn listing(&self, client: &Client) -> Result<Listing> {
        let (functions, services, triggers) = tokio::try_join!(
            client.list_workloads(Kind::Function),
            client.list_workloads(Kind::Service),
            client.list_triggers(),
        )?;
        Ok(Listing::from_api(
            client.namespace(),
            functions,
            services,
            triggers,
        ))
    }

    /// Everything the function page shows, fetched concurrently. A workload never built
    /// has no build log (the API's 404), which is not an error here.
    pub async fn function(
        &self,
        client: &Client,
        kind: WorkloadKind,
        name: &str,
        logs: &LogFilter,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<FunctionView> {
        let collection = Kind::from(kind);
        let (workload, triggers, calls, logs, build_log, versions) = tokio::try_join!(
            client.get_workload(collection, name),
            client.list_triggers(),
            client.invocations(collection, name, FETCHED_CALLS),
            client.find_logs(collection, name, logs),
            async {
                match client.build_log(collection, name).await {
                    Ok(log) => Ok(Some(log)),
                    Err(e) if e.status() == Some(404) => Ok(None),
                    Err(e) => Err(e),
                }
            },
            client.versions(collection, name),
        )?;
        let triggers = triggers
            .into_iter()
            .filter(|t| t.function_ref == name)
            .map(|t| TriggerRuns::of(TriggerView::from_api(t), now))
            .collect();
        Ok(FunctionView {
            workload,
            triggers,
            calls: CallSummary::from_api(calls, now).map_err(ViewError::Data)?,
            logs,
            build_log,
            versions,
        })
    }

    pub async fn workload(
        &self,
        client: &Client,
        kind: WorkloadKind,
        name: &str,
    ) -> Result<WorkloadResponse> {
        Ok(client.get_workload(kind.into(), name).await?)
    }

    /// The highlighted files of the upload behind `s3_key`: from the cache, else fetched
    /// from the API's source endpoint and highlighted off the async runtime.
    pub async fn source(
        &self,
        client: &Client,
        kind: WorkloadKind,
        name: &str,
        s3_key: &str,
    ) -> Result<RenderedSource> {
        if let Some(files) = self.cache.get_upload(s3_key) {
            return Ok(files);
        }
        let listed = client.source(kind.into(), name).await?;
        self.highlight(s3_key, listed).await
    }

    /// The highlighted files of a kept version: cached under its zip's key, as the
    /// latest upload is.
    pub async fn version_source(
        &self,
        client: &Client,
        kind: WorkloadKind,
        namespace: &str,
        name: &str,
        version: &str,
    ) -> Result<RenderedSource> {
        let key = sless_api::keys::object_keys(namespace, name, version).zip;
        if let Some(files) = self.cache.get_upload(&key) {
            return Ok(files);
        }
        let listed = client.version_source(kind.into(), name, version).await?;
        self.highlight(&key, listed).await
    }

    /// The kept versions and what changed from `from` to `to`, diffed off the async
    /// runtime. A version not kept is the API's 404, which names the kept ones.
    pub async fn version_diff(
        &self,
        client: &Client,
        kind: WorkloadKind,
        name: &str,
        from: &str,
        to: &str,
    ) -> Result<VersionDiff> {
        let (versions, old, new) = tokio::try_join!(
            client.versions(kind.into(), name),
            client.version_source(kind.into(), name, from),
            client.version_source(kind.into(), name, to),
        )?;
        let files = tokio::task::spawn_blocking(move || {
            diff_files(&old, &new, crate::diff::DiffLimits::default())
        })
        .await
        .map_err(|e| ViewError::Data(format!("diffing failed: {e}")))?;
        Ok(VersionDiff { versions, files })
    }

    /// Highlights the files of an upload not yet cached (off the async runtime) and
    /// caches them.
    async fn highlight(
        &self,
        s3_key: &str,
        listed: Vec<sless_api::SourceFileResponse>,
    ) -> Result<RenderedSource> {
        let mut files: Vec<Option<Arc<crate::highlight::RenderedFile>>> = listed
            .iter()
            .map(|f| self.cache.get(s3_key, &f.name))
            .collect();
        let missing: Vec<(usize, sless_api::SourceFileResponse)> = listed
            .into_iter()
            .enumerate()
            .filter(|(i, _)| files[*i].is_none())
            .collect();
        if !missing.is_empty() {
            let rendered = tokio::task::spawn_blocking(move || {
                missing
                    .into_iter()
                    .map(|(i, f)| (i, Arc::new(render_file(&f))))
                    .collect::<Vec<_>>()
            })
            .await
            .map_err(|e| ViewError::Highlight(e.to_string()))?;
            for (i, file) in rendered {
                files[i] = Some(file);
            }
        }
        let files: RenderedSource = files.into_iter().flatten().collect();
        self.cache.put_upload(s3_key, &files);
        Ok(files)
    }

    /// Sources of the first [`ConsoleOptions::inline_sources`] entries that have code,
    /// by entry name; a failure is kept per entry so one broken upload does not blank
    /// the page. Uploads over [`ConsoleOptions::inline_source_bytes`] are left out (the
    /// page links to them) and not highlighted here.
    pub async fn inline_sources(
        &self,
        client: &Client,
        entries: &[&Entry],
    ) -> HashMap<String, Result<RenderedSource, String>> {
        let wanted: Vec<(String, WorkloadKind, String)> = entries
            .iter()
            .filter_map(|e| Some((e.name.clone(), e.kind, e.s3_key.clone()?)))
            .take(self.options.inline_sources)
            .collect();
        futures::stream::iter(wanted)
            .map(|(name, kind, key)| async move {
                let result = self.small_source(client, kind, &name, &key).await;
                result
                    .map_err(|e| e.to_string())
                    .transpose()
                    .map(|result| (name, result))
            })
            .buffer_unordered(8)
            .filter_map(std::future::ready)
            .collect()
            .await
    }

    /// The highlighted upload if it is small enough to inline; `None` if it is not.
    async fn small_source(
        &self,
        client: &Client,
        kind: WorkloadKind,
        name: &str,
        s3_key: &str,
    ) -> Result<Option<RenderedSource>> {
        let limit = self.options.inline_source_bytes;
        if let Some(files) = self.cache.get_upload(s3_key) {
            let size: u64 = files.iter().map(|f| f.size).sum();
            return Ok((size <= limit).then_some(files));
        }
        let listed = client.source(kind.into(), name).await?;
        if listed.iter().map(|f| f.size).sum::<u64>() > limit {
            return Ok(None);
        }
        self.highlight(s3_key, listed).await.map(Some)
    }

    /// Starts (`enabled`) or stops a trigger, then waits until the platform has acted
    /// (a stopped http trigger's `/fn` answers 503 by then); says what happened.
    pub async fn set_trigger(
        &self,
        client: &Client,
        trigger: &str,
        enabled: bool,
    ) -> Result<String> {
        client.set_trigger_enabled(trigger, enabled).await?;
        let wait = client
            .wait_for_trigger(trigger, SETTLE_WAIT, POLL_INTERVAL)
            .await?;
        let verb = if enabled { "Started" } else { "Stopped" };
        Ok(match wait {
            TriggerWait::Settled(_) => format!("{verb} trigger {trigger}."),
            TriggerWait::NotBuilt(t, phase) => format!(
                "{verb} trigger {trigger}; {} is {phase}, so it takes calls once built.",
                t.function_ref
            ),
            TriggerWait::TimedOut(t) => format!(
                "{verb} trigger {trigger}, but the platform has not acted yet{}.",
                t.message.map(|m| format!(": {m}")).unwrap_or_default()
            ),
        })
    }

    /// Calls `/fn` with the invoke form's fields; the body must be JSON (or empty).
    pub async fn invoke(
        &self,
        client: &Client,
        name: &str,
        method: &str,
        path: &str,
        body: Option<String>,
    ) -> Result<InvokeOutcome, ActionFailure> {
        let method = reqwest::Method::from_bytes(method.trim().to_ascii_uppercase().as_bytes())
            .map_err(|_| ActionFailure::bad_request(format!("{method:?} is not an HTTP method")))?;
        let body = body.filter(|b| !b.trim().is_empty() && method != reqwest::Method::GET);
        if let Some(body) = &body {
            serde_json::from_str::<serde_json::Value>(body)
                .map_err(|e| ActionFailure::bad_request(format!("the body is not JSON: {e}")))?;
        }
        // The call stays below the function's own URL (URLs resolve `..` and `%2e%2e`).
        let dot_dot = |segment: &str| percent_decode_str(segment).decode_utf8_lossy() == "..";
        if path.split(['/', '?', '#']).any(dot_dot) || path.contains('\\') {
            return Err(ActionFailure::bad_request(format!(
                "{path:?}: the path may not contain \"..\" segments or backslashes"
            )));
        }
        let path = if path.starts_with('/') {
            path.to_string()
        } else {
            format!("/{path}")
        };
        let started = std::time::Instant::now();
        let body = body.map(String::into_bytes);
        let answer = match &self.invoker {
            Some(invoker) => invoker
                .invoke(InvokeCall {
                    namespace: client.namespace().to_string(),
                    name: name.to_string(),
                    method: method.clone(),
                    path: path.clone(),
                    body,
                })
                .await
                .map_err(|message| ActionFailure {
                    status: 502,
                    message,
                })?,
            None => client
                .invoke(name, method.clone(), &path, body, None)
                .await
                .map_err(ViewError::from)?,
        };
        let duration_ms = started.elapsed().as_secs_f64() * 1000.0;
        let json = answer
            .content_type
            .as_deref()
            .is_some_and(|t| t.contains("json"));
        let shown = &answer.body[..answer.body.len().min(INVOKE_BODY_LIMIT)];
        Ok(InvokeOutcome {
            method: method.to_string(),
            path,
            status: answer.status,
            headers: answer.headers,
            body: String::from_utf8_lossy(shown).into_owned(),
            json,
            duration_ms,
        })
    }

    pub async fn jobs(&self, client: &Client) -> Result<Vec<JobResponse>> {
        let mut jobs = client.list_jobs().await?;
        jobs.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(jobs)
    }

    /// The job, its kept runs and, when `run` names one, that run with its log tail.
    pub async fn job(&self, client: &Client, name: &str, run: Option<i64>) -> Result<JobPage> {
        let job = client.get_job(name).await?;
        let runs = client.job_runs(name, None).await?;
        let run = match run {
            Some(run_id) => Some(client.job_run(name, run_id).await?),
            None => None,
        };
        Ok(JobPage { job, runs, run })
    }

    /// Starts the job's next run (with a new event when given) and waits a little for
    /// its result; says how it went.
    pub async fn run_job(
        &self,
        client: &Client,
        name: &str,
        event: Option<String>,
    ) -> Result<String, ActionFailure> {
        if let Some(event) = &event {
            serde_json::from_str::<serde_json::Value>(event)
                .map_err(|e| ActionFailure::bad_request(format!("the event is not JSON: {e}")))?;
        }
        let job = client.get_job(name).await.map_err(ViewError::from)?;
        let patch = JobPatch {
            run_id: Some(job.run_id + 1),
            event_json: event,
        };
        let started = client
            .patch_job(name, &patch)
            .await
            .map_err(ViewError::from)?;
        let wait = client
            .wait_for_run(&started, RUN_WAIT, POLL_INTERVAL, |_| {})
            .await
            .map_err(ViewError::from)?;
        Ok(match wait {
            RunWait::Finished(job) => format!("Run {} of job {name}: {}.", job.run_id, job.phase),
            RunWait::Superseded(job) => {
                format!(
                    "Run {} of job {name} was replaced by run {}.",
                    started.run_id, job.run_id
                )
            }
            RunWait::TimedOut(job) => {
                format!(
                    "Run {} of job {name} started; still {}.",
                    job.run_id, job.phase
                )
            }
        })
    }
}

/// The lifecycle: create, upload, settings, triggers, delete, saved events.
impl Console {
    /// Creates a Function or Service and, with `code`, uploads it; a refused upload
    /// deletes the new workload again, so one form is one change. Answers its kind, name
    /// and what happened.
    pub async fn create(
        &self,
        client: &Client,
        form: &CreateForm,
        code: Option<Vec<u8>>,
    ) -> Result<(WorkloadKind, String, String), ActionFailure> {
        let (kind, request) = form.request()?;
        let name = request.name.clone().unwrap_or_default();
        client.create_workload(kind.into(), &request).await?;
        let Some(code) = code else {
            return Ok((
                kind,
                name.clone(),
                format!("Created {kind} {name}; upload its code to build it."),
            ));
        };
        if let Err(e) = client.upload(kind.into(), &name, code).await {
            // The form made nothing: the user fixes the zip and posts it again.
            if let Err(cleanup) = client.delete(kind.into(), &name).await {
                tracing::warn!(%kind, %name, error = %cleanup, "removing a workload after its refused upload");
            }
            return Err(code_failure(e));
        }
        Ok((
            kind,
            name.clone(),
            format!("Created {kind} {name}; building its code."),
        ))
    }

    /// A new version of the code: the API's upload (its limits, zip checks and review).
    pub async fn upload(
        &self,
        client: &Client,
        kind: WorkloadKind,
        name: &str,
        code: Vec<u8>,
    ) -> Result<String, ActionFailure> {
        client
            .upload(kind.into(), name, code)
            .await
            .map_err(code_failure)?;
        Ok(format!("Uploaded a new version of {name}; building it."))
    }

    /// Makes a kept version the code again (no rebuild when its build is kept).
    pub async fn rollback(
        &self,
        client: &Client,
        kind: WorkloadKind,
        name: &str,
        version: &str,
    ) -> Result<String, ActionFailure> {
        client.rollback(kind.into(), name, version).await?;
        Ok(format!(
            "Rolling {name} back to version {version}; it serves once Ready."
        ))
    }

    pub async fn save_settings(
        &self,
        client: &Client,
        kind: WorkloadKind,
        name: &str,
        form: &SettingsForm,
    ) -> Result<String, ActionFailure> {
        let current = client.get_workload(kind.into(), name).await?;
        let request = form.apply(&current)?;
        client
            .replace_workload(kind.into(), name, &request)
            .await
            .map_err(changed_meanwhile)?;
        Ok(format!("Saved the settings of {name}."))
    }

    /// Sets or removes one env var; the other values stay as they are, unseen.
    pub async fn change_env(
        &self,
        client: &Client,
        kind: WorkloadKind,
        name: &str,
        change: &EnvChange,
    ) -> Result<String, ActionFailure> {
        let current = client.get_workload(kind.into(), name).await?;
        let mut request = crate::forms::spec_of(&current);
        request.env_vars = Some(change.apply(&current.env_vars)?);
        client
            .replace_workload(kind.into(), name, &request)
            .await
            .map_err(changed_meanwhile)?;
        Ok(match change {
            EnvChange::Set { name: var, .. } if current.env_vars.contains_key(var) => {
                format!("Replaced the value of {var}.")
            }
            EnvChange::Set { name: var, .. } => format!("Added {var}."),
            EnvChange::Remove { name: var } => format!("Removed {var}."),
        })
    }

    pub async fn add_trigger(
        &self,
        client: &Client,
        function: &str,
        form: &TriggerForm,
    ) -> Result<String, ActionFailure> {
        let request = form.request(function)?;
        let trigger = client.create_trigger(&request).await?;
        Ok(format!(
            "Added the {} trigger {}.",
            trigger.trigger_type, trigger.name
        ))
    }

    /// Removes one of `function`'s triggers (a trigger of another function is not
    /// removed from this page).
    pub async fn remove_trigger(
        &self,
        client: &Client,
        function: &str,
        trigger: &str,
    ) -> Result<String, ActionFailure> {
        let found = client.get_trigger(trigger).await?;
        if found.function_ref != function {
            return Err(ActionFailure::bad_request(format!(
                "trigger: {trigger} belongs to {}, not {function}",
                found.function_ref
            )));
        }
        client.delete(Kind::Trigger, trigger).await?;
        Ok(format!("Removed the trigger {trigger}."))
    }

    /// What deleting a workload takes with it: its triggers, by name.
    pub async fn triggers_of(&self, client: &Client, name: &str) -> Result<Vec<String>> {
        Ok(client
            .list_triggers()
            .await?
            .into_iter()
            .filter(|t| t.function_ref == name)
            .map(|t| t.name)
            .collect())
    }

    /// Deletes a workload with its triggers, uploaded code and saved events.
    pub async fn delete(
        &self,
        client: &Client,
        kind: WorkloadKind,
        name: &str,
    ) -> Result<String, ActionFailure> {
        // The workload must exist (a typo deletes nothing, not its namesake's triggers).
        client.get_workload(kind.into(), name).await?;
        let triggers = self.triggers_of(client, name).await?;
        for trigger in &triggers {
            match client.delete(Kind::Trigger, trigger).await {
                Err(e) if e.status() != Some(404) => return Err(e.into()),
                _ => {}
            }
        }
        client.delete(kind.into(), name).await?;
        if let Some(events) = &self.events {
            let key = FunctionKey {
                namespace: client.namespace().to_string(),
                kind,
                name: name.to_string(),
            };
            if let Err(e) = events.forget(&key).await {
                tracing::warn!(%name, error = %e, "forgetting a deleted function's saved events");
            }
        }
        Ok(match triggers.len() {
            0 => format!("Deleted {kind} {name}."),
            _ => format!(
                "Deleted {kind} {name} and its triggers {}.",
                triggers.join(", ")
            ),
        })
    }

    fn events(&self) -> Result<&Arc<dyn SavedEvents>, ActionFailure> {
        self.events.as_ref().ok_or_else(|| ActionFailure {
            status: 501,
            message: "this console keeps no saved events".into(),
        })
    }

    /// A function's saved events (none when this console keeps none).
    pub async fn saved_events(&self, key: &FunctionKey) -> Result<Vec<SavedEvent>> {
        match &self.events {
            Some(events) => events.list(key).await.map_err(ViewError::Data),
            None => Ok(Vec::new()),
        }
    }

    pub async fn save_event(
        &self,
        key: &FunctionKey,
        event: &SavedEvent,
    ) -> Result<String, ActionFailure> {
        validate_event_name(&event.name)?;
        validate_event_body(&event.body)?;
        let saved = self
            .events()?
            .save(key, event, SAVED_EVENTS_MAX)
            .await
            .map_err(internal)?;
        match saved {
            Saved::Added => Ok(format!("Saved the event {:?}.", event.name)),
            Saved::Replaced => Ok(format!("Replaced the saved event {:?}.", event.name)),
            Saved::Full => Err(ActionFailure::bad_request(format!(
                "event_name: {} already has {SAVED_EVENTS_MAX} saved events; delete one or \
                 save under an existing name",
                key.name
            ))),
        }
    }

    pub async fn delete_event(
        &self,
        key: &FunctionKey,
        name: &str,
    ) -> Result<String, ActionFailure> {
        if self.events()?.delete(key, name).await.map_err(internal)? {
            Ok(format!("Deleted the saved event {name:?}."))
        } else {
            Err(ActionFailure {
                status: 404,
                message: format!("event_name: no saved event {name:?}"),
            })
        }
    }
}

/// A refused upload names the form's file field.
fn code_failure(e: ClientError) -> ActionFailure {
    let failure = ActionFailure::from(e);
    ActionFailure {
        message: format!("code: {}", failure.message),
        ..failure
    }
}

/// A 409 on a guarded PUT: someone changed it since the page was read.
fn changed_meanwhile(e: ClientError) -> ActionFailure {
    if e.status() == Some(409) {
        return ActionFailure {
            status: 409,
            message: "it was changed meanwhile; look at the page again and redo the change".into(),
        };
    }
    e.into()
}

fn internal(message: String) -> ActionFailure {
    ActionFailure {
        status: 500,
        message,
    }
}

/// How long an action waits for the platform to act on a trigger or finish a run
/// before answering anyway (the page then shows where it is).
const SETTLE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
const RUN_WAIT: std::time::Duration = std::time::Duration::from_secs(30);
const POLL_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);
