//! A Kubernetes API server emulator served over HTTP on loopback, so the real operator
//! binary and kube-rs clients can be tested end to end without a cluster.
//!
//! It keeps objects in memory with the API server's rules where controllers depend on
//! them: resource versions and optimistic concurrency, list/watch with selectors,
//! bookmarks and 410 Gone, merge/JSON/apply patches, status subresources, finalizers,
//! owner-reference garbage collection, CRDs with structural-schema pruning and
//! validation. It runs no controllers: tests play the Job controller and the kubelet
//! through the [`Emulator`] handle.
//!
//! Not emulated: authentication and authorization (every request is allowed), shared
//! field ownership and conflicts in server-side apply (an apply deep-merges into the
//! object, maps merging and lists replaced, after dropping what the same manager applied
//! before and now omits, even where another writer set it too), strategic merge
//! patch directives (treated as a merge patch), CEL rules (`x-kubernetes-validations`)
//! and `oneOf`/`anyOf`/`allOf`/`not` in CRD schemas, conversion between CRD versions
//! (objects are served under the requested version unchanged), pagination (`limit` and
//! `continue` are ignored: a list is one page), `resourceVersionMatch` on lists,
//! `propagationPolicy` and graceful pod deletion (deletion is background-cascading and
//! immediate unless finalizers hold it), aggregated discovery and `/openapi`, protobuf,
//! and workloads: nothing creates pods for Jobs or Deployments.

mod error;
mod http;
mod resources;
mod schema;
mod selector;
mod store;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub use error::ApiError;
use store::{Origin, Part, State};

/// Requests kept in the log; counts per (method, path) are kept for all.
const REQUEST_LOG: usize = 10_000;

/// One served request.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestRecord {
    /// The `{id}` of a `/clients/{id}` path prefix, see [`Emulator::kubeconfig_yaml_for`].
    pub client: Option<String>,
    pub method: String,
    /// Without the client prefix and the query.
    pub path: String,
    pub query: String,
    pub status: u16,
    /// The `metadata.name` of the object a POST sent (its path names only the collection).
    pub created_name: Option<String>,
    /// From the request's arrival to its response's head (a watch streams on after).
    pub duration: Duration,
}

/// A request being served: arrived, no response head yet.
#[derive(Clone, Debug, PartialEq)]
pub struct OpenRequest {
    pub client: Option<String>,
    pub method: String,
    pub path: String,
    pub query: String,
    /// How long it has been open.
    pub open_for: Duration,
}

impl RequestRecord {
    /// True for methods that can change state.
    pub fn is_write(&self) -> bool {
        matches!(self.method.as_str(), "POST" | "PUT" | "PATCH" | "DELETE")
    }
}

#[derive(Default)]
struct Requests {
    log: VecDeque<RequestRecord>,
    counts: HashMap<(String, String), u64>,
    /// Every request served so far.
    served: u64,
    /// Requests still being served, by arrival number.
    open: BTreeMap<u64, (OpenRequest, Instant)>,
    arrived: u64,
}

/// Keeps a request in [`Emulator::open_requests`] until dropped (served, or given up
/// by the client).
pub(crate) struct Opened {
    emu: Emulator,
    id: u64,
}

impl Drop for Opened {
    fn drop(&mut self) {
        lock(&self.emu.inner.requests).open.remove(&self.id);
    }
}

struct Inner {
    state: Mutex<State>,
    requests: Mutex<Requests>,
    addr: SocketAddr,
    /// True while the API server is down: see [`Emulator::set_down`].
    down: tokio::sync::watch::Sender<bool>,
}

/// A cheap handle on a running emulator's shared state.
#[derive(Clone)]
pub struct Emulator {
    inner: Arc<Inner>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `"batch/v1"` → (`"batch"`, `"v1"`); `"v1"` → (`""`, `"v1"`).
fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.split_once('/').unwrap_or(("", api_version))
}

impl Emulator {
    /// Serves on an ephemeral loopback port in a tokio task.
    pub async fn start() -> std::io::Result<(Emulator, SocketAddr)> {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    pub async fn start_on(addr: SocketAddr) -> std::io::Result<(Emulator, SocketAddr)> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let emulator = Emulator {
            inner: Arc::new(Inner {
                state: Mutex::new(State::new()),
                requests: Mutex::new(Requests::default()),
                addr,
                down: tokio::sync::watch::Sender::new(false),
            }),
        };
        let app = axum::Router::new()
            .fallback(http::handle)
            .with_state(emulator.clone());
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "kube emulator stopped serving");
            }
        });
        Ok((emulator, addr))
    }

    /// An outage: while down, every request is answered 503 and open watches end, as
    /// when clients cannot reach the API server; its state is kept for when it is back.
    pub fn set_down(&self, down: bool) {
        self.inner.down.send_replace(down);
    }

    pub(crate) fn is_down(&self) -> bool {
        *self.inner.down.borrow()
    }

    pub(crate) fn outage(&self) -> tokio::sync::watch::Receiver<bool> {
        self.inner.down.subscribe()
    }

    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// `http://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("http://{}", self.inner.addr)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.inner.state)
    }

    /// A kubeconfig for this server: namespace `default`, no credentials.
    pub fn kubeconfig_yaml(&self) -> String {
        kubeconfig(&self.url())
    }

    /// Like [`Self::kubeconfig_yaml`], but the requests of whoever uses it are logged
    /// with `client` set, so a test can tell apart what each process did.
    pub fn kubeconfig_yaml_for(&self, client: &str) -> String {
        kubeconfig(&format!("{}/clients/{client}", self.url()))
    }

    /// An object as stored, `None` when absent or of an unknown type.
    pub fn get(
        &self,
        api_version: &str,
        plural: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let (group, version) = split_api_version(api_version);
        let state = self.state();
        let res = state.find(group, version, plural)?;
        state
            .get(&res, namespace, name)
            .ok()
            .map(|o| store::present(o, &res, version))
    }

    /// Objects of one type in a namespace, or in all namespaces with `None`.
    pub fn list(&self, api_version: &str, plural: &str, namespace: Option<&str>) -> Vec<Value> {
        let (group, version) = split_api_version(api_version);
        let state = self.state();
        let Some(res) = state.find(group, version, plural) else {
            return Vec::new();
        };
        state
            .list(&res, namespace)
            .into_iter()
            .map(|o| store::present(o, &res, version))
            .collect()
    }

    fn resource(
        state: &State,
        api_version: &str,
        plural: &str,
    ) -> Result<Arc<resources::Resource>, ApiError> {
        let (group, version) = split_api_version(api_version);
        state
            .find(group, version, plural)
            .ok_or_else(ApiError::no_route)
    }

    /// Creates an object as a controller or the kubelet would, its `status` kept; the
    /// namespace comes from `metadata.namespace`.
    pub fn create(
        &self,
        api_version: &str,
        plural: &str,
        object: Value,
    ) -> Result<Value, ApiError> {
        let (_, version) = split_api_version(api_version);
        let mut state = self.state();
        let res = Self::resource(&state, api_version, plural)?;
        state.create(&res, version, None, object, Origin::Handle)
    }

    /// Replaces an object's `status`, e.g. to mark a Job complete or a pod running.
    pub fn update_status(
        &self,
        api_version: &str,
        plural: &str,
        namespace: Option<&str>,
        name: &str,
        status: Value,
    ) -> Result<Value, ApiError> {
        let (_, version) = split_api_version(api_version);
        let mut state = self.state();
        let res = Self::resource(&state, api_version, plural)?;
        let body = json!({ "status": status });
        state.update(
            &res,
            version,
            namespace,
            name,
            body,
            Part::Status,
            Origin::Handle,
        )
    }

    /// Deletes as a client would: finalizers hold the object, dependents follow it.
    pub fn delete(
        &self,
        api_version: &str,
        plural: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<(), ApiError> {
        let mut state = self.state();
        let res = Self::resource(&state, api_version, plural)?;
        state
            .delete(&res, namespace, name, &Value::Null)
            .map(|_| ())
    }

    /// Marks a Job succeeded the way the Job controller does.
    pub fn complete_job(&self, namespace: &str, name: &str) -> Result<Value, ApiError> {
        let now = store::now();
        let condition = |kind: &str, reason: &str| {
            json!({"type": kind, "status": "True", "reason": reason,
                   "message": "Reached expected number of succeeded pods",
                   "lastProbeTime": now, "lastTransitionTime": now})
        };
        let status = json!({
            "succeeded": 1, "active": 0, "startTime": now, "completionTime": now,
            "conditions": [
                condition("SuccessCriteriaMet", "CompletionsReached"),
                condition("Complete", "CompletionsReached"),
            ],
        });
        self.update_status("batch/v1", "jobs", Some(namespace), name, status)
    }

    /// Marks a Job failed the way the Job controller does once its backoff limit is hit.
    pub fn fail_job(&self, namespace: &str, name: &str) -> Result<Value, ApiError> {
        let job = self
            .get("batch/v1", "jobs", Some(namespace), name)
            .ok_or_else(|| ApiError::not_found("batch", "jobs", name))?;
        let failed = job["spec"]["backoffLimit"].as_i64().unwrap_or(6) + 1;
        let now = store::now();
        let condition = |kind: &str| {
            json!({"type": kind, "status": "True", "reason": "BackoffLimitExceeded",
                   "message": "Job has reached the specified backoff limit",
                   "lastProbeTime": now, "lastTransitionTime": now})
        };
        let status = json!({
            "failed": failed, "active": 0, "startTime": now,
            "conditions": [condition("FailureTarget"), condition("Failed")],
        });
        self.update_status("batch/v1", "jobs", Some(namespace), name, status)
    }

    /// Creates a pod for a Job from its template, as the Job controller would (name,
    /// labels and owner reference included), in `phase` and with `log` as its output.
    pub fn add_job_pod(
        &self,
        namespace: &str,
        job: &str,
        phase: &str,
        log: &str,
    ) -> Result<Value, ApiError> {
        let found = self
            .get("batch/v1", "jobs", Some(namespace), job)
            .ok_or_else(|| ApiError::not_found("batch", "jobs", job))?;
        let uid = found["metadata"]["uid"].clone();
        let template = &found["spec"]["template"];
        let mut labels = template["metadata"]["labels"].clone();
        if !labels.is_object() {
            labels = json!({});
        }
        for (key, value) in [
            ("batch.kubernetes.io/controller-uid", &uid),
            ("batch.kubernetes.io/job-name", &json!(job)),
            ("controller-uid", &uid),
            ("job-name", &json!(job)),
        ] {
            labels[key] = value.clone();
        }
        let mut pod = json!({
            "metadata": {
                "generateName": format!("{job}-"),
                "namespace": namespace,
                "labels": labels,
                "ownerReferences": [{
                    "apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": uid,
                    "controller": true, "blockOwnerDeletion": true,
                }],
            },
            "spec": template["spec"],
            "status": {"phase": phase},
        });
        if let Some(annotations) = template["metadata"].get("annotations") {
            pod["metadata"]["annotations"] = annotations.clone();
        }
        let created = self.create("v1", "pods", pod)?;
        let name = created["metadata"]["name"].as_str().unwrap_or_default();
        self.set_pod_log(namespace, name, log);
        Ok(created)
    }

    /// Reports a Deployment the way the Deployment controller does once `available` of
    /// its replicas run the newest template and are available (`Available` and
    /// `Progressing` conditions included).
    pub fn set_deployment_available(
        &self,
        namespace: &str,
        name: &str,
        available: i64,
    ) -> Result<Value, ApiError> {
        let found = self
            .get("apps/v1", "deployments", Some(namespace), name)
            .ok_or_else(|| ApiError::not_found("apps", "deployments", name))?;
        let wanted = found["spec"]["replicas"].as_i64().unwrap_or(1);
        let now = store::now();
        let enough = available >= wanted;
        let condition = |kind: &str, status: bool, reason: &str, message: &str| {
            json!({"type": kind, "status": if status { "True" } else { "False" },
                   "reason": reason, "message": message,
                   "lastUpdateTime": now, "lastTransitionTime": now})
        };
        let status = json!({
            "observedGeneration": found["metadata"]["generation"],
            "replicas": wanted, "updatedReplicas": wanted, "readyReplicas": available,
            "availableReplicas": available, "unavailableReplicas": (wanted - available).max(0),
            "conditions": [
                if enough {
                    condition("Available", true, "MinimumReplicasAvailable",
                              "Deployment has minimum availability.")
                } else {
                    condition("Available", false, "MinimumReplicasUnavailable",
                              "Deployment does not have minimum availability.")
                },
                condition("Progressing", true,
                          if enough { "NewReplicaSetAvailable" } else { "ReplicaSetUpdated" },
                          &format!("ReplicaSet \"{name}\" is progressing.")),
            ],
        });
        self.update_status("apps/v1", "deployments", Some(namespace), name, status)
    }

    /// Creates a pod of a Deployment from its template, as its ReplicaSet would, whose
    /// containers run and are ready, or (with `waiting`) wait for that reason as the
    /// kubelet reports it, e.g. `CrashLoopBackOff` after an exit by `OOMKilled`.
    pub fn add_deployment_pod(
        &self,
        namespace: &str,
        deployment: &str,
        waiting: Option<Waiting>,
    ) -> Result<Value, ApiError> {
        let found = self
            .get("apps/v1", "deployments", Some(namespace), deployment)
            .ok_or_else(|| ApiError::not_found("apps", "deployments", deployment))?;
        let template = &found["spec"]["template"];
        let containers = template["spec"]["containers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let statuses: Vec<Value> = containers
            .iter()
            .map(|c| {
                let mut status = json!({
                    "name": c["name"], "image": c["image"], "imageID": "",
                    "ready": waiting.is_none(), "started": waiting.is_none(),
                    "restartCount": 0,
                    "state": {"running": {"startedAt": store::now()}},
                });
                if let Some(w) = &waiting {
                    status["state"] =
                        json!({"waiting": {"reason": w.reason, "message": w.message}});
                    if let Some(exit) = &w.last_exit {
                        status["restartCount"] = json!(3);
                        status["lastState"] = json!({"terminated": {
                            "reason": exit, "exitCode": if exit == "OOMKilled" { 137 } else { 1 },
                        }});
                    }
                }
                status
            })
            .collect();
        let mut pod = json!({
            "metadata": {
                "generateName": format!("{deployment}-"),
                "namespace": namespace,
                "labels": template["metadata"]["labels"],
            },
            "spec": template["spec"],
            "status": {"phase": "Running", "containerStatuses": statuses},
        });
        if let Some(annotations) = template["metadata"].get("annotations") {
            pod["metadata"]["annotations"] = annotations.clone();
        }
        self.create("v1", "pods", pod)
    }

    /// What `/api/v1/namespaces/{namespace}/pods/{pod}/log` serves.
    pub fn set_pod_log(&self, namespace: &str, pod: &str, log: &str) {
        self.state().set_log(namespace, pod, log);
    }

    /// Forgets the change history, as an etcd compaction does: watches resuming from
    /// an older resource version get 410 Gone and must relist.
    pub fn compact_history(&self) {
        self.state().compact();
    }

    /// The current (latest) resource version.
    pub fn resource_version(&self) -> u64 {
        self.state().resource_version()
    }

    /// The latest requests, oldest first.
    pub fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.inner.requests).log.iter().cloned().collect()
    }

    /// The requests served after the first `seen` (those the log still holds, oldest
    /// first) and how many were served in all, to pass as `seen` next time.
    pub fn requests_after(&self, seen: u64) -> (Vec<RequestRecord>, u64) {
        let requests = lock(&self.inner.requests);
        let new = usize::try_from(requests.served.saturating_sub(seen)).unwrap_or(usize::MAX);
        let skip = requests.log.len().saturating_sub(new);
        (
            requests.log.iter().skip(skip).cloned().collect(),
            requests.served,
        )
    }

    /// How many `method` requests reached `path` (no query, no client prefix).
    pub fn request_count(&self, method: &str, path: &str) -> u64 {
        lock(&self.inner.requests)
            .counts
            .get(&(method.to_string(), path.to_string()))
            .copied()
            .unwrap_or(0)
    }

    /// The requests that arrived and have no response yet, oldest first.
    pub fn open_requests(&self) -> Vec<OpenRequest> {
        lock(&self.inner.requests)
            .open
            .values()
            .map(|(request, since)| OpenRequest {
                open_for: since.elapsed(),
                ..request.clone()
            })
            .collect()
    }

    fn open(&self, client: Option<&str>, method: &str, path: &str, query: &str) -> Opened {
        let since = Instant::now();
        let mut requests = lock(&self.inner.requests);
        requests.arrived += 1;
        let id = requests.arrived;
        let request = OpenRequest {
            client: client.map(str::to_string),
            method: method.to_string(),
            path: path.to_string(),
            query: query.to_string(),
            open_for: Duration::ZERO,
        };
        requests.open.insert(id, (request, since));
        Opened {
            emu: self.clone(),
            id,
        }
    }

    /// Moves a served request from the open ones to the log.
    fn record(&self, opened: &Opened, status: u16, created_name: Option<String>) {
        let mut requests = lock(&self.inner.requests);
        let Some((request, since)) = requests.open.remove(&opened.id) else {
            return;
        };
        *requests
            .counts
            .entry((request.method.clone(), request.path.clone()))
            .or_default() += 1;
        requests.served += 1;
        if requests.log.len() == REQUEST_LOG {
            requests.log.pop_front();
        }
        requests.log.push_back(RequestRecord {
            client: request.client,
            method: request.method,
            path: request.path,
            query: request.query,
            status,
            created_name,
            duration: since.elapsed(),
        });
    }
}

/// A container's waiting state, as the kubelet reports it.
#[derive(Clone, Debug)]
pub struct Waiting {
    /// `CrashLoopBackOff`, `ImagePullBackOff`, `ContainerCreating`, ...
    pub reason: String,
    pub message: String,
    /// The reason the previous run ended (`Error`, `OOMKilled`), if it ran.
    pub last_exit: Option<String>,
}

fn kubeconfig(server: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: kube-emulator
  cluster:
    server: {server}
contexts:
- name: kube-emulator
  context:
    cluster: kube-emulator
    user: kube-emulator
    namespace: default
current-context: kube-emulator
users:
- name: kube-emulator
  user: {{}}
"
    )
}
