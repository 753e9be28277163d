//! Watches and lists of the sless CRs that survive an object they cannot decode (one
//! applied under an older, looser CRD, say). A typed watch fails the whole list for
//! one such object and stalls every neighbour; here it is skipped, and its status says
//! why, while the others are reconciled as usual.

use std::fmt::Debug;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::ready_condition;
use super::statuses::Statuses;
use sless_core::model::now;

/// What the controllers need of a CR type here.
pub trait Decodable:
    Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static
{
}

impl<K> Decodable for K where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static
{
}

fn decode<K: Decodable>(object: &DynamicObject) -> Result<K, serde_json::Error> {
    serde_json::to_value(object).and_then(serde_json::from_value)
}

/// Every object of `K` in `namespace` that decodes; the others are logged.
pub(crate) async fn list<K: Decodable>(client: &Client, namespace: &str) -> kube::Result<Vec<K>> {
    let api = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::erase::<K>(&()),
    );
    let objects = api.list(&ListParams::default()).await?;
    Ok(objects
        .items
        .iter()
        .filter_map(|object| match decode::<K>(object) {
            Ok(typed) => Some(typed),
            Err(e) => {
                tracing::warn!(kind = K::kind(&()).as_ref(), name = %object.name_any(), error = %e, "skipping an unreadable object");
                None
            }
        })
        .collect())
}

/// A watch of every `K` for `Controller::for_stream`/`watches_stream`, with its store.
/// A controller's own watch (`statuses`) records each object's conditions there, and
/// gives an undecodable object a status saying why (once per message).
pub(crate) fn watch<K: Decodable>(
    client: Client,
    statuses: Option<Arc<Statuses>>,
) -> (
    Store<K>,
    impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
) {
    let resource = ApiResource::erase::<K>(&());
    let api = Api::<DynamicObject>::all_with(client.clone(), &resource);
    let (reader, writer) = reflector::store::<K>();
    let events = watcher(api, watcher::Config::default())
        .default_backoff()
        .filter_map(move |event| {
            let client = client.clone();
            let resource = resource.clone();
            if let (Some(statuses), Ok(event)) = (&statuses, &event) {
                remember(statuses, event);
            }
            let report = statuses.is_some();
            async move {
                let event = match event {
                    Err(e) => return Some(Err(e)),
                    Ok(watcher::Event::Init) => watcher::Event::Init,
                    Ok(watcher::Event::InitDone) => watcher::Event::InitDone,
                    Ok(watcher::Event::Apply(o)) => {
                        watcher::Event::Apply(decode_or_skip(&client, &resource, report, o).await?)
                    }
                    Ok(watcher::Event::InitApply(o)) => watcher::Event::InitApply(
                        decode_or_skip(&client, &resource, report, o).await?,
                    ),
                    // The store never held an object it could not decode.
                    Ok(watcher::Event::Delete(o)) => watcher::Event::Delete(decode(&o).ok()?),
                };
                Some(Ok(event))
            }
        });
    let objects = reflector::reflector(writer, events).applied_objects();
    (reader, objects)
}

/// Keeps what the event says of its objects' conditions.
fn remember(statuses: &Statuses, event: &watcher::Event<DynamicObject>) {
    match event {
        watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
            if let Some(uid) = o.metadata.uid.as_deref() {
                statuses.seen(uid, o.data.pointer("/status/conditions"));
            }
        }
        watcher::Event::Delete(o) => {
            if let Some(uid) = o.metadata.uid.as_deref() {
                statuses.gone(uid);
            }
        }
        watcher::Event::Init | watcher::Event::InitDone => {}
    }
}

/// The typed object, or `None` when it does not decode (logged, and reported in its
/// status with `report`).
async fn decode_or_skip<K: Decodable>(
    client: &Client,
    resource: &ApiResource,
    report: bool,
    object: DynamicObject,
) -> Option<K> {
    let error = match decode::<K>(&object) {
        Ok(typed) => return Some(typed),
        Err(e) => e,
    };
    let name = object.name_any();
    let namespace = object.namespace().unwrap_or_default();
    tracing::warn!(kind = %resource.kind, %namespace, %name, %error, "skipping an unreadable object");
    if report && let Err(e) = report_unreadable(client, resource, &object, &error).await {
        tracing::warn!(kind = %resource.kind, %namespace, %name, error = %e, "cannot report it");
    }
    None
}

/// The status of an object that cannot be decoded: `Failed` (or inactive, for a
/// trigger) with the decoding error, unless it already says so.
async fn report_unreadable(
    client: &Client,
    resource: &ApiResource,
    object: &DynamicObject,
    error: &serde_json::Error,
) -> kube::Result<()> {
    let message = format!(
        "{} {:?} cannot be read by the operator ({error}); fix it with kubectl apply",
        resource.kind,
        object.name_any()
    );
    let current = object.data.get("status").cloned().unwrap_or(Value::Null);
    if current["message"].as_str() == Some(message.as_str()) {
        return Ok(());
    }
    let mut status = if resource.kind == "Trigger" {
        json!({"active": false, "message": message})
    } else {
        json!({"phase": "Failed", "message": message})
    };
    let condition = ready_condition(
        &status,
        current.get("conditions"),
        object.metadata.generation,
        &now(),
    );
    status["conditions"] = json!([condition]);
    let api = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        &object.namespace().unwrap_or_default(),
        resource,
    );
    api.patch_status(
        &object.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await?;
    Ok(())
}
