//! The watch caches reconciles read instead of the API server, so a steady-state pass
//! over 1,000 workloads asks it nothing: children, pods, triggers, the other kind of a
//! shared name, the registry secrets. Each child cache is also the stream that wakes
//! its controller: a reconcile never reads state older than the change that woke it.

use std::collections::BTreeMap;
use std::collections::hash_map::DefaultHasher;
use std::fmt::Debug;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::{Pod, Secret, Service as KubeService};
use k8s_openapi::api::networking::v1::{Ingress, NetworkPolicy};
use kube::api::ObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use sless_core::model::{Function, Kind, Service, Trigger};

use super::statuses::Statuses;
use super::{Context, Error, Result, apply, managed};

/// What a workload controller (functions or services) reads of its children.
#[derive(Clone)]
pub(crate) struct Children {
    pub deployments: Store<Deployment>,
    pub services: Store<KubeService>,
    pub policies: Store<NetworkPolicy>,
    pub pods: Store<Pod>,
}

/// What the trigger controller reads of its children.
#[derive(Clone)]
pub(crate) struct TriggerChildren {
    pub cron_jobs: Store<CronJob>,
    pub ingresses: Store<Ingress>,
}

/// Every cache of one run of the controllers.
pub(crate) struct Caches {
    /// The function controller's trigger watch: a function's demand.
    pub triggers: Store<Trigger>,
    /// The trigger controller's function watch: the function a trigger calls.
    pub functions: Store<Function>,
    /// The service controller's own store: a name a service already took.
    pub services: Store<Service>,
    pub function_children: Children,
    pub service_children: Children,
    pub trigger_children: TriggerChildren,
    /// The operator namespace's Secrets: the registry credentials copied to tenants.
    pub secrets: Store<Secret>,
    /// The statuses the controllers' own watches delivered and this run wrote.
    pub statuses: Arc<Statuses>,
}

impl Caches {
    /// The children the controller of `kind` watches, for functions and services.
    pub fn of(&self, kind: Kind) -> Option<&Children> {
        match kind {
            Kind::Function => Some(&self.function_children),
            Kind::Service => Some(&self.service_children),
            _ => None,
        }
    }

    /// The metadata of the function or service `namespace/name` (other kinds are
    /// not cached: `None`).
    pub async fn workload_meta(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
    ) -> Result<Option<ObjectMeta>> {
        Ok(match kind {
            Kind::Function => cached(&self.functions, "function", namespace, name)
                .await?
                .map(|f| f.metadata.clone()),
            Kind::Service => cached(&self.services, "service", namespace, name)
                .await?
                .map(|s| s.metadata.clone()),
            _ => None,
        })
    }
}

/// A watch of every managed `K` with its store, for `Controller::watches_stream`:
/// deleted objects are passed on too, so a child deleted by hand is restored.
pub(crate) fn children<K>(
    client: &Client,
) -> (
    Store<K>,
    impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store::<K>();
    let events = watcher(Api::<K>::all(client.clone()), managed()).default_backoff();
    (
        reader,
        reflector::reflector(writer, events).touched_objects(),
    )
}

/// A watch of the operator namespace's Secrets with its store; the stream yields once
/// per change of one of `names`, after the store has it.
pub(crate) fn secrets(
    client: &Client,
    namespace: &str,
    names: Vec<String>,
) -> (Store<Secret>, impl Stream<Item = ()> + Send + 'static) {
    let (reader, writer) = reflector::store::<Secret>();
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let changes = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default()).default_backoff(),
    )
    .touched_objects()
    .filter_map(move |r| {
        let ours = r.is_ok_and(|secret| names.iter().any(|n| *n == secret.name_any()));
        async move { ours.then_some(()) }
    });
    (reader, changes)
}

/// The cached `name` in `namespace`, once the cache has listed.
pub(crate) async fn cached<K>(
    store: &Store<K>,
    what: &'static str,
    namespace: &str,
    name: &str,
) -> Result<Option<Arc<K>>>
where
    K: Resource<DynamicType = ()> + Clone,
{
    listed(store, what).await?;
    Ok(store.get(&ObjectRef::new(name).within(namespace)))
}

/// Waits for the cache's first list: before it the cache is empty, which would read as
/// absent.
async fn listed<K>(store: &Store<K>, what: &'static str) -> Result<()>
where
    K: Resource<DynamicType = ()> + Clone,
{
    store
        .wait_until_ready()
        .await
        .map_err(|_| Error::WatchStopped(what))
}

/// The cached objects of `namespace` carrying every one of `labels`.
pub(crate) async fn labelled<K>(
    store: &Store<K>,
    what: &'static str,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> Result<Vec<Arc<K>>>
where
    K: Resource<DynamicType = ()> + Clone,
{
    listed(store, what).await?;
    Ok(store
        .state()
        .into_iter()
        .filter(|o| o.meta().namespace.as_deref() == Some(namespace))
        .filter(|o| {
            let theirs = o.labels();
            labels.iter().all(|(k, v)| theirs.get(k) == Some(v))
        })
        .collect())
}

/// What changes when anyone changes `object`'s spec or metadata: its generation with
/// its labels and annotations where it has one (a status written by its own controller
/// leaves it alone), else its resourceVersion.
fn version_of<K: Resource>(object: &K) -> String {
    let meta = object.meta();
    match meta.generation {
        Some(generation) => {
            let mut hasher = DefaultHasher::new();
            (&meta.labels, &meta.annotations).hash(&mut hasher);
            format!("{generation}/{}", hasher.finish())
        }
        None => meta.resource_version.clone().unwrap_or_default(),
    }
}

impl Context {
    /// The caches of the running controllers; `None` outside them (a reconcile called
    /// directly), where the API server is asked instead.
    pub(crate) fn caches(&self) -> Option<Arc<Caches>> {
        self.caches
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Server-side applies `object` unless the child in `cache` is the object the last
    /// apply of the same manifest returned (its [`version_of`]): nobody changed it
    /// since, so the apply would change nothing. Either way, the child as it is now.
    pub(crate) async fn apply_unless_current<K>(
        &self,
        api: &Api<K>,
        cache: Option<&Store<K>>,
        object: &K,
    ) -> Result<Arc<K>>
    where
        K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
    {
        let namespace = object
            .meta()
            .namespace
            .clone()
            .ok_or(Error::MissingObjectKey("metadata.namespace"))?;
        let name = object
            .meta()
            .name
            .clone()
            .ok_or(Error::MissingObjectKey("metadata.name"))?;
        let Some(cache) = cache else {
            return Ok(Arc::new(apply(api, object).await?));
        };
        let key = format!("{}/{namespace}/{name}", K::kind(&()));
        let mut hasher = DefaultHasher::new();
        serde_json::to_string(object)?.hash(&mut hasher);
        let manifest = hasher.finish();
        let current = cached(cache, "child", &namespace, &name).await?;
        let unchanged = current.as_ref().is_some_and(|child| {
            self.applied
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&key)
                .is_some_and(|(hash, version)| {
                    *hash == manifest && version_of(&**child) == *version
                })
        });
        if let Some(child) = current.filter(|_| unchanged) {
            return Ok(child);
        }
        let applied = apply(api, object).await?;
        let version = version_of(&applied);
        self.applied
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, (manifest, version));
        Ok(Arc::new(applied))
    }
}
