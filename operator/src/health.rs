//! Whether a workload's Deployment serves the version it should, read from what the
//! Deployment controller (`status`, `Available`, `Progressing`) and the kubelet (the
//! pods' container states) report, the way Knative's `ResourcesAvailable` and
//! `ContainerHealthy` conditions read them. Pure: the reconciler fetches, this decides.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

/// Waiting reasons that do not go away without a change: a bad image, a crashing
/// program, a configuration the kubelet cannot use.
const FAILING_WAITING: [&str; 8] = [
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

/// What the cluster says of a workload's Deployment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// Every wanted replica runs the newest pod template and is available (or none is
    /// wanted).
    Available,
    /// Still rolling out; the message says how far.
    Starting { message: String },
    /// A container will not run without a change: the kubelet's reason, and a
    /// message naming the pod.
    Unhealthy { reason: String, message: String },
    /// The rollout gave up (`Progressing=False`, `ProgressDeadlineExceeded`): the
    /// Deployment controller's reason and message.
    Stalled { reason: String, message: String },
}

/// The health of `deployment`, whose pods (those of its selector) are `pods`; only
/// pods running `image` (the current build) and not being deleted are looked at.
pub fn health(deployment: &Deployment, pods: &[Pod], image: &str) -> Health {
    let wanted = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    if wanted == 0 {
        return Health::Available;
    }
    let current: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && runs_image(p, image))
        .collect();
    let rollout = rollout(deployment, wanted);
    if rollout.is_ok() {
        return Health::Available;
    }
    if let Some(unhealthy) = current.iter().copied().find_map(unhealthy_container) {
        return unhealthy;
    }
    let status = deployment.status.as_ref();
    let stuck = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "Progressing" && c.status == "False");
    if let Some(stuck) = stuck {
        let reason = stuck.reason.clone().unwrap_or_else(|| "Progressing".into());
        let message = format!(
            "{reason}: {}",
            stuck
                .message
                .as_deref()
                .unwrap_or("the rollout makes no progress")
        );
        return Health::Stalled { reason, message };
    }
    let mut message = rollout.unwrap_err();
    if let Some(why) = current.iter().find_map(|pod| unschedulable(pod)) {
        message.push_str("; ");
        message.push_str(&why);
    }
    Health::Starting { message }
}

/// `Ok` once the rollout is complete, as `kubectl rollout status` decides it;
/// otherwise how far it got.
fn rollout(deployment: &Deployment, wanted: i32) -> Result<(), String> {
    let Some(status) = &deployment.status else {
        return Err(format!("0 of {wanted} instances available"));
    };
    let generation = deployment.metadata.generation.unwrap_or(0);
    if status.observed_generation.unwrap_or(0) < generation {
        return Err("waiting for the Deployment controller to see the new version".into());
    }
    let updated = status.updated_replicas.unwrap_or(0);
    let available = status.available_replicas.unwrap_or(0);
    let total = status.replicas.unwrap_or(0);
    if updated < wanted {
        return Err(format!("{updated} of {wanted} instances updated"));
    }
    if total > updated {
        return Err(format!(
            "{} old instances still running",
            total.saturating_sub(updated)
        ));
    }
    if available < updated {
        return Err(format!("{available} of {wanted} instances available"));
    }
    Ok(())
}

/// The first stuck container among `pods` (e.g. a job run's): the kubelet's reason and
/// a message naming the pod.
pub fn stuck(pods: &[Pod]) -> Option<(String, String)> {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .find_map(unhealthy_container)
        .and_then(|health| match health {
            Health::Unhealthy { reason, message } => Some((reason, message)),
            _ => None,
        })
}

fn runs_image(pod: &Pod, image: &str) -> bool {
    pod.spec.as_ref().is_some_and(|s| {
        s.containers
            .iter()
            .any(|c| c.image.as_deref() == Some(image))
    })
}

/// The first container of `pod` that is stuck, with the kubelet's reason.
fn unhealthy_container(pod: &Pod) -> Option<Health> {
    let name = pod.metadata.name.as_deref().unwrap_or("?");
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    statuses.iter().find_map(|c| {
        let state = c.state.as_ref()?;
        let (reason, detail) = if let Some(waiting) = &state.waiting {
            let reason = waiting.reason.as_deref()?;
            if !FAILING_WAITING.contains(&reason) {
                return None;
            }
            (reason.to_string(), waiting.message.clone())
        } else if let Some(terminated) = &state.terminated {
            // A container that ends with OOMKilled is restarted; say so before the
            // back-off does.
            if terminated.reason.as_deref() != Some("OOMKilled") {
                return None;
            }
            ("OOMKilled".to_string(), None)
        } else {
            return None;
        };
        let mut message = format!("pod {name}: {reason}");
        if let Some(detail) = detail.filter(|d| !d.is_empty()) {
            message.push_str(": ");
            message.push_str(&detail);
        }
        if let Some(last) = last_exit(c) {
            message.push_str("; ");
            message.push_str(&last);
        }
        if reason == "OOMKilled" || message.contains("OOMKilled") {
            message.push_str("; it needs more memory than memoryMb");
        }
        Some(Health::Unhealthy { reason, message })
    })
}

/// How the container's previous run ended: `last exit: Error (exit code 1)`.
fn last_exit(container: &ContainerStatus) -> Option<String> {
    let terminated = container.last_state.as_ref()?.terminated.as_ref()?;
    Some(format!(
        "last exit: {} (exit code {})",
        terminated.reason.as_deref().unwrap_or("terminated"),
        terminated.exit_code
    ))
}

/// The scheduler's reason when the pod has no node (waiting, not failed: a node may
/// come).
fn unschedulable(pod: &Pod) -> Option<String> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    let scheduled = conditions
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
    Some(format!(
        "pod {}: {}: {}",
        pod.metadata.name.as_deref().unwrap_or("?"),
        scheduled.reason.as_deref().unwrap_or("Unschedulable"),
        scheduled.message.as_deref().unwrap_or("")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    const IMAGE: &str = "registry.test/sless-ns-hello:abc";

    fn deployment(replicas: i32, status: Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "hello", "generation": 2},
            "spec": {"replicas": replicas, "selector": {}, "template": {}},
            "status": status,
        }))
        .unwrap()
    }

    fn available(n: i32) -> Value {
        json!({"observedGeneration": 2, "replicas": n, "updatedReplicas": n,
               "readyReplicas": n, "availableReplicas": n})
    }

    fn pod(image: &str, container_status: Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "hello-1"},
            "spec": {"containers": [{"name": "function", "image": image}]},
            "status": {"phase": "Running", "containerStatuses": [container_status]},
        }))
        .unwrap()
    }

    fn crashing() -> Value {
        json!({"name": "function", "image": IMAGE, "imageID": "", "ready": false,
               "restartCount": 4,
               "state": {"waiting": {"reason": "CrashLoopBackOff",
                                     "message": "back-off 40s restarting failed container"}},
               "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}})
    }

    #[test]
    fn available_only_once_every_wanted_replica_is_updated_and_available() {
        assert_eq!(
            health(&deployment(2, available(2)), &[], IMAGE),
            Health::Available
        );
        assert_eq!(
            health(&deployment(0, json!({})), &[], IMAGE),
            Health::Available
        );
        let starting = |status| match health(&deployment(2, status), &[], IMAGE) {
            Health::Starting { message } => message,
            other => panic!("{other:?}"),
        };
        assert_eq!(starting(Value::Null), "0 of 2 instances available");
        let mut stale = available(2);
        stale["observedGeneration"] = json!(1);
        assert!(starting(stale).contains("Deployment controller"));
        let mut half = available(2);
        half["availableReplicas"] = json!(1);
        assert_eq!(starting(half), "1 of 2 instances available");
        let mut old = available(2);
        old["replicas"] = json!(3);
        assert_eq!(starting(old), "1 old instances still running");
    }

    #[test]
    fn a_crash_loop_is_failing_with_the_kubelets_reason_and_the_last_exit() {
        let health = health(
            &deployment(
                1,
                json!({"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1}),
            ),
            &[pod(IMAGE, crashing())],
            IMAGE,
        );
        let Health::Unhealthy { reason, message } = health else {
            panic!("{health:?}");
        };
        assert_eq!(reason, "CrashLoopBackOff");
        assert!(
            message.starts_with("pod hello-1: CrashLoopBackOff: back-off 40s"),
            "{message}"
        );
        assert!(
            message.contains("last exit: OOMKilled (exit code 137)"),
            "{message}"
        );
        assert!(message.contains("memoryMb"), "{message}");
    }

    #[test]
    fn pods_of_another_image_and_passing_states_do_not_count() {
        let status = json!({"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1});
        let other = pod("registry.test/sless-ns-hello:old", crashing());
        assert!(matches!(
            health(&deployment(1, status.clone()), &[other], IMAGE),
            Health::Starting { .. }
        ));
        let creating = pod(
            IMAGE,
            json!({"name": "function", "image": IMAGE, "imageID": "", "ready": false,
                   "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}),
        );
        assert!(matches!(
            health(&deployment(1, status), &[creating], IMAGE),
            Health::Starting { .. }
        ));
    }

    #[test]
    fn image_pull_errors_and_a_progress_deadline_fail() {
        let status = json!({"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1});
        let pulling = pod(
            IMAGE,
            json!({"name": "function", "image": IMAGE, "imageID": "", "ready": false,
                   "restartCount": 0,
                   "state": {"waiting": {"reason": "ImagePullBackOff",
                                         "message": "Back-off pulling image"}}}),
        );
        assert!(matches!(
            health(&deployment(1, status), &[pulling], IMAGE),
            Health::Unhealthy { reason, .. } if reason == "ImagePullBackOff"
        ));
        let deadline = json!({"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1,
            "conditions": [{"type": "Progressing", "status": "False",
                            "reason": "ProgressDeadlineExceeded",
                            "message": "ReplicaSet \"hello-1\" has timed out progressing."}]});
        let Health::Stalled { reason, message } = health(&deployment(1, deadline), &[], IMAGE)
        else {
            panic!("not failing");
        };
        assert_eq!(reason, "ProgressDeadlineExceeded");
        assert!(message.contains("timed out progressing"), "{message}");
    }
}
