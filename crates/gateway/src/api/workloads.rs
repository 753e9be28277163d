//! Functions and Services: the same handlers, generic over the kind.

use std::sync::Arc;

use std::time::Duration;

use axum::Json;
use axum::extract::Extension;
use axum::extract::multipart::MultipartRejection;
use axum::extract::{Multipart, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use tokio::sync::broadcast::error::RecvError;

use super::code::{
    SpooledZip, Upload, delete_code, list_source, prune_versions, read_code_field, review_note,
    store_code, stored_zip,
};
use super::convert::workload_spec;
use super::extract::{ApiJson, ApiQuery, Authorized};
use super::not_found;
use super::versions::{activate, kept_versions};
use super::{ApiError, AppState, load};
use crate::proxy::{Filter, Invocation, Via};
use crate::serve::Stopping;
use sless_api::page::{Listed, PageQuery};
use sless_api::{SourceFileResponse, WorkloadRequest, WorkloadResponse};
use sless_core::logs::{Following, LogFilter, LogLine};
use sless_core::model::{Phase, WorkloadSpec, validate_name};
use sless_core::quota::Slot;
use sless_core::store::{Object, StoreError, StoreExt, WorkloadResource, modify, modify_status};
use sless_core::upload::version_of;
use sless_core::workload::{no_code, refused_upload};

pub async fn list<R: WorkloadResource>(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    ApiQuery(page): ApiQuery<PageQuery>,
) -> Result<Json<Listed<WorkloadResponse>>, ApiError> {
    let cursor = page.cursor()?;
    let objects = state.store.list_typed::<R>(Some(&auth.namespace)).await?;
    let items = super::by_name(objects.iter().map(|o| state.workload(o)), |w| {
        w.name.as_str()
    });
    Ok(Json(Listed::of(items, cursor.as_ref(), |w| {
        w.name.as_str()
    })))
}

pub async fn get<R: WorkloadResource>(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    Path((_, name)): Path<(String, String)>,
) -> Result<Json<WorkloadResponse>, ApiError> {
    let object = load::<R>(&state, &auth.namespace, &name).await?;
    Ok(Json(state.workload(&object)))
}

pub async fn create<R: WorkloadResource>(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    ApiJson(request): ApiJson<WorkloadRequest>,
) -> Result<(StatusCode, Json<WorkloadResponse>), ApiError> {
    let name = request
        .name
        .clone()
        .ok_or_else(|| ApiError::BadRequest("name: required".into()))?;
    validate_name("name", &name)?;
    let spec = workload_spec(&request, false)?;
    state.config.check_egress(request.egress.as_ref())?;
    let ns = &auth.namespace;

    if let Some(other) = R::KIND.shares_names_with()
        && state.store.get(other, ns, &name).await?.is_some()
    {
        return Err(ApiError::Conflict(format!(
            "a {} named {name:?} already exists in {ns}; functions and services share names \
             (both are served at /fn/{ns}/{name})",
            other.noun()
        )));
    }
    if let Some(existing) = state.store.get_typed::<R>(ns, &name).await? {
        // A failed first apply may be re-applied: the failed object is replaced.
        if existing.status.phase != Phase::Failed {
            return Err(StoreError::AlreadyExists {
                kind: R::KIND,
                namespace: ns.clone(),
                name,
            }
            .into());
        }
        state.store.delete(R::KIND, ns, &name).await?;
        delete_code(&state, ns, &name).await;
    }
    let created = state
        .store
        .create_typed::<R>(ns, &name, &R::from_workload(spec))
        .await?;
    Ok((StatusCode::CREATED, Json(state.workload(&created))))
}

pub async fn replace<R: WorkloadResource>(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    Path((_, name)): Path<(String, String)>,
    ApiJson(request): ApiJson<WorkloadRequest>,
) -> Result<Json<WorkloadResponse>, ApiError> {
    if let Some(body_name) = &request.name
        && body_name != &name
    {
        return Err(ApiError::BadRequest(format!(
            "name: {body_name:?} does not match the URL ({name:?}); resources cannot be renamed"
        )));
    }
    let new_spec = workload_spec(&request, true)?;
    state.config.check_egress(request.egress.as_ref())?;
    let ns = &auth.namespace;
    let object = load::<R>(&state, ns, &name).await?;
    let old = R::workload(&object.spec).clone();
    // The build context bakes in runtime and entrypoint: rebuild it from the stored zip.
    let rebuilt = match &old.s3_key {
        Some(context_key)
            if old.runtime != new_spec.runtime || old.entrypoint != new_spec.entrypoint =>
        {
            let zip = stored_zip(&state, context_key).await?;
            let upload = Upload {
                namespace: ns,
                key_name: &name,
                runtime: new_spec.runtime,
                entrypoint: &new_spec.entrypoint,
                uploaded_by: &auth.subject,
            };
            Some(store_code(&state, &upload, zip).await?)
        }
        _ => None,
    };
    // The user's fields replace the current ones; the code and replicas are sless's own.
    let apply = |spec: &mut WorkloadSpec| {
        let current = std::mem::replace(spec, new_spec.clone());
        spec.replicas = current.replicas;
        spec.s3_key = match &rebuilt {
            // An upload that landed meanwhile wins over the rebuilt older code.
            Some(key) if current.s3_key == old.s3_key => Some(key.clone()),
            _ => current.s3_key,
        };
    };
    let updated = match &request.resource_version {
        Some(version) => {
            let mut object = object;
            object.meta.resource_version = version.clone();
            apply(R::workload_mut(&mut object.spec));
            state.store.update_typed(&object).await?
        }
        // No version: last writer wins, never a conflict.
        None => {
            modify::<R, _>(&*state.store, ns, &name, |o| {
                apply(R::workload_mut(&mut o.spec))
            })
            .await?
        }
    };
    let updated = if rebuilt.is_some() {
        let building = mark_building::<R>(&state, ns, &name).await?;
        prune_versions(
            &state,
            ns,
            &name,
            R::workload(&building.spec).s3_key.as_deref(),
        )
        .await;
        building
    } else {
        updated
    };
    Ok(Json(state.workload(&updated)))
}

pub async fn delete<R: WorkloadResource>(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    Path((_, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    if !state.store.delete(R::KIND, &auth.namespace, &name).await? {
        return Err(not_found(R::KIND, &auth.namespace, &name));
    }
    delete_code(&state, &auth.namespace, &name).await;
    // A function re-created under the name starts without them.
    if let Err(e) = state
        .proxy
        .invocations()
        .forget(&auth.namespace, &name)
        .await
    {
        tracing::warn!(%name, error = %e, "could not forget the call records");
    }
    Ok(StatusCode::NO_CONTENT)
}

pub async fn upload<R: WorkloadResource>(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    Path((_, name)): Path<(String, String)>,
    headers: HeaderMap,
    multipart: Result<Multipart, MultipartRejection>,
) -> Result<Json<WorkloadResponse>, ApiError> {
    let ns = &auth.namespace;
    let object = load::<R>(&state, ns, &name).await?;
    let zip = read_code_field(&state, ns, &headers, multipart).await?;
    let workload = R::workload(&object.spec);
    if let Some(same) = same_version(&state, &object, &zip).await? {
        let activated = activate::<R>(&state, &object, &same).await?;
        return Ok(Json(state.workload(&activated)));
    }
    let upload = Upload {
        namespace: ns,
        key_name: &name,
        runtime: workload.runtime,
        entrypoint: &workload.entrypoint,
        uploaded_by: &auth.subject,
    };
    let key = match store_code(&state, &upload, zip).await {
        Err(ApiError::CodeReviewRefused(reason)) => {
            return Err(mark_refused::<R>(&state, ns, &name, reason).await);
        }
        stored => stored?,
    };
    modify::<R, _>(&*state.store, ns, &name, |o| {
        R::workload_mut(&mut o.spec).s3_key = Some(key.clone());
    })
    .await?;
    let updated = mark_building::<R>(&state, ns, &name).await?;
    prune_versions(&state, ns, &name, Some(&key)).await;
    Ok(Json(state.workload(&updated)))
}

/// The kept version an upload of these bytes already is (for the workload's runtime and
/// entrypoint): uploading it again stores nothing. Not the active version when its build
/// failed: uploading the same code again then builds it again, as a new version.
async fn same_version<R: WorkloadResource>(
    state: &AppState,
    object: &Object<R>,
    zip: &SpooledZip,
) -> Result<Option<String>, ApiError> {
    let spec = R::workload(&object.spec);
    let runtime = spec.runtime.to_string();
    let active = spec.s3_key.as_deref().map(version_of);
    let failed = object.status.phase == Phase::Failed;
    Ok(kept_versions(state, object)
        .await?
        .into_iter()
        .find(|v| v.holds(&zip.sha256, &runtime, &spec.entrypoint))
        .filter(|v| !(failed && active == Some(v.version.as_str())))
        .map(|v| v.version))
}

pub async fn source<R: WorkloadResource>(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    Path((_, name)): Path<(String, String)>,
) -> Result<Json<Vec<SourceFileResponse>>, ApiError> {
    let object = load::<R>(&state, &auth.namespace, &name).await?;
    let Some(key) = &R::workload(&object.spec).s3_key else {
        return Err(ApiError::NotFound(no_code(R::KIND, &name)));
    };
    Ok(Json(list_source(&state, key).await?))
}

async fn mark_building<R: WorkloadResource>(
    state: &AppState,
    namespace: &str,
    name: &str,
) -> Result<Object<R>, ApiError> {
    Ok(modify_status::<R, _>(&*state.store, namespace, name, |o| {
        o.status.phase = Phase::Building;
        o.status.message = Some("build queued".into());
    })
    .await?)
}

/// Shows a refused upload in the status: the message says why, and a workload that has
/// no code yet fails. One with code keeps its phase and serving; its runner's next
/// status write (Ready) replaces the message, the build log keeps the reason.
async fn mark_refused<R: WorkloadResource>(
    state: &AppState,
    namespace: &str,
    name: &str,
    reason: String,
) -> ApiError {
    let refused = ApiError::CodeReviewRefused(reason);
    let message = refused_upload(&refused.to_string());
    let marked = modify_status::<R, _>(&*state.store, namespace, name, |o| {
        if R::workload(&o.spec).s3_key.is_none() {
            o.status.phase = Phase::Failed;
        }
        o.status.message = Some(message.clone());
    })
    .await;
    if let Err(e) = marked {
        tracing::warn!(%namespace, %name, error = %e, "could not record a refused upload");
    }
    refused
}

#[derive(serde::Deserialize)]
pub struct LogsQuery {
    /// How many of the newest matching lines; a non-negative integer.
    tail: Option<usize>,
    /// Only the lines the call with this request id printed.
    request_id: Option<String>,
    /// Only lines containing this text (case-insensitive).
    q: Option<String>,
    /// Keep the answer open and send each new line as it is printed (Server-Sent Events).
    #[serde(default)]
    follow: bool,
}

/// The longest `q` a log search takes.
const MAX_LOG_SEARCH_BYTES: usize = 256;

impl LogsQuery {
    /// The query, or why it is a bad request.
    fn log_query(self) -> Result<LogFilter, String> {
        if let Some(id) = &self.request_id
            && !sless_api::is_valid_request_id(id)
        {
            return Err(format!(
                "request_id: {id:?} is not a request id (1 to {} of A-Z a-z 0-9 . _ -)",
                sless_api::MAX_REQUEST_ID_LEN
            ));
        }
        if let Some(q) = &self.q
            && q.len() > MAX_LOG_SEARCH_BYTES
        {
            return Err(format!(
                "q: a search is at most {MAX_LOG_SEARCH_BYTES} bytes"
            ));
        }
        Ok(LogFilter {
            tail: self.tail.unwrap_or(100).min(10_000),
            request_id: self.request_id,
            search: self.q.filter(|q| !q.is_empty()),
        })
    }
}

/// Captured stdout/stderr of the workload's instances, oldest first; with
/// `follow=true` a stream of them and of every new one.
pub async fn logs<R: WorkloadResource>(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    Path((_, name)): Path<(String, String)>,
    ApiQuery(query): ApiQuery<LogsQuery>,
    stopping: Option<Extension<Stopping>>,
) -> Result<Response, ApiError> {
    let follow = query.follow;
    let query = query.log_query().map_err(ApiError::BadRequest)?;
    load::<R>(&state, &auth.namespace, &name).await?;
    if !follow {
        return Ok(Json(state.logs.lines(&auth.namespace, &name, &query)).into_response());
    }
    let place = state.log_followers.try_acquire(&auth.namespace)?;
    let following = state
        .logs
        .follow(&auth.namespace, &name, &query)
        .ok_or_else(|| {
            ApiError::BadRequest(format!(
                "this platform keeps no instance output to follow; {}",
                state.logs.lines(&auth.namespace, &name, &query)[0].line
            ))
        })?;
    let stopping = stopping.map(|Extension(s)| s);
    Ok(log_stream(following, query, place, stopping).into_response())
}

/// A follower is closed after this long (clients reconnect), so none is held forever.
const MAX_FOLLOW: Duration = Duration::from_secs(3600);

/// The SSE answer of a follower: the lines there were, then each new line `query` keeps;
/// a `lagged` event says how many lines a slow reader missed. Ends when the workload is
/// deleted, the server stops, or after [`MAX_FOLLOW`]; the place is held until then.
fn log_stream(
    following: Following,
    query: LogFilter,
    place: Slot,
    stopping: Option<Stopping>,
) -> Sse<impl futures::Stream<Item = Result<Event, std::convert::Infallible>>> {
    let line_event = |line: &LogLine| Event::default().json_data(line).ok();
    let past = futures::stream::iter(
        following
            .lines
            .iter()
            .filter_map(line_event)
            .collect::<Vec<_>>(),
    );
    let new = futures::stream::unfold(
        (following.new, query, place),
        move |(mut new, query, place)| async move {
            loop {
                match new.recv().await {
                    Ok(line) if line.kept_by(&query) => {
                        let event = line_event(&line)?;
                        return Some((event, (new, query, place)));
                    }
                    Ok(_) => {}
                    Err(RecvError::Lagged(missed)) => {
                        let event = Event::default()
                            .event("lagged")
                            .data(format!("{{\"missed\":{missed}}}"));
                        return Some((event, (new, query, place)));
                    }
                    Err(RecvError::Closed) => return None,
                }
            }
        },
    );
    let end = async move {
        match stopping {
            Some(stopping) => {
                let _ = tokio::time::timeout(MAX_FOLLOW, stopping.wait()).await;
            }
            None => tokio::time::sleep(MAX_FOLLOW).await,
        }
    };
    let stream = past.chain(new).take_until(end).map(Ok);
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// The whole log of the latest build, as text.
pub async fn build_log<R: WorkloadResource>(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    Path((_, name)): Path<(String, String)>,
) -> Result<String, ApiError> {
    load::<R>(&state, &auth.namespace, &name).await?;
    let review = review_note(&state, &auth.namespace, &name).await;
    let build = state.logs.build_log(R::KIND, &auth.namespace, &name).await;
    match (review, build) {
        (Some(review), Some(build)) => Some(review + &build),
        (review, build) => review.or(build),
    }
    .ok_or_else(|| {
        ApiError::NotFound(format!(
            "{} {name:?} has not been built yet",
            R::KIND.noun()
        ))
    })
}

#[derive(serde::Deserialize)]
pub struct InvocationsQuery {
    /// How many of the newest matching calls; a non-negative integer.
    tail: Option<usize>,
    trigger: Option<Via>,
    status: Option<String>,
    since: Option<chrono::DateTime<chrono::Utc>>,
}

/// Recent calls through `/fn` and event triggers (newest first, filtered by `trigger`,
/// `status` and `since`) and their totals.
pub async fn invocations<R: WorkloadResource>(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    Path((_, name)): Path<(String, String)>,
    ApiQuery(query): ApiQuery<InvocationsQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let filter = Filter {
        trigger: query.trigger,
        status: query.status,
        since: query.since,
    };
    if let Some(problem) = filter.problem() {
        return Err(ApiError::BadRequest(problem));
    }
    load::<R>(&state, &auth.namespace, &name).await?;
    let log = state.proxy.invocations();
    let limit = query.tail.unwrap_or(100);
    Ok(Json(serde_json::json!({
        "stats": log.stats(&auth.namespace, &name),
        "invocations": log.recent(&auth.namespace, &name, &filter, limit),
    })))
}

/// One recent call, by its request id, with the lines it printed that are still kept.
#[derive(serde::Serialize)]
pub struct CallRecord {
    #[serde(flatten)]
    invocation: Invocation,
    logs: Vec<LogLine>,
}

/// The lines of one call shown with its record; a call printing more is read with
/// `logs?request_id=`.
const CALL_LOG_LINES: usize = 1000;

pub async fn invocation<R: WorkloadResource>(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    Path((_, name, request_id)): Path<(String, String, String)>,
) -> Result<Json<CallRecord>, ApiError> {
    load::<R>(&state, &auth.namespace, &name).await?;
    let logs = state.logs.lines(
        &auth.namespace,
        &name,
        &LogFilter {
            tail: CALL_LOG_LINES,
            request_id: Some(request_id.clone()),
            search: None,
        },
    );
    let log = state.proxy.invocations();
    log.by_request_id(&auth.namespace, &name, &request_id)
        .map(|invocation| Json(CallRecord { invocation, logs }))
        .ok_or_else(|| {
            ApiError::NotFound(format!(
                "no call {request_id:?} among the last {} calls of {} {name:?}",
                log.retention().max_count,
                R::KIND.noun()
            ))
        })
}
