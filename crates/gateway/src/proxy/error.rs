use std::time::Duration;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use sless_api::ErrorBody;

/// Why a call did not reach a function or got no answer; each variant is one status.
#[derive(Debug, thiserror::Error)]
pub enum InvokeError {
    #[error("no function or service \"{name}\" in namespace {namespace}")]
    Unknown { namespace: String, name: String },
    /// Disabled, building, crashed: the reason comes from the route table.
    #[error("{0}")]
    Unavailable(String),
    #[error("function \"{name}\" is unreachable: {detail}")]
    Unreachable { name: String, detail: String },
    /// The function's answer could not be read (a bad head is `Unreachable`: the
    /// client library reports both alike).
    #[error("function \"{name}\" sent a malformed answer: {detail}")]
    BadAnswer { name: String, detail: String },
    #[error("function \"{name}\" did not answer within {} s (its timeout_sec)", Seconds(*.timeout))]
    Timeout { name: String, timeout: Duration },
    #[error("request body is larger than the limit of {limit} bytes")]
    BodyTooLarge { limit: u64 },
    /// The caller's own request body broke off.
    #[error("reading the request body: {0}")]
    BadRequestBody(String),
}

impl InvokeError {
    pub fn status(&self) -> StatusCode {
        match self {
            InvokeError::Unknown { .. } => StatusCode::NOT_FOUND,
            InvokeError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            InvokeError::Unreachable { .. } | InvokeError::BadAnswer { .. } => {
                StatusCode::BAD_GATEWAY
            }
            InvokeError::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            InvokeError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            InvokeError::BadRequestBody(_) => StatusCode::BAD_REQUEST,
        }
    }
}

impl IntoResponse for InvokeError {
    fn into_response(self) -> Response {
        let status = self.status();
        if matches!(
            self,
            InvokeError::Unreachable { .. }
                | InvokeError::BadAnswer { .. }
                | InvokeError::Timeout { .. }
        ) {
            tracing::warn!(error = %self, "invoke failed");
        }
        (
            status,
            Json(ErrorBody {
                error: self.to_string(),
            }),
        )
            .into_response()
    }
}

/// Whole seconds as `30`, anything finer as `1.5`.
struct Seconds(Duration);

impl std::fmt::Display for Seconds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.subsec_nanos() == 0 {
            write!(f, "{}", self.0.as_secs())
        } else {
            write!(f, "{}", self.0.as_secs_f64())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_function() {
        let timeout = InvokeError::Timeout {
            name: "f".into(),
            timeout: Duration::from_secs(30),
        };
        assert_eq!(
            timeout.to_string(),
            "function \"f\" did not answer within 30 s (its timeout_sec)"
        );
        let unknown = InvokeError::Unknown {
            namespace: "ns".into(),
            name: "f".into(),
        };
        assert_eq!(
            unknown.to_string(),
            "no function or service \"f\" in namespace ns"
        );
        assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
        let fine = InvokeError::Timeout {
            name: "f".into(),
            timeout: Duration::from_millis(1500),
        };
        assert!(fine.to_string().contains("within 1.5 s"));
    }
}
