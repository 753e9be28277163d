use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use super::convert::{trigger_response, trigger_spec};
use super::extract::{ApiJson, ApiQuery, Authorized};
use super::{ApiError, AppState, load, not_found};
use sless_api::page::{Listed, PageQuery};
use sless_api::{TriggerPatch, TriggerRequest, TriggerResponse};
use sless_core::model::{Function, Kind, Phase, Trigger, TriggerType, function_url, validate_name};
use sless_core::store::{StoreExt, modify, modify_status};

pub async fn list(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    ApiQuery(page): ApiQuery<PageQuery>,
) -> Result<Json<Listed<TriggerResponse>>, ApiError> {
    let cursor = page.cursor()?;
    let objects = state
        .store
        .list_typed::<Trigger>(Some(&auth.namespace))
        .await?;
    let items = super::by_name(objects.iter().map(trigger_response), |t| t.name.as_str());
    Ok(Json(Listed::of(items, cursor.as_ref(), |t| {
        t.name.as_str()
    })))
}

pub async fn get(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    Path((_, name)): Path<(String, String)>,
) -> Result<Json<TriggerResponse>, ApiError> {
    Ok(Json(trigger_response(
        &load::<Trigger>(&state, &auth.namespace, &name).await?,
    )))
}

pub async fn create(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    ApiJson(request): ApiJson<TriggerRequest>,
) -> Result<(StatusCode, Json<TriggerResponse>), ApiError> {
    let name = request
        .name
        .clone()
        .ok_or_else(|| ApiError::BadRequest("name: required".into()))?;
    validate_name("name", &name)?;
    let spec = trigger_spec(&request)?;
    let ns = &auth.namespace;
    let mut created = state
        .store
        .create_typed::<Trigger>(ns, &name, &spec)
        .await?;
    // The runner fills the URL once it has seen the trigger (for a stopped function,
    // after starting it); the URL of a Ready function is known now.
    if spec.trigger_type == TriggerType::Http
        && let Some(base) = &state.config.external_url
        && let Some(function) = state
            .store
            .get_typed::<Function>(ns, &spec.function_ref)
            .await?
        && function.status.phase == Phase::Ready
    {
        let url = function_url(base, ns, &spec.function_ref);
        created = modify_status::<Trigger, _>(&*state.store, ns, &name, |t| {
            t.status.url.get_or_insert_with(|| url.clone());
        })
        .await?;
    }
    Ok((StatusCode::CREATED, Json(trigger_response(&created))))
}

pub async fn replace(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    Path((_, name)): Path<(String, String)>,
    ApiJson(request): ApiJson<TriggerRequest>,
) -> Result<Json<TriggerResponse>, ApiError> {
    if let Some(body_name) = &request.name
        && body_name != &name
    {
        return Err(ApiError::BadRequest(format!(
            "name: {body_name:?} does not match the URL ({name:?}); resources cannot be renamed"
        )));
    }
    let spec = trigger_spec(&request)?;
    let updated = match &request.resource_version {
        Some(version) => {
            let mut object = load::<Trigger>(&state, &auth.namespace, &name).await?;
            object.meta.resource_version = version.clone();
            object.spec = spec;
            state.store.update_typed(&object).await?
        }
        // No version: last writer wins, never a conflict.
        None => {
            modify::<Trigger, _>(&*state.store, &auth.namespace, &name, |o| {
                o.spec = spec.clone();
            })
            .await?
        }
    };
    Ok(Json(trigger_response(&updated)))
}

/// Start or stop in place: the trigger is not re-created.
pub async fn patch(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    Path((_, name)): Path<(String, String)>,
    ApiJson(patch): ApiJson<TriggerPatch>,
) -> Result<Json<TriggerResponse>, ApiError> {
    let updated = modify::<Trigger, _>(&*state.store, &auth.namespace, &name, |o| {
        o.spec.enabled = patch.enabled;
    })
    .await?;
    Ok(Json(trigger_response(&updated)))
}

pub async fn delete(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    Path((_, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    if state
        .store
        .delete(Kind::Trigger, &auth.namespace, &name)
        .await?
    {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(not_found(Kind::Trigger, &auth.namespace, &name))
    }
}
