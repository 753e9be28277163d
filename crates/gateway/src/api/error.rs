use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use sless_api::ErrorBody;
use sless_core::auth::AuthError;
use sless_core::error_text::BoxError;
use sless_core::model::ValidationError;
use sless_core::quota::QuotaExceeded;
use sless_core::s3::StorageError;
use sless_core::store::StoreError;
use sless_core::upload::UploadError;

use crate::request_id;

/// Seconds a client refused for things in flight waits: about one upload's time.
const RETRY_AFTER_SECS: &str = "5";

/// The API layer's one error type: each variant is a status. The message of a 4xx is for
/// the caller; a 5xx keeps its cause for the log and shows the caller an id only
/// ([`request_id::hide`]).
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Auth(#[from] AuthError),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    /// The pre-build code review flagged the upload; the model's reason.
    #[error("code review refused this upload: {0}")]
    CodeReviewRefused(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// 403, or 429 with `Retry-After` for things in flight (they free up by themselves).
    #[error(transparent)]
    Quota(QuotaExceeded),
    /// The store's backend is down (503) or an object cannot be read (500); its 4xx
    /// errors become the variants above.
    #[error(transparent)]
    Store(StoreError),
    #[error("object storage: {0}")]
    Storage(#[from] StorageError),
    #[error("{what} task failed")]
    Task {
        what: &'static str,
        #[source]
        source: tokio::task::JoinError,
    },
    /// A broken invariant: a bug, not the caller's doing.
    #[error(transparent)]
    Internal(BoxError),
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) | ApiError::CodeReviewRefused(_) => StatusCode::BAD_REQUEST,
            ApiError::Auth(e) => {
                StatusCode::from_u16(e.status()).unwrap_or(StatusCode::UNAUTHORIZED)
            }
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Quota(e) if e.quota.is_in_flight() => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Quota(_) => StatusCode::FORBIDDEN,
            ApiError::Store(StoreError::Backend { .. }) | ApiError::Storage(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ApiError::Store(_) | ApiError::Task { .. } | ApiError::Internal(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }
}

impl From<ValidationError> for ApiError {
    fn from(e: ValidationError) -> Self {
        ApiError::BadRequest(e.to_string())
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound { .. } => ApiError::NotFound(e.to_string()),
            StoreError::AlreadyExists { .. } | StoreError::Conflict { .. } => {
                ApiError::Conflict(e.to_string())
            }
            StoreError::Quota(e) => ApiError::Quota(e),
            StoreError::Corrupt { .. } | StoreError::Backend { .. } => ApiError::Store(e),
        }
    }
}

impl From<QuotaExceeded> for ApiError {
    fn from(e: QuotaExceeded) -> Self {
        ApiError::Quota(e)
    }
}

impl From<UploadError> for ApiError {
    fn from(e: UploadError) -> Self {
        if e.is_too_large() {
            ApiError::PayloadTooLarge(e.to_string())
        } else {
            ApiError::BadRequest(e.to_string())
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let error = if status.is_server_error() {
            request_id::hide(&self)
        } else {
            self.to_string()
        };
        let mut response = (status, Json(ErrorBody { error })).into_response();
        if status == StatusCode::TOO_MANY_REQUESTS {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static(RETRY_AFTER_SECS),
            );
        }
        response
    }
}
