//! The one door of every console action (the `app` crate's Leptos server functions):
//! who calls (session or bearer token), the session's CSRF token and the namespace the
//! form names are checked here once, then `leptos_axum` runs the action with an
//! [`ActionContext`]; a browser's reply is kept as the flash of the page it goes back to.

use std::sync::Arc;

use app::actions::ActionContext;
use app::pages::{Flash, FlashKind};
use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use leptos::prelude::provide_context;
use serde::Deserialize;

use super::ConsoleState;
use super::auth::{Caller, Via};
use super::csrf;
use super::error::ConsoleError;
use super::session;

/// Forms are small; an invoke body is the largest field.
const FORM_LIMIT: usize = 1024 * 1024;

/// The fields actions' forms share; every name among them is checked here once.
#[derive(Deserialize)]
struct Common {
    csrf_token: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    trigger: Option<String>,
    job: Option<String>,
}

pub async fn handle(
    State(state): State<Arc<ConsoleState>>,
    caller: Caller,
    request: Request,
) -> Result<Response, ConsoleError> {
    let (parts, body) = request.into_parts();
    let bytes = to_bytes(body, FORM_LIMIT)
        .await
        .map_err(|e| ConsoleError::BadRequest(format!("reading the form: {e}")))?;
    let common: Common = serde_urlencoded::from_bytes(&bytes)
        .map_err(|e| ConsoleError::BadRequest(format!("the form could not be read: {e}")))?;
    let session = match caller.via {
        Via::Session => {
            let session = caller.session.clone().ok_or(ConsoleError::Csrf)?;
            csrf::verify(&session, common.csrf_token.as_deref()).await?;
            Some(session)
        }
        Via::Bearer => None,
    };
    let names = [
        ("namespace", &common.namespace),
        ("name", &common.name),
        ("trigger", &common.trigger),
        ("job", &common.job),
    ];
    for (field, value) in names {
        if let Some(value) = value {
            sless_core::model::validate_name(field, value)
                .map_err(|e| ConsoleError::BadRequest(e.to_string()))?;
        }
    }
    if let Some(namespace) = &common.namespace {
        caller.authorize(namespace)?;
    }
    let ctx = ActionContext::new(
        state.console.clone(),
        caller.token.clone(),
        common.namespace,
        session.is_some(),
    );
    let provided = ctx.clone();
    let request = Request::from_parts(parts, Body::from(bytes));
    let response = leptos_axum::handle_server_fns_with_context(
        move || provide_context(provided.clone()),
        request,
    )
    .await
    .into_response();
    if let Some(session) = session {
        if ctx.logged_out() {
            session::log_out(&session).await?;
        } else if let Some(reply) = ctx.take_reply() {
            let flash = Flash {
                kind: if reply.ok {
                    FlashKind::Ok
                } else {
                    FlashKind::Error
                },
                text: reply.message,
                invocation: reply.invocation,
            };
            session::set_flash(&session, flash).await?;
        }
    }
    Ok(response)
}
