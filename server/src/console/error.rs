//! The console's error type. Its response is text (for curl); the `headers::secure`
//! middleware, which knows whether a browser asked and the page's nonce, turns it into
//! an HTML page or a redirect to `/login`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sless_core::error_text::BoxError;

#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// No session and no bearer token.
    #[error("log in first: open /login in a browser, or send Authorization: Bearer <token>")]
    LoginRequired,
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error(
        "the form has expired or did not come from this console (CSRF check failed); reload the page and try again"
    )]
    Csrf,
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    BadRequest(String),
    #[error(transparent)]
    App(#[from] app::console::ViewError),
    #[error("session store: {0}")]
    Session(#[source] tower_sessions::session::Error),
    /// Not the caller's doing: the caller sees a request id, the log the cause.
    #[error(transparent)]
    Internal(BoxError),
}

/// Attached to error responses so the middleware can render them for browsers.
#[derive(Clone, Debug)]
pub struct Failure {
    pub status: StatusCode,
    pub title: &'static str,
    pub message: String,
    pub login: bool,
}

impl ConsoleError {
    pub fn status(&self) -> StatusCode {
        match self {
            ConsoleError::LoginRequired | ConsoleError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ConsoleError::Forbidden(_) | ConsoleError::Csrf => StatusCode::FORBIDDEN,
            ConsoleError::NotFound(_) => StatusCode::NOT_FOUND,
            ConsoleError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ConsoleError::App(e) => {
                StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_GATEWAY)
            }
            ConsoleError::Session(_) | ConsoleError::Internal(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }

    fn title(&self) -> &'static str {
        match self.status() {
            StatusCode::UNAUTHORIZED => "Not logged in",
            StatusCode::FORBIDDEN => "Not allowed",
            StatusCode::NOT_FOUND => "Not found",
            StatusCode::BAD_REQUEST => "Bad request",
            StatusCode::BAD_GATEWAY => "The API did not answer",
            _ => "Something went wrong",
        }
    }
}

impl From<sless_client::client::ClientError> for ConsoleError {
    fn from(e: sless_client::client::ClientError) -> Self {
        ConsoleError::App(e.into())
    }
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        let status = self.status();
        let message = match self {
            ConsoleError::Session(_) | ConsoleError::Internal(_) => {
                gateway::request_id::hide(&self)
            }
            _ => {
                if status.is_server_error() {
                    tracing::warn!(error = %self, "console request failed");
                }
                self.to_string()
            }
        };
        let failure = Failure {
            status,
            title: self.title(),
            message,
            login: matches!(
                self,
                ConsoleError::LoginRequired | ConsoleError::Unauthorized(_)
            ),
        };
        let mut response = (status, format!("{}\n", failure.message)).into_response();
        if failure.login {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"sless\""),
            );
        }
        response.extensions_mut().insert(failure);
        response
    }
}
