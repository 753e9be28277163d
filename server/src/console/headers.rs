//! Security headers on every console response (a Content-Security-Policy with a fresh
//! nonce each time) and the browser rendering of errors.

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};
use base64::Engine;
use tower_sessions::Session;

use super::error::Failure;
use super::session;

/// The nonce of this response's Content-Security-Policy: only scripts carrying it run.
#[derive(Clone, Debug)]
pub struct Nonce(pub String);

impl Nonce {
    fn random() -> Self {
        let bytes: [u8; 16] = rand::random();
        Nonce(base64::engine::general_purpose::STANDARD.encode(bytes))
    }
}

/// Browsers put `text/html` in Accept; curl and scripts do not.
pub fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/html"))
}

pub fn csp(nonce: &str) -> String {
    format!(
        "default-src 'none'; style-src 'self'; img-src 'self' data:; script-src 'nonce-{nonce}'; \
         connect-src 'self'; \
         form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    )
}

pub async fn secure(mut request: Request, next: Next) -> Response {
    let nonce = Nonce::random();
    let browser = wants_html(request.headers());
    let get = request.method() == Method::GET;
    let target = request
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let session = request.extensions().get::<Session>().cloned();
    request.extensions_mut().insert(nonce.clone());

    let mut response = next.run(request).await;
    if let Some(failure) = response.extensions_mut().remove::<Failure>()
        && browser
    {
        response = if failure.login {
            let next = if get && super::auth::safe_next(&target).is_some() {
                format!("?next={}", app::listing::url_encode(&target))
            } else {
                Default::default()
            };
            Redirect::to(&format!("/login{next}")).into_response()
        } else {
            error_page(&failure, &nonce, session.as_ref()).await
        };
    }
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(&csp(&nonce.0)) {
        headers.insert(header::CONTENT_SECURITY_POLICY, value);
    }
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // Pages show private data: never cache them (static files set their own policy).
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

/// An error as a page with the usual header bar (logged-in user, logout).
async fn error_page(failure: &Failure, nonce: &Nonce, session: Option<&Session>) -> Response {
    let mut ctx = app::pages::PageContext {
        nonce: nonce.0.clone(),
        ..Default::default()
    };
    if let Some(session) = session {
        if let Ok(Some(user)) = session::user(session).await {
            ctx.user = Some(app::pages::UserBadge {
                namespace: user.namespace,
                admin: user.admin,
            });
        }
        ctx.csrf = super::csrf::existing(session).await;
    }
    let html = app::pages::render_message(
        failure.status.as_u16(),
        failure.title,
        &failure.message,
        &ctx,
    )
    .await;
    (failure.status, Html(html)).into_response()
}
