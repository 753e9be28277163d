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
/// The step that pushes the built image; the only one that mounts the push credential.
pub const PUSH_CONTAINER: &str = "push";
/// The steps in the order they run: a failed build's cause is in the log of the last one
/// that printed anything.
pub const STEPS: [&str; 3] = [FETCH_CONTAINER, BUILD_CONTAINER, PUSH_CONTAINER];
/// Retries of a failed build pod (docs/spec.md §10).
pub const BACKOFF_LIMIT: i32 = 2;
/// Finished build Jobs (and their logs) are kept this long.
const TTL_AFTER_FINISHED: i32 = 24 * 3600;
/// The rootless BuildKit image runs as this user (it cannot be changed without a rebuild).
const BUILDKIT_UID: i64 = 1000;
const WORKSPACE: &str = "/workspace";
/// Where the build step leaves the image for the push step.
const OUTPUT: &str = "/output";
const IMAGE_TAR: &str = "/output/image.tar";
/// The push step's registry credential (its `DOCKER_CONFIG`).
const PUSH_AUTH: &str = "/registry-auth";
/// The uid of the crane image's `nonroot` user (distroless).
const CRANE_UID: i64 = 65532;
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

/// The registry's host (`host[:port]`), what insecure-registry settings name.
pub fn registry_host(image: &str) -> &str {
    image.split('/').next().unwrap_or(image)
}

/// The build command and its arguments: the image is built into a tarball at
/// `/output/image.tar`, never pushed by the builder (tenant code runs in it; the push
/// credential is not there). With an external BuildKit daemon, `buildctl` sends it the
/// context and receives the tarball.
pub fn build_command(config: &KubeConfig, image: &str) -> (Vec<String>, Vec<String>) {
    let insecure = config.insecure_registry;
    match config.builder {
        Builder::BuildKit => {
            let args = [
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
            .chain([format!("type=docker,name={image},dest={IMAGE_TAR}")])
            .collect();
            if let Some(addr) = &config.buildkit_addr {
                // The daemon's own buildkitd.toml decides how it reaches registries.
                return (vec!["buildctl".into(), "--addr".into(), addr.clone()], args);
            }
            if !insecure {
                return (vec!["buildctl-daemonless.sh".into()], args);
            }
            // Base images come over plain HTTP too: rootless buildkitd reads its
            // registry settings from ~/.config/buildkit/buildkitd.toml.
            let script = format!(
                "set -eu; mkdir -p \"$HOME/.config/buildkit\"; \
                 printf '[registry.\"%s\"]\\n  http = true\\n  insecure = true\\n' '{}' \
                 > \"$HOME/.config/buildkit/buildkitd.toml\"; exec buildctl-daemonless.sh \"$@\"",
                registry_host(image)
            );
            (
                vec![
                    "sh".into(),
                    "-c".into(),
                    script,
                    "buildctl-daemonless.sh".into(),
                ],
                args,
            )
        }
        Builder::Kaniko => {
            let mut args = vec![
                "--context=dir:///workspace".to_string(),
                "--dockerfile=/workspace/Dockerfile".to_string(),
                format!("--destination={image}"),
                "--no-push".to_string(),
                format!("--tar-path={IMAGE_TAR}"),
            ];
            if insecure {
                let host = registry_host(image);
                args.push(format!("--insecure-registry={host}"));
                args.push(format!("--skip-tls-verify-registry={host}"));
            }
            (vec!["/kaniko/executor".into()], args)
        }
    }
}

/// The push step's command: the built tarball to this build's image, nothing else.
pub fn push_command(image: &str, insecure: bool) -> Vec<String> {
    let mut command: Vec<String> = ["crane", "push", IMAGE_TAR, image]
        .into_iter()
        .map(String::from)
        .collect();
    if insecure {
        command.push("--insecure".into());
    }
    command
}

/// A dockerconfigjson Secret as a `config.json` directory.
fn docker_config_volume(name: &str, secret: &str) -> Volume {
    Volume {
        name: name.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.to_string()),
            items: Some(vec![KeyToPath {
                key: ".dockerconfigjson".into(),
                path: "config.json".into(),
                ..KeyToPath::default()
            }]),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// Tenant code runs at build time (pip/npm install, go build, RUN steps), so the steps
/// run one after the other as containers of their own: fetch, build (with at most the
/// pull-only credential, for private base images), then push, the only container that
/// mounts the push credential, started once the build has exited and running nothing
/// but `crane push` of the tarball to this function's repository.
pub fn build_job(build: &BuildJob, config: &KubeConfig) -> Job {
    let name = build_job_name(build.name, build.s3_key);
    let labels = component_labels(build.kind, build.namespace, build.name, COMPONENT);
    let annotations = BTreeMap::from([(ANNOTATION_S3_KEY.to_string(), build.s3_key.to_string())]);
    let (command, args) = build_command(config, build.image);
    let external = config.builds_unprivileged();

    let mut volumes = vec![empty_dir("workspace"), empty_dir("output")];
    let docker_config_dir = match config.builder {
        Builder::BuildKit => "/home/user/.docker",
        Builder::Kaniko => "/kaniko/.docker",
    };
    let mut build_mounts = vec![
        mount("workspace", WORKSPACE, true),
        mount("output", OUTPUT, false),
    ];
    let mut env = Vec::new();
    if let Some(secret) = &config.registry_pull_secret {
        volumes.push(docker_config_volume("registry-pull", secret));
        build_mounts.push(mount("registry-pull", docker_config_dir, true));
        env.push(env_var("DOCKER_CONFIG", docker_config_dir));
    }
    let mut push_mounts = vec![mount("output", OUTPUT, true)];
    let mut push_env = Vec::new();
    if let Some(secret) = &config.registry_secret {
        volumes.push(docker_config_volume("registry-push", secret));
        push_mounts.push(mount("registry-push", PUSH_AUTH, true));
        push_env.push(env_var("DOCKER_CONFIG", PUSH_AUTH));
    }
    let security = match config.builder {
        // Only a client of the daemon runs here: the restricted profile (it writes the
        // tarball and may keep client state under $HOME, hence a writable root).
        Builder::BuildKit if external => restricted(BUILDKIT_UID, false),
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
                    // Uids in the pod map to unprivileged ones on the node: a step that
                    // escapes its container is nobody there.
                    host_users: config.build_user_namespaces.then_some(false),
                    image_pull_secrets: pull_secrets(config),
                    init_containers: Some(vec![
                        Container {
                            name: FETCH_CONTAINER.into(),
                            image: Some(config.images.curl.clone()),
                            command: Some(vec!["sh".into(), "-c".into(), fetch_script()]),
                            env: Some(vec![env_var("SLESS_CONTEXT_URL", build.context_url)]),
                            security_context: Some(restricted(fetch_uid, true)),
                            volume_mounts: Some(vec![mount("workspace", WORKSPACE, false)]),
                            ..Container::default()
                        },
                        Container {
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
                        },
                    ]),
                    containers: vec![Container {
                        name: PUSH_CONTAINER.into(),
                        image: Some(config.images.crane.clone()),
                        command: Some(push_command(build.image, config.insecure_registry)),
                        env: (!push_env.is_empty()).then_some(push_env),
                        security_context: Some(restricted(CRANE_UID, true)),
                        volume_mounts: Some(push_mounts),
                        resources: Some(ResourceRequirements {
                            requests: Some(BTreeMap::from([
                                ("cpu".into(), quantity("50m".into())),
                                ("memory".into(), quantity("64Mi".into())),
                            ])),
                            limits: Some(BTreeMap::from([(
                                "memory".into(),
                                quantity("512Mi".into()),
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
