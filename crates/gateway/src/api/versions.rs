//! The versions of Functions and Services: listing, a version's source, rollback. The
//! records live in object storage ([`sless_core::versions`]); which one is active is the
//! workload's `s3_key` in the store. [`kept_versions`] and [`activate`] are the calls a
//! page of the console makes through the API.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};

use super::code::list_source;
use super::extract::{ApiJson, Authorized};
use super::{ApiError, AppState, load};
use sless_api::keys::{is_version, object_keys, version_of};
use sless_api::{RollbackRequest, SourceFileResponse, VersionResponse, WorkloadResponse};
use sless_core::model::Phase;
use sless_core::store::{Object, WorkloadResource, modify, modify_status};
use sless_core::versions::{self, StoredVersion};

/// `GET .../{name}/versions`: newest first, `active` marking the workload's code.
pub async fn list<R: WorkloadResource>(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    Path((_, name)): Path<(String, String)>,
) -> Result<Json<Vec<VersionResponse>>, ApiError> {
    let object = load::<R>(&state, &auth.namespace, &name).await?;
    let kept = kept_versions(&state, &object).await?;
    let active = active_version(&object);
    Ok(Json(
        kept.iter()
            .map(|v| version_response(v, active.as_deref()))
            .collect(),
    ))
}

/// `GET .../{name}/versions/{version}/source`: the files of one kept version.
pub async fn source<R: WorkloadResource>(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    Path((_, name, version)): Path<(String, String, String)>,
) -> Result<Json<Vec<SourceFileResponse>>, ApiError> {
    let object = load::<R>(&state, &auth.namespace, &name).await?;
    let kept = kept_version(&state, &object, &version).await?;
    let key = object_keys(&auth.namespace, &name, &kept.version).context;
    Ok(Json(list_source(&state, &key).await?))
}

/// `POST .../{name}/rollback` `{"version"}`: the version becomes the workload's code
/// again; its old build serves when it is still there.
pub async fn rollback<R: WorkloadResource>(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    Path((_, name)): Path<(String, String)>,
    ApiJson(request): ApiJson<RollbackRequest>,
) -> Result<Json<WorkloadResponse>, ApiError> {
    let object = load::<R>(&state, &auth.namespace, &name).await?;
    let kept = kept_version(&state, &object, &request.version).await?;
    let spec = R::workload(&object.spec);
    if let Some(record) = &kept.record
        && (record.runtime != spec.runtime.to_string() || record.entrypoint != spec.entrypoint)
    {
        return Err(ApiError::Conflict(format!(
            "version: {} was built for runtime {} and entrypoint {:?}, the {} now has {} and \
             {:?}; set those back (PUT) before rolling back, or upload its code again",
            kept.version,
            record.runtime,
            record.entrypoint,
            R::KIND.noun(),
            spec.runtime,
            spec.entrypoint
        )));
    }
    let activated = activate::<R>(&state, &object, &kept.version).await?;
    Ok(Json(state.workload(&activated)))
}

/// The versions `object` keeps, newest first.
pub async fn kept_versions<R: WorkloadResource>(
    state: &AppState,
    object: &Object<R>,
) -> Result<Vec<StoredVersion>, ApiError> {
    Ok(versions::list(&state.objects, &object.meta.namespace, &object.meta.name).await?)
}

fn active_version<R: WorkloadResource>(object: &Object<R>) -> Option<String> {
    R::workload(&object.spec)
        .s3_key
        .as_deref()
        .map(|key| version_of(key).to_string())
}

pub fn version_response(version: &StoredVersion, active: Option<&str>) -> VersionResponse {
    let record = version.record.as_ref();
    VersionResponse {
        version: version.version.clone(),
        created_at: version.created_at(),
        sha256: record.map(|r| r.sha256.clone()),
        size: record.map(|r| r.size),
        uploaded_by: record.map(|r| r.uploaded_by.clone()),
        active: active == Some(version.version.as_str()),
    }
}

/// The kept version named `version`; a 404 lists the versions there are.
async fn kept_version<R: WorkloadResource>(
    state: &AppState,
    object: &Object<R>,
    version: &str,
) -> Result<StoredVersion, ApiError> {
    if !is_version(version) {
        return Err(ApiError::BadRequest(format!(
            "version: {version:?} is not a version (14 digits, e.g. 20260102030405, or with \
             -N); `sless versions {}` lists them",
            object.meta.name
        )));
    }
    let kept = kept_versions(state, object).await?;
    if let Some(found) = kept.iter().find(|v| v.version == version) {
        return Ok(found.clone());
    }
    let names: Vec<&str> = kept.iter().map(|v| v.version.as_str()).collect();
    Err(ApiError::NotFound(format!(
        "version: {} {:?} has no version {version} (pruned, or never uploaded); the versions \
         kept: {}",
        R::KIND.noun(),
        object.meta.name,
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    )))
}

/// Makes a stored version the workload's code, as an upload does, without storing or
/// building anything: the runner builds it only if its build is gone. Unchanged when
/// it is already active.
pub async fn activate<R: WorkloadResource>(
    state: &AppState,
    object: &Object<R>,
    version: &str,
) -> Result<Object<R>, ApiError> {
    let (ns, name) = (&object.meta.namespace, &object.meta.name);
    let key = object_keys(ns, name, version).context;
    if R::workload(&object.spec).s3_key.as_deref() == Some(key.as_str()) {
        return Ok(object.clone());
    }
    tracing::info!(%ns, %name, %version, "switching to a kept version");
    modify::<R, _>(&*state.store, ns, name, |o| {
        R::workload_mut(&mut o.spec).s3_key = Some(key.clone());
    })
    .await?;
    // After the code: a runner that switched before this write is poked by it and
    // writes Ready again, so Ready read after the answer means the version serves.
    Ok(modify_status::<R, _>(&*state.store, ns, name, |o| {
        o.status.phase = Phase::Building;
        o.status.message = Some(format!("switching to version {version}"));
    })
    .await?)
}
