//! The one door of every console action (the `app` crate's Leptos server functions):
//! who calls (session or bearer token), the session's CSRF token and the namespace the
//! form names are checked here once, then `leptos_axum` runs the action with an
//! [`ActionContext`]; a browser's reply is kept as the flash of the page it goes back to,
//! with what was typed into a failed form.
//!
//! A multipart form (one with a `code` file: create, upload) is read here, the file
//! within the API's upload limit: the file goes to the action in its context, the other
//! fields to the server function as an ordinary urlencoded form, so every action reads
//! its fields the same way.

use std::sync::Arc;

use app::actions::{ActionContext, PostedFile};
use app::pages::{Flash, FlashKind};
use axum::body::{Body, Bytes, to_bytes};
use axum::extract::{FromRequest, Multipart, Request, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Redirect, Response};
use leptos::prelude::provide_context;
use serde::Deserialize;

use super::ConsoleState;
use super::auth::{Caller, Via};
use super::csrf;
use super::error::ConsoleError;
use super::session;

/// Forms are small; an invoke body is the largest field. Also the cap of a multipart
/// form's fields other than its file.
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

/// The multipart form's file field.
const FILE_FIELD: &str = "code";

fn bad_form(e: impl std::fmt::Display) -> ConsoleError {
    ConsoleError::BadRequest(format!("the form could not be read: {e}"))
}

/// A multipart form's text fields (within [`FORM_LIMIT`]) and its `code` file (within
/// `limit` bytes: past it the rest is not read, so the file must come last).
async fn read_multipart(
    multipart: &mut Multipart,
    limit: u64,
) -> Result<(Vec<(String, String)>, Option<PostedFile>), ConsoleError> {
    let mut fields = Vec::new();
    let mut text_bytes = 0;
    let mut file = None;
    while let Some(mut field) = multipart.next_field().await.map_err(bad_form)? {
        let name = field.name().unwrap_or_default().to_string();
        if name == FILE_FIELD {
            let mut zip = Vec::new();
            while let Some(chunk) = field.chunk().await.map_err(bad_form)? {
                if (zip.len() + chunk.len()) as u64 > limit {
                    return Ok((fields, Some(PostedFile::TooLarge { limit_bytes: limit })));
                }
                zip.extend_from_slice(&chunk);
            }
            file = Some(PostedFile::Zip(Bytes::from(zip)));
            continue;
        }
        if field.file_name().is_some() {
            return Err(ConsoleError::BadRequest(format!(
                "{name}: only the field {FILE_FIELD:?} may be a file"
            )));
        }
        let value = field.text().await.map_err(bad_form)?;
        text_bytes += name.len() + value.len();
        if text_bytes > FORM_LIMIT {
            return Err(ConsoleError::BadRequest(format!(
                "the form's fields are larger than {FORM_LIMIT} bytes"
            )));
        }
        fields.push((name, value));
    }
    Ok((fields, file))
}

fn is_multipart(request: &Request) -> bool {
    request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("multipart/form-data"))
}

pub async fn handle(
    State(state): State<Arc<ConsoleState>>,
    caller: Caller,
    request: Request,
) -> Result<Response, ConsoleError> {
    let (bytes, file, mut parts) = if is_multipart(&request) {
        let (parts, body) = request.into_parts();
        let mut reading = Request::new(body);
        *reading.headers_mut() = parts.headers.clone();
        reading.extensions_mut().extend(parts.extensions.clone());
        let mut multipart = Multipart::from_request(reading, &())
            .await
            .map_err(|e| ConsoleError::BadRequest(e.body_text()))?;
        let (fields, file) = read_multipart(&mut multipart, state.max_upload_bytes).await?;
        let form = serde_urlencoded::to_string(&fields).map_err(bad_form)?;
        (Bytes::from(form), file, parts)
    } else {
        let (parts, body) = request.into_parts();
        let bytes = to_bytes(body, FORM_LIMIT)
            .await
            .map_err(|e| ConsoleError::BadRequest(format!("reading the form: {e}")))?;
        (bytes, None, parts)
    };
    let common: Common = serde_urlencoded::from_bytes(&bytes).map_err(bad_form)?;
    let typed: Vec<(String, String)> = serde_urlencoded::from_bytes(&bytes).map_err(bad_form)?;
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
        let Some(value) = value else { continue };
        let Err(e) = sless_core::model::validate_name(field, value) else {
            continue;
        };
        let Some(session) = &session else {
            return Err(ConsoleError::BadRequest(e.to_string()));
        };
        // A browser goes back to its form, as typed, with the rule broken.
        let mut flash = Flash::error(e.to_string());
        flash.form = Some(app::forms::keep(&typed));
        session::set_flash(session, flash).await?;
        let fallback = match &common.namespace {
            Some(ns) if sless_core::model::validate_name("namespace", ns).is_ok() => {
                app::routes::list_href(ns)
            }
            _ => "/funcs".to_string(),
        };
        let back = app::actions::back_to(Some(&parts.headers), &fallback);
        return Ok(Redirect::to(&back).into_response());
    }
    if let Some(namespace) = &common.namespace {
        caller.authorize(namespace)?;
    }
    let ctx = ActionContext::new(
        state.console.clone(),
        caller.token.clone(),
        common.namespace,
        session.is_some(),
    )
    .with_upload(file);
    let provided = ctx.clone();
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-www-form-urlencoded"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
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
            let keep = !reply.ok || ctx.keeps_form();
            let flash = Flash {
                kind: if reply.ok {
                    FlashKind::Ok
                } else {
                    FlashKind::Error
                },
                text: reply.message,
                invocation: reply.invocation,
                form: keep.then(|| app::forms::keep(&typed)),
            };
            session::set_flash(&session, flash).await?;
        }
    }
    Ok(response)
}
