//! Pod logs: the build log tail of a failed build, the result line of a job run, and
//! the API's build-log endpoint. Behind a trait because an in-memory API server
//! (the tests') serves no logs.

use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, LogParams};
use kube::{Api, Client, ResourceExt};

use super::manifests::build::{BUILD_CONTAINER, COMPONENT as BUILD_COMPONENT, PUSH_CONTAINER};
use super::names::{LABEL_COMPONENT, owner_selector};
use sless_core::logs::{Following, LogFilter, LogLine, Stream, WorkloadLogs};
use sless_core::model::{Kind, build_namespace, deploy_namespace};

/// The largest log read from one pod.
const MAX_LOG_BYTES: i64 = 512 * 1024;

#[async_trait::async_trait]
pub trait PodLogs: Send + Sync + 'static {
    /// The log of one container of the newest pod of a Job, if it has a pod.
    async fn job_log(&self, namespace: &str, job: &str, container: &str) -> Option<String>;
}

pub struct KubePodLogs {
    client: Client,
}

impl KubePodLogs {
    pub fn new(client: Client) -> Self {
        Self { client }
    }
}

#[async_trait::async_trait]
impl PodLogs for KubePodLogs {
    async fn job_log(&self, namespace: &str, job: &str, container: &str) -> Option<String> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        // Set by the Job controller on every pod it creates.
        let selector = format!("batch.kubernetes.io/job-name={job}");
        let list = match pods.list(&ListParams::default().labels(&selector)).await {
            Ok(list) => list,
            Err(e) => {
                tracing::warn!(%namespace, %job, error = %e, "cannot list the pods of a job");
                return None;
            }
        };
        let newest = list
            .items
            .into_iter()
            .max_by_key(|pod| pod.creation_timestamp().map(|t| t.0))?;
        let params = LogParams {
            container: Some(container.to_string()),
            limit_bytes: Some(MAX_LOG_BYTES),
            ..LogParams::default()
        };
        match pods.logs(&newest.name_any(), &params).await {
            Ok(text) => Some(text),
            Err(e) => {
                tracing::warn!(%namespace, %job, error = %e, "cannot read a pod log");
                None
            }
        }
    }
}

/// The API's view of logs in Kubernetes mode. Instance output lives in the cluster's
/// log pipeline; `tail` says where to find it instead of copying it.
pub struct KubeWorkloadLogs {
    client: Client,
    pods: Arc<dyn PodLogs>,
}

impl KubeWorkloadLogs {
    pub fn new(client: Client, pods: Arc<dyn PodLogs>) -> Self {
        Self { client, pods }
    }
}

#[async_trait::async_trait]
impl WorkloadLogs for KubeWorkloadLogs {
    fn lines(&self, namespace: &str, name: &str, _query: &LogFilter) -> Vec<LogLine> {
        vec![LogLine {
            time: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            stream: Stream::Stderr,
            version: "-".into(),
            request_id: None,
            line: format!(
                "[sless] instance logs are in the cluster (each line starts with the \
                 [request id] of the call that printed it): kubectl logs -n {} deploy/{name}",
                deploy_namespace(namespace)
            ),
        }]
    }

    fn follow(&self, _namespace: &str, _name: &str, _query: &LogFilter) -> Option<Following> {
        None
    }

    async fn build_log(&self, kind: Kind, namespace: &str, name: &str) -> Option<String> {
        let build_ns = build_namespace(namespace);
        let jobs: Api<Job> = Api::namespaced(self.client.clone(), &build_ns);
        let selector = format!(
            "{},{LABEL_COMPONENT}={BUILD_COMPONENT}",
            owner_selector(kind, namespace, name)
        );
        let list = jobs
            .list(&ListParams::default().labels(&selector))
            .await
            .ok()?;
        let newest = list
            .items
            .into_iter()
            .max_by_key(|job| job.creation_timestamp().map(|t| t.0))?;
        let job = newest.name_any();
        let build = self.pods.job_log(&build_ns, &job, BUILD_CONTAINER).await?;
        // The push step's lines follow the build's once it has run.
        match self.pods.job_log(&build_ns, &job, PUSH_CONTAINER).await {
            Some(push) if !push.trim().is_empty() => Some(format!("{build}{push}")),
            _ => Some(build),
        }
    }
}
