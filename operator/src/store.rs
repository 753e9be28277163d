//! The store seam on CustomResources: each resource is a namespaced CR in the user's
//! namespace; status goes through the status subresource; `resourceVersion` is the
//! store's optimistic-concurrency version, so a stale write is a 409 from the API
//! server and a [`StoreError::Conflict`] here.

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use super::Readiness;
use sless_core::model::{Function, FunctionJob, Kind, Service, Trigger};
use sless_core::store::{Change, Meta, RawObject, Result, Store, StoreError};

/// How long `create` waits for an object of the same name that is being deleted
/// (its finalizer is cleaning up) before reporting that the name is taken.
const TERMINATING_WAIT: Duration = Duration::from_secs(15);
const TERMINATING_POLL: Duration = Duration::from_millis(250);

pub struct KubeStore {
    client: Client,
    changes: broadcast::Sender<Change>,
    terminating_wait: Duration,
}

fn watcher_part(kind: Kind) -> String {
    format!("{kind} (api)")
}

pub fn api_resource(kind: Kind) -> ApiResource {
    match kind {
        Kind::Function => ApiResource::erase::<Function>(&()),
        Kind::Service => ApiResource::erase::<Service>(&()),
        Kind::Trigger => ApiResource::erase::<Trigger>(&()),
        Kind::FunctionJob => ApiResource::erase::<FunctionJob>(&()),
    }
}

/// The API server's answer to a failed call, if it answered.
pub(crate) fn api_status(e: &kube::Error) -> Option<&kube::core::Status> {
    match e {
        kube::Error::Api(status) => Some(status),
        _ => None,
    }
}

pub(crate) fn is_not_found(e: &kube::Error) -> bool {
    api_status(e).is_some_and(|s| s.code == 404)
}

pub(crate) fn is_already_exists(e: &kube::Error) -> bool {
    api_status(e).is_some_and(|s| s.reason == "AlreadyExists")
}

/// A 409 that is a stale resourceVersion, not a taken name.
pub(crate) fn is_conflict(e: &kube::Error) -> bool {
    api_status(e).is_some_and(|s| s.code == 409 && s.reason != "AlreadyExists")
}

fn backend(e: kube::Error) -> StoreError {
    StoreError::backend("kubernetes", e)
}

fn rfc3339_seconds(time: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> String {
    chrono::DateTime::from_timestamp(time.0.as_second(), 0)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn terminating(object: &DynamicObject) -> bool {
    object.metadata.deletion_timestamp.is_some()
}

fn to_raw(kind: Kind, object: DynamicObject) -> Result<RawObject> {
    let meta = object.metadata;
    let name = meta.name.unwrap_or_default();
    let missing = |field: &str| {
        StoreError::corrupt(
            kind,
            &name,
            "metadata",
            format!("the API server returned no {field}"),
        )
    };
    let namespace = meta.namespace.clone().ok_or_else(|| missing("namespace"))?;
    let resource_version = meta
        .resource_version
        .clone()
        .ok_or_else(|| missing("resourceVersion"))?;
    let mut data = object.data;
    let spec = data.get_mut("spec").map(Value::take).unwrap_or(Value::Null);
    let status = data
        .get_mut("status")
        .map(Value::take)
        .unwrap_or(Value::Null);
    Ok(RawObject {
        kind,
        meta: Meta {
            namespace,
            uid: meta.uid.unwrap_or_default(),
            resource_version,
            created_at: meta
                .creation_timestamp
                .as_ref()
                .map(rfc3339_seconds)
                .unwrap_or_default(),
            annotations: meta.annotations.unwrap_or_default(),
            name,
        },
        spec,
        status,
    })
}

/// A JSON patch; `replace /metadata/resourceVersion` makes the API server check it
/// against the stored version (409 when stale) before applying the rest.
fn versioned_patch(resource_version: &str, ops: Vec<Value>) -> Result<Patch<()>> {
    let mut all = vec![json!({
        "op": "replace",
        "path": "/metadata/resourceVersion",
        "value": resource_version,
    })];
    all.extend(ops);
    let patch: json_patch::Patch = serde_json::from_value(Value::Array(all))
        .map_err(|e| StoreError::backend("building a patch", e))?;
    Ok(Patch::Json(patch))
}

impl KubeStore {
    pub fn new(client: Client) -> Self {
        let (changes, _) = broadcast::channel(1024);
        Self {
            client,
            changes,
            terminating_wait: TERMINATING_WAIT,
        }
    }

    pub fn with_terminating_wait(mut self, wait: Duration) -> Self {
        self.terminating_wait = wait;
        self
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    fn api(&self, kind: Kind, namespace: Option<&str>) -> Api<DynamicObject> {
        let resource = api_resource(kind);
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        }
    }

    fn announce(&self, kind: Kind, namespace: &str, name: &str) {
        // No subscriber is fine: subscribers list everything when they start.
        let _ = self.changes.send(Change {
            kind,
            namespace: namespace.to_string(),
            name: name.to_string(),
        });
    }

    /// Feeds changes made by anyone (kubectl, the controllers, another replica) into
    /// [`Store::subscribe`]. Writes through this store are announced without it.
    /// Each watcher marks `readiness` (part `"<Kind> (api)"`) after its first list.
    pub fn spawn_watchers(&self, readiness: &Readiness) -> Vec<JoinHandle<()>> {
        readiness.expect(Kind::ALL.map(watcher_part));
        Kind::ALL
            .into_iter()
            .map(|kind| {
                let api = self.api(kind, None);
                let changes = self.changes.clone();
                let readiness = readiness.clone();
                tokio::spawn(async move {
                    let mut events = watcher(api, watcher::Config::default())
                        .default_backoff()
                        .boxed();
                    while let Some(event) = events.next().await {
                        let object = match event {
                            Ok(watcher::Event::Apply(o))
                            | Ok(watcher::Event::InitApply(o))
                            | Ok(watcher::Event::Delete(o)) => o,
                            Ok(watcher::Event::InitDone) => {
                                readiness.ready(&watcher_part(kind));
                                continue;
                            }
                            Ok(watcher::Event::Init) => continue,
                            Err(e) => {
                                tracing::warn!(%kind, error = %e, "watch failed; retrying");
                                continue;
                            }
                        };
                        let (Some(namespace), Some(name)) =
                            (object.metadata.namespace, object.metadata.name)
                        else {
                            continue;
                        };
                        let _ = changes.send(Change {
                            kind,
                            namespace,
                            name,
                        });
                    }
                })
            })
            .collect()
    }

    fn conflict(object: &RawObject) -> StoreError {
        StoreError::Conflict {
            kind: object.kind,
            name: object.meta.name.clone(),
            expected: object.meta.resource_version.clone(),
        }
    }

    fn not_found(object: &RawObject) -> StoreError {
        StoreError::NotFound {
            kind: object.kind,
            namespace: object.meta.namespace.clone(),
            name: object.meta.name.clone(),
        }
    }

    fn write_error(object: &RawObject, e: kube::Error) -> StoreError {
        if is_conflict(&e) {
            Self::conflict(object)
        } else if is_not_found(&e) {
            Self::not_found(object)
        } else {
            backend(e)
        }
    }

    async fn patch_status(&self, object: &RawObject) -> Result<RawObject> {
        let api = self.api(object.kind, Some(&object.meta.namespace));
        let patch = versioned_patch(
            &object.meta.resource_version,
            vec![json!({"op": "add", "path": "/status", "value": object.status})],
        )?;
        let written = api
            .patch_status(&object.meta.name, &PatchParams::default(), &patch)
            .await
            .map_err(|e| Self::write_error(object, e))?;
        to_raw(object.kind, written)
    }
}

#[async_trait::async_trait]
impl Store for KubeStore {
    async fn ensure_namespace(&self, namespace: &str) -> Result<bool> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let object = super::manifests::namespace(namespace, None, None);
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => Ok(true),
            Err(e) if is_already_exists(&e) => Ok(false),
            Err(e) => Err(backend(e)),
        }
    }

    async fn list(&self, kind: Kind, namespace: Option<&str>) -> Result<Vec<RawObject>> {
        let list = self
            .api(kind, namespace)
            .list(&ListParams::default())
            .await
            .map_err(backend)?;
        let mut objects = list
            .items
            .into_iter()
            .filter(|o| !terminating(o))
            .map(|o| to_raw(kind, o))
            .collect::<Result<Vec<_>>>()?;
        objects.sort_by(|a, b| {
            (&a.meta.namespace, &a.meta.name).cmp(&(&b.meta.namespace, &b.meta.name))
        });
        Ok(objects)
    }

    /// An object whose deletion is under way is gone for the API (as in the embedded
    /// store); only the controllers still see it until its finalizer is done.
    async fn get(&self, kind: Kind, namespace: &str, name: &str) -> Result<Option<RawObject>> {
        match self.api(kind, Some(namespace)).get_opt(name).await {
            Ok(Some(object)) if !terminating(&object) => Ok(Some(to_raw(kind, object)?)),
            Ok(_) => Ok(None),
            Err(e) => Err(backend(e)),
        }
    }

    async fn create(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        spec: Value,
        status: Value,
    ) -> Result<RawObject> {
        let api = self.api(kind, Some(namespace));
        let mut data = json!({ "spec": spec });
        if !status.is_null() {
            // Ignored by an API server with the status subresource; written below.
            data["status"] = status.clone();
        }
        let object = DynamicObject::new(name, &api_resource(kind))
            .within(namespace)
            .data(data);
        let started = Instant::now();
        let mut ensured = false;
        let created = loop {
            match api.create(&PostParams::default(), &object).await {
                Ok(created) => break created,
                Err(e) if is_already_exists(&e) => {
                    let existing = api.get_opt(name).await.map_err(backend)?;
                    let waiting = existing.as_ref().is_none_or(terminating);
                    if !waiting || started.elapsed() >= self.terminating_wait {
                        return Err(StoreError::AlreadyExists {
                            kind,
                            namespace: namespace.to_string(),
                            name: name.to_string(),
                        });
                    }
                    tokio::time::sleep(TERMINATING_POLL).await;
                }
                // The user's namespace does not exist yet.
                Err(e) if is_not_found(&e) && !ensured => {
                    self.ensure_namespace(namespace).await?;
                    ensured = true;
                }
                Err(e) => return Err(backend(e)),
            }
        };
        let mut raw = to_raw(kind, created)?;
        if !status.is_null() && raw.status != status {
            raw.status = status;
            raw = match self.patch_status(&raw).await {
                Ok(written) => written,
                // The controller saw the new object first and wrote its own status (or
                // finalizer): that is newer than the initial one, which is dropped.
                Err(StoreError::Conflict { .. }) => {
                    let latest = api.get(name).await.map_err(backend)?;
                    to_raw(kind, latest)?
                }
                Err(e) => return Err(e),
            };
        }
        self.announce(kind, namespace, name);
        Ok(raw)
    }

    async fn update(&self, object: &RawObject) -> Result<RawObject> {
        if object.meta.resource_version.is_empty() {
            return Err(Self::conflict(object));
        }
        let api = self.api(object.kind, Some(&object.meta.namespace));
        let patch = versioned_patch(
            &object.meta.resource_version,
            vec![
                json!({"op": "add", "path": "/spec", "value": object.spec}),
                json!({"op": "add", "path": "/metadata/annotations", "value": object.meta.annotations}),
            ],
        )?;
        let written = api
            .patch(&object.meta.name, &PatchParams::default(), &patch)
            .await
            .map_err(|e| Self::write_error(object, e))?;
        let raw = to_raw(object.kind, written)?;
        self.announce(object.kind, &object.meta.namespace, &object.meta.name);
        Ok(raw)
    }

    async fn update_status(&self, object: &RawObject) -> Result<RawObject> {
        if object.meta.resource_version.is_empty() {
            return Err(Self::conflict(object));
        }
        let raw = self.patch_status(object).await?;
        self.announce(object.kind, &object.meta.namespace, &object.meta.name);
        Ok(raw)
    }

    async fn delete(&self, kind: Kind, namespace: &str, name: &str) -> Result<bool> {
        let api = self.api(kind, Some(namespace));
        match api.get_opt(name).await.map_err(backend)? {
            None => return Ok(false),
            Some(object) if terminating(&object) => return Ok(false),
            Some(_) => {}
        }
        match api.delete(name, &DeleteParams::background()).await {
            Ok(_) => {
                self.announce(kind, namespace, name);
                Ok(true)
            }
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(backend(e)),
        }
    }

    fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.changes.subscribe()
    }
}
