//! kube-runtime controllers for the four resources, in the shape of kube-rs/controller-rs:
//! one [`Context`], `reconcile(obj, ctx) -> Result<Action>`, an `error_policy` that picks
//! the requeue, and the `finalizer()` helper for the children in the deploy namespace
//! (found by labels: owner references cannot cross namespaces).

mod build;
mod caches;
pub mod job;
mod statuses;
mod tolerant;
pub mod trigger;
pub mod workload;

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::{CronJob, Job, JobCondition};
use k8s_openapi::api::core::v1::{
    LimitRange, Namespace, Pod, ResourceQuota, Secret, Service as KubeService,
};
use k8s_openapi::api::networking::v1::{Ingress, NetworkPolicy};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::manifests::PodSecurity;
use super::names::{
    FIELD_MANAGER, FINALIZER, LABEL_COMPONENT, LABEL_NAMESPACE, MANAGED_BY, MANAGER, owner_of,
};
use super::store::is_not_found;
use super::{ContextUrls, KubeConfig, PodLogs, Readiness, manifests};
use sless_core::logs::last_bytes;
use sless_core::model::{Function, FunctionJob, Kind, Service, Trigger, now};

pub use job::reconcile_job;
pub use trigger::reconcile_trigger;
pub use workload::{reconcile_function, reconcile_service};

/// The errors of one reconcile; the variant name is what logs show.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("KubeError: {0}")]
    KubeError(#[source] kube::Error),
    #[error("FinalizerError: {0}")]
    FinalizerError(#[source] Box<kube::runtime::finalizer::Error<Error>>),
    #[error("SerializationError: {0}")]
    SerializationError(#[source] serde_json::Error),
    #[error("PresignError: {0}")]
    PresignError(#[source] crate::PresignError),
    #[error("MissingObjectKey: {0}")]
    MissingObjectKey(&'static str),
    #[error("WatchStopped: the {0} watch stopped")]
    WatchStopped(&'static str),
}

impl From<kube::Error> for Error {
    fn from(e: kube::Error) -> Self {
        Error::KubeError(e)
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::SerializationError(e)
    }
}

impl Error {
    /// The variant name, for logs and metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::KubeError(_) => "KubeError",
            Error::FinalizerError(_) => "FinalizerError",
            Error::SerializationError(_) => "SerializationError",
            Error::PresignError(_) => "PresignError",
            Error::MissingObjectKey(_) => "MissingObjectKey",
            Error::WatchStopped(_) => "WatchStopped",
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What every reconciler gets.
pub struct Context {
    pub client: Client,
    pub config: KubeConfig,
    pub contexts: Arc<dyn ContextUrls>,
    pub logs: Arc<dyn PodLogs>,
    /// Kubernetes Events, what `kubectl describe` shows.
    recorder: Recorder,
    /// Deploy namespaces known to exist (and since when), to skip a call per reconcile.
    namespaces: Mutex<HashMap<String, Instant>>,
    /// Deploy namespace → (source secret resourceVersion, when it was copied).
    secrets: Mutex<HashMap<String, (String, Instant)>>,
    /// Deploy namespaces whose boundaries were applied, and when that apply began.
    boundaries: Mutex<HashMap<String, Instant>>,
    /// Held while a namespace is prepared: the hundred reconciles of a new namespace
    /// wait for the first instead of all applying the same objects.
    preparing: tokio::sync::Mutex<()>,
    /// The watch caches of the running controllers (replaced by each run: a replica
    /// that regains the lease starts new watches).
    caches: RwLock<Option<Arc<caches::Caches>>>,
    /// Child (`Kind/namespace/name`) → (hash of the manifest last applied, the
    /// resourceVersion that apply returned): see [`Context::apply_unless_current`].
    applied: Mutex<HashMap<String, (u64, String)>>,
    /// Namespaces whose boundaries changed by hand, and when: an apply that began
    /// before does not count (it may have written a boundary before its deletion).
    boundaries_changed: Mutex<HashMap<String, Instant>>,
}

/// Cached facts about a deploy namespace (it exists, its pull secret is current) are
/// checked again after this long, so a namespace or copy deleted by hand comes back.
const SECRET_RESYNC: Duration = Duration::from_secs(600);

const EVENT_NOTE_BYTES: usize = 1000;

impl Context {
    pub fn new(
        client: Client,
        config: KubeConfig,
        contexts: Arc<dyn ContextUrls>,
        logs: Arc<dyn PodLogs>,
    ) -> Arc<Self> {
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance: std::env::var("HOSTNAME").ok(),
        };
        Arc::new(Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            config,
            contexts,
            logs,
            namespaces: Mutex::new(HashMap::new()),
            secrets: Mutex::new(HashMap::new()),
            boundaries: Mutex::new(HashMap::new()),
            preparing: tokio::sync::Mutex::new(()),
            caches: RwLock::new(None),
            applied: Mutex::new(HashMap::new()),
            boundaries_changed: Mutex::new(HashMap::new()),
        })
    }

    /// The triggers of `namespace`: from the function controller's watch cache once it
    /// runs (updated before the controller hears of a change), else listed.
    pub(crate) async fn triggers_in(&self, namespace: &str) -> Result<Vec<Arc<Trigger>>> {
        let Some(caches) = self.caches() else {
            let listed = tolerant::list::<Trigger>(&self.client, namespace).await?;
            return Ok(listed.into_iter().map(Arc::new).collect());
        };
        let cache = &caches.triggers;
        // Before the first list the cache is empty, which would read as no demand.
        cache
            .wait_until_ready()
            .await
            .map_err(|_| Error::WatchStopped("trigger"))?;
        Ok(cache
            .state()
            .into_iter()
            .filter(|t| t.metadata.namespace.as_deref() == Some(namespace))
            .collect())
    }

    /// Records an Event on `object`; a failure is logged, never fails a reconcile.
    pub(crate) async fn event<K>(&self, object: &K, warning: bool, reason: &str, note: &str)
    where
        K: Resource<DynamicType = ()>,
    {
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            // The API server refuses notes over 1 kB.
            note: Some(last_bytes(note, EVENT_NOTE_BYTES)),
            action: reason.into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &object.object_ref(&())).await {
            tracing::warn!(reason, error = %e, "cannot record an event");
        }
    }

    /// A deploy namespace, as [`Context::prepare_namespace`] makes it, with the tenant's
    /// boundaries: NetworkPolicies, ResourceQuota and LimitRange.
    async fn prepare_deploy_namespace(&self, namespace: &str, deploy_ns: &str) -> Result<()> {
        let _preparing = self.preparing.lock().await;
        self.prepare_namespace(namespace, deploy_ns, PodSecurity::Restricted)
            .await?;
        if self.knows_boundaries(deploy_ns) {
            return Ok(());
        }
        let started = Instant::now();
        let client = &self.client;
        let policies: Api<NetworkPolicy> = Api::namespaced(client.clone(), deploy_ns);
        apply(&policies, &manifests::default_deny(namespace)).await?;
        apply(
            &policies,
            &manifests::data_plane_ingress(namespace, &self.config),
        )
        .await?;
        apply(&policies, &manifests::cron_egress(namespace, &self.config)).await?;
        let secrets: Api<Secret> = Api::namespaced(client.clone(), deploy_ns);
        apply(
            &secrets,
            &manifests::trigger_token_secret(namespace, &self.config),
        )
        .await?;
        let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), deploy_ns);
        apply(
            &quotas,
            &manifests::resource_quota(namespace, &self.config.tenant_quota),
        )
        .await?;
        let limits: Api<LimitRange> = Api::namespaced(client.clone(), deploy_ns);
        apply(&limits, &manifests::limit_range(namespace)).await?;
        self.boundaries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(deploy_ns.to_string(), started);
        Ok(())
    }

    /// A build namespace, as [`Context::prepare_namespace`] makes it, with its
    /// NetworkPolicy.
    async fn prepare_build_namespace(&self, namespace: &str, build_ns: &str) -> Result<()> {
        let _preparing = self.preparing.lock().await;
        // Rootless BuildKit and kaniko need a privileged namespace; a client of an
        // external daemon does not.
        let pod_security = if self.config.builds_unprivileged() {
            PodSecurity::Restricted
        } else {
            PodSecurity::Privileged
        };
        self.prepare_namespace(namespace, build_ns, pod_security)
            .await?;
        if self.knows_boundaries(build_ns) {
            return Ok(());
        }
        let started = Instant::now();
        let policies: Api<NetworkPolicy> = Api::namespaced(self.client.clone(), build_ns);
        apply(
            &policies,
            &manifests::build_boundary(namespace, &self.config),
        )
        .await?;
        self.boundaries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(build_ns.to_string(), started);
        Ok(())
    }

    fn knows_boundaries(&self, namespace: &str) -> bool {
        let changed = self
            .boundaries_changed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(namespace)
            .copied();
        self.boundaries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(namespace)
            .is_some_and(|at| at.elapsed() < SECRET_RESYNC && changed.is_none_or(|c| *at > c))
    }

    /// A boundary of the user namespace's deploy or build namespace changed (or was
    /// deleted by hand): the next reconcile (or build) applies them again, also when an
    /// apply is under way.
    fn forget_boundaries(&self, namespace: &str) {
        let now = Instant::now();
        let mut changed = self
            .boundaries_changed
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        changed.insert(sless_core::model::deploy_namespace(namespace), now);
        changed.insert(sless_core::model::build_namespace(namespace), now);
    }

    /// `target_ns` exists with its Pod Security labels and holds current copies of the
    /// registry secrets it needs: the pull secret everywhere (for the kubelet), the push
    /// secret only in build namespaces (mounted by the push step alone).
    async fn prepare_namespace(
        &self,
        namespace: &str,
        target_ns: &str,
        pod_security: PodSecurity,
    ) -> Result<()> {
        let builds = target_ns == sless_core::model::build_namespace(namespace);
        let mut secrets: Vec<&str> = self.config.pull_secret().into_iter().collect();
        if let Some(push) = self.config.registry_secret.as_deref().filter(|_| builds)
            && !secrets.contains(&push)
        {
            secrets.push(push);
        }
        let known = self
            .namespaces
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(target_ns)
            .is_some_and(|at| at.elapsed() < SECRET_RESYNC);
        if !known {
            // Applied, not only created: labels of an older version are brought up to date.
            let api: Api<Namespace> = Api::all(self.client.clone());
            let manifest = manifests::namespace(target_ns, Some(namespace), Some(pod_security));
            apply(&api, &manifest).await?;
            // Deploy namespaces hold the cron pods' token; any may hold registry secrets.
            if !builds || !secrets.is_empty() {
                // Secrets may be written only where the operator bound itself this role.
                let bindings: Api<RoleBinding> = Api::namespaced(self.client.clone(), target_ns);
                let binding = manifests::secrets_role_binding(
                    target_ns,
                    &self.config.service_account,
                    &self.config.operator_namespace,
                );
                apply(&bindings, &binding).await?;
            }
            self.namespaces
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(target_ns.to_string(), Instant::now());
        }
        for secret in secrets {
            self.sync_secret(secret, target_ns).await?;
        }
        Ok(())
    }

    /// Copies the operator namespace's Secret `name` into `target_ns` when it changed
    /// (or was last copied long ago).
    async fn sync_secret(&self, name: &str, target_ns: &str) -> Result<()> {
        let operator_ns = &self.config.operator_namespace;
        let source = match self.caches() {
            Some(caches) => caches::cached(&caches.secrets, "secret", operator_ns, name)
                .await?
                .map(|s| (*s).clone()),
            None => {
                let sources: Api<Secret> = Api::namespaced(self.client.clone(), operator_ns);
                sources.get_opt(name).await?
            }
        };
        let Some(source) = source else {
            tracing::warn!(
                secret = %name,
                namespace = %self.config.operator_namespace,
                "the registry secret does not exist; pods may fail to pull or push"
            );
            return Ok(());
        };
        let version = source.resource_version().unwrap_or_default();
        let key = format!("{target_ns}/{name}");
        let current = {
            let secrets = self.secrets.lock().unwrap_or_else(|e| e.into_inner());
            secrets
                .get(&key)
                .is_some_and(|(v, at)| *v == version && at.elapsed() < SECRET_RESYNC)
        };
        if current {
            return Ok(());
        }
        let copies: Api<Secret> = Api::namespaced(self.client.clone(), target_ns);
        apply(
            &copies,
            &manifests::registry_secret_copy(&source, target_ns),
        )
        .await?;
        self.secrets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, (version, Instant::now()));
        Ok(())
    }
}

/// How long before a failed reconcile is tried again, unless a watch event comes first.
const RETRY_AFTER: Duration = Duration::from_secs(30);

/// Every failure is tried again after [`RETRY_AFTER`], conflicts included: a conflict
/// says the object changed after the version the reconcile held, so its watch brings
/// the newer version, which reconciles it at once. Retrying sooner would send the same
/// stale version from the cache again (one conflict per object per second while the
/// watch lags: a storm that slows the watch further).
pub fn error_policy<K: Resource>(object: Arc<K>, error: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(
        name = %object.meta().name.as_deref().unwrap_or_default(),
        namespace = %object.meta().namespace.as_deref().unwrap_or_default(),
        error = error.metric_label(),
        "reconcile failed: {error}"
    );
    Action::requeue(RETRY_AFTER)
}

/// Create or update a child by server-side apply: the same call either way, and only
/// the fields sless sets are its own.
pub(crate) async fn apply<K>(api: &Api<K>, object: &K) -> Result<K>
where
    K: Resource + Clone + Debug + Serialize + DeserializeOwned,
{
    let name = object
        .meta()
        .name
        .clone()
        .ok_or(Error::MissingObjectKey("metadata.name"))?;
    Ok(api
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(object),
        )
        .await?)
}

/// Deletes every object matching `selector` but `keep`; Jobs take their pods along.
pub(crate) async fn delete_labelled<K>(
    api: &Api<K>,
    selector: &str,
    keep: Option<&str>,
) -> Result<usize>
where
    K: Resource + Clone + Debug + DeserializeOwned,
{
    let list = api.list(&ListParams::default().labels(selector)).await?;
    let mut deleted = 0;
    for object in list.items {
        let name = object.name_any();
        if Some(name.as_str()) == keep || object.meta().deletion_timestamp.is_some() {
            continue;
        }
        match api.delete(&name, &DeleteParams::background()).await {
            Ok(_) => deleted += 1,
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(deleted)
}

/// Replaces the whole status (a JSON patch `add /status`): fields that are `None` now
/// are removed, which a merge patch would leave behind.
pub(crate) async fn write_status<K, S>(
    ctx: &Context,
    api: &Api<K>,
    object: &K,
    status: &S,
) -> Result<()>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
    S: Serialize,
{
    write_status_with(ctx, api, object, status, None, &[]).await
}

/// A condition besides `Ready`, as the reconciler decided it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Condition {
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    pub reason: String,
    pub message: String,
}

impl Condition {
    pub(crate) fn new(type_: &str, status: &str, reason: &str, message: &str) -> Self {
        Self {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// [`write_status`] with the `Ready` condition's reason given (default: the phase) and
/// more conditions after it. Skipped when the reconcile holds the object from before
/// this run wrote the same status.
pub(crate) async fn write_status_with<K, S>(
    ctx: &Context,
    api: &Api<K>,
    object: &K,
    status: &S,
    ready_reason: Option<&str>,
    more: &[Condition],
) -> Result<()>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
    S: Serialize,
{
    let statuses = ctx.caches().map(|c| c.statuses.clone());
    let stored = match statuses.as_ref().and_then(|s| s.previous(object)) {
        Some(known) => known,
        None => stored_conditions(api, object).await?,
    };
    let previous = stored.as_ref();
    let mut status = serde_json::to_value(status)?;
    let now = now();
    let generation = object.meta().generation;
    let mut ready = ready_condition(&status, previous, generation, &now);
    if let Some(reason) = ready_reason {
        ready["reason"] = json!(reason);
    }
    let mut conditions = vec![ready];
    conditions.extend(
        more.iter()
            .map(|c| condition(c, previous, generation, &now)),
    );
    status["conditions"] = json!(conditions);
    if statuses
        .as_ref()
        .is_some_and(|s| s.unchanged(object, &status))
    {
        return Ok(());
    }
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "add", "path": "/status", "value": status}
    ]))?;
    api.patch_status(
        &object.name_any(),
        &PatchParams::default(),
        &Patch::Json::<()>(patch),
    )
    .await?;
    if let Some(statuses) = statuses {
        statuses.wrote(object, status);
    }
    Ok(())
}

/// The conditions as stored: the typed statuses do not carry them, so without what
/// the watch delivered (a reconcile called directly) they are read.
async fn stored_conditions<K>(api: &Api<K>, object: &K) -> Result<Option<Value>>
where
    K: Resource<DynamicType = ()> + Clone,
{
    let resource = ApiResource::erase::<K>(&());
    let client = api.clone().into_client();
    let raw: Api<DynamicObject> = match object.meta().namespace.as_deref() {
        Some(namespace) => Api::namespaced_with(client, namespace, &resource),
        None => Api::all_with(client, &resource),
    };
    Ok(raw
        .get_opt(&object.name_any())
        .await?
        .and_then(|o| o.data.pointer("/status/conditions").cloned()))
}

/// A condition as written, its transition time kept while its status stays.
fn condition(c: &Condition, previous: Option<&Value>, generation: Option<i64>, now: &str) -> Value {
    let since = transition_time(previous, &c.type_, &c.status).unwrap_or(now);
    let mut condition = json!({
        "type": c.type_,
        "status": c.status,
        "reason": c.reason,
        "message": c.message,
        "lastTransitionTime": since,
    });
    if let Some(generation) = generation {
        condition["observedGeneration"] = json!(generation);
    }
    condition
}

/// When the condition `kind` last changed, if it still has `state`.
fn transition_time<'a>(previous: Option<&'a Value>, kind: &str, state: &str) -> Option<&'a str> {
    previous
        .and_then(Value::as_array)
        .and_then(|all| all.iter().find(|c| c["type"] == kind))
        .filter(|c| c["status"] == state)
        .and_then(|c| c["lastTransitionTime"].as_str())
}

/// The `Ready` condition `kubectl wait --for=condition=Ready` and other tools read,
/// derived from the phase (workloads, jobs) or `active` (triggers). Its transition
/// time changes only when its status does.
fn ready_condition(
    status: &Value,
    previous: Option<&Value>,
    generation: Option<i64>,
    now: &str,
) -> Value {
    let (ready, reason) = match (status["phase"].as_str(), status["active"].as_bool()) {
        (Some(phase), _) => (matches!(phase, "Ready" | "Succeeded"), phase.to_string()),
        (None, Some(true)) => (true, "Active".to_string()),
        (None, _) => (false, "Inactive".to_string()),
    };
    let state = if ready { "True" } else { "False" };
    let message = status["message"].as_str().unwrap_or("");
    condition(
        &Condition::new("Ready", state, &reason, message),
        previous,
        generation,
        now,
    )
}

/// Sets (`Some`) or removes (`None`) annotations.
pub(crate) async fn annotate<K>(
    api: &Api<K>,
    name: &str,
    changes: &[(&str, Option<&str>)],
) -> Result<()>
where
    K: Resource + Clone + Debug + DeserializeOwned,
{
    let annotations: serde_json::Map<String, Value> = changes
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                v.map_or(Value::Null, |v| Value::String(v.into())),
            )
        })
        .collect();
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": annotations}})),
    )
    .await?;
    Ok(())
}

/// Adds the finalizer before `finalizer()` runs, with a merge patch guarded by the
/// resourceVersion. (The helper's own JSON-patch `test` of a missing
/// `/metadata/finalizers` is accepted by the API server but not by every JSON-patch
/// implementation; doing it here works against both and saves a round trip.)
pub(crate) async fn ensure_finalizer<K>(api: &Api<K>, object: Arc<K>) -> Result<Arc<K>>
where
    K: Resource + Clone + Debug + Serialize + DeserializeOwned,
{
    if object.meta().deletion_timestamp.is_some()
        || object.finalizers().iter().any(|f| f == FINALIZER)
    {
        return Ok(object);
    }
    let mut finalizers = object.finalizers().to_vec();
    finalizers.push(FINALIZER.to_string());
    let patch = json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": object.resource_version(),
    }});
    let patched = api
        .patch(
            &object.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await?;
    Ok(Arc::new(patched))
}

/// The namespace of a namespaced object, which every one of ours has.
pub(crate) fn namespace_of<K: Resource>(object: &K) -> Result<String> {
    object
        .meta()
        .namespace
        .clone()
        .ok_or(Error::MissingObjectKey("metadata.namespace"))
}

/// How a Job ended, or that it has not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobOutcome {
    Running,
    Succeeded,
    Failed { reason: String },
}

fn condition_true<'a>(conditions: &'a [JobCondition], kind: &str) -> Option<&'a JobCondition> {
    conditions
        .iter()
        .find(|c| c.type_ == kind && c.status == "True")
}

/// Reads a Job's status the way the Job controller reports it.
pub fn job_outcome(job: &Job) -> JobOutcome {
    let Some(status) = &job.status else {
        return JobOutcome::Running;
    };
    let conditions = status.conditions.as_deref().unwrap_or_default();
    if let Some(failed) = condition_true(conditions, "Failed") {
        let reason = match (failed.reason.as_deref(), failed.message.as_deref()) {
            (Some(reason), Some(message)) => format!("{reason}: {message}"),
            (Some(reason), None) => reason.to_string(),
            (None, Some(message)) => message.to_string(),
            (None, None) => "the Job failed".to_string(),
        };
        return JobOutcome::Failed { reason };
    }
    if condition_true(conditions, "Complete").is_some() || status.succeeded.unwrap_or(0) > 0 {
        return JobOutcome::Succeeded;
    }
    JobOutcome::Running
}

/// A tenant boundary (NetworkPolicy, ResourceQuota, LimitRange of a deploy namespace)
/// that changed or was deleted: every `K` of its namespace is reconciled, the first of
/// which applies the boundaries again; a workload's own policy goes to its owner.
fn boundary_refs<K>(
    labels: &std::collections::BTreeMap<String, String>,
    kind: Kind,
    ctx: &Context,
    known: &Store<K>,
) -> Vec<ObjectRef<K>>
where
    K: Resource<DynamicType = ()> + Clone,
{
    if labels.get(LABEL_COMPONENT).map(String::as_str) != Some(manifests::TENANT_COMPONENT) {
        return owner_ref(labels, kind).into_iter().collect();
    }
    let Some(namespace) = labels.get(LABEL_NAMESPACE) else {
        return Vec::new();
    };
    ctx.forget_boundaries(namespace);
    known
        .state()
        .into_iter()
        .filter(|o| o.meta().namespace.as_deref() == Some(namespace))
        .map(|o| ObjectRef::from_obj(&*o))
        .collect()
}

/// The owner a labelled child belongs to, as a reconcile request for kind `K`.
fn owner_ref<K>(
    child_labels: &std::collections::BTreeMap<String, String>,
    kind: Kind,
) -> Option<ObjectRef<K>>
where
    K: Resource<DynamicType = ()>,
{
    let (owner_kind, namespace, name) = owner_of(child_labels)?;
    (owner_kind == kind).then(|| ObjectRef::new(&name).within(&namespace))
}

fn managed_labels() -> String {
    format!("{MANAGED_BY}={MANAGER}")
}

fn managed() -> watcher::Config {
    watcher::Config::default().labels(&managed_labels())
}

/// The registry secrets' watch with its store, and a sender that ticks after each of
/// their changes (once the store has it), so every workload re-copies them.
fn registry_secrets(
    ctx: &Context,
) -> (
    Store<Secret>,
    futures::future::BoxFuture<'static, ()>,
    tokio::sync::watch::Sender<u64>,
) {
    use futures::FutureExt as _;
    let names: Vec<String> = ctx
        .config
        .registry_secret
        .iter()
        .chain(&ctx.config.registry_pull_secret)
        .cloned()
        .collect();
    let ticks = tokio::sync::watch::Sender::new(0u64);
    if names.is_empty() {
        // Never ready, and never read: without registry secrets none is copied.
        let (store, _) = reflector::store::<Secret>();
        return (store, futures::future::pending().boxed(), ticks);
    }
    let (store, changes) = caches::secrets(&ctx.client, &ctx.config.operator_namespace, names);
    let sender = ticks.clone();
    let run = changes
        .for_each(move |()| {
            sender.send_modify(|n| *n += 1);
            futures::future::ready(())
        })
        .boxed();
    (store, run, ticks)
}

/// A stream of the ticks of [`registry_secrets`], for `reconcile_all_on`.
fn secret_changes(
    ticks: &tokio::sync::watch::Sender<u64>,
) -> impl Stream<Item = ()> + Send + 'static {
    futures::stream::unfold(ticks.subscribe(), |mut receiver| async move {
        receiver.changed().await.ok()?;
        Some(((), receiver))
    })
}

async fn drain<K, S>(name: &'static str, stream: S)
where
    K: Resource,
    S: Stream<
        Item = std::result::Result<
            (ObjectRef<K>, Action),
            kube::runtime::controller::Error<Error, watcher::Error>,
        >,
    >,
{
    use kube::runtime::controller::Error as ControllerError;
    stream
        .for_each(|result| async move {
            let error = match &result {
                Ok(_) => None,
                Err(ControllerError::ReconcilerFailed(e, _)) => Some(e.metric_label()),
                Err(ControllerError::ObjectNotFound(_)) => Some("ObjectNotFound"),
                Err(ControllerError::QueueError(_)) => Some("QueueError"),
                Err(_) => Some("ControllerError"),
            };
            sless_core::metrics::metrics().reconcile(name, error);
            if let Err(e) = result {
                tracing::debug!(controller = name, error = %e, "reconcile error");
            }
        })
        .await;
}

/// What the API server said when it refused an object outright (invalid or bad
/// request): retrying the same object cannot help, so it goes into the status.
pub(crate) fn refusal(result: &Result<impl Sized>) -> Option<String> {
    match result {
        Err(Error::KubeError(e)) => super::store::api_status(e)
            .filter(|s| s.code == 422 || s.code == 400)
            .map(|s| s.message.clone()),
        _ => None,
    }
}

/// Refuses to start when the CRDs are missing, with the fix in the message.
pub async fn check_crds(client: &Client) -> anyhow::Result<()> {
    async fn probe<K: Resource<DynamicType = ()>>(client: &Client) -> anyhow::Result<()> {
        Api::<DynamicObject>::all_with(client.clone(), &ApiResource::erase::<K>(&()))
            .list(&ListParams::default().limit(1))
            .await
            .map(|_| ())
            .map_err(|e| {
                anyhow::anyhow!(
                    "{} cannot be listed ({e}); are the CRDs installed? \
                     sless crds | kubectl apply -f -",
                    K::plural(&())
                )
            })
    }
    probe::<Function>(client).await?;
    probe::<Service>(client).await?;
    probe::<Trigger>(client).await?;
    probe::<FunctionJob>(client).await
}

/// Marks `part` ready once the first list of `K` succeeded: the controllers' own
/// watches do not say when theirs did, so one probing list stands for them.
async fn probe_until_listed<K>(
    client: Client,
    part: &str,
    managed_only: bool,
    readiness: &Readiness,
) where
    K: Resource<DynamicType = ()>,
{
    let mut params = ListParams::default().limit(1);
    if managed_only {
        params = params.labels(&managed_labels());
    }
    // Untyped: one object that does not decode must not keep the process unready.
    let api = Api::<DynamicObject>::all_with(client, &ApiResource::erase::<K>(&()));
    loop {
        match api.list(&params).await {
            Ok(_) => return readiness.ready(part),
            Err(e) => tracing::warn!(part, error = %e, "first list failed; retrying"),
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Runs the four controllers until a shutdown signal; `readiness` waits for the first
/// list of every kind they watch.
pub async fn run_controllers(ctx: Arc<Context>, readiness: Readiness) -> anyhow::Result<()> {
    let client = ctx.client.clone();
    check_crds(&client).await?;
    const PARTS: [&str; 13] = [
        "Function (controllers)",
        "Service (controllers)",
        "Trigger (controllers)",
        "FunctionJob (controllers)",
        "Deployment (controllers)",
        "Job (controllers)",
        "CronJob (controllers)",
        "core Service (controllers)",
        "Ingress (controllers)",
        "Pod (controllers)",
        "NetworkPolicy (controllers)",
        "ResourceQuota (controllers)",
        "LimitRange (controllers)",
    ];
    readiness.expect(PARTS);
    let probes = async {
        let (c, r) = (&client, &readiness);
        tokio::join!(
            probe_until_listed::<Function>(c.clone(), PARTS[0], false, r),
            probe_until_listed::<Service>(c.clone(), PARTS[1], false, r),
            probe_until_listed::<Trigger>(c.clone(), PARTS[2], false, r),
            probe_until_listed::<FunctionJob>(c.clone(), PARTS[3], false, r),
            probe_until_listed::<Deployment>(c.clone(), PARTS[4], true, r),
            probe_until_listed::<Job>(c.clone(), PARTS[5], true, r),
            probe_until_listed::<CronJob>(c.clone(), PARTS[6], true, r),
            probe_until_listed::<KubeService>(c.clone(), PARTS[7], true, r),
            probe_until_listed::<Ingress>(c.clone(), PARTS[8], true, r),
            probe_until_listed::<Pod>(c.clone(), PARTS[9], true, r),
            probe_until_listed::<NetworkPolicy>(c.clone(), PARTS[10], true, r),
            probe_until_listed::<ResourceQuota>(c.clone(), PARTS[11], true, r),
            probe_until_listed::<LimitRange>(c.clone(), PARTS[12], true, r),
        );
    };

    // Every kind of child is watched, so one deleted by hand comes back at once; the
    // watches are also the caches the reconciles read (see `caches`).
    // The CRs are watched through `tolerant`, so one unreadable object stalls nothing.
    let (secret_store, secret_watch, secret_ticks) = registry_secrets(&ctx);
    let statuses = Arc::new(statuses::Statuses::default());
    let (function_store, function_events) =
        tolerant::watch::<Function>(client.clone(), Some(statuses.clone()));
    let known_functions = function_store.clone();
    let (trigger_cache, trigger_changes) = tolerant::watch::<Trigger>(client.clone(), None);
    let (f_deployments, f_deployment_events) = caches::children::<Deployment>(&client);
    let (f_services, f_service_events) = caches::children::<KubeService>(&client);
    let (f_policies, f_policy_events) = caches::children::<NetworkPolicy>(&client);
    let (f_pods, f_pod_events) = caches::children::<Pod>(&client);
    let functions = Controller::for_stream(function_events, function_store)
        .watches_stream(trigger_changes, |trigger: Trigger| {
            let namespace = trigger.namespace()?;
            Some(ObjectRef::new(&trigger.spec.function_ref).within(&namespace))
        })
        .watches_stream(f_deployment_events, |d: Deployment| {
            owner_ref(d.labels(), Kind::Function)
        })
        .watches_stream(f_service_events, |s: KubeService| {
            owner_ref(s.labels(), Kind::Function)
        })
        .watches(Api::<Job>::all(client.clone()), managed(), |j: Job| {
            owner_ref(j.labels(), Kind::Function)
        })
        // What the kubelet reports (a crash loop, an image pull error) shows on no
        // Deployment field: the pods are watched for it.
        .watches_stream(f_pod_events, |p: Pod| owner_ref(p.labels(), Kind::Function))
        .watches_stream(f_policy_events, {
            let (ctx, known) = (ctx.clone(), known_functions.clone());
            move |p: NetworkPolicy| boundary_refs(p.labels(), Kind::Function, &ctx, &known)
        })
        .watches(Api::<ResourceQuota>::all(client.clone()), managed(), {
            let (ctx, known) = (ctx.clone(), known_functions.clone());
            move |q: ResourceQuota| boundary_refs(q.labels(), Kind::Function, &ctx, &known)
        })
        .watches(Api::<LimitRange>::all(client.clone()), managed(), {
            let (ctx, known) = (ctx.clone(), known_functions.clone());
            move |l: LimitRange| boundary_refs(l.labels(), Kind::Function, &ctx, &known)
        })
        .reconcile_all_on(secret_changes(&secret_ticks))
        .shutdown_on_signal();

    let (service_store, service_events) =
        tolerant::watch::<Service>(client.clone(), Some(statuses.clone()));
    let known_services = service_store.clone();
    let (s_deployments, s_deployment_events) = caches::children::<Deployment>(&client);
    let (s_services, s_service_events) = caches::children::<KubeService>(&client);
    let (s_policies, s_policy_events) = caches::children::<NetworkPolicy>(&client);
    let (s_pods, s_pod_events) = caches::children::<Pod>(&client);
    let services = Controller::for_stream(service_events, service_store)
        .watches_stream(s_deployment_events, |d: Deployment| {
            owner_ref(d.labels(), Kind::Service)
        })
        .watches_stream(s_service_events, |s: KubeService| {
            owner_ref(s.labels(), Kind::Service)
        })
        .watches(Api::<Job>::all(client.clone()), managed(), |j: Job| {
            owner_ref(j.labels(), Kind::Service)
        })
        // What the kubelet reports (a crash loop, an image pull error) shows on no
        // Deployment field: the pods are watched for it.
        .watches_stream(s_pod_events, |p: Pod| owner_ref(p.labels(), Kind::Service))
        .watches_stream(s_policy_events, {
            let (ctx, known) = (ctx.clone(), known_services.clone());
            move |p: NetworkPolicy| boundary_refs(p.labels(), Kind::Service, &ctx, &known)
        })
        .watches(Api::<ResourceQuota>::all(client.clone()), managed(), {
            let (ctx, known) = (ctx.clone(), known_services.clone());
            move |q: ResourceQuota| boundary_refs(q.labels(), Kind::Service, &ctx, &known)
        })
        .watches(Api::<LimitRange>::all(client.clone()), managed(), {
            let (ctx, known) = (ctx.clone(), known_services.clone());
            move |l: LimitRange| boundary_refs(l.labels(), Kind::Service, &ctx, &known)
        })
        .reconcile_all_on(secret_changes(&secret_ticks))
        .shutdown_on_signal();

    let (trigger_store, trigger_events) =
        tolerant::watch::<Trigger>(client.clone(), Some(statuses.clone()));
    let known_triggers = trigger_store.clone();
    let (called_functions, function_changes) = tolerant::watch::<Function>(client.clone(), None);
    let (cron_jobs, cron_job_events) = caches::children::<CronJob>(&client);
    let (ingresses, ingress_events) = caches::children::<Ingress>(&client);
    let triggers = Controller::for_stream(trigger_events, trigger_store)
        .watches_stream(function_changes, move |function: Function| {
            let namespace = function.namespace();
            let name = function.name_any();
            known_triggers
                .state()
                .into_iter()
                .filter(|t| t.namespace() == namespace && t.spec.function_ref == name)
                .map(|t| ObjectRef::from_obj(&*t))
                .collect::<Vec<_>>()
        })
        .watches_stream(cron_job_events, |c: CronJob| {
            owner_ref(c.labels(), Kind::Trigger)
        })
        .watches_stream(ingress_events, |i: Ingress| {
            owner_ref(i.labels(), Kind::Trigger)
        })
        .shutdown_on_signal();

    *ctx.caches.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(caches::Caches {
        triggers: trigger_cache,
        functions: called_functions,
        services: known_services,
        function_children: caches::Children {
            deployments: f_deployments,
            services: f_services,
            policies: f_policies,
            pods: f_pods,
        },
        service_children: caches::Children {
            deployments: s_deployments,
            services: s_services,
            policies: s_policies,
            pods: s_pods,
        },
        trigger_children: caches::TriggerChildren {
            cron_jobs,
            ingresses,
        },
        secrets: secret_store,
        statuses: statuses.clone(),
    }));
    let functions = functions.run(reconcile_function, error_policy, ctx.clone());
    let services = services.run(reconcile_service, error_policy, ctx.clone());
    let triggers = triggers.run(reconcile_trigger, error_policy, ctx.clone());

    // Jobs are also polled: watching them across namespaces is not relied on.
    let (job_store, job_events) =
        tolerant::watch::<FunctionJob>(client.clone(), Some(statuses.clone()));
    let jobs = Controller::for_stream(job_events, job_store)
        .watches(Api::<Job>::all(client.clone()), managed(), |j: Job| {
            owner_ref(j.labels(), Kind::FunctionJob)
        })
        .shutdown_on_signal()
        .run(reconcile_job, error_policy, ctx.clone());

    tracing::info!("controllers started");
    let controllers = async {
        tokio::join!(
            probes,
            drain("function", functions),
            drain("service", services),
            drain("trigger", triggers),
            drain("job", jobs),
        )
    };
    // Beside the controllers, on the same lease: one replica scales at a time.
    let autoscaler = crate::autoscale::run(
        client.clone(),
        ctx.config.operator_namespace.clone(),
        ctx.config.scale_to_zero_after,
    );
    // The secrets' watch ends with the controllers (it never ends on its own).
    tokio::select! {
        _ = secret_watch => {}
        _ = controllers => {}
        () = autoscaler => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ready_condition_follows_the_phase_and_keeps_its_transition_time() {
        let building = json!({"phase": "Building", "message": "building version 1"});
        let first = ready_condition(&building, None, Some(2), "t1");
        assert_eq!(first["status"], "False");
        assert_eq!(first["reason"], "Building");
        assert_eq!(first["message"], "building version 1");
        assert_eq!(first["observedGeneration"], 2);
        assert_eq!(first["lastTransitionTime"], "t1");

        let failed = json!({"phase": "Failed", "message": "boom"});
        let still_false = ready_condition(&failed, Some(&json!([first])), Some(2), "t2");
        assert_eq!(still_false["lastTransitionTime"], "t1");
        assert_eq!(still_false["reason"], "Failed");

        let ready = json!({"phase": "Ready"});
        let flipped = ready_condition(&ready, Some(&json!([still_false])), Some(3), "t3");
        assert_eq!(flipped["status"], "True");
        assert_eq!(flipped["lastTransitionTime"], "t3");

        let trigger = ready_condition(&json!({"active": true}), None, None, "t4");
        assert_eq!(
            (&trigger["status"], &trigger["reason"]),
            (&json!("True"), &json!("Active"))
        );
        assert!(trigger.get("observedGeneration").is_none());
    }
}
