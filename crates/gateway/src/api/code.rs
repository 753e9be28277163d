//! Uploads and source listings, shared by functions, services and self-contained jobs.

use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::multipart::MultipartError;
use axum::extract::{Multipart, Request, State};
use axum::http::HeaderMap;
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{Semaphore, SemaphorePermit};

use super::{ApiError, AppState};
use sless_api::SourceFileResponse;
use sless_api::keys::{next_version, version_of_listed, version_order};
use sless_core::model::Runtime;
use sless_core::quota::Slot;
use sless_core::review::{Outcome, Reviewer, Selection, select_files};
use sless_core::upload::{
    SourceLimits, UploadError, build_context, check_zip, object_keys, review_note_key,
    source_files, upload_prefixes, version_of, zip_key_for_context,
};
use sless_core::versions::{self, VersionRecord};

/// The multipart field that carries the zip.
pub const CODE_FIELD: &str = "code";

/// Multipart framing adds a little on top of the zip itself.
pub const MULTIPART_FRAMING_BYTES: u64 = 64 * 1024;

/// Zip work (checking a zip, building a context, listing sources) is CPU-bound and
/// inflates entries through buffers: only this many run at once, the rest wait their
/// turn.
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

/// A zip spooled to a temporary file (removed on drop), with its size and sha256
/// computed while it streamed in: an upload is never held whole in memory. A later step
/// reads it with [`SpooledZip::open`] (a `std::fs::File`: Read + Seek).
pub struct SpooledZip {
    file: tempfile::TempPath,
    pub size: u64,
    /// Hex sha256 of the zip.
    pub sha256: String,
    /// The namespace's upload place, held until the zip is stored.
    _slot: Option<Slot>,
}

impl SpooledZip {
    pub fn path(&self) -> &Path {
        &self.file
    }

    /// The zip from its start.
    pub fn open(&self) -> std::io::Result<std::fs::File> {
        std::fs::File::open(&self.file)
    }
}

/// Writes chunks to a new temporary file under the spool dir, counting and hashing them.
struct Spooler {
    file: tokio::fs::File,
    path: tempfile::TempPath,
    size: u64,
    hash: Sha256,
}

impl Spooler {
    async fn new(dir: &Path) -> Result<Self, ApiError> {
        let temp = tempfile::Builder::new()
            .prefix("upload-")
            .suffix(".zip")
            .tempfile_in(dir)
            .map_err(|e| spool_error(dir, e))?;
        let (file, path) = temp.into_parts();
        Ok(Self {
            file: tokio::fs::File::from_std(file),
            path,
            size: 0,
            hash: Sha256::new(),
        })
    }

    async fn write(&mut self, chunk: &[u8]) -> Result<(), ApiError> {
        self.write_all(chunk)
            .await
            .map_err(|e| spool_error(&self.path, e))
    }

    async fn finish(mut self, slot: Option<Slot>) -> Result<SpooledZip, ApiError> {
        self.file
            .flush()
            .await
            .map_err(|e| spool_error(&self.path, e))?;
        Ok(SpooledZip {
            file: self.path,
            size: self.size,
            sha256: hex::encode(self.hash.finalize()),
            _slot: slot,
        })
    }
}

/// Every byte written is counted and hashed as the file accepts it.
impl AsyncWrite for Spooler {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.file).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = written {
            this.size += n as u64;
            this.hash.update(&buf[..n]);
        }
        written
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().file).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().file).poll_shutdown(cx)
    }
}

fn spool_error(path: &Path, e: std::io::Error) -> ApiError {
    ApiError::Internal(format!("spooling an upload to {}: {e}", path.display()).into())
}

/// Reads the `code` field of a multipart upload into a spooled file, chunk by chunk,
/// refusing it as soon as it passes the size limit. Each namespace has a few upload
/// places ([`sless_core::quota::Quotas::max_uploads_in_flight`]); the returned zip
/// holds one until it is dropped.
pub async fn read_code_field(
    state: &AppState,
    namespace: &str,
    headers: &HeaderMap,
    multipart: Result<Multipart, axum::extract::multipart::MultipartRejection>,
) -> Result<SpooledZip, ApiError> {
    let limit = state.config.upload_limits.max_zip_bytes;
    let is_multipart = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().starts_with("multipart/form-data"));
    let usage = "send multipart/form-data with the zip in the field \"code\", e.g. \
                 curl -F code=@function.zip";
    if !is_multipart {
        return Err(ApiError::UnsupportedMediaType(usage.into()));
    }
    let slot = state.uploads.try_acquire(namespace)?;
    let mut multipart = multipart.map_err(|e| ApiError::BadRequest(format!("{e}; {usage}")))?;
    let too_large = || upload_too_large(limit);
    let read_error = |e: MultipartError, what: &str| {
        if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
            too_large()
        } else {
            ApiError::BadRequest(format!("{what}: {e}"))
        }
    };
    loop {
        let mut field = match multipart.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => return Err(ApiError::BadRequest(format!("no field \"code\"; {usage}"))),
            Err(e) => return Err(read_error(e, "malformed multipart body")),
        };
        if field.name() != Some(CODE_FIELD) {
            continue;
        }
        let mut spool = Spooler::new(&state.config.spool_dir).await?;
        while let Some(chunk) = field
            .chunk()
            .await
            .map_err(|e| read_error(e, "reading field \"code\""))?
        {
            if spool.size + chunk.len() as u64 > limit {
                return Err(too_large());
            }
            spool.write(&chunk).await?;
        }
        return spool.finish(Some(slot)).await;
    }
}

/// Where an upload goes and who sent it.
pub struct Upload<'a> {
    pub namespace: &'a str,
    /// The name part of its keys (a job's is [`sless_core::upload::job_key_name`]).
    pub key_name: &'a str,
    pub runtime: Runtime,
    pub entrypoint: &'a str,
    /// The token's `sub`, kept in the version's record.
    pub uploaded_by: &'a str,
}

/// Validates a zip, builds its context, has the code reviewed (when enabled) and stores
/// both objects, then the version's record; returns the context key (the new `s3Key`).
/// Nothing is stored unless the zip is valid and the review did not refuse it. The zip
/// is read from its spooled file and the context is written to another, so neither is
/// ever whole in memory; both stream to object storage from disk.
pub async fn store_code(
    state: &AppState,
    upload: &Upload<'_>,
    zip: SpooledZip,
) -> Result<String, ApiError> {
    let Upload {
        namespace,
        key_name,
        runtime,
        entrypoint,
        uploaded_by,
    } = *upload;
    let limits = state.config.upload_limits.clone();
    let prefix = state.config.base_image_prefix.clone();
    let context_entrypoint = entrypoint.to_string();
    let zip_path = zip.path().to_path_buf();
    let context_file = tempfile::Builder::new()
        .prefix("context-")
        .suffix(".tar.gz")
        .tempfile_in(&state.config.spool_dir)
        .map_err(|e| spool_error(&state.config.spool_dir, e))?;
    let (context_out, context_path) = context_file.into_parts();
    // Disabled, the review costs nothing: no walk over the zip, no request.
    let reviewing = state.config.code_review.is_some();
    let permit = zip_permit().await?;
    let selection = blocking("building the context", move || {
        let open = || {
            std::fs::File::open(&zip_path)
                .map(std::io::BufReader::new)
                .map_err(|e| UploadError::io("reading the spooled upload", e))
        };
        let out = build_context(
            &prefix,
            runtime,
            &context_entrypoint,
            &mut check_zip(open()?, &limits)?,
            std::io::BufWriter::new(context_out),
        )?;
        out.into_inner()
            .map_err(|e| UploadError::io("writing the build context", e.into_error()))?
            .sync_data()
            .map_err(|e| UploadError::io("writing the build context", e))?;
        reviewing.then(|| select_files(open()?)).transpose()
    })
    .await?;
    drop(permit);
    if let (Some(reviewer), Some(selection)) = (&state.config.code_review, selection) {
        review(state, reviewer, namespace, key_name, selection).await?;
    }

    let now = chrono::Utc::now();
    let [zips, ..] = upload_prefixes(namespace, key_name);
    let mut newest = state
        .objects
        .list(&zips)
        .await?
        .iter()
        .filter_map(|key| version_of_listed(key))
        .max_by(|a, b| version_order(a, b))
        .map(str::to_owned);
    // Another upload of the name may have taken the version meanwhile.
    let (version, keys) = loop {
        let version = next_version(now, newest.as_deref());
        let keys = object_keys(namespace, key_name, &version);
        if !state.objects.exists(&keys.zip).await? {
            break (version, keys);
        }
        newest = Some(version);
    };
    tracing::info!(key = %keys.zip, size = zip.size, sha256 = %zip.sha256, "storing an upload");
    state
        .objects
        .put_file(&keys.zip, zip.path(), "application/zip")
        .await?;
    state
        .objects
        .put_file(&keys.context, &context_path, "application/gzip")
        .await?;
    let record = VersionRecord {
        created_at: now.to_rfc3339(),
        sha256: zip.sha256.clone(),
        size: zip.size,
        uploaded_by: uploaded_by.to_string(),
        runtime: runtime.to_string(),
        entrypoint: entrypoint.to_string(),
    };
    versions::record(&state.objects, namespace, key_name, &version, &record).await?;
    Ok(keys.context)
}

/// Prunes the versions of a name past `--keep-versions`, never the one `active_key`
/// (its `s3Key`) is; a failure is logged, the upload it follows stands.
pub async fn prune_versions(
    state: &AppState,
    namespace: &str,
    key_name: &str,
    active_key: Option<&str>,
) {
    match versions::list(&state.objects, namespace, key_name).await {
        Ok(kept) => {
            let active = active_key.map(version_of);
            let keep = state.config.keep_versions;
            let pruned =
                versions::prune(&state.objects, namespace, key_name, &kept, keep, active).await;
            if !pruned.is_empty() {
                tracing::info!(%namespace, name = %key_name, ?pruned, "pruned old versions");
            }
        }
        Err(e) => {
            tracing::warn!(%namespace, name = %key_name, error = %e, "could not list versions to prune")
        }
    }
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
        .put(&key, bytes::Bytes::from(line), "text/plain")
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
    let zip = stored_zip(state, context_key).await?;
    let _permit = zip_permit().await?;
    let limits = state.config.upload_limits.clone();
    let source_limits = SourceLimits {
        max_file_bytes: state.config.max_source_file_bytes,
        max_total_bytes: state.config.max_source_answer_bytes,
    };
    let files = blocking("listing the source", move || {
        let file = zip
            .open()
            .map_err(|e| UploadError::io("reading the spooled upload", e))?;
        source_files(
            &mut check_zip(std::io::BufReader::new(file), &limits)?,
            source_limits,
        )
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

/// The user's zip behind a context key, spooled from object storage to a file.
pub async fn stored_zip(state: &AppState, context_key: &str) -> Result<SpooledZip, ApiError> {
    let zip_key = zip_key_for_context(context_key)
        .ok_or_else(|| ApiError::Internal(format!("unexpected s3 key {context_key:?}").into()))?;
    let mut spool = Spooler::new(&state.config.spool_dir).await?;
    if !state.objects.get_into(&zip_key, &mut spool).await? {
        return Err(ApiError::NotFound(format!(
            "the uploaded zip {zip_key:?} is missing from object storage; upload the code again"
        )));
    }
    spool.finish(None).await
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
