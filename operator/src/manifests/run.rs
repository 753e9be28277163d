//! The Job of one FunctionJob run: the function's image in job mode (docs/spec.md §8), the
//! event in the environment, the result on the last line of the log.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{Container, PodSpec};

use super::{
    IMAGE_PULL_POLICY, RUNTIME_UID, TMP_MOUNT, empty_dir, env_vars, limits, metadata, mount,
    one_shot_pod, pull_secrets, restricted, restricted_pod,
};
use crate::KubeConfig;
use crate::names::{component_labels, run_job_name};
use sless_core::model::{Kind, deploy_namespace};

pub const COMPONENT: &str = "run";
pub const RUN_CONTAINER: &str = "run";
pub const LABEL_RUN_ID: &str = "sless.kube5s.ru/run-id";

/// One run of a FunctionJob.
pub struct RunJob<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub run_id: i64,
    pub image: &'a str,
    pub entrypoint: &'a str,
    /// The function's env overlaid with the job's.
    pub env: &'a BTreeMap<String, String>,
    pub event_json: &'a str,
    /// 0 = no limit.
    pub timeout_sec: u32,
    pub memory_mb: u32,
    pub cpu_millis: u32,
    pub disk_mb: u32,
    pub read_only_root: bool,
}

pub fn run_job(run: &RunJob, config: &KubeConfig) -> Job {
    let mut labels = component_labels(Kind::FunctionJob, run.namespace, run.name, COMPONENT);
    labels.insert(LABEL_RUN_ID.to_string(), run.run_id.to_string());
    let mut env = run.env.clone();
    env.insert("SLESS_MODE".into(), "job".into());
    env.insert("SLESS_EVENT_JSON".into(), run.event_json.to_string());
    env.insert("SLESS_ENTRYPOINT".into(), run.entrypoint.to_string());
    Job {
        metadata: metadata(
            &run_job_name(run.name, run.run_id),
            &deploy_namespace(run.namespace),
            labels.clone(),
            BTreeMap::new(),
        ),
        spec: Some(JobSpec {
            // A retry would run the handler twice; a failed run is reported, not repeated.
            backoff_limit: Some(0),
            active_deadline_seconds: (run.timeout_sec > 0).then(|| i64::from(run.timeout_sec)),
            // Long enough for the controller to read the result.
            ttl_seconds_after_finished: Some(24 * 3600),
            template: one_shot_pod(
                labels,
                PodSpec {
                    image_pull_secrets: pull_secrets(config),
                    security_context: Some(restricted_pod(RUNTIME_UID)),
                    containers: vec![Container {
                        name: RUN_CONTAINER.into(),
                        image: Some(run.image.to_string()),
                        // Tags are content-addressed (sha of the upload's key): a node that
                        // has the image has this image. Only sless names images in pods.
                        image_pull_policy: Some(IMAGE_PULL_POLICY.into()),
                        env: Some(env_vars(&env)),
                        resources: Some(limits(run.memory_mb, run.cpu_millis, run.disk_mb)),
                        security_context: Some(restricted(RUNTIME_UID, run.read_only_root)),
                        volume_mounts: Some(vec![mount("tmp", TMP_MOUNT, false)]),
                        ..Container::default()
                    }],
                    volumes: Some(vec![empty_dir("tmp")]),
                    ..PodSpec::default()
                },
            ),
            ..JobSpec::default()
        }),
        ..Job::default()
    }
}
