//! The build Job: fetch the context from S3, build it, push the image.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    AppArmorProfile, Container, EnvVar, KeyToPath, PodSpec, ResourceRequirements, SeccompProfile,
    SecretVolumeSource, SecurityContext, Volume,
};

use super::{
    CURL_UID, empty_dir, metadata, mount, one_shot_pod, pull_secrets, quantity, restricted,
    restricted_pod,
};
use crate::names::{ANNOTATION_S3_KEY, build_job_name, component_labels};
use crate::{Builder, KubeConfig};
use sless_core::model::{Kind, build_namespace};

pub const COMPONENT: &str = "build";
/// The container whose log a failed build reports.
pub const BUILD_CONTAINER: &str = "build";
pub const FETCH_CONTAINER: &str = "fetch-context";
/// Retries of a failed build pod (docs/spec.md §10).
pub const BACKOFF_LIMIT: i32 = 2;
/// Finished build Jobs (and their logs) are kept this long.
const TTL_AFTER_FINISHED: i32 = 24 * 3600;
/// The rootless BuildKit image runs as this user (it cannot be changed without a rebuild).
const BUILDKIT_UID: i64 = 1000;
const WORKSPACE: &str = "/workspace";
/// Where the fetch step puts the downloaded archive before unpacking it.
const ARCHIVE: &str = "/workspace/.sless-context.tar.gz";

/// One build of one upload.
pub struct BuildJob<'a> {
    pub kind: Kind,
    pub namespace: &'a str,
    pub name: &'a str,
    pub s3_key: &'a str,
    /// A presigned GET URL of the context archive.
    pub context_url: &'a str,
    /// Where the image is pushed.
    pub image: &'a str,
}

/// The shell the fetch step runs; the URL comes from the environment, never the command
/// line, so it does not show up in `ps` or the Job's args.
pub fn fetch_script() -> String {
    format!(
        "set -eu; curl -fsSL --retry 3 --retry-delay 2 -o {ARCHIVE} \"$SLESS_CONTEXT_URL\" \
         && tar -xzf {ARCHIVE} -C {WORKSPACE} && rm -f {ARCHIVE}"
    )
}

/// The build command and its arguments.
pub fn build_command(builder: Builder, image: &str, insecure: bool) -> (Vec<String>, Vec<String>) {
    match builder {
        Builder::BuildKit => {
            let mut output = format!("type=image,name={image},push=true");
            if insecure {
                output.push_str(",registry.insecure=true");
            }
            (
                vec!["buildctl-daemonless.sh".into()],
                [
                    "build",
                    "--frontend",
                    "dockerfile.v0",
                    "--local",
                    "context=/workspace",
                    "--local",
                    "dockerfile=/workspace",
                    "--output",
                ]
                .into_iter()
                .map(String::from)
                .chain([output])
                .collect(),
            )
        }
        Builder::Kaniko => {
            let mut args = vec![
                "--context=dir:///workspace".to_string(),
                "--dockerfile=/workspace/Dockerfile".to_string(),
                format!("--destination={image}"),
                "--push-retry=2".to_string(),
            ];
            if insecure {
                args.push("--insecure".into());
            }
            (vec!["/kaniko/executor".into()], args)
        }
    }
}

pub fn build_job(build: &BuildJob, config: &KubeConfig) -> Job {
    let name = build_job_name(build.name, build.s3_key);
    let labels = component_labels(build.kind, build.namespace, build.name, COMPONENT);
    let annotations = BTreeMap::from([(ANNOTATION_S3_KEY.to_string(), build.s3_key.to_string())]);
    let (command, args) = build_command(config.builder, build.image, config.insecure_registry);

    let mut volumes = vec![empty_dir("workspace")];
    let docker_config_dir = match config.builder {
        Builder::BuildKit => "/home/user/.docker",
        Builder::Kaniko => "/kaniko/.docker",
    };
    let mut build_mounts = vec![mount("workspace", WORKSPACE, true)];
    if let Some(secret) = &config.registry_secret {
        volumes.push(Volume {
            name: "registry-auth".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret.clone()),
                items: Some(vec![KeyToPath {
                    key: ".dockerconfigjson".into(),
                    path: "config.json".into(),
                    ..KeyToPath::default()
                }]),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
        build_mounts.push(mount("registry-auth", docker_config_dir, true));
    }
    let mut env = Vec::new();
    let security = match config.builder {
        Builder::BuildKit => {
            // Rootless BuildKit's state must be a real volume (not the image's VOLUME).
            volumes.push(empty_dir("buildkitd"));
            build_mounts.push(mount(
                "buildkitd",
                "/home/user/.local/share/buildkit",
                false,
            ));
            env.push(env_var(
                "BUILDKITD_FLAGS",
                "--oci-worker-no-process-sandbox",
            ));
            env.push(env_var("DOCKER_CONFIG", docker_config_dir));
            // Rootless BuildKit (its Kubernetes examples) needs user namespaces: no
            // seccomp/AppArmor confinement, and privilege escalation for the setuid
            // newuidmap/newgidmap (moby/buildkit#1671). It never runs as root; the build
            // namespace allows this profile, the deploy namespaces do not.
            SecurityContext {
                allow_privilege_escalation: Some(true),
                run_as_non_root: Some(true),
                run_as_user: Some(BUILDKIT_UID),
                run_as_group: Some(BUILDKIT_UID),
                seccomp_profile: Some(SeccompProfile {
                    type_: "Unconfined".into(),
                    ..SeccompProfile::default()
                }),
                app_armor_profile: Some(AppArmorProfile {
                    type_: "Unconfined".into(),
                    ..AppArmorProfile::default()
                }),
                ..SecurityContext::default()
            }
        }
        // kaniko unpacks images into its own root filesystem: it must run as root.
        Builder::Kaniko => SecurityContext {
            allow_privilege_escalation: Some(false),
            ..SecurityContext::default()
        },
    };
    let image = match config.builder {
        Builder::BuildKit => config.images.buildkit.clone(),
        Builder::Kaniko => config.images.kaniko.clone(),
    };
    let pod_security = match config.builder {
        // The fetch step writes the workspace as the BuildKit user.
        Builder::BuildKit => Some(restricted_pod(BUILDKIT_UID)),
        Builder::Kaniko => None,
    };
    let fetch_uid = match config.builder {
        Builder::BuildKit => BUILDKIT_UID,
        Builder::Kaniko => CURL_UID,
    };

    Job {
        metadata: metadata(
            &name,
            &build_namespace(build.namespace),
            labels.clone(),
            annotations,
        ),
        spec: Some(JobSpec {
            backoff_limit: Some(BACKOFF_LIMIT),
            active_deadline_seconds: Some(config.build_timeout.as_secs() as i64),
            ttl_seconds_after_finished: Some(TTL_AFTER_FINISHED),
            template: one_shot_pod(
                labels,
                PodSpec {
                    security_context: pod_security,
                    image_pull_secrets: pull_secrets(&config.registry_secret),
                    init_containers: Some(vec![Container {
                        name: FETCH_CONTAINER.into(),
                        image: Some(config.images.curl.clone()),
                        command: Some(vec!["sh".into(), "-c".into(), fetch_script()]),
                        env: Some(vec![env_var("SLESS_CONTEXT_URL", build.context_url)]),
                        security_context: Some(restricted(fetch_uid, true)),
                        volume_mounts: Some(vec![mount("workspace", WORKSPACE, false)]),
                        ..Container::default()
                    }]),
                    containers: vec![Container {
                        name: BUILD_CONTAINER.into(),
                        image: Some(image),
                        command: Some(command),
                        args: Some(args),
                        env: (!env.is_empty()).then_some(env),
                        security_context: Some(security),
                        volume_mounts: Some(build_mounts),
                        resources: Some(ResourceRequirements {
                            requests: Some(BTreeMap::from([
                                ("cpu".into(), quantity("250m".into())),
                                ("memory".into(), quantity("512Mi".into())),
                            ])),
                            limits: Some(BTreeMap::from([(
                                "memory".into(),
                                quantity("4Gi".into()),
                            )])),
                            ..ResourceRequirements::default()
                        }),
                        ..Container::default()
                    }],
                    volumes: Some(volumes),
                    ..PodSpec::default()
                },
            ),
            ..JobSpec::default()
        }),
        ..Job::default()
    }
}

fn env_var(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..EnvVar::default()
    }
}
