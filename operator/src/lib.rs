//! The Kubernetes platform (docs/spec.md §10): the store seam on CustomResources, the kube-rs
//! controllers that turn them into Jobs, Deployments, Services and CronJobs in
//! `sless-fn-<ns>`, the `/fn` route table on Service DNS, and the CRDs.
//!
//! Manifests are pure functions of a spec and a [`KubeConfig`] (see [`manifests`]), so
//! tests check them without a cluster; the reconcilers in [`controller`] only decide
//! which of them to apply or delete.

pub mod autoscale;
pub mod context_url;
pub mod controller;
pub mod crds;
pub mod health;
pub mod job_records;
pub mod leader;
pub mod logs;
pub mod manifests;
pub mod names;
pub mod readiness;
pub mod routes;
pub mod store;

use std::time::Duration;

use sless_core::auth::TriggerKey;

pub use context_url::{ContextUrls, PresignError, S3ContextUrls};
pub use controller::{Context, Error, run_controllers};
pub use leader::LeaderElection;
pub use logs::{KubePodLogs, KubeWorkloadLogs, PodLogs};
pub use readiness::Readiness;
pub use routes::KubeRoutes;
pub use store::KubeStore;

/// BuildKit, rootless, run daemonless inside the build Job (the default builder).
pub const BUILDKIT_IMAGE: &str = "moby/buildkit:v0.23.2-rootless";
/// The maintained kaniko fork (osscontainertools/kaniko; Google's repository was
/// archived in 2025), for clusters that cannot run rootless BuildKit.
pub const KANIKO_IMAGE: &str = "martizih/kaniko:v1.27.6";
/// Fetches build contexts and fires cron triggers.
pub const CURL_IMAGE: &str = "curlimages/curl:8.11.1";
/// Pushes a build's image (go-containerregistry's crane, distroless).
pub const CRANE_IMAGE: &str = "gcr.io/go-containerregistry/crane:v0.20.3";

/// The Service of the data plane (`operator/deploy/operator.yaml`).
pub const DATA_PLANE_SERVICE: &str = "sless-operator";

/// Which tool a build Job runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Builder {
    #[default]
    BuildKit,
    Kaniko,
}

/// The pinned images the controllers put into Jobs and CronJobs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Images {
    pub buildkit: String,
    pub kaniko: String,
    pub curl: String,
    pub crane: String,
}

impl Default for Images {
    fn default() -> Self {
        Self {
            buildkit: BUILDKIT_IMAGE.into(),
            kaniko: KANIKO_IMAGE.into(),
            curl: CURL_IMAGE.into(),
            crane: CRANE_IMAGE.into(),
        }
    }
}

/// Used only when no external URL is configured (docs/spec.md §10: Ingress only then).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IngressConfig {
    pub class: Option<String>,
    /// Host of the Ingress rules and of the URLs written to trigger status.
    pub host: Option<String>,
    /// The ingress controller's namespace, allowed to call functions by their
    /// NetworkPolicy (whether or not sless makes the Ingresses).
    pub namespace: Option<String>,
}

#[derive(Clone, Debug)]
pub struct KubeConfig {
    /// Where builds push: `<registry>/sless-<ns>-<name>:<sha12 of s3Key>`.
    pub registry: String,
    /// A `kubernetes.io/dockerconfigjson` Secret in `operator_namespace` that can push:
    /// copied only into build namespaces and mounted only by a build's push step, never
    /// by a container that runs tenant code.
    pub registry_secret: Option<String>,
    /// A pull-only dockerconfigjson Secret in `operator_namespace`: every pod's
    /// `imagePullSecret` (copied into deploy and build namespaces) and the build step's
    /// credential for private base images. Unset, pods pull with `registry_secret`
    /// (only the kubelet sees it) and builds pull base images anonymously.
    pub registry_pull_secret: Option<String>,
    /// The namespace the operator runs in (where `registry_secret` lives).
    pub operator_namespace: String,
    /// The operator's service account, bound to the secrets role in each namespace it
    /// copies a registry secret into.
    pub service_account: String,
    pub builder: Builder,
    pub images: Images,
    /// For `http://<name>.sless-fn-<ns>.svc.<cluster_domain>:8080`.
    pub cluster_domain: String,
    /// Base of the URLs in status (`<external_url>/fn/<ns>/<name>`).
    pub external_url: Option<String>,
    pub ingress: IngressConfig,
    /// Push to and pull from the registry over plain HTTP (a registry inside the cluster).
    pub insecure_registry: bool,
    /// How long the presigned URL of a build context stays valid.
    pub context_url_ttl: Duration,
    /// A build Job is stopped after this long.
    pub build_timeout: Duration,
    /// Ready objects are looked at again this often, so a child deleted by hand comes back.
    pub ready_requeue: Duration,
    /// How often running builds and jobs are polled.
    pub poll_interval: Duration,
    /// Runs each job keeps in its status (`--job-runs-kept`).
    pub job_runs_kept: usize,
    /// The ResourceQuota of every deploy namespace.
    pub tenant_quota: manifests::TenantQuota,
    /// A workload without calls for this long is scaled down to its `min_instances`.
    pub scale_to_zero_after: Duration,
    /// Signs the token each tenant's cron pods show the data plane.
    pub trigger_key: TriggerKey,
    /// Where cron pods call `/fn`; unset, the data plane's Service in the operator's
    /// namespace ([`KubeConfig::data_plane_url`]).
    pub data_plane_url: Option<String>,
    /// `host[:port]` or URLs every build pod must reach (S3, the registries, an
    /// external BuildKit daemon): the build namespaces' NetworkPolicy allows them.
    pub build_endpoints: Vec<String>,
    /// Build pods run in a user namespace of their own (`hostUsers: false`; Kubernetes
    /// 1.30+ with the feature, and a runtime that supports it).
    pub build_user_namespaces: bool,
    /// A BuildKit daemon builds run on (`buildctl --addr`), instead of a rootless one
    /// in each build pod, which then needs no privilege.
    pub buildkit_addr: Option<String>,
}

impl KubeConfig {
    pub fn new(registry: impl Into<String>) -> Self {
        let registry = registry.into();
        Self {
            build_endpoints: vec![registry.clone()],
            build_user_namespaces: false,
            buildkit_addr: None,
            registry,
            registry_secret: None,
            registry_pull_secret: None,
            operator_namespace: "sless-system".into(),
            service_account: "sless-operator".into(),
            builder: Builder::default(),
            images: Images::default(),
            cluster_domain: "cluster.local".into(),
            external_url: None,
            ingress: IngressConfig::default(),
            insecure_registry: false,
            context_url_ttl: Duration::from_secs(3600),
            build_timeout: Duration::from_secs(1800),
            ready_requeue: Duration::from_secs(300),
            poll_interval: Duration::from_secs(10),
            job_runs_kept: sless_core::model::DEFAULT_JOB_RUNS_KEPT,
            tenant_quota: manifests::TenantQuota::default(),
            scale_to_zero_after: autoscale::DEFAULT_SCALE_TO_ZERO_AFTER,
            // `sless operator` sets the install's own; a random one serves a process
            // that is both sides.
            trigger_key: TriggerKey::random(),
            data_plane_url: None,
        }
    }

    /// The base URL cron pods call `/fn/<ns>/<fn>/` under.
    pub fn data_plane_url(&self) -> String {
        match &self.data_plane_url {
            Some(url) => url.trim_end_matches('/').to_string(),
            None => format!(
                "http://{DATA_PLANE_SERVICE}.{}.svc.{}:8080",
                self.operator_namespace, self.cluster_domain
            ),
        }
    }

    /// Whether build pods run only unprivileged steps (the build namespaces can then be
    /// `restricted`): kaniko and in-pod BuildKit cannot.
    pub fn builds_unprivileged(&self) -> bool {
        self.builder == Builder::BuildKit && self.buildkit_addr.is_some()
    }

    /// The Secret pods pull images with.
    pub fn pull_secret(&self) -> Option<&str> {
        self.registry_pull_secret
            .as_deref()
            .or(self.registry_secret.as_deref())
    }

    /// The public URL of `/fn/<ns>/<name>`, when one is known.
    pub fn function_url(&self, namespace: &str, name: &str) -> Option<String> {
        let base = match (&self.external_url, &self.ingress.host) {
            (Some(url), _) => url.trim_end_matches('/').to_string(),
            (None, Some(host)) => format!("http://{host}"),
            (None, None) => return None,
        };
        Some(format!("{base}/fn/{namespace}/{name}"))
    }
}

/// The client [`connect`] gives, for crates that do not depend on kube.
pub use kube::Client as KubeClient;

/// How long start-up waits for the API server's first answer.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// How long a request may wait for the head of its response (a watch's comes at once):
/// one that never answers fails and its reconcile is retried, instead of holding it
/// forever (kube sets no read timeout). The API server ends its own requests after 60 s.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(70);

/// A client whose requests fail after `timeout` without the head of a response.
fn client(config: kube::Config, timeout: Duration) -> kube::Result<kube::Client> {
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&tower::timeout::TimeoutLayer::new(timeout))
        .build())
}

/// A client from the in-cluster service account, or the local kubeconfig, once the API
/// server answered: a wrong address fails the start with a message, not later.
pub async fn connect() -> anyhow::Result<kube::Client> {
    let config = kube::Config::infer().await.map_err(|e| {
        anyhow::anyhow!(
            "no Kubernetes configuration found ({e}); run in a pod with a service account, \
             or set KUBECONFIG to a kubeconfig file"
        )
    })?;
    let url = config.cluster_url.clone();
    let client = client(config, REQUEST_TIMEOUT)
        .map_err(|e| anyhow::anyhow!("cannot build a Kubernetes client for {url}: {e}"))?;
    match tokio::time::timeout(CONNECT_TIMEOUT, client.apiserver_version()).await {
        Ok(Ok(version)) => {
            tracing::info!(%url, version = %version.git_version, "connected to Kubernetes");
            Ok(client)
        }
        Ok(Err(e)) => anyhow::bail!(
            "cannot reach the Kubernetes API at {url} ({e}); check KUBECONFIG or the \
             pod's service account and network policy"
        ),
        Err(_) => anyhow::bail!(
            "the Kubernetes API at {url} did not answer within {} s",
            CONNECT_TIMEOUT.as_secs()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_the_api_server_never_answers_fails_after_the_timeout() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        // Accepts and reads, never answers.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
        let client = client(config, Duration::from_millis(300)).unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(10), client.apiserver_version())
            .await
            .expect("the request gave up by itself");
        assert!(answer.is_err(), "{answer:?}");
    }
}
