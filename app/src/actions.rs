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

use crate::console::{ActionFailure, Console};
use crate::function::InvokeOutcome;

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
    /// `back`), a script gets the reply or the failure's status.
    fn finish(
        &self,
        back: &str,
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
            leptos_axum::redirect(&referer().unwrap_or_else(|| back.to_string()));
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

/// The console page the form was posted from (same-origin Referer), if it is one.
fn referer() -> Option<String> {
    let parts = use_context::<http::request::Parts>()?;
    let referer = parts.headers.get(http::header::REFERER)?.to_str().ok()?;
    let uri: http::Uri = referer.parse().ok()?;
    let host = parts.headers.get(http::header::HOST)?.to_str().ok()?;
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
