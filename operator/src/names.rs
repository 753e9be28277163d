//! Names and labels of the objects the controllers make, and how they find them again.
//! Owner references cannot cross namespaces, so children in `sless-fn-<ns>` carry
//! labels naming their owner; finalizers delete by those labels.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use sless_core::model::{Kind, deploy_namespace};

pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const MANAGER: &str = "sless";
/// The user namespace of the owning resource.
pub const LABEL_NAMESPACE: &str = "sless.kube5s.ru/namespace";
/// `function`, `service`, `trigger` or `job` (a FunctionJob).
pub const LABEL_KIND: &str = "sless.kube5s.ru/kind";
pub const LABEL_NAME: &str = "sless.kube5s.ru/name";
/// What the child is for: `build`, `workload`, `cron`, `ingress`, `run`.
pub const LABEL_COMPONENT: &str = "sless.kube5s.ru/component";
/// The function a CronJob or Ingress calls, so deleting the function finds them.
pub const LABEL_FUNCTION: &str = "sless.kube5s.ru/function";
/// The s3Key a build Job or Deployment comes from (the full key, not a label).
pub const ANNOTATION_S3_KEY: &str = "sless.kube5s.ru/s3-key";
/// On a FunctionJob: the build of `last-built-s3key` failed.
pub const ANNOTATION_BUILD_FAILED: &str = "sless.kube5s.ru/last-build-failed";
/// On a run Job: the version of the code it runs (its record's, whatever the status
/// cache a reconcile read).
pub const ANNOTATION_VERSION: &str = "sless.kube5s.ru/version";
/// Keeps a resource until its children in the deploy namespace are gone.
pub const FINALIZER: &str = "sless.kube5s.ru/cleanup";
/// The field manager of server-side apply.
pub const FIELD_MANAGER: &str = "sless-operator";
/// The port every runtime listens on.
pub const FUNCTION_PORT: i32 = 8080;

/// Most Kubernetes names are DNS-1123 labels.
const MAX_NAME: usize = 63;
/// A CronJob's Jobs get an 11-character suffix.
const MAX_CRONJOB_NAME: usize = 52;

pub fn owner_labels(kind: Kind, namespace: &str, name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY.to_string(), MANAGER.to_string()),
        (LABEL_NAMESPACE.to_string(), namespace.to_string()),
        (LABEL_KIND.to_string(), kind.noun().to_string()),
        (LABEL_NAME.to_string(), name.to_string()),
    ])
}

pub fn component_labels(
    kind: Kind,
    namespace: &str,
    name: &str,
    component: &str,
) -> BTreeMap<String, String> {
    let mut labels = owner_labels(kind, namespace, name);
    labels.insert(LABEL_COMPONENT.to_string(), component.to_string());
    labels
}

/// `k=v,k=v` for list calls.
pub fn selector(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

pub fn owner_selector(kind: Kind, namespace: &str, name: &str) -> String {
    selector(&owner_labels(kind, namespace, name))
}

/// Who owns a child, read back from its labels.
pub fn owner_of(labels: &BTreeMap<String, String>) -> Option<(Kind, String, String)> {
    if labels.get(MANAGED_BY).map(String::as_str) != Some(MANAGER) {
        return None;
    }
    let kind = labels.get(LABEL_KIND)?;
    let kind = Kind::ALL.into_iter().find(|k| k.noun() == kind)?;
    Some((
        kind,
        labels.get(LABEL_NAMESPACE)?.clone(),
        labels.get(LABEL_NAME)?.clone(),
    ))
}

fn short_hash(text: &str, len: usize) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))[..len].to_string()
}

/// `base + suffix` if it fits in `max`; otherwise a cut `base`, a hash of the whole
/// base (so two long names stay apart) and the suffix.
pub fn fit(base: &str, suffix: &str, max: usize) -> String {
    if base.len() + suffix.len() <= max {
        return format!("{base}{suffix}");
    }
    let hash = short_hash(base, 8);
    let keep = max.saturating_sub(suffix.len() + hash.len() + 1);
    let cut = base[..keep.min(base.len())].trim_end_matches('-');
    format!("{cut}-{hash}{suffix}")
}

/// The build Job of one upload: one per s3Key, so the same upload is never built twice.
pub fn build_job_name(name: &str, s3_key: &str) -> String {
    fit(
        name,
        &format!("-build-{}", short_hash(s3_key, 10)),
        MAX_NAME,
    )
}

/// The Job of one FunctionJob run.
pub fn run_job_name(name: &str, run_id: i64) -> String {
    fit(name, &format!("-run-{run_id}"), MAX_NAME)
}

pub fn cron_job_name(trigger: &str) -> String {
    fit(trigger, "", MAX_CRONJOB_NAME)
}

pub fn ingress_name(trigger: &str) -> String {
    fit(trigger, "-http", MAX_NAME)
}

/// The Service DNS name of a workload inside the cluster.
pub fn service_host(namespace: &str, name: &str, cluster_domain: &str) -> String {
    format!(
        "{name}.{}.svc.{}",
        deploy_namespace(namespace),
        cluster_domain.trim_matches('.')
    )
}

/// `host:port` the `/fn` proxy forwards to.
pub fn service_authority(namespace: &str, name: &str, cluster_domain: &str) -> String {
    format!(
        "{}:{FUNCTION_PORT}",
        service_host(namespace, name, cluster_domain)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_in_a_label() {
        let long = "a".repeat(63);
        let build = build_job_name(&long, "contexts/ns/x/1.tar.gz");
        assert!(build.len() <= 63, "{build}");
        assert!(build.contains("-build-"));
        assert_ne!(
            build_job_name(&long, "contexts/ns/x/1.tar.gz"),
            build_job_name(&long, "contexts/ns/x/2.tar.gz")
        );
        assert_eq!(run_job_name("nightly", 3), "nightly-run-3");
        assert!(run_job_name(&long, i64::MAX).len() <= 63);
        assert!(cron_job_name(&long).len() <= 52);
        assert_eq!(cron_job_name("tick"), "tick");
        // Two long names with one prefix stay apart.
        let other = format!("{}b", "a".repeat(62));
        assert_ne!(cron_job_name(&long), cron_job_name(&other));
        assert!(!fit(&"a-".repeat(40), "", 52).contains("--"));
    }

    #[test]
    fn owners_round_trip_through_labels() {
        let labels = component_labels(Kind::FunctionJob, "sless-ab", "nightly", "run");
        assert_eq!(
            owner_of(&labels),
            Some((Kind::FunctionJob, "sless-ab".into(), "nightly".into()))
        );
        assert_eq!(
            owner_selector(Kind::Function, "ns", "f"),
            "app.kubernetes.io/managed-by=sless,sless.kube5s.ru/kind=function,\
             sless.kube5s.ru/name=f,sless.kube5s.ru/namespace=ns"
        );
        let mut foreign = labels.clone();
        foreign.insert(MANAGED_BY.into(), "helm".into());
        assert_eq!(owner_of(&foreign), None);
    }

    #[test]
    fn service_authority_uses_the_cluster_domain() {
        assert_eq!(
            service_authority("sless-ab", "hello", "cluster.local"),
            "hello.sless-fn-sless-ab.svc.cluster.local:8080"
        );
        assert_eq!(
            service_host("sless-ab", "hello", "corp.example."),
            "hello.sless-fn-sless-ab.svc.corp.example"
        );
    }
}
