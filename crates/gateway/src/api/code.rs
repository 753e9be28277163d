//! Uploads and source listings, shared by functions, services and self-contained jobs.

use std::sync::Arc;

use axum::extract::{Multipart, Request, State};
use axum::http::HeaderMap;
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use tokio::sync::{Semaphore, SemaphorePermit};

use super::{ApiError, AppState};
use sless_api::SourceFileResponse;
use sless_core::model::Runtime;
use sless_core::review::{Outcome, Reviewer, Selection, select_files};
use sless_core::upload::{
    SourceLimits, UploadError, build_context, check_zip, object_keys, review_note_key,
    source_files, upload_prefixes, version_stamp, zip_key_for_context,
};

/// The multipart field that carries the zip.
pub const CODE_FIELD: &str = "code";

/// Multipart framing adds a little on top of the zip itself.
pub const MULTIPART_FRAMING_BYTES: u64 = 64 * 1024;

/// Zip work (fetching a stored zip, checking it, building a context, listing sources)
/// is CPU-bound and holds a zip and its output in memory: only this many run at once,
/// the rest wait their turn (16 concurrent listings of a 10 MB zip: 152 MiB peak with
/// 4, 86 MiB with 2).
static ZIP_WORK: Semaphore = Semaphore::const_new(2);

async fn zip_permit() -> Result<SemaphorePermit<'static>, ApiError> {
    ZIP_WORK
        .acquire()
        .await
        .map_err(|e| ApiError::Internal(e.into()))
}

/// Runs `work` on the blocking pool (inflating is CPU work).
async fn blocking<T: Send + 'static>(
    what: &'static str,
    work: impl FnOnce() -> Result<T, UploadError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|source| ApiError::Task { what, source })?
        .map_err(ApiError::from)
}

pub fn upload_too_large(limit: u64) -> ApiError {
    ApiError::PayloadTooLarge(format!(
        "upload is larger than the limit of {} MiB; remove build outputs and \
         dependencies (they are installed at build time) from the zip",
        limit / (1024 * 1024)
    ))
}

/// Refuses an upload whose Content-Length is over the limit before a byte of it is
/// read: hyper answers `Expect: 100-continue` only when the body is first polled, so
/// such a client is never invited to send it.
pub async fn refuse_oversize(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let limit = state.config.upload_limits.max_zip_bytes;
    let declared = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit + MULTIPART_FRAMING_BYTES) {
        return upload_too_large(limit).into_response();
    }
    next.run(request).await
}

/// Reads the `code` field of a multipart upload.
pub async fn read_code_field(
    headers: &HeaderMap,
    multipart: Result<Multipart, axum::extract::multipart::MultipartRejection>,
    limit: u64,
) -> Result<Bytes, ApiError> {
    let is_multipart = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().starts_with("multipart/form-data"));
    let usage = "send multipart/form-data with the zip in the field \"code\", e.g. \
                 curl -F code=@function.zip";
    if !is_multipart {
        return Err(ApiError::UnsupportedMediaType(usage.into()));
    }
    let mut multipart = multipart.map_err(|e| ApiError::BadRequest(format!("{e}; {usage}")))?;
    let too_large = || upload_too_large(limit);
    loop {
        let field = match multipart.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => return Err(ApiError::BadRequest(format!("no field \"code\"; {usage}"))),
            Err(e) if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE => {
                return Err(too_large());
            }
            Err(e) => {
                return Err(ApiError::BadRequest(format!(
                    "malformed multipart body: {e}"
                )));
            }
        };
        if field.name() != Some(CODE_FIELD) {
            continue;
        }
        return match field.bytes().await {
            Ok(bytes) if bytes.len() as u64 > limit => Err(too_large()),
            Ok(bytes) => Ok(bytes),
            Err(e) if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE => Err(too_large()),
            Err(e) => Err(ApiError::BadRequest(format!("reading field \"code\": {e}"))),
        };
    }
}

/// Validates a zip, builds its context, has the code reviewed (when enabled) and stores
/// both objects; returns the context key (the new `s3Key`). Nothing is stored unless the
/// zip is valid and the review did not refuse it.
pub async fn store_code(
    state: &AppState,
    namespace: &str,
    key_name: &str,
    runtime: Runtime,
    entrypoint: &str,
    zip: Bytes,
) -> Result<String, ApiError> {
    let limits = state.config.upload_limits.clone();
    let prefix = state.config.base_image_prefix.clone();
    let entrypoint = entrypoint.to_string();
    let zip_for_check = zip.clone();
    // Disabled, the review costs nothing: no walk over the zip, no request.
    let reviewing = state.config.code_review.is_some();
    let permit = zip_permit().await?;
    let (context, selection) = blocking("building the context", move || {
        let context = build_context(
            &prefix,
            runtime,
            &entrypoint,
            &mut check_zip(&zip_for_check, &limits)?,
        )?;
        let selection = reviewing
            .then(|| select_files(std::io::Cursor::new(&zip_for_check[..])))
            .transpose()?;
        Ok((context, selection))
    })
    .await?;
    drop(permit);
    if let (Some(reviewer), Some(selection)) = (&state.config.code_review, selection) {
        review(state, reviewer, namespace, key_name, selection).await?;
    }

    let now = chrono::Utc::now();
    let mut disambiguator = 0;
    let keys = loop {
        let keys = object_keys(namespace, key_name, &version_stamp(now, disambiguator));
        if !state.objects.exists(&keys.zip).await? {
            break keys;
        }
        disambiguator += 1;
    };
    state.objects.put(&keys.zip, zip, "application/zip").await?;
    state
        .objects
        .put(&keys.context, Bytes::from(context), "application/gzip")
        .await?;
    Ok(keys.context)
}

/// Runs the code review and keeps its line for the build log; a refusal is the error,
/// every other outcome lets the upload go on.
async fn review(
    state: &AppState,
    reviewer: &Reviewer,
    namespace: &str,
    key_name: &str,
    selection: Selection,
) -> Result<(), ApiError> {
    let (outcome, took) = reviewer
        .review(selection, &format!("{namespace}/{key_name}"))
        .await;
    let line = format!(
        "[{}] {}\n",
        chrono::Utc::now().format("%H:%M:%S"),
        outcome.log_line(took)
    );
    let key = review_note_key(namespace, key_name);
    // The line is a courtesy: losing it must not fail an upload the review let through.
    if let Err(e) = state
        .objects
        .put(&key, Bytes::from(line), "text/plain")
        .await
    {
        tracing::warn!(%key, error = %e, "could not keep the code review's line");
    }
    match outcome {
        Outcome::Refused(reason) => Err(ApiError::CodeReviewRefused(reason)),
        Outcome::Safe | Outcome::Skipped(_) | Outcome::Failed(_) => Ok(()),
    }
}

/// The code review's line about the latest upload of a name, while reviews are enabled.
pub async fn review_note(state: &AppState, namespace: &str, key_name: &str) -> Option<String> {
    state.config.code_review.as_ref()?;
    let key = review_note_key(namespace, key_name);
    match state.objects.get(&key).await {
        Ok(Some(bytes)) => Some(String::from_utf8_lossy(&bytes).into_owned()),
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(%key, error = %e, "could not read the code review's line");
            None
        }
    }
}

/// The files of the upload a context key belongs to (never the generated Dockerfile).
pub async fn list_source(
    state: &AppState,
    context_key: &str,
) -> Result<Vec<SourceFileResponse>, ApiError> {
    let _permit = zip_permit().await?;
    let zip = stored_zip(state, context_key).await?;
    let limits = state.config.upload_limits.clone();
    let source_limits = SourceLimits {
        max_file_bytes: state.config.max_source_file_bytes,
        max_total_bytes: state.config.max_source_answer_bytes,
    };
    let files = blocking("listing the source", move || {
        source_files(&mut check_zip(&zip, &limits)?, source_limits)
    })
    .await?;
    Ok(files
        .into_iter()
        .map(|f| SourceFileResponse {
            name: f.name,
            content: f.content,
            binary: f.binary,
            truncated: f.truncated,
            size: f.size,
        })
        .collect())
}

/// The user's zip behind a context key.
pub async fn stored_zip(state: &AppState, context_key: &str) -> Result<Bytes, ApiError> {
    let zip_key = zip_key_for_context(context_key)
        .ok_or_else(|| ApiError::Internal(format!("unexpected s3 key {context_key:?}").into()))?;
    state.objects.get(&zip_key).await?.ok_or_else(|| {
        ApiError::NotFound(format!(
            "the uploaded zip {zip_key:?} is missing from object storage; upload the code again"
        ))
    })
}

/// Removes every stored upload under a name (best effort: a leftover object is harmless).
pub async fn delete_code(state: &AppState, namespace: &str, key_name: &str) {
    for prefix in upload_prefixes(namespace, key_name) {
        match state.objects.list(&prefix).await {
            Ok(keys) => {
                for key in keys {
                    if let Err(e) = state.objects.delete(&key).await {
                        tracing::warn!(%key, error = %e, "could not delete an old upload");
                    }
                }
            }
            Err(e) => tracing::warn!(%prefix, error = %e, "could not list old uploads"),
        }
    }
    let key = review_note_key(namespace, key_name);
    if let Err(e) = state.objects.delete(&key).await {
        tracing::warn!(%key, error = %e, "could not delete the code review's line");
    }
}
