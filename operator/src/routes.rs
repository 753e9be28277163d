//! The `/fn` route table in Kubernetes mode: Ready workloads are reached through their
//! Service DNS name. Routes are kept in memory, rebuilt per namespace from the store
//! on every change, so the invoke path never waits on the API server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinHandle;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};

use super::names::{MANAGED_BY, MANAGER, owner_of, service_authority};
use sless_api::keys::version_of;
use sless_api::text::first_line;
use sless_core::metrics::metrics;
use sless_core::model::{Function, Kind, Phase, Service, Trigger, WorkloadSpec, WorkloadStatus};
use sless_core::routes::{Address, Instances, Route, RouteTable, Scaler, Slot};
use sless_core::store::{Object, Resource, Store, StoreError, WorkloadResource};
use sless_core::workload::{Demand, demand, no_code};

use crate::autoscale::{Load, Loads};

/// A call held for a workload without a ready pod counts as demand this long after the
/// last look at its route (calls waiting look every few milliseconds).
const HELD_FOR: Duration = Duration::from_secs(2);

pub struct KubeRoutes {
    cluster_domain: String,
    /// Service `host:port` → the `host:port` actually dialled, like curl's
    /// `--connect-to`: an operator run outside the cluster (port-forwards, tests).
    connect_to: HashMap<String, Arc<str>>,
    /// Namespace → name → route.
    routes: RwLock<HashMap<String, HashMap<String, Route>>>,
    /// `(namespace, name)` of workloads → their Deployment's ready pods, once
    /// [`KubeRoutes::watch_endpoints`] listed them; `None` before (or without) it, and
    /// then routes are not held back.
    ready_instances: RwLock<Option<HashMap<(String, String), u32>>>,
    /// Per workload, its Service as one slot: the calls in flight through this process
    /// and the calls ever made, what the autoscaler sums over data-plane replicas.
    slots: Mutex<HashMap<(String, String), Arc<Slot>>>,
    /// Never asked for more: the Deployment's pods are counted by the autoscaler.
    scaler: Arc<Scaler>,
    /// Workloads with calls held for want of a ready pod, and when last seen waiting.
    held: Mutex<HashMap<(String, String), Instant>>,
    /// Woken when a workload gets its first held call: its demand is published at once.
    demand: Notify,
}

impl RouteTable for KubeRoutes {
    fn route(&self, namespace: &str, name: &str) -> Route {
        let route = {
            let routes = self.routes.read().unwrap_or_else(|e| e.into_inner());
            routes
                .get(namespace)
                .and_then(|names| names.get(name))
                .cloned()
                .unwrap_or(Route::Unknown)
        };
        let (Route::Ready { kind, .. } | Route::Hidden { kind, .. }) = &route else {
            return route;
        };
        let ready = self
            .ready_instances
            .read()
            .unwrap_or_else(|e| e.into_inner());
        match &*ready {
            Some(ready)
                if ready
                    .get(&(namespace.to_string(), name.to_string()))
                    .is_none_or(|n| *n == 0) =>
            {
                // Scaled to zero, or a trigger was just started: calls wait for the pod,
                // and the autoscaler learns of them.
                let reason = format!("{} {name:?} has no ready instance yet", kind.noun());
                self.hold(namespace, name);
                Route::Starting { reason }
            }
            _ => route,
        }
    }

    /// The ready pods of its Deployment.
    fn instances(&self, namespace: &str, name: &str) -> Option<u32> {
        let ready = self
            .ready_instances
            .read()
            .unwrap_or_else(|e| e.into_inner());
        let key = (namespace.to_string(), name.to_string());
        ready
            .as_ref()
            .map(|ready| ready.get(&key).copied().unwrap_or(0))
    }
}

/// The workload a Deployment runs, and its ready pods.
fn workload_readiness(deployment: &Deployment) -> Option<((String, String), u32)> {
    let ready = deployment
        .status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    let (_, namespace, name) = owner_of(deployment.labels())?;
    Some(((namespace, name), u32::try_from(ready).unwrap_or(0)))
}

/// Not Ready yet, or failed, with no version deployed: the route that says why. A
/// version being built is [`Route::Starting`], so the first call after an upload waits
/// for it.
fn not_ready(
    kind: Kind,
    name: &str,
    spec: &WorkloadSpec,
    status: &WorkloadStatus,
) -> Option<Route> {
    let noun = kind.noun();
    let reason = match status.phase {
        Phase::Ready => return None,
        // A version was deployed: its pods serve while the next one is built or rolls
        // out, or while it fails to (the old pods stay until new ones are available);
        // with no ready pod, calls wait as after a start.
        Phase::Building | Phase::Failed if status.image_ref.is_some() => return None,
        Phase::Failed => format!(
            "{noun} {name:?} failed to build: {}",
            first_line(status.message.as_deref().unwrap_or("see its status"))
        ),
        Phase::Pending if spec.s3_key.is_none() => {
            return Some(Route::NoCode {
                reason: no_code(kind, name),
            });
        }
        Phase::Pending | Phase::Building => {
            return Some(Route::Starting {
                reason: format!("{noun} {name:?} is being built"),
            });
        }
    };
    Some(Route::Unavailable { reason })
}

/// Where `/fn/<ns>/<name>` goes for a Function: its Service, if it is Ready and an
/// enabled http trigger exposes it.
pub fn function_route(
    function: &Object<Function>,
    triggers: &[Object<Trigger>],
    cluster_domain: &str,
) -> Route {
    let triggers = triggers.iter().map(|t| (t.meta.name.as_str(), &t.spec));
    let demand = demand(Kind::Function, &function.meta.name, triggers);
    workload_route(function, &demand, cluster_domain)
}

/// A Service is always exposed once it is Ready.
pub fn service_route(service: &Object<Service>, cluster_domain: &str) -> Route {
    let demand = demand(Kind::Service, &service.meta.name, []);
    workload_route(service, &demand, cluster_domain)
}

/// Not Ready: why, to callers of `/fn` only if it is exposed. Ready: its Service.
fn workload_route<R: WorkloadResource>(
    object: &Object<R>,
    demand: &Demand,
    cluster_domain: &str,
) -> Route {
    let (namespace, name) = (&object.meta.namespace, &object.meta.name);
    let spec = R::workload(&object.spec);
    match (
        not_ready(R::KIND, name, spec, &object.status),
        &demand.exposed,
    ) {
        (Some(route), Ok(())) => route,
        (Some(_), Err(reason)) => Route::Unavailable {
            reason: reason.clone(),
        },
        (None, _) => {
            let address = Address::Tcp(service_authority(namespace, name, cluster_domain).into());
            // Ready: the Deployment's pods all run the current code. Otherwise the
            // previous version's pods may serve while the next rolls out: unknown.
            let version = spec
                .s3_key
                .as_deref()
                .filter(|_| object.status.phase == Phase::Ready)
                .map(|key| version_of(key).into());
            demand.ready_route(R::KIND, address, spec.timeout(), version)
        }
    }
}

/// The objects of a kind that decode; one that does not (e.g. applied with kubectl
/// against an older schema) gets an unavailable route naming the problem instead of
/// taking every route of its namespace down with it.
async fn decodable<R: Resource>(
    store: &dyn Store,
    namespace: &str,
    routes: &mut HashMap<String, Route>,
) -> Result<Vec<Object<R>>, StoreError> {
    let mut objects = Vec::new();
    for raw in store.list(R::KIND, Some(namespace)).await? {
        let name = raw.meta.name.clone();
        match Object::<R>::from_raw(raw) {
            Ok(object) => objects.push(object),
            Err(e) => {
                tracing::warn!(%namespace, %name, error = %e, "skipping an unreadable object");
                let reason = format!("{} {name:?} cannot be read: {e}", R::KIND.noun());
                routes.insert(name, Route::Unavailable { reason });
            }
        }
    }
    Ok(objects)
}

impl KubeRoutes {
    /// Notes a call waiting for `namespace/name`; the first wakes the stats publisher.
    fn hold(&self, namespace: &str, name: &str) {
        let now = Instant::now();
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let key = (namespace.to_string(), name.to_string());
        let first = held
            .insert(key, now)
            .is_none_or(|last| now.duration_since(last) > HELD_FOR);
        if first {
            self.demand.notify_one();
        }
    }

    /// Resolves when a workload gets its first held call.
    pub async fn demand_arrived(&self) {
        self.demand.notified().await;
    }

    /// What this process sees of each workload's load, by `(namespace, name)`.
    pub fn load(&self) -> Loads {
        let now = Instant::now();
        let mut loads: Loads = self
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(_, slot)| slot.leased() > 0)
            .map(|(key, slot)| {
                let load = Load {
                    in_flight: slot.in_flight(),
                    calls: slot.leased(),
                    held: false,
                };
                (key.clone(), load)
            })
            .collect();
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.retain(|_, last| now.duration_since(*last) <= HELD_FOR);
        for key in held.keys() {
            loads.entry(key.clone()).or_default().held = true;
        }
        loads
    }

    /// A ready route's Service becomes the workload's slot, dialled where `connect_to`
    /// says, so this process counts the calls through it.
    fn counted(&self, namespace: &str, name: &str, route: Route) -> Route {
        let counted = |instances: Instances| {
            let Instances::One(Address::Tcp(authority)) = instances else {
                return instances;
            };
            let address = Address::Tcp(
                self.connect_to
                    .get(&*authority)
                    .cloned()
                    .unwrap_or(authority),
            );
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            let slot = slots
                .entry((namespace.to_string(), name.to_string()))
                .and_modify(|slot| {
                    if *slot.address() != address {
                        *slot = Slot::new(address.clone());
                    }
                })
                .or_insert_with(|| Slot::new(address.clone()))
                .clone();
            Instances::Scaled {
                ready: Arc::from([slot]),
                scaler: self.scaler.clone(),
            }
        };
        match route {
            Route::Ready {
                kind,
                instances,
                timeout,
                version,
            } => Route::Ready {
                kind,
                instances: counted(instances),
                timeout,
                version,
            },
            Route::Hidden {
                reason,
                kind,
                instances,
                timeout,
                version,
            } => Route::Hidden {
                reason,
                kind,
                instances: counted(instances),
                timeout,
                version,
            },
            other => other,
        }
    }

    pub fn new(cluster_domain: impl Into<String>) -> Arc<Self> {
        Self::connecting_to(cluster_domain, HashMap::new())
    }

    /// Calls to a Service `host:port` found in `connect_to` dial its value instead.
    pub fn connecting_to(
        cluster_domain: impl Into<String>,
        connect_to: HashMap<String, String>,
    ) -> Arc<Self> {
        Arc::new(Self {
            cluster_domain: cluster_domain.into(),
            connect_to: connect_to
                .into_iter()
                .map(|(service, dialled)| (service, dialled.into()))
                .collect(),
            routes: RwLock::new(HashMap::new()),
            ready_instances: RwLock::new(None),
            slots: Mutex::new(HashMap::new()),
            scaler: Scaler::new(u32::MAX),
            held: Mutex::new(HashMap::new()),
            demand: Notify::new(),
        })
    }

    fn update_ready(&self, change: impl FnOnce(&mut Option<HashMap<(String, String), u32>>)) {
        change(
            &mut self
                .ready_instances
                .write()
                .unwrap_or_else(|e| e.into_inner()),
        );
    }

    /// Follows the workloads' Deployments, so a Ready route of a workload without a
    /// ready pod is [`Route::Starting`] and its calls wait instead of failing.
    pub fn watch_endpoints(self: &Arc<Self>, client: Client) -> JoinHandle<()> {
        let routes = self.clone();
        tokio::spawn(async move {
            let deployments = Api::<Deployment>::all(client);
            let config = watcher::Config::default().labels(&format!("{MANAGED_BY}={MANAGER}"));
            let mut events = watcher(deployments, config).default_backoff().boxed();
            let mut listing = HashMap::new();
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::Init) => listing.clear(),
                    Ok(watcher::Event::InitApply(d)) => {
                        if let Some((workload, ready)) = workload_readiness(&d) {
                            listing.insert(workload, ready);
                        }
                    }
                    Ok(watcher::Event::InitDone) => {
                        let listed = std::mem::take(&mut listing);
                        for ((namespace, name), ready) in &listed {
                            metrics().instances(namespace, name, *ready);
                        }
                        routes.update_ready(|ready| *ready = Some(listed));
                    }
                    Ok(watcher::Event::Apply(d)) => {
                        if let Some((workload, count)) = workload_readiness(&d) {
                            metrics().instances(&workload.0, &workload.1, count);
                            routes.update_ready(|ready| {
                                if let Some(ready) = ready {
                                    ready.insert(workload, count);
                                }
                            });
                        }
                    }
                    Ok(watcher::Event::Delete(d)) => {
                        if let Some((workload, _)) = workload_readiness(&d) {
                            metrics().forget_instances(&workload.0, &workload.1);
                            routes.update_ready(|ready| {
                                if let Some(ready) = ready {
                                    ready.remove(&workload);
                                }
                            });
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "routes: deployment watch failed"),
                }
            }
        })
    }

    /// Recomputes every route of one namespace.
    pub async fn refresh_namespace(
        &self,
        store: &dyn Store,
        namespace: &str,
    ) -> Result<(), StoreError> {
        let mut routes = HashMap::new();
        let functions = decodable::<Function>(store, namespace, &mut routes).await?;
        let services = decodable::<Service>(store, namespace, &mut routes).await?;
        let triggers = decodable::<Trigger>(store, namespace, &mut HashMap::new()).await?;
        for function in &functions {
            let name = &function.meta.name;
            let route = function_route(function, &triggers, &self.cluster_domain);
            routes.insert(name.clone(), self.counted(namespace, name, route));
        }
        for service in &services {
            let name = &service.meta.name;
            let route = service_route(service, &self.cluster_domain);
            routes.insert(name.clone(), self.counted(namespace, name, route));
        }
        self.slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(ns, name), _| ns != namespace || routes.contains_key(name));
        let mut table = self.routes.write().unwrap_or_else(|e| e.into_inner());
        if routes.is_empty() {
            table.remove(namespace);
        } else {
            table.insert(namespace.to_string(), routes);
        }
        Ok(())
    }

    /// Recomputes every namespace that has (or had) workloads.
    pub async fn refresh_all(&self, store: &dyn Store) -> Result<(), StoreError> {
        let mut namespaces: Vec<String> = {
            let table = self.routes.read().unwrap_or_else(|e| e.into_inner());
            table.keys().cloned().collect()
        };
        for kind in [Kind::Function, Kind::Service] {
            for object in store.list(kind, None).await? {
                namespaces.push(object.meta.namespace);
            }
        }
        namespaces.sort();
        namespaces.dedup();
        for namespace in namespaces {
            self.refresh_namespace(store, &namespace).await?;
        }
        Ok(())
    }

    /// Keeps the table current from the store's change notifications, with a full
    /// pass at start, after missed notifications and every `resync`.
    pub fn spawn(self: &Arc<Self>, store: Arc<dyn Store>, resync: Duration) -> JoinHandle<()> {
        let routes = self.clone();
        let mut changes = store.subscribe();
        tokio::spawn(async move {
            let full = |routes: Arc<KubeRoutes>, store: Arc<dyn Store>| async move {
                if let Err(e) = routes.refresh_all(&*store).await {
                    tracing::warn!(error = %e, "routes: full refresh failed");
                }
            };
            full(routes.clone(), store.clone()).await;
            let mut tick = tokio::time::interval(resync);
            tick.tick().await;
            loop {
                tokio::select! {
                    change = changes.recv() => match change {
                        Ok(change) => {
                            if let Err(e) = routes.refresh_namespace(&*store, &change.namespace).await {
                                tracing::warn!(namespace = %change.namespace, error = %e, "routes: refresh failed");
                            }
                        }
                        Err(RecvError::Lagged(_)) => full(routes.clone(), store.clone()).await,
                        Err(RecvError::Closed) => return,
                    },
                    _ = tick.tick() => full(routes.clone(), store.clone()).await,
                }
            }
        })
    }
}
