use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::{ApiError, AppState};
use sless_core::auth::Authenticator;
use sless_core::model::validate_name;

/// `axum::Json` with errors in the API's `{"error"}` shape and fitting statuses.
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(ApiJson(value)),
            Err(JsonRejection::MissingJsonContentType(_)) => Err(ApiError::UnsupportedMediaType(
                "send the body as JSON with Content-Type: application/json".into(),
            )),
            Err(JsonRejection::JsonDataError(e)) => Err(ApiError::BadRequest(format!(
                "invalid request body: {}",
                e.body_text()
            ))),
            Err(JsonRejection::JsonSyntaxError(e)) => Err(ApiError::BadRequest(format!(
                "request body is not valid JSON: {}",
                e.body_text()
            ))),
            Err(e) if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE => Err(
                ApiError::PayloadTooLarge("request body is larger than the limit".into()),
            ),
            Err(e) => Err(ApiError::BadRequest(e.body_text())),
        }
    }
}

/// `axum::extract::Query` with errors in the API's `{"error"}` shape; the message
/// names the parameter.
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(value)| ApiQuery(value))
            .map_err(|e| ApiError::BadRequest(e.body_text()))
    }
}

/// A verified caller allowed to act on the `{ns}` of the route.
pub struct Authorized {
    pub namespace: String,
    /// The token's `sub`: who uploaded a version.
    pub subject: String,
}

impl FromRequestParts<Arc<AppState>> for Authorized {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        let header = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let token = Authenticator::bearer(header)?;
        let principal = state.auth.authenticate(token).await?;
        let Path(params) = Path::<HashMap<String, String>>::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::BadRequest(e.body_text()))?;
        let namespace = params
            .get("ns")
            .cloned()
            .ok_or_else(|| ApiError::Internal("route has no namespace".into()))?;
        validate_name("namespace", &namespace)?;
        principal.authorize(&namespace)?;
        Ok(Authorized {
            namespace,
            subject: principal.sub,
        })
    }
}
