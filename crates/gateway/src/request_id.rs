//! Request ids for internal errors: a 5xx tells the caller only `internal error (id …)`
//! and logs the whole error chain under the same id, so a report can be matched to it.
//! The id is the caller's `X-Request-Id` when it is a sane one, else a random one; error
//! answers echo it in `X-Request-Id`.
//!
//! [`layer`] puts the request in a task-local for the rest of the stack: an error's
//! `IntoResponse` runs inside it but cannot see the request, and this way it writes its
//! final body at once instead of leaving a marker for a middleware to rewrite.

use std::error::Error as StdError;

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::Response;

use sless_core::error_text::error_chain;

const HEADER: HeaderName = HeaderName::from_static("x-request-id");

pub(crate) use sless_api::{MAX_REQUEST_ID_LEN as MAX_LEN, is_valid_request_id as is_valid};

#[derive(Clone)]
struct Current {
    id: String,
    method: Method,
    path: String,
}

tokio::task_local! {
    static CURRENT: Current;
}

/// Middleware (`axum::middleware::from_fn`): runs the request with its id in scope and
/// puts the id on error answers.
pub async fn layer(request: Request, next: Next) -> Response {
    let id = request
        .headers()
        .get(&HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|id| is_valid(id))
        .map_or_else(fresh, str::to_owned);
    let current = Current {
        id: id.clone(),
        method: request.method().clone(),
        path: request.uri().path().to_owned(),
    };
    let mut response = CURRENT.scope(current, next.run(request)).await;
    let status = response.status();
    if (status.is_client_error() || status.is_server_error())
        && let Ok(value) = HeaderValue::from_str(&id)
    {
        response.headers_mut().insert(HEADER, value);
    }
    response
}

/// Logs an internal error with its sources under the request's id and returns what the
/// caller may see. Outside [`layer`] the id is a fresh one.
pub fn hide(error: &dyn StdError) -> String {
    let current = CURRENT.try_with(Current::clone).ok();
    let id = current.as_ref().map_or_else(fresh, |c| c.id.clone());
    tracing::error!(
        request_id = %id,
        method = current.as_ref().map(|c| c.method.as_str()),
        path = current.as_ref().map(|c| c.path.as_str()),
        error = %error_chain(error),
        "internal error"
    );
    format!("internal error (id {id})")
}

fn fresh() -> String {
    format!("{:016x}", rand::random::<u64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_ids_are_16_hex_digits() {
        let id = fresh();
        assert_eq!(id.len(), 16);
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(is_valid(&id));
    }

    #[tokio::test]
    async fn hide_names_the_request_id_in_scope() {
        let current = Current {
            id: "req-1".into(),
            method: Method::GET,
            path: "/v1".into(),
        };
        let text = CURRENT
            .scope(current, async {
                hide(&std::io::Error::other("secret detail"))
            })
            .await;
        assert_eq!(text, "internal error (id req-1)");
    }
}
