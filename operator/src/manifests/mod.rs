//! Manifest builders: pure functions from a spec and the [`KubeConfig`](super::KubeConfig)
//! to k8s-openapi objects. Nothing here talks to a cluster.

pub mod build;
pub mod cron;
pub mod network;
pub mod quota;
pub mod run;
pub mod workload;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, EmptyDirVolumeSource, EnvVar, LocalObjectReference, Namespace,
    PodSecurityContext, PodSpec, PodTemplateSpec, ResourceRequirements, SeccompProfile, Secret,
    SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub use build::{BuildJob, build_job};
pub use cron::{CronTrigger, cron_job, http_ingress, trigger_token_secret};
pub use network::{
    build_boundary, build_egress_policy, cron_egress, data_plane_ingress, default_deny,
    egress_policy,
};
pub use quota::{TenantQuota, limit_range, resource_quota};
pub use run::{RunJob, run_job};
pub use workload::{Workload, deployment, service};

use super::names::{MANAGED_BY, MANAGER};

/// The uid/gid of the runtime images (`runtimes/*/Dockerfile`).
pub const RUNTIME_UID: i64 = 10001;
/// The uid/gid of the curl image's user.
pub const CURL_UID: i64 = 100;
/// Function images: their tags are content-addressed, so a cached image is the right one.
pub const IMAGE_PULL_POLICY: &str = "IfNotPresent";
/// Scratch space for code that writes temporary files under a read-only root.
pub const TMP_MOUNT: &str = "/tmp";

/// The deploy namespace of a user namespace.
pub fn namespace(
    name: &str,
    user_namespace: Option<&str>,
    pod_security: Option<PodSecurity>,
) -> Namespace {
    let mut labels = BTreeMap::from([(MANAGED_BY.to_string(), MANAGER.to_string())]);
    if let Some(user) = user_namespace {
        labels.insert(super::names::LABEL_NAMESPACE.to_string(), user.to_string());
    }
    if let Some(level) = pod_security {
        for mode in ["enforce", "audit", "warn"] {
            labels.insert(
                format!("pod-security.kubernetes.io/{mode}"),
                level.as_str().to_string(),
            );
        }
    }
    Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    }
}

/// The component label of the objects that bound a whole deploy namespace
/// (NetworkPolicies, ResourceQuota, LimitRange).
pub const TENANT_COMPONENT: &str = "tenant";

/// Labels of a deploy namespace's own objects: whose namespace they bound.
pub fn tenant_labels(user_namespace: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY.to_string(), MANAGER.to_string()),
        (
            super::names::LABEL_NAMESPACE.to_string(),
            user_namespace.to_string(),
        ),
        (
            super::names::LABEL_COMPONENT.to_string(),
            TENANT_COMPONENT.to_string(),
        ),
    ])
}

/// The Pod Security Standard a namespace enforces (its `pod-security.kubernetes.io`
/// labels).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodSecurity {
    /// Function pods: non-root, no privilege escalation, RuntimeDefault seccomp.
    Restricted,
    /// Build pods: rootless BuildKit needs unconfined seccomp/AppArmor and setuid
    /// newuidmap (privilege escalation); it still never runs as root.
    Privileged,
}

impl PodSecurity {
    fn as_str(self) -> &'static str {
        match self {
            PodSecurity::Restricted => "restricted",
            PodSecurity::Privileged => "privileged",
        }
    }
}

/// The ClusterRole the operator binds to itself in each namespace it made, to copy the
/// registry secrets there; never bound cluster-wide (operator/deploy/rbac.yaml), and
/// the admission policy lets the operator bind no other.
pub const SECRETS_ROLE: &str = "sless-operator-secrets";

/// The binding of [`SECRETS_ROLE`] to the operator's service account in `namespace`.
pub fn secrets_role_binding(
    namespace: &str,
    service_account: &str,
    operator_namespace: &str,
) -> RoleBinding {
    RoleBinding {
        metadata: ObjectMeta {
            name: Some(SECRETS_ROLE.to_string()),
            namespace: Some(namespace.to_string()),
            labels: Some(BTreeMap::from([(
                MANAGED_BY.to_string(),
                MANAGER.to_string(),
            )])),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: SECRETS_ROLE.into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: service_account.to_string(),
            namespace: Some(operator_namespace.to_string()),
            ..Subject::default()
        }]),
    }
}

/// A registry secret as it is copied into a namespace sless made: same name, type and
/// data, none of the source's server-set metadata.
pub fn registry_secret_copy(source: &Secret, namespace: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: source.metadata.name.clone(),
            namespace: Some(namespace.to_string()),
            labels: Some(BTreeMap::from([(
                MANAGED_BY.to_string(),
                MANAGER.to_string(),
            )])),
            ..ObjectMeta::default()
        },
        type_: source.type_.clone(),
        data: source.data.clone(),
        ..Secret::default()
    }
}

/// Sorted `name=value` pairs: a stable pod template means no spurious rollouts.
pub fn env_vars(env: &BTreeMap<String, String>) -> Vec<EnvVar> {
    env.iter()
        .map(|(name, value)| EnvVar {
            name: name.clone(),
            value: Some(value.clone()),
            ..EnvVar::default()
        })
        .collect()
}

fn metadata(
    name: &str,
    namespace: &str,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(namespace.to_string()),
        labels: Some(labels),
        annotations: (!annotations.is_empty()).then_some(annotations),
        ..ObjectMeta::default()
    }
}

/// The pod of a Job (build, run, cron tick): runs once, gets no API token and no
/// service-link variables.
fn one_shot_pod(labels: BTreeMap<String, String>, spec: PodSpec) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels),
            ..ObjectMeta::default()
        }),
        spec: Some(PodSpec {
            restart_policy: Some("Never".into()),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            ..spec
        }),
    }
}

fn runtime_default_seccomp() -> SeccompProfile {
    SeccompProfile {
        type_: "RuntimeDefault".into(),
        ..SeccompProfile::default()
    }
}

/// The Pod Security Standards "restricted" profile for one container.
fn restricted(uid: i64, read_only_root: bool) -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        run_as_non_root: Some(true),
        run_as_user: Some(uid),
        run_as_group: Some(uid),
        read_only_root_filesystem: Some(read_only_root),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Capabilities::default()
        }),
        seccomp_profile: Some(runtime_default_seccomp()),
        ..SecurityContext::default()
    }
}

fn restricted_pod(uid: i64) -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(uid),
        run_as_group: Some(uid),
        fs_group: Some(uid),
        seccomp_profile: Some(runtime_default_seccomp()),
        ..PodSecurityContext::default()
    }
}

fn empty_dir(name: &str) -> Volume {
    Volume {
        name: name.to_string(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    }
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.to_string(),
        mount_path: path.to_string(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

fn pull_secrets(config: &super::KubeConfig) -> Option<Vec<LocalObjectReference>> {
    config.pull_secret().map(|name| {
        vec![LocalObjectReference {
            name: name.to_string(),
        }]
    })
}

/// A function's container: limits from `memory_mb`, `cpu_millis` and `disk_mb` (the
/// ephemeral storage of its writable layer, `/tmp` and logs); it asks for its memory
/// and a little CPU, so a node packs many idle functions.
fn limits(memory_mb: u32, cpu_millis: u32, disk_mb: u32) -> ResourceRequirements {
    let memory = quantity(format!("{memory_mb}Mi"));
    ResourceRequirements {
        limits: Some(BTreeMap::from([
            ("memory".into(), memory.clone()),
            ("cpu".into(), quantity(format!("{cpu_millis}m"))),
            ("ephemeral-storage".into(), quantity(format!("{disk_mb}Mi"))),
        ])),
        requests: Some(BTreeMap::from([
            ("memory".into(), memory),
            ("cpu".into(), quantity("50m".into())),
        ])),
        ..ResourceRequirements::default()
    }
}

fn quantity(text: String) -> k8s_openapi::apimachinery::pkg::api::resource::Quantity {
    k8s_openapi::apimachinery::pkg::api::resource::Quantity(text)
}

/// An image reference carries a tag or digest and the tag is not `latest`.
pub fn is_pinned(image: &str) -> bool {
    if image.contains('@') {
        return true;
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.rsplit_once(':') {
        Some((_, tag)) => !tag.is_empty() && tag != "latest",
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_images() {
        assert!(is_pinned("moby/buildkit:v0.23.2-rootless"));
        assert!(is_pinned("registry:5000/a/b:1.0"));
        assert!(is_pinned("a/b@sha256:abc"));
        assert!(!is_pinned("registry:5000/a/b"));
        assert!(!is_pinned("curlimages/curl:latest"));
        assert!(!is_pinned("curlimages/curl"));
        for image in [
            super::super::BUILDKIT_IMAGE,
            super::super::KANIKO_IMAGE,
            super::super::CURL_IMAGE,
        ] {
            assert!(is_pinned(image), "{image}");
        }
    }

    #[test]
    fn env_is_sorted() {
        let env = BTreeMap::from([
            ("ZED".to_string(), "1".to_string()),
            ("ALPHA".to_string(), "2".to_string()),
        ]);
        let names: Vec<_> = env_vars(&env).into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["ALPHA", "ZED"]);
    }

    #[test]
    fn registry_secret_copy_keeps_type_and_data_only() {
        let source = Secret {
            metadata: ObjectMeta {
                name: Some("regcred".into()),
                namespace: Some("sless-system".into()),
                resource_version: Some("42".into()),
                uid: Some("u".into()),
                ..ObjectMeta::default()
            },
            type_: Some("kubernetes.io/dockerconfigjson".into()),
            data: Some(BTreeMap::from([(
                ".dockerconfigjson".to_string(),
                k8s_openapi::ByteString(b"{}".to_vec()),
            )])),
            ..Secret::default()
        };
        let copy = registry_secret_copy(&source, "sless-fn-sless-ab");
        assert_eq!(
            copy.metadata.namespace.as_deref(),
            Some("sless-fn-sless-ab")
        );
        assert_eq!(copy.metadata.name.as_deref(), Some("regcred"));
        assert_eq!(copy.metadata.resource_version, None);
        assert_eq!(copy.metadata.uid, None);
        assert_eq!(copy.type_, source.type_);
        assert_eq!(copy.data, source.data);
    }
}
