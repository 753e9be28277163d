//! Functions and Services: the same handlers, generic over the kind.

use std::sync::Arc;

use axum::Json;
use axum::extract::multipart::MultipartRejection;
use axum::extract::{Multipart, Path, State};
use axum::http::{HeaderMap, StatusCode};

use super::code::{delete_code, list_source, read_code_field, review_note, store_code, stored_zip};
use super::convert::{workload_response, workload_spec};
use super::extract::{ApiJson, ApiQuery, Authorized};
use super::not_found;
use super::{ApiError, AppState, load};
use crate::proxy::{Filter, Invocation, RECENT_INVOCATIONS, Via};
use sless_api::{SourceFileResponse, WorkloadRequest, WorkloadResponse};
use sless_core::model::{Phase, WorkloadSpec, validate_name};
use sless_core::store::{Object, StoreError, StoreExt, WorkloadResource, modify, modify_status};
use sless_core::workload::{no_code, refused_upload};

pub async fn list<R: WorkloadResource>(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
) -> Result<Json<Vec<WorkloadResponse>>, ApiError> {
    let objects = state.store.list_typed::<R>(Some(&auth.namespace)).await?;
    Ok(Json(objects.iter().map(workload_response).collect()))
}

pub async fn get<R: WorkloadResource>(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    Path((_, name)): Path<(String, String)>,
) -> Result<Json<WorkloadResponse>, ApiError> {
    let object = load::<R>(&state, &auth.namespace, &name).await?;
    Ok(Json(workload_response(&object)))
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
    Ok((StatusCode::CREATED, Json(workload_response(&created))))
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
    let ns = &auth.namespace;
    let object = load::<R>(&state, ns, &name).await?;
    let old = R::workload(&object.spec).clone();
    // The build context bakes in runtime and entrypoint: rebuild it from the stored zip.
    let rebuilt = match &old.s3_key {
        Some(context_key)
            if old.runtime != new_spec.runtime || old.entrypoint != new_spec.entrypoint =>
        {
            let zip = stored_zip(&state, context_key).await?;
            Some(
                store_code(
                    &state,
                    ns,
                    &name,
                    new_spec.runtime,
                    &new_spec.entrypoint,
                    zip,
                )
                .await?,
            )
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
        mark_building::<R>(&state, ns, &name).await?
    } else {
        updated
    };
    Ok(Json(workload_response(&updated)))
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
    let key = match store_code(
        &state,
        ns,
        &name,
        workload.runtime,
        &workload.entrypoint,
        zip,
    )
    .await
    {
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
    Ok(Json(workload_response(&updated)))
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
pub struct TailQuery {
    /// How many of the newest entries; a non-negative integer.
    tail: Option<usize>,
}

/// Captured stdout/stderr of the workload's instances, oldest first.
pub async fn logs<R: WorkloadResource>(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    Path((_, name)): Path<(String, String)>,
    ApiQuery(query): ApiQuery<TailQuery>,
) -> Result<Json<Vec<sless_core::logs::LogLine>>, ApiError> {
    load::<R>(&state, &auth.namespace, &name).await?;
    let lines = query.tail.unwrap_or(100).min(10_000);
    Ok(Json(state.logs.tail(&auth.namespace, &name, lines)))
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

/// One recent call, by its request id.
pub async fn invocation<R: WorkloadResource>(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    Path((_, name, request_id)): Path<(String, String, String)>,
) -> Result<Json<Invocation>, ApiError> {
    load::<R>(&state, &auth.namespace, &name).await?;
    state
        .proxy
        .invocations()
        .by_request_id(&auth.namespace, &name, &request_id)
        .map(Json)
        .ok_or_else(|| {
            ApiError::NotFound(format!(
                "no call {request_id:?} among the last {RECENT_INVOCATIONS} calls of {} {name:?}",
                R::KIND.noun()
            ))
        })
}
