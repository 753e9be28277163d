//! The Deployment and Service of a Function or a Service resource.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, HTTPGetAction, PodSpec, PodTemplateSpec, Probe,
    Service as KubeService, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{
    IMAGE_PULL_POLICY, RUNTIME_UID, TMP_MOUNT, empty_dir, env_vars, limits, metadata, mount,
    pull_secrets, restricted, restricted_pod,
};
use crate::KubeConfig;
use crate::autoscale::{ANNOTATION_SCALING, Bounds};
use crate::names::{
    ANNOTATION_S3_KEY, FUNCTION_PORT, LABEL_COMPONENT, LABEL_NAME, component_labels,
};
use sless_core::model::{Kind, WorkloadSpec, deploy_namespace};

/// Rolls a pod when a new build reuses the image tag (docs/spec.md §3).
pub const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";
pub const COMPONENT: &str = "workload";
const CONTAINER: &str = "function";

/// What a Deployment is made from.
pub struct Workload<'a> {
    pub kind: Kind,
    pub namespace: &'a str,
    pub name: &'a str,
    pub spec: &'a WorkloadSpec,
    pub image: &'a str,
    /// The replicas the autoscaler keeps it in; it sets them (`spec.replicas` is not
    /// applied, so the operator never fights an autoscaler over it).
    pub bounds: Bounds,
    /// `lastBuiltAt` of the build the image comes from.
    pub restarted_at: Option<&'a str>,
}

/// Labels that pick the pods of one workload; immutable once the Deployment exists.
fn selector_labels(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_NAME.to_string(), name.to_string()),
        (LABEL_COMPONENT.to_string(), COMPONENT.to_string()),
    ])
}

fn health_probe(initial_delay: i32, period: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some("/health".into()),
            port: IntOrString::Int(FUNCTION_PORT),
            ..HTTPGetAction::default()
        }),
        initial_delay_seconds: Some(initial_delay),
        period_seconds: Some(period),
        timeout_seconds: Some(3),
        failure_threshold: Some(3),
        ..Probe::default()
    }
}

pub fn deployment(workload: &Workload, config: &KubeConfig) -> Deployment {
    let spec = workload.spec;
    let labels = component_labels(workload.kind, workload.namespace, workload.name, COMPONENT);
    let mut env = spec.env.clone();
    // The platform's variables win over the user's: the probes depend on PORT.
    env.insert("PORT".into(), FUNCTION_PORT.to_string());
    env.insert("SLESS_ENTRYPOINT".into(), spec.entrypoint.clone());
    let mut pod_annotations = BTreeMap::new();
    if let Some(at) = workload.restarted_at {
        pod_annotations.insert(RESTARTED_AT.to_string(), at.to_string());
    }
    let mut annotations: BTreeMap<String, String> = spec
        .s3_key
        .iter()
        .map(|key| (ANNOTATION_S3_KEY.to_string(), key.clone()))
        .collect();
    annotations.insert(ANNOTATION_SCALING.to_string(), workload.bounds.annotation());
    Deployment {
        metadata: metadata(
            workload.name,
            &deploy_namespace(workload.namespace),
            labels.clone(),
            annotations,
        ),
        spec: Some(DeploymentSpec {
            revision_history_limit: Some(3),
            selector: LabelSelector {
                match_labels: Some(selector_labels(workload.name)),
                ..LabelSelector::default()
            },
            // The old pod serves until the new one is ready.
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_surge: Some(IntOrString::Int(1)),
                    max_unavailable: Some(IntOrString::Int(0)),
                }),
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    annotations: (!pod_annotations.is_empty()).then_some(pod_annotations),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    automount_service_account_token: Some(false),
                    enable_service_links: Some(false),
                    image_pull_secrets: pull_secrets(config),
                    security_context: Some(restricted_pod(RUNTIME_UID)),
                    containers: vec![Container {
                        name: CONTAINER.into(),
                        image: Some(workload.image.to_string()),
                        // Tags are content-addressed (sha of the upload's key): a node that
                        // has the image has this image. Only sless names images in pods.
                        image_pull_policy: Some(IMAGE_PULL_POLICY.into()),
                        env: Some(env_vars(&env)),
                        ports: Some(vec![ContainerPort {
                            name: Some("http".into()),
                            container_port: FUNCTION_PORT,
                            protocol: Some("TCP".into()),
                            ..ContainerPort::default()
                        }]),
                        resources: Some(limits(spec.memory_mb, spec.cpu_millis, spec.disk_mb)),
                        readiness_probe: Some(health_probe(1, 5)),
                        liveness_probe: Some(health_probe(10, 10)),
                        security_context: Some(restricted(
                            RUNTIME_UID,
                            spec.runtime.descriptor().read_only_root,
                        )),
                        volume_mounts: Some(vec![mount("tmp", TMP_MOUNT, false)]),
                        ..Container::default()
                    }],
                    volumes: Some(vec![empty_dir("tmp")]),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
}

/// The ClusterIP Service the `/fn` proxy and cron triggers call:
/// `<name>.sless-fn-<ns>.svc.<cluster-domain>:8080`.
pub fn service(kind: Kind, namespace: &str, name: &str) -> KubeService {
    KubeService {
        metadata: metadata(
            name,
            &deploy_namespace(namespace),
            component_labels(kind, namespace, name, COMPONENT),
            BTreeMap::new(),
        ),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(selector_labels(name)),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: FUNCTION_PORT,
                target_port: Some(IntOrString::Int(FUNCTION_PORT)),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..KubeService::default()
    }
}
