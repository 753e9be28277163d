//! Autoscaling in Kubernetes mode (docs/kubernetes.md, "Scaling"), on the concurrency
//! the `/fn` data plane sees, as Knative's KPA does it. Each data-plane replica
//! publishes its calls in flight per workload in a Lease of its own in the operator's
//! namespace ([`publish_load`]); the leader sums them over replicas and sets
//! each Deployment's replicas through its `scale` subresource ([`run`]), within the
//! bounds the workload controller writes on the Deployment ([`Bounds`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;

use crate::KubeRoutes;
use crate::names::{MANAGED_BY, MANAGER, owner_of};

/// On a Deployment: the [`Bounds`] the autoscaler keeps it in; without it, the
/// autoscaler leaves the Deployment alone.
pub const ANNOTATION_SCALING: &str = "sless.kube5s.ru/scaling";
/// The field manager of the leader's writes to `deployments/scale`.
pub const AUTOSCALER_MANAGER: &str = "sless-autoscaler";
/// `app.kubernetes.io/component` of the load Leases.
pub const LOAD_COMPONENT: &str = "fn-load";
/// On a load Lease: the loads, a JSON object by `<namespace>.<name>`.
pub const ANNOTATION_LOAD: &str = "sless.kube5s.ru/load";
const COMPONENT_LABEL: &str = "app.kubernetes.io/component";
/// What `SLESS_SCALE_TO_ZERO_AFTER` defaults to, as in embedded mode.
pub const DEFAULT_SCALE_TO_ZERO_AFTER: Duration = Duration::from_secs(300);

/// How often a data-plane replica looks at its load (and writes it, if it changed).
const PUBLISH_EVERY: Duration = Duration::from_secs(1);
/// A replica with calls in flight rewrites its load this often, changed or not, so the
/// leader can tell a live replica from one that died with calls in flight.
const HEARTBEAT: Duration = Duration::from_secs(20);
/// A load object not written for this long (by the leader's clock) no longer counts.
const STALE_AFTER: Duration = Duration::from_secs(60);
/// How often the leader decides, besides at once when a held call is published.
const TICK: Duration = Duration::from_millis(500);
/// The longest a Deployment stays above what its load needs before it is scaled in.
const MAX_STABLE_WINDOW: Duration = Duration::from_secs(60);

/// Loads by `(namespace, name)` of the workload.
pub type Loads = BTreeMap<(String, String), Load>;

/// One workload's load as one data-plane replica sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Load {
    /// Calls forwarded and not yet answered.
    pub in_flight: u64,
    /// Calls ever forwarded by this replica: a change means calls came.
    pub calls: u64,
    /// Calls wait for want of a ready pod (scaled to zero, or starting).
    #[serde(default)]
    pub held: bool,
}

impl Load {
    fn add(&mut self, other: &Load) {
        self.in_flight += other.in_flight;
        self.calls += other.calls;
        self.held |= other.held;
    }
}

/// How many replicas a workload may run: `max` 0 while nothing needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    pub min: u32,
    pub max: u32,
    /// Calls in flight per replica before another is started.
    pub target: u32,
}

impl Bounds {
    pub fn annotation(&self) -> String {
        format!("min={} max={} target={}", self.min, self.max, self.target)
    }

    pub fn parse(text: &str) -> Option<Bounds> {
        let mut fields = HashMap::new();
        for field in text.split_whitespace() {
            let (key, value) = field.split_once('=')?;
            fields.insert(key, value.parse::<u32>().ok()?);
        }
        Some(Bounds {
            min: *fields.get("min")?,
            max: *fields.get("max")?,
            target: (*fields.get("target")?).max(1),
        })
    }
}

/// What the leader remembers of one Deployment between decisions.
#[derive(Debug)]
struct History {
    /// The last call, held call, new version or start of demand.
    active_at: Instant,
    calls: u64,
    image: String,
    max: u32,
    /// Since when fewer replicas than run would do, and the most wanted since then.
    below: Option<(Instant, u32)>,
}

impl History {
    fn new(now: Instant, image: &str, bounds: Bounds) -> Self {
        Self {
            active_at: now,
            calls: 0,
            image: image.to_string(),
            max: bounds.max,
            below: None,
        }
    }

    /// The replicas to set now, if they change: more at once; fewer once that many
    /// were enough for the stable window; `min` once idle for `idle`.
    fn next(
        &mut self,
        bounds: Bounds,
        load: Load,
        image: &str,
        current: u32,
        now: Instant,
        idle: Duration,
    ) -> Option<u32> {
        // A new version is started once to prove it starts; so is a workload that
        // just became needed (a trigger enabled).
        if load.calls != self.calls
            || load.in_flight > 0
            || load.held
            || image != self.image
            || (self.max == 0 && bounds.max > 0)
        {
            self.active_at = now;
        }
        self.calls = load.calls;
        self.image = image.to_string();
        self.max = bounds.max;
        if bounds.max == 0 {
            self.below = None;
            return (current != 0).then_some(0);
        }
        let idle_now = now.duration_since(self.active_at) >= idle;
        let mut wanted =
            u32::try_from(load.in_flight.div_ceil(u64::from(bounds.target))).unwrap_or(u32::MAX);
        if !idle_now {
            wanted = wanted.max(1);
        }
        let wanted = wanted.clamp(bounds.min, bounds.max.max(bounds.min));
        if wanted >= current {
            self.below = None;
            return (wanted > current).then_some(wanted);
        }
        if idle_now {
            self.below = None;
            return Some(wanted);
        }
        let (since, peak) = self.below.get_or_insert((now, wanted));
        *peak = (*peak).max(wanted);
        if now.duration_since(*since) >= idle.min(MAX_STABLE_WINDOW) {
            let peak = *peak;
            self.below = None;
            return Some(peak);
        }
        None
    }
}

/// The data-plane replica that publishes: its pod, in the operator's namespace (outside
/// a cluster, a name of its own and no uid).
pub struct Pod {
    pub name: String,
    pub uid: Option<String>,
}

/// The load Lease of the data-plane replica `pod`.
pub fn load_object_name(pod: &str) -> String {
    let name = format!("sless-load-{pod}").to_lowercase();
    name.chars().take(253).collect()
}

/// `<namespace>.<name>`: user namespaces are DNS labels, so the first dot splits.
fn load_key(namespace: &str, name: &str) -> String {
    format!("{namespace}.{name}")
}

/// The loads in a load Lease, by `(namespace, name)` of the workload.
fn loads_of(lease: &Lease) -> Loads {
    let Some(text) = lease.annotations().get(ANNOTATION_LOAD) else {
        return BTreeMap::new();
    };
    let loads: BTreeMap<String, Load> = serde_json::from_str(text).unwrap_or_default();
    loads
        .into_iter()
        .filter_map(|(key, load)| {
            let (namespace, name) = key.split_once('.')?;
            Some(((namespace.to_string(), name.to_string()), load))
        })
        .collect()
}

/// Publishes this data-plane replica's load in the Lease `load_object_name(pod)` of
/// `namespace` (a Lease, so the data plane needs no write it did not have for leader
/// election): when it changed (looked at every second), at once when a workload gets
/// its first held call, and every [`HEARTBEAT`] while calls are in flight.
pub fn publish_load(
    routes: Arc<KubeRoutes>,
    client: Client,
    namespace: &str,
    pod: Pod,
) -> JoinHandle<()> {
    let api: Api<Lease> = Api::namespaced(client, namespace);
    let name = load_object_name(&pod.name);
    // Collected with the pod, so Leases of replaced pods do not pile up.
    let owners = pod.uid.map(|uid| {
        vec![OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: pod.name.clone(),
            uid,
            ..OwnerReference::default()
        }]
    });
    let pod = pod.name;
    tokio::spawn(async move {
        let mut published = BTreeMap::new();
        let mut written = Instant::now();
        // Of this replica's last write: it is the Lease's only writer.
        let mut version: Option<String> = None;
        loop {
            tokio::select! {
                () = tokio::time::sleep(PUBLISH_EVERY) => {}
                () = routes.demand_arrived() => {}
            }
            let load = routes.load();
            let busy = load.values().any(|l| l.in_flight > 0 || l.held);
            if load == published && !(busy && written.elapsed() >= HEARTBEAT) {
                continue;
            }
            let by_key: BTreeMap<String, &Load> = load
                .iter()
                .map(|((namespace, name), load)| (load_key(namespace, name), load))
                .collect();
            let mut lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    labels: Some(BTreeMap::from([
                        (MANAGED_BY.to_string(), MANAGER.to_string()),
                        (COMPONENT_LABEL.to_string(), LOAD_COMPONENT.to_string()),
                    ])),
                    annotations: Some(BTreeMap::from([(
                        ANNOTATION_LOAD.to_string(),
                        serde_json::to_string(&by_key).unwrap_or_default(),
                    )])),
                    owner_references: owners.clone(),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(pod.clone()),
                    renew_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
                    lease_duration_seconds: i32::try_from(STALE_AFTER.as_secs()).ok(),
                    ..LeaseSpec::default()
                }),
            };
            let written_now = async {
                if version.is_none() {
                    version = match api.get_opt(&name).await? {
                        Some(found) => found.metadata.resource_version,
                        None => {
                            let created = api.create(&PostParams::default(), &lease).await?;
                            return Ok(created.metadata.resource_version);
                        }
                    };
                }
                lease.metadata.resource_version = version.clone();
                let replaced = api.replace(&name, &PostParams::default(), &lease).await?;
                Ok::<_, kube::Error>(replaced.metadata.resource_version)
            };
            match written_now.await {
                Ok(now_version) => {
                    version = now_version;
                    published = load;
                    written = Instant::now();
                }
                Err(e) => {
                    // Read again next time (e.g. deleted by hand).
                    version = None;
                    tracing::warn!(%name, error = %e, "load not published");
                }
            }
        }
    })
}

/// The Deployments an HPA in their namespace scales: left to it.
fn hpa_targets(hpas: &Store<HorizontalPodAutoscaler>) -> HashSet<(String, String)> {
    hpas.state()
        .iter()
        .filter_map(|hpa| {
            let target = &hpa.spec.as_ref()?.scale_target_ref;
            let namespace = hpa.namespace()?;
            (target.kind == "Deployment").then(|| (namespace, target.name.clone()))
        })
        .collect()
}

/// The leader's autoscaler: runs until dropped (the lease lost) or its watches end.
pub async fn run(client: Client, namespace: String, idle: Duration) {
    let (deployments, deployment_writer) = reflector::store();
    let managed = watcher::Config::default().labels(&format!("{MANAGED_BY}={MANAGER}"));
    let deployment_events = watcher(Api::<Deployment>::all(client.clone()), managed)
        .default_backoff()
        .reflect(deployment_writer)
        .for_each(|_| async {});
    let (hpas, hpa_writer) = reflector::store();
    let hpa_events = watcher(
        Api::<HorizontalPodAutoscaler>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(hpa_writer)
    .for_each(|_| async {});
    let loads = watcher::Config::default().labels(&format!("{COMPONENT_LABEL}={LOAD_COMPONENT}"));
    let mut load_events = watcher(Api::<Lease>::namespaced(client.clone(), &namespace), loads)
        .default_backoff()
        .boxed();
    let scaler = async {
        // Nothing is scaled before every HPA is known.
        let (Ok(()), Ok(())) = (
            deployments.wait_until_ready().await,
            hpas.wait_until_ready().await,
        ) else {
            return;
        };
        tracing::info!(idle_secs = idle.as_secs(), "autoscaler started");
        // Load Lease → when last seen changed, and its loads.
        let mut published: HashMap<String, (Instant, Loads)> = HashMap::new();
        let mut histories: HashMap<(String, String), History> = HashMap::new();
        let mut tick = tokio::time::interval(TICK);
        loop {
            tokio::select! {
                event = load_events.next() => match event {
                    Some(Ok(watcher::Event::Apply(lease) | watcher::Event::InitApply(lease))) => {
                        published.insert(lease.name_any(), (Instant::now(), loads_of(&lease)));
                    }
                    Some(Ok(watcher::Event::Delete(lease))) => {
                        published.remove(&lease.name_any());
                    }
                    Some(Ok(watcher::Event::Init | watcher::Event::InitDone)) => {}
                    Some(Err(e)) => tracing::warn!(error = %e, "autoscaler: load watch failed"),
                    None => return,
                },
                _ = tick.tick() => {}
            }
            published.retain(|_, (seen, _)| seen.elapsed() < STALE_AFTER);
            let mut total: HashMap<(String, String), Load> = HashMap::new();
            for (_, loads) in published.values() {
                for (workload, load) in loads {
                    total.entry(workload.clone()).or_default().add(load);
                }
            }
            scale(&client, &deployments, &hpas, &total, &mut histories, idle).await;
        }
    };
    tokio::select! {
        () = deployment_events => {}
        () = hpa_events => {}
        () = scaler => {}
    }
}

/// One decision for every Deployment the autoscaler manages.
async fn scale(
    client: &Client,
    deployments: &Store<Deployment>,
    hpas: &Store<HorizontalPodAutoscaler>,
    total: &HashMap<(String, String), Load>,
    histories: &mut HashMap<(String, String), History>,
    idle: Duration,
) {
    let now = Instant::now();
    let targeted = hpa_targets(hpas);
    let mut seen = HashSet::new();
    for deployment in deployments.state() {
        let (Some(deploy_ns), Some((_, namespace, name))) =
            (deployment.namespace(), owner_of(deployment.labels()))
        else {
            continue;
        };
        let Some(bounds) = deployment
            .annotations()
            .get(ANNOTATION_SCALING)
            .and_then(|text| Bounds::parse(text))
        else {
            continue;
        };
        let key = (deploy_ns.clone(), deployment.name_any());
        if targeted.contains(&key) {
            continue;
        }
        let spec = deployment.spec.as_ref();
        let current = spec
            .and_then(|s| s.replicas)
            .map_or(1, |r| u32::try_from(r).unwrap_or(0));
        let image = spec
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.containers.first())
            .and_then(|c| c.image.clone())
            .unwrap_or_default();
        let load = total
            .get(&(namespace.clone(), name.clone()))
            .copied()
            .unwrap_or_default();
        seen.insert(key.clone());
        let history = histories
            .entry(key.clone())
            .or_insert_with(|| History::new(now, &image, bounds));
        let Some(replicas) = history.next(bounds, load, &image, current, now, idle) else {
            continue;
        };
        if replicas == current {
            continue;
        }
        let api: Api<Deployment> = Api::namespaced(client.clone(), &deploy_ns);
        let params = PatchParams {
            field_manager: Some(AUTOSCALER_MANAGER.into()),
            ..PatchParams::default()
        };
        let patch = Patch::Merge(serde_json::json!({"spec": {"replicas": replicas}}));
        match api.patch_scale(&key.1, &params, &patch).await {
            Ok(_) => {
                tracing::info!(%namespace, %name, from = current, to = replicas,
                    in_flight = load.in_flight, held = load.held, "scaled");
                let metrics = sless_core::metrics::metrics();
                if replicas > current {
                    metrics.scaled_up(&namespace, &name, current == 0);
                } else {
                    metrics.scaled_down(&namespace, &name, u64::from(current - replicas));
                }
            }
            Err(e) => tracing::warn!(%namespace, %name, error = %e, "not scaled"),
        }
    }
    histories.retain(|key, _| seen.contains(key));
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDLE: Duration = Duration::from_secs(30);

    fn bounds(min: u32, max: u32, target: u32) -> Bounds {
        Bounds { min, max, target }
    }

    fn load(in_flight: u64, calls: u64) -> Load {
        Load {
            in_flight,
            calls,
            held: false,
        }
    }

    #[test]
    fn bounds_read_back_what_they_write() {
        let written = bounds(0, 4, 10);
        assert_eq!(Bounds::parse(&written.annotation()), Some(written));
        assert_eq!(Bounds::parse("min=1 max=x target=1"), None);
        assert_eq!(Bounds::parse("min=1 max=2"), None);
    }

    #[test]
    fn a_held_call_scales_from_zero_at_once_and_load_scales_out_at_once() {
        let start = Instant::now();
        let b = bounds(0, 4, 2);
        let mut h = History::new(start, "v1", b);
        let later = start + IDLE * 2;
        assert_eq!(h.next(b, load(0, 0), "v1", 1, later, IDLE), Some(0));
        let held = Load {
            held: true,
            ..Load::default()
        };
        assert_eq!(h.next(b, held, "v1", 0, later, IDLE), Some(1));
        assert_eq!(h.next(b, load(5, 5), "v1", 1, later, IDLE), Some(3));
        assert_eq!(h.next(b, load(50, 50), "v1", 3, later, IDLE), Some(4));
    }

    #[test]
    fn fewer_replicas_only_after_the_stable_window_and_min_after_the_idle_time() {
        let idle = MAX_STABLE_WINDOW * 2;
        let start = Instant::now();
        let b = bounds(0, 10, 1);
        let mut h = History::new(start, "v1", b);
        assert_eq!(h.next(b, load(4, 4), "v1", 1, start, idle), Some(4));
        let quiet = start + Duration::from_secs(1);
        assert_eq!(h.next(b, load(1, 8), "v1", 4, quiet, idle), None);
        let window = quiet + MAX_STABLE_WINDOW;
        assert_eq!(h.next(b, load(0, 8), "v1", 4, window, idle), Some(1));
        // Idle: the calls counter has not moved for the idle time.
        let idle_at = quiet + idle;
        assert_eq!(h.next(b, load(0, 8), "v1", 1, idle_at, idle), Some(0));
        assert_eq!(h.next(b, load(0, 8), "v1", 0, idle_at, idle), None);
    }

    #[test]
    fn min_is_kept_a_new_version_starts_once_and_no_demand_is_zero_at_once() {
        let start = Instant::now();
        let kept = bounds(2, 4, 1);
        let mut h = History::new(start, "v1", kept);
        let later = start + IDLE * 3;
        assert_eq!(h.next(kept, load(0, 0), "v1", 0, later, IDLE), Some(2));
        let b = bounds(0, 4, 1);
        let mut h = History::new(start, "v1", b);
        assert_eq!(h.next(b, load(0, 0), "v1", 0, later, IDLE), None);
        assert_eq!(h.next(b, load(0, 0), "v2", 0, later, IDLE), Some(1));
        let off = bounds(0, 0, 1);
        assert_eq!(h.next(off, load(3, 9), "v2", 1, later, IDLE), Some(0));
        assert_eq!(h.next(b, load(0, 9), "v2", 0, later, IDLE), Some(1));
    }
}
