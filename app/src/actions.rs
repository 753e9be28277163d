//! The console's actions as Leptos server functions, served by `leptos_axum` under
//! `/console/...` and posted by `<ActionForm>`s, so they work without JavaScript: a
//! browser's form post ends in a redirect back to the page with a flash, a script gets
//! the JSON reply. The server checks the caller (session or bearer token), the CSRF
//! token of a session and the posted namespace once, for every action, before any of
//! them runs ([`ActionContext`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::console::{ActionFailure, Console, FunctionKey, SavedEvent};
use crate::forms::{CreateForm, EnvChange, SettingsForm, TriggerForm};
use crate::function::InvokeOutcome;
use crate::listing::WorkloadKind;
use crate::routes::{function_href, list_href};

/// What an action answers: a script reads it as JSON, a browser sees it as the flash.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ActionReply {
    pub ok: bool,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocation: Option<InvokeOutcome>,
}

/// Provided by the server to every action, once the caller has passed its checks.
#[derive(Clone)]
pub struct ActionContext {
    pub console: Arc<Console>,
    pub token: String,
    /// The namespace the posted form names, already authorized for the caller.
    pub namespace: Option<String>,
    /// A logged-in browser: answers redirect back and the reply becomes the flash.
    pub browser: bool,
    /// The reply, for the server to keep as the flash.
    pub reply: Arc<Mutex<Option<ActionReply>>>,
    /// Set by [`logout`]: the server ends the session.
    pub log_out: Arc<AtomicBool>,
    /// The file of a multipart form (`code`), read by the server within the API's
    /// upload limit.
    pub upload: Option<PostedFile>,
    /// Set by an action whose form comes back as typed even when it worked (invoke).
    pub keep_form: Arc<AtomicBool>,
}

/// The `code` file of a posted form.
#[derive(Clone, Debug)]
pub enum PostedFile {
    Zip(bytes::Bytes),
    /// Larger than the API accepts; the rest was not read.
    TooLarge {
        limit_bytes: u64,
    },
}

impl ActionContext {
    pub fn new(
        console: Arc<Console>,
        token: String,
        namespace: Option<String>,
        browser: bool,
    ) -> Self {
        ActionContext {
            console,
            token,
            namespace,
            browser,
            reply: Arc::default(),
            log_out: Arc::default(),
            upload: None,
            keep_form: Arc::default(),
        }
    }

    /// With the `code` file of a multipart form.
    pub fn with_upload(mut self, upload: Option<PostedFile>) -> Self {
        self.upload = upload;
        self
    }

    /// Whether the form should come back as typed whatever the outcome.
    pub fn keeps_form(&self) -> bool {
        self.keep_form.load(Ordering::Relaxed)
    }

    /// The posted zip: none when no file was chosen.
    fn code(&self) -> Result<Option<Vec<u8>>, ActionFailure> {
        match &self.upload {
            None => Ok(None),
            Some(PostedFile::Zip(zip)) if zip.is_empty() => Ok(None),
            Some(PostedFile::Zip(zip)) => Ok(Some(zip.to_vec())),
            Some(PostedFile::TooLarge { limit_bytes }) => Err(ActionFailure {
                status: 413,
                message: format!(
                    "code: the zip is larger than the limit of {} MiB; leave out what the \
                     function does not need (dependencies are installed at build time)",
                    limit_bytes / (1024 * 1024)
                ),
            }),
        }
    }

    /// The reply the action left, if any.
    pub fn take_reply(&self) -> Option<ActionReply> {
        self.reply.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    pub fn logged_out(&self) -> bool {
        self.log_out.load(Ordering::Relaxed)
    }

    /// A client for the posted namespace (the server has authorized that one only).
    fn client(&self, namespace: &str) -> Result<sless_client::client::Client, ActionFailure> {
        if self.namespace.as_deref() != Some(namespace) {
            return Err(ActionFailure {
                status: 403,
                message: format!("not allowed to act on namespace {namespace:?}"),
            });
        }
        Ok(self.console.client(&self.token, namespace))
    }

    /// Keeps the reply and answers: a browser goes back to the page it came from (else
    /// `back`) at `back`'s fragment, a script gets the reply or the failure's status.
    fn finish(
        &self,
        back: &str,
        result: Result<ActionReply, ActionFailure>,
    ) -> Result<ActionReply, ServerFnError> {
        self.finish_at(back, None, result)
    }

    /// As [`Self::finish`], but a browser whose action worked goes to `done` (a created
    /// function's page, the list after a delete).
    fn finish_at(
        &self,
        back: &str,
        done: Option<String>,
        result: Result<ActionReply, ActionFailure>,
    ) -> Result<ActionReply, ServerFnError> {
        let reply = match &result {
            Ok(reply) => reply.clone(),
            Err(failure) => ActionReply {
                ok: false,
                message: failure.message.clone(),
                invocation: None,
            },
        };
        *self.reply.lock().unwrap_or_else(|e| e.into_inner()) = Some(reply.clone());
        if self.browser {
            let target = match done.filter(|_| result.is_ok()) {
                Some(page) => page,
                None => {
                    let headers = use_context::<http::request::Parts>().map(|p| p.headers);
                    back_to(headers.as_ref(), back)
                }
            };
            leptos_axum::redirect(&target);
            return Ok(reply);
        }
        result.map_err(|failure| {
            if let Some(options) = use_context::<leptos_axum::ResponseOptions>() {
                options.set_status(
                    http::StatusCode::from_u16(failure.status)
                        .unwrap_or(http::StatusCode::BAD_GATEWAY),
                );
            }
            ServerFnError::ServerError(failure.message)
        })
    }
}

/// Where a browser goes back to: the page the form was posted from, else `fallback`, at
/// `fallback`'s fragment (the form's section, so the page stays where it was).
pub fn back_to(headers: Option<&http::HeaderMap>, fallback: &str) -> String {
    let fragment = fallback.split_once('#').map(|(_, f)| f);
    match headers.and_then(referer) {
        Some(page) => match fragment {
            Some(fragment) => format!("{}#{fragment}", page.split('#').next().unwrap_or("")),
            None => page,
        },
        None => fallback.to_string(),
    }
}

/// The console page the form was posted from (same-origin Referer), if it is one.
fn referer(headers: &http::HeaderMap) -> Option<String> {
    let referer = headers.get(http::header::REFERER)?.to_str().ok()?;
    let uri: http::Uri = referer.parse().ok()?;
    let host = headers.get(http::header::HOST)?.to_str().ok()?;
    if uri.authority().map(|a| a.as_str()) != Some(host) {
        return None;
    }
    let path = uri.path_and_query()?.as_str();
    safe_next(path).map(String::from)
}

/// A console path only, so a redirect cannot send anyone elsewhere.
pub fn safe_next(next: &str) -> Option<&str> {
    let ok = (next == "/funcs" || next.starts_with("/funcs/"))
        && !next.contains("//")
        && next.len() <= 512
        && next.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'/' | b'-' | b'_' | b'.' | b'?' | b'=' | b'&' | b'%' | b'+'
                )
        });
    ok.then_some(next)
}

fn context() -> Result<ActionContext, ServerFnError> {
    use_context::<ActionContext>()
        .ok_or_else(|| ServerFnError::ServerError("the console's actions are not set up".into()))
}

fn ok(message: String) -> ActionReply {
    ActionReply {
        ok: true,
        message,
        invocation: None,
    }
}

/// Starts or stops a trigger and returns once the platform has acted (a stopped http
/// trigger's `/fn` answers 503 by then).
#[server(prefix = "/console", endpoint = "set-trigger")]
pub async fn set_trigger(
    namespace: String,
    trigger: String,
    enabled: bool,
) -> Result<ActionReply, ServerFnError> {
    let ctx = context()?;
    let back = format!("/funcs/{namespace}");
    let result = async {
        let client = ctx.client(&namespace)?;
        let message = ctx.console.set_trigger(&client, &trigger, enabled).await?;
        Ok(ok(message))
    }
    .await
    .map_err(|failure: ActionFailure| {
        let verb = if enabled { "start" } else { "stop" };
        ActionFailure {
            message: format!("Could not {verb} trigger {trigger}: {}", failure.message),
            ..failure
        }
    });
    ctx.finish(&back, result)
}

/// Calls a Function or Service through `/fn`, as any caller would.
#[server(prefix = "/console", endpoint = "invoke")]
pub async fn invoke(
    namespace: String,
    kind: String,
    name: String,
    method: String,
    path: Option<String>,
    body: Option<String>,
) -> Result<ActionReply, ServerFnError> {
    let ctx = context()?;
    // The form keeps its method, path and body after the call.
    ctx.keep_form.store(true, Ordering::Relaxed);
    let parsed = crate::listing::WorkloadKind::parse(&kind);
    let back = parsed.map_or_else(
        || format!("/funcs/{namespace}"),
        |k| crate::routes::function_href(&namespace, k, &name),
    );
    let result = async {
        parsed.ok_or_else(|| {
            ActionFailure::bad_request(format!("kind {kind:?}: expected function or service"))
        })?;
        let client = ctx.client(&namespace)?;
        let outcome = ctx
            .console
            .invoke(&client, &name, &method, path.as_deref().unwrap_or(""), body)
            .await?;
        Ok(ActionReply {
            ok: true,
            message: format!(
                "{} {} answered {}.",
                outcome.method, outcome.path, outcome.status
            ),
            invocation: Some(outcome),
        })
    }
    .await;
    ctx.finish(&format!("{back}#invoke"), result)
}

/// Runs a job again (the next `run_id`), with a new event when one is given, and waits
/// a little for the run's result.
#[server(prefix = "/console", endpoint = "run-job")]
pub async fn run_job(
    namespace: String,
    job: String,
    event: Option<String>,
) -> Result<ActionReply, ServerFnError> {
    let ctx = context()?;
    let back = crate::routes::job_href(&namespace, &job);
    let result = async {
        let client = ctx.client(&namespace)?;
        let event = event.filter(|e| !e.trim().is_empty());
        Ok(ok(ctx.console.run_job(&client, &job, event).await?))
    }
    .await;
    ctx.finish(&back, result)
}

/// The kind of a posted form, as a failure naming the field.
fn kind_of(kind: &str) -> Result<WorkloadKind, ActionFailure> {
    WorkloadKind::from_name(kind).ok_or_else(|| {
        ActionFailure::bad_request(format!("kind: {kind:?}: expected function or service"))
    })
}

/// The page of the workload a form acts on, at `fragment` (the list when the kind is
/// not one).
fn workload_back(namespace: &str, kind: &str, name: &str, fragment: &str) -> String {
    match WorkloadKind::from_name(kind) {
        Some(kind) => format!("{}#{fragment}", function_href(namespace, kind, name)),
        None => list_href(namespace),
    }
}

/// Creates a Function or Service from the `/funcs/<ns>/new` form, with its zip when
/// one is chosen (a multipart form); its page follows the build.
#[server(prefix = "/console", endpoint = "create")]
#[allow(clippy::too_many_arguments)]
pub async fn create(
    namespace: String,
    kind: String,
    name: String,
    runtime: String,
    entrypoint: Option<String>,
    memory_mb: Option<String>,
    timeout_sec: Option<String>,
    env: Option<String>,
) -> Result<ActionReply, ServerFnError> {
    let ctx = context()?;
    let back = format!("{}/new", list_href(&namespace));
    let form = CreateForm {
        kind,
        name,
        runtime,
        entrypoint,
        memory_mb,
        timeout_sec,
        env,
    };
    let mut done = None;
    let result = async {
        let client = ctx.client(&namespace)?;
        let code = ctx.code()?;
        let built = code.is_some();
        let (kind, name, message) = ctx.console.create(&client, &form, code).await?;
        let page = function_href(&namespace, kind, &name);
        done = Some(if built {
            format!("{page}?follow=1#build")
        } else {
            format!("{page}#upload")
        });
        Ok(ok(message))
    }
    .await;
    ctx.finish_at(&back, done, result)
}

/// A new version of a workload's code; its page follows the build.
#[server(prefix = "/console", endpoint = "upload")]
pub async fn upload(
    namespace: String,
    kind: String,
    name: String,
) -> Result<ActionReply, ServerFnError> {
    let ctx = context()?;
    let back = workload_back(&namespace, &kind, &name, "upload");
    let result = async {
        let kind = kind_of(&kind)?;
        let client = ctx.client(&namespace)?;
        let code = ctx
            .code()?
            .ok_or_else(|| ActionFailure::bad_request("code: choose a zip file to upload"))?;
        ctx.console.upload(&client, kind, &name, code).await.map(ok)
    }
    .await;
    let done = WorkloadKind::from_name(&kind)
        .map(|k| format!("{}?follow=1#build", function_href(&namespace, k, &name)));
    ctx.finish_at(&back, done, result)
}

/// Entrypoint, memory, CPU, disk, timeout and scaling; an empty field stays as it is.
#[server(prefix = "/console", endpoint = "settings")]
#[allow(clippy::too_many_arguments)]
pub async fn save_settings(
    namespace: String,
    kind: String,
    name: String,
    entrypoint: Option<String>,
    memory_mb: Option<String>,
    cpu_millis: Option<String>,
    disk_mb: Option<String>,
    timeout_sec: Option<String>,
    min_instances: Option<String>,
    max_instances: Option<String>,
    target_concurrency: Option<String>,
) -> Result<ActionReply, ServerFnError> {
    let ctx = context()?;
    let back = workload_back(&namespace, &kind, &name, "settings");
    let form = SettingsForm {
        entrypoint,
        memory_mb,
        cpu_millis,
        disk_mb,
        timeout_sec,
        min_instances,
        max_instances,
        target_concurrency,
    };
    let result = async {
        let kind = kind_of(&kind)?;
        let client = ctx.client(&namespace)?;
        ctx.console
            .save_settings(&client, kind, &name, &form)
            .await
            .map(ok)
    }
    .await;
    ctx.finish(&back, result)
}

/// Sets one env var (`env_value`), or removes it when `remove` is posted. Values are
/// never shown: replacing one means typing it.
#[server(prefix = "/console", endpoint = "env")]
pub async fn change_env(
    namespace: String,
    kind: String,
    name: String,
    env_name: String,
    env_value: Option<String>,
    remove: Option<String>,
) -> Result<ActionReply, ServerFnError> {
    let ctx = context()?;
    let back = workload_back(&namespace, &kind, &name, "env");
    let result = async {
        let kind = kind_of(&kind)?;
        let client = ctx.client(&namespace)?;
        let env_name = env_name.trim().to_string();
        let change = if remove.is_some() {
            EnvChange::Remove { name: env_name }
        } else {
            EnvChange::Set {
                name: env_name,
                value: env_value.unwrap_or_default(),
            }
        };
        ctx.console
            .change_env(&client, kind, &name, &change)
            .await
            .map(ok)
    }
    .await;
    ctx.finish(&back, result)
}

/// Adds an http, cron or event trigger to the workload `name`.
#[server(prefix = "/console", endpoint = "add-trigger")]
#[allow(clippy::too_many_arguments)]
pub async fn add_trigger(
    namespace: String,
    kind: String,
    name: String,
    trigger: String,
    trigger_type: String,
    schedule: Option<String>,
    queue: Option<String>,
    concurrency: Option<String>,
    max_retries: Option<String>,
) -> Result<ActionReply, ServerFnError> {
    let ctx = context()?;
    let back = workload_back(&namespace, &kind, &name, "triggers");
    let form = TriggerForm {
        trigger,
        trigger_type,
        schedule,
        queue,
        concurrency,
        max_retries,
    };
    let result = async {
        let client = ctx.client(&namespace)?;
        ctx.console.add_trigger(&client, &name, &form).await.map(ok)
    }
    .await;
    ctx.finish(&back, result)
}

/// Makes the kept version `version` the workload's code again.
#[server(prefix = "/console", endpoint = "rollback")]
pub async fn rollback(
    namespace: String,
    kind: String,
    name: String,
    version: String,
) -> Result<ActionReply, ServerFnError> {
    let ctx = context()?;
    let back = workload_back(&namespace, &kind, &name, "versions");
    let result = async {
        let kind = kind_of(&kind)?;
        let client = ctx.client(&namespace)?;
        ctx.console
            .rollback(&client, kind, &name, &version)
            .await
            .map(ok)
    }
    .await;
    ctx.finish(&back, result)
}

/// Removes one trigger of the workload `name`.
#[server(prefix = "/console", endpoint = "remove-trigger")]
pub async fn remove_trigger(
    namespace: String,
    kind: String,
    name: String,
    trigger: String,
) -> Result<ActionReply, ServerFnError> {
    let ctx = context()?;
    let back = workload_back(&namespace, &kind, &name, "triggers");
    let result = async {
        let client = ctx.client(&namespace)?;
        ctx.console
            .remove_trigger(&client, &name, &trigger)
            .await
            .map(ok)
    }
    .await;
    ctx.finish(&back, result)
}

/// Deletes a workload with its triggers; `confirm` must repeat its name (the
/// confirmation step of the page posts it).
#[server(prefix = "/console", endpoint = "delete")]
pub async fn delete(
    namespace: String,
    kind: String,
    name: String,
    confirm: Option<String>,
) -> Result<ActionReply, ServerFnError> {
    let ctx = context()?;
    let back = workload_back(&namespace, &kind, &name, "delete");
    let result = async {
        let kind = kind_of(&kind)?;
        if confirm.as_deref() != Some(name.as_str()) {
            return Err(ActionFailure::bad_request(format!(
                "confirm: deleting needs the confirmation step: post confirm={name}"
            )));
        }
        let client = ctx.client(&namespace)?;
        ctx.console.delete(&client, kind, &name).await.map(ok)
    }
    .await;
    ctx.finish_at(&back, Some(list_href(&namespace)), result)
}

/// Saves the invoke form's body as a named test event of this function.
#[server(prefix = "/console", endpoint = "save-event")]
pub async fn save_event(
    namespace: String,
    kind: String,
    name: String,
    event_name: String,
    body: Option<String>,
) -> Result<ActionReply, ServerFnError> {
    let ctx = context()?;
    ctx.keep_form.store(true, Ordering::Relaxed);
    let back = workload_back(&namespace, &kind, &name, "invoke");
    let result = async {
        let kind = kind_of(&kind)?;
        ctx.client(&namespace)?;
        let key = FunctionKey {
            namespace: namespace.clone(),
            kind,
            name: name.clone(),
        };
        let event = SavedEvent {
            name: event_name.trim().to_string(),
            body: body.unwrap_or_default(),
        };
        ctx.console.save_event(&key, &event).await.map(ok)
    }
    .await;
    ctx.finish(&back, result)
}

/// Deletes one saved test event.
#[server(prefix = "/console", endpoint = "delete-event")]
pub async fn delete_event(
    namespace: String,
    kind: String,
    name: String,
    event_name: String,
) -> Result<ActionReply, ServerFnError> {
    let ctx = context()?;
    let back = workload_back(&namespace, &kind, &name, "invoke");
    let result = async {
        let kind = kind_of(&kind)?;
        ctx.client(&namespace)?;
        let key = FunctionKey {
            namespace: namespace.clone(),
            kind,
            name: name.clone(),
        };
        ctx.console.delete_event(&key, &event_name).await.map(ok)
    }
    .await;
    ctx.finish(&back, result)
}

/// Ends the browser's session; the login page then says so.
#[server(prefix = "/console", endpoint = "logout")]
pub async fn logout() -> Result<ActionReply, ServerFnError> {
    let ctx = context()?;
    ctx.log_out.store(true, Ordering::Relaxed);
    if ctx.browser {
        leptos_axum::redirect("/login?bye=1");
    }
    Ok(ok("Logged out.".into()))
}
