use std::sync::Arc;

use axum::Json;
use axum::extract::multipart::MultipartRejection;
use axum::extract::{Multipart, Path, State};
use axum::http::{HeaderMap, StatusCode};

use super::code::{Upload, delete_code, prune_versions, read_code_field, store_code, stored_zip};
use super::convert::{job_response, job_run_response, job_spec};
use super::extract::{ApiJson, ApiQuery, Authorized};
use super::{ApiError, AppState, load, not_found};
use sless_api::page::{Listed, PageQuery};
use sless_api::{JobPatch, JobRequest, JobResponse, JobRunResponse};
use sless_core::model::{
    FunctionJob, FunctionJobSpec, Kind, ValidationError, validate_event_json, validate_name,
};
use sless_core::store::{StoreExt, modify};
use sless_core::upload::job_key_name;

pub async fn list(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    ApiQuery(page): ApiQuery<PageQuery>,
) -> Result<Json<Listed<JobResponse>>, ApiError> {
    let cursor = page.cursor()?;
    let objects = state
        .store
        .list_typed::<FunctionJob>(Some(&auth.namespace))
        .await?;
    let items = super::by_name(objects.iter().map(job_response), |j| j.name.as_str());
    Ok(Json(Listed::of(items, cursor.as_ref(), |j| {
        j.name.as_str()
    })))
}

pub async fn get(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    Path((_, name)): Path<(String, String)>,
) -> Result<Json<JobResponse>, ApiError> {
    let object = load::<FunctionJob>(&state, &auth.namespace, &name).await?;
    Ok(Json(job_response(&object)))
}

#[derive(serde::Deserialize)]
pub struct RunsQuery {
    /// How many of the newest runs.
    tail: Option<usize>,
}

/// The runs the job's history keeps, newest first, without their log tails.
pub async fn runs(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    Path((_, name)): Path<(String, String)>,
    ApiQuery(query): ApiQuery<RunsQuery>,
) -> Result<Json<Vec<JobRunResponse>>, ApiError> {
    let object = load::<FunctionJob>(&state, &auth.namespace, &name).await?;
    let runs = object
        .status
        .runs
        .iter()
        .take(query.tail.unwrap_or(usize::MAX));
    Ok(Json(runs.map(|r| job_run_response(r, false)).collect()))
}

/// One run with its log tail.
pub async fn run(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    Path((_, name, run_id)): Path<(String, String, String)>,
) -> Result<Json<JobRunResponse>, ApiError> {
    let object = load::<FunctionJob>(&state, &auth.namespace, &name).await?;
    run_id
        .parse()
        .ok()
        .and_then(|id| object.status.run(id))
        .map(|r| Json(job_run_response(r, true)))
        .ok_or_else(|| {
            ApiError::NotFound(format!(
                "job {name:?} has no run {run_id:?}: its history keeps the last {} runs \
                 (GET .../jobs/{name}/runs lists them)",
                object.status.runs.len()
            ))
        })
}

pub async fn create(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    ApiJson(request): ApiJson<JobRequest>,
) -> Result<(StatusCode, Json<JobResponse>), ApiError> {
    let name = request
        .name
        .clone()
        .ok_or_else(|| ApiError::BadRequest("name: required".into()))?;
    validate_name("name", &name)?;
    let spec = job_spec(&request)?;
    state.config.check_egress(request.egress.as_ref())?;
    let created = state
        .store
        .create_typed::<FunctionJob>(&auth.namespace, &name, &spec)
        .await?;
    Ok((StatusCode::CREATED, Json(job_response(&created))))
}

/// Full replacement; raising `run_id` runs the job again.
pub async fn replace(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    Path((_, name)): Path<(String, String)>,
    ApiJson(request): ApiJson<JobRequest>,
) -> Result<Json<JobResponse>, ApiError> {
    if let Some(body_name) = &request.name
        && body_name != &name
    {
        return Err(ApiError::BadRequest(format!(
            "name: {body_name:?} does not match the URL ({name:?}); resources cannot be renamed"
        )));
    }
    let ns = &auth.namespace;
    let new_spec = job_spec(&request)?;
    let object = load::<FunctionJob>(&state, ns, &name).await?;
    let old = &object.spec;
    // A self-contained job's context bakes in the runtime: rebuild it from the stored zip.
    let rebuilt = match (&old.s3_key, new_spec.runtime, &new_spec.entrypoint) {
        (Some(key), Some(runtime), Some(entrypoint))
            if new_spec.function_ref.is_none()
                && (old.runtime != new_spec.runtime
                    || old.entrypoint.as_ref() != Some(entrypoint)) =>
        {
            let zip = stored_zip(&state, key).await?;
            let upload = Upload {
                namespace: ns,
                key_name: &job_key_name(&name),
                runtime,
                entrypoint,
                uploaded_by: &auth.subject,
            };
            Some(store_code(&state, &upload, zip).await?)
        }
        _ => None,
    };
    let old_key = old.s3_key.clone();
    let apply = |spec: &mut FunctionJobSpec| {
        let current = std::mem::replace(spec, new_spec.clone());
        // Own code stays only for a self-contained job; an upload that landed meanwhile
        // wins over the rebuilt older code.
        spec.s3_key = match &rebuilt {
            _ if spec.function_ref.is_some() => None,
            Some(key) if current.s3_key == old_key => Some(key.clone()),
            _ => current.s3_key,
        };
    };
    let updated = match &request.resource_version {
        Some(version) => {
            let mut object = object;
            object.meta.resource_version = version.clone();
            apply(&mut object.spec);
            state.store.update_typed(&object).await?
        }
        // No version: last writer wins, never a conflict.
        None => modify::<FunctionJob, _>(&*state.store, ns, &name, |o| apply(&mut o.spec)).await?,
    };
    Ok(Json(job_response(&updated)))
}

pub async fn patch(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    Path((_, name)): Path<(String, String)>,
    ApiJson(patch): ApiJson<JobPatch>,
) -> Result<Json<JobResponse>, ApiError> {
    if let Some(run_id) = patch.run_id
        && run_id < 0
    {
        return Err(ValidationError::new("run_id", "must be 0 or a positive run number").into());
    }
    if let Some(event) = &patch.event_json {
        validate_event_json("event_json", event)?;
    }
    let updated = modify::<FunctionJob, _>(&*state.store, &auth.namespace, &name, |o| {
        if let Some(run_id) = patch.run_id {
            o.spec.run_id = run_id;
        }
        if let Some(event) = &patch.event_json {
            o.spec.event_json = event.clone();
        }
    })
    .await?;
    Ok(Json(job_response(&updated)))
}

pub async fn delete(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    Path((_, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    if !state
        .store
        .delete(Kind::FunctionJob, &auth.namespace, &name)
        .await?
    {
        return Err(not_found(Kind::FunctionJob, &auth.namespace, &name));
    }
    delete_code(&state, &auth.namespace, &job_key_name(&name)).await;
    Ok(StatusCode::NO_CONTENT)
}

/// Code for a self-contained job (one with its own runtime, no `function_ref`).
pub async fn upload(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    Path((_, name)): Path<(String, String)>,
    headers: HeaderMap,
    multipart: Result<Multipart, MultipartRejection>,
) -> Result<Json<JobResponse>, ApiError> {
    let ns = &auth.namespace;
    let object = load::<FunctionJob>(&state, ns, &name).await?;
    let (Some(runtime), None) = (object.spec.runtime, &object.spec.function_ref) else {
        return Err(ApiError::BadRequest(format!(
            "job {name:?} runs function {:?}; only a self-contained job (with runtime, \
             without function_ref) takes its own code",
            object.spec.function_ref.as_deref().unwrap_or_default()
        )));
    };
    let entrypoint = object.spec.entrypoint_or_default();
    let zip = read_code_field(&state, ns, &headers, multipart).await?;
    let key_name = job_key_name(&name);
    let upload = Upload {
        namespace: ns,
        key_name: &key_name,
        runtime,
        entrypoint: &entrypoint,
        uploaded_by: &auth.subject,
    };
    let key = store_code(&state, &upload, zip).await?;
    let updated = modify::<FunctionJob, _>(&*state.store, ns, &name, |o| {
        o.spec.s3_key = Some(key.clone());
    })
    .await?;
    prune_versions(&state, ns, &key_name, Some(&key)).await;
    Ok(Json(job_response(&updated)))
}
