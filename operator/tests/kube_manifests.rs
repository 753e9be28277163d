//! The manifest builders, checked as plain data: no cluster involved.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use operator::autoscale::{ANNOTATION_SCALING, Bounds};
use operator::manifests::{
    self, BuildJob, CronTrigger, RunJob, Workload,
    build::{BUILD_CONTAINER, FETCH_CONTAINER, PUSH_CONTAINER, STEPS, fetch_script},
    is_pinned,
};
use operator::names::{
    ANNOTATION_S3_KEY, LABEL_COMPONENT, LABEL_FUNCTION, LABEL_KIND, LABEL_NAME, LABEL_NAMESPACE,
    MANAGED_BY, build_job_name,
};
use operator::{Builder, KubeConfig};
use sless_core::model::{Kind, Runtime, WorkloadSpec};

const NS: &str = "sless-cdd874dfa31ba6ca";
const DEPLOY_NS: &str = "sless-fn-sless-cdd874dfa31ba6ca";
const KEY: &str = "contexts/sless-cdd874dfa31ba6ca/hello/20250101120000.tar.gz";

fn config() -> KubeConfig {
    let mut config = KubeConfig::new("registry.test/sless");
    config.registry_secret = Some("regcred".into());
    config
}

fn spec() -> WorkloadSpec {
    WorkloadSpec {
        runtime: Runtime::Python311,
        entrypoint: "handler.handle".into(),
        memory_mb: 256,
        cpu_millis: 250,
        disk_mb: 2048,
        timeout_sec: 30,
        env: BTreeMap::from([
            ("ZETA".to_string(), "z".to_string()),
            ("ALPHA".to_string(), "a".to_string()),
            // The platform's PORT wins: the probes depend on it.
            ("PORT".to_string(), "9999".to_string()),
        ]),
        s3_key: Some(KEY.into()),
        replicas: None,
        min_instances: None,
        max_instances: None,
        target_concurrency: None,
        egress: Default::default(),
    }
}

fn pod(template: &Option<PodSpec>) -> &PodSpec {
    template.as_ref().expect("pod spec")
}

fn env_of(container: &Container) -> Vec<(String, String)> {
    container
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect()
}

fn deployment() -> Deployment {
    let spec = spec();
    manifests::deployment(
        &Workload {
            kind: Kind::Function,
            namespace: NS,
            name: "hello",
            spec: &spec,
            image: "registry.test/sless/sless-ns-hello:0123456789ab",
            bounds: Bounds {
                min: 0,
                max: 4,
                target: 10,
            },
            restarted_at: Some("2025-01-01T12:00:05Z"),
        },
        &config(),
    )
}

#[test]
fn deployment_lives_in_the_deploy_namespace_with_owner_labels() {
    let d = deployment();
    assert_eq!(d.metadata.namespace.as_deref(), Some(DEPLOY_NS));
    assert_eq!(d.metadata.name.as_deref(), Some("hello"));
    let labels = d.metadata.labels.as_ref().unwrap();
    assert_eq!(labels[MANAGED_BY], "sless");
    assert_eq!(labels[LABEL_NAMESPACE], NS);
    assert_eq!(labels[LABEL_KIND], "function");
    assert_eq!(labels[LABEL_NAME], "hello");
    assert_eq!(labels[LABEL_COMPONENT], "workload");
    assert_eq!(
        d.metadata.annotations.as_ref().unwrap()[ANNOTATION_S3_KEY],
        KEY
    );
    assert_eq!(
        d.metadata.annotations.as_ref().unwrap()[ANNOTATION_SCALING],
        "min=0 max=4 target=10"
    );
    let spec = d.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, None, "the autoscaler's, never applied");
    let selector = spec.selector.match_labels.as_ref().unwrap();
    let pod_labels = spec
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .as_ref()
        .unwrap();
    for (k, v) in selector {
        assert_eq!(pod_labels.get(k), Some(v), "the selector picks the pods");
    }
}

#[test]
fn deployment_rolls_on_each_build_and_renders_env_sorted() {
    let d = deployment();
    let template = &d.spec.as_ref().unwrap().template;
    let annotations = template
        .metadata
        .as_ref()
        .unwrap()
        .annotations
        .as_ref()
        .unwrap();
    assert_eq!(
        annotations["kubectl.kubernetes.io/restartedAt"],
        "2025-01-01T12:00:05Z"
    );
    let container = &pod(&template.spec).containers[0];
    let env = env_of(container);
    let names: Vec<&str> = env.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["ALPHA", "PORT", "SLESS_ENTRYPOINT", "ZETA"]);
    assert!(env.contains(&("PORT".into(), "8080".into())));
    assert!(env.contains(&("SLESS_ENTRYPOINT".into(), "handler.handle".into())));
    // The same input gives the same object: no spurious rollouts.
    assert_eq!(deployment(), d);
}

#[test]
fn deployment_limits_probes_and_security() {
    let d = deployment();
    let pod = pod(&d.spec.as_ref().unwrap().template.spec);
    let container = &pod.containers[0];
    let resources = container.resources.as_ref().unwrap();
    let limits = resources.limits.as_ref().unwrap();
    assert_eq!(limits["memory"].0, "256Mi");
    assert_eq!(limits["cpu"].0, "250m");
    assert_eq!(limits["ephemeral-storage"].0, "2048Mi");
    assert_eq!(resources.requests.as_ref().unwrap()["memory"].0, "256Mi");
    for probe in [&container.readiness_probe, &container.liveness_probe] {
        let http = probe.as_ref().unwrap().http_get.as_ref().unwrap();
        assert_eq!(http.path.as_deref(), Some("/health"));
        assert_eq!(http.port, IntOrString::Int(8080));
    }
    assert_eq!(container.ports.as_ref().unwrap()[0].container_port, 8080);
    // Content-addressed tags: a cached image is reused, not pulled on every start.
    assert_eq!(container.image_pull_policy.as_deref(), Some("IfNotPresent"));
    let security = container.security_context.as_ref().unwrap();
    assert_eq!(security.allow_privilege_escalation, Some(false));
    assert_eq!(security.run_as_non_root, Some(true));
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(
        security.capabilities.as_ref().unwrap().drop.as_deref(),
        Some(&["ALL".to_string()][..])
    );
    assert_eq!(pod.automount_service_account_token, Some(false));
    assert_eq!(pod.image_pull_secrets.as_ref().unwrap()[0].name, "regcred");
    // A read-only root still has a writable /tmp.
    let tmp = container.volume_mounts.as_ref().unwrap();
    assert!(tmp.iter().any(|m| m.mount_path == "/tmp"));
}

#[test]
fn service_selects_the_workload_pods_on_8080() {
    let svc = manifests::service(Kind::Function, NS, "hello");
    assert_eq!(svc.metadata.namespace.as_deref(), Some(DEPLOY_NS));
    let spec = svc.spec.as_ref().unwrap();
    assert_eq!(spec.ports.as_ref().unwrap()[0].port, 8080);
    let d = deployment();
    assert_eq!(
        spec.selector.as_ref(),
        d.spec.as_ref().unwrap().selector.match_labels.as_ref()
    );
}

fn build_with(config: KubeConfig) -> Job {
    manifests::build_job(
        &BuildJob {
            kind: Kind::Function,
            namespace: NS,
            name: "hello",
            s3_key: KEY,
            context_url: "https://s3.test/presigned",
            image: "registry.test/sless/sless-ns-hello:0123456789ab",
        },
        &config,
    )
}

fn build(builder: Builder, insecure: bool) -> Job {
    let mut config = config();
    config.builder = builder;
    config.insecure_registry = insecure;
    build_with(config)
}

/// The pod's containers in the order they run: init containers, then the others.
fn steps(job: &Job) -> Vec<Container> {
    let pod = pod(&job.spec.as_ref().unwrap().template.spec);
    let mut steps = pod.init_containers.clone().unwrap_or_default();
    steps.extend(pod.containers.clone());
    steps
}

/// The Secret a container's volume mounts read, if any.
fn mounted_secrets(job: &Job, container: &Container) -> Vec<String> {
    let pod = pod(&job.spec.as_ref().unwrap().template.spec);
    let volumes = pod.volumes.as_ref().unwrap();
    container
        .volume_mounts
        .as_deref()
        .unwrap_or_default()
        .iter()
        .filter_map(|m| volumes.iter().find(|v| v.name == m.name))
        .filter_map(|v| v.secret.as_ref()?.secret_name.clone())
        .collect()
}

#[test]
fn build_job_fetches_the_context_builds_to_a_tarball_and_pushes_apart() {
    let job = build(Builder::BuildKit, false);
    assert_eq!(job.metadata.name, Some(build_job_name("hello", KEY)));
    assert_eq!(
        job.metadata.namespace.as_deref(),
        Some("sless-build-sless-cdd874dfa31ba6ca")
    );
    assert_eq!(
        job.metadata.labels.as_ref().unwrap()[LABEL_COMPONENT],
        "build"
    );
    let spec = job.spec.as_ref().unwrap();
    assert_eq!(spec.backoff_limit, Some(2));
    let pod = pod(&spec.template.spec);
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    let steps = steps(&job);
    let names: Vec<&str> = steps.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, STEPS, "fetch, build, push, one after the other");
    let (fetch, builder, push) = (&steps[0], &steps[1], &steps[2]);

    assert_eq!(fetch.image.as_deref(), Some(operator::CURL_IMAGE));
    assert_eq!(fetch.command.as_ref().unwrap()[2], fetch_script());
    assert!(fetch_script().contains("\"$SLESS_CONTEXT_URL\""));
    assert!(fetch_script().contains("tar -xzf"));
    assert!(env_of(fetch).contains(&(
        "SLESS_CONTEXT_URL".into(),
        "https://s3.test/presigned".into()
    )));

    assert_eq!(builder.image.as_deref(), Some(operator::BUILDKIT_IMAGE));
    assert_eq!(
        builder.command.as_deref(),
        Some(&["buildctl-daemonless.sh".to_string()][..])
    );
    let args = builder.args.as_ref().unwrap().join(" ");
    assert!(args.contains("--frontend dockerfile.v0"), "{args}");
    assert!(args.contains("--local context=/workspace --local dockerfile=/workspace"));
    assert!(args.ends_with(
        "--output type=docker,name=registry.test/sless/sless-ns-hello:0123456789ab,dest=/output/image.tar"
    ), "{args}");
    assert!(!args.contains("push"), "the builder never pushes: {args}");
    assert!(env_of(builder).contains(&(
        "BUILDKITD_FLAGS".into(),
        "--oci-worker-no-process-sandbox".into()
    )));
    let security = builder.security_context.as_ref().unwrap();
    assert_eq!(security.run_as_non_root, Some(true));
    // newuidmap is setuid: rootless BuildKit cannot start without escalation.
    assert_eq!(security.allow_privilege_escalation, Some(true));

    assert_eq!(push.image.as_deref(), Some(operator::CRANE_IMAGE));
    assert_eq!(
        push.command.as_ref().unwrap().join(" "),
        "crane push /output/image.tar registry.test/sless/sless-ns-hello:0123456789ab"
    );
    let push_security = push.security_context.as_ref().unwrap();
    assert_eq!(push_security.run_as_non_root, Some(true));
    assert_eq!(push_security.allow_privilege_escalation, Some(false));
    assert_eq!(push_security.read_only_root_filesystem, Some(true));
    assert!(env_of(push).contains(&("DOCKER_CONFIG".into(), "/registry-auth".into())));
    // The presigned URL is the only S3 access the build has.
    assert!(!format!("{pod:?}").contains("AWS_SECRET"));
}

/// Tenant code runs in the build step (RUN steps, installs): it never sees the push
/// credential, which only the push step mounts; pods pull with the pull-only secret.
#[test]
fn only_the_push_step_holds_the_push_credential() {
    for builder in [Builder::BuildKit, Builder::Kaniko] {
        let mut config = config();
        config.builder = builder;
        config.registry_pull_secret = Some("regpull".into());
        let job = build_with(config);
        let by_step: Vec<(String, Vec<String>)> = steps(&job)
            .iter()
            .map(|c| (c.name.clone(), mounted_secrets(&job, c)))
            .collect();
        assert_eq!(
            by_step,
            [
                (FETCH_CONTAINER.to_string(), vec![]),
                (BUILD_CONTAINER.to_string(), vec!["regpull".to_string()]),
                (PUSH_CONTAINER.to_string(), vec!["regcred".to_string()]),
            ],
            "{builder:?}"
        );
        let pod = pod(&job.spec.as_ref().unwrap().template.spec);
        assert_eq!(pod.image_pull_secrets.as_ref().unwrap()[0].name, "regpull");
        assert_ne!(pod.share_process_namespace, Some(true));
        assert_eq!(pod.automount_service_account_token, Some(false));

        // Without a pull-only secret the build step holds no credential at all.
        let job = build(builder, false);
        let anonymous = steps(&job);
        assert!(
            mounted_secrets(&job, &anonymous[1]).is_empty(),
            "{builder:?}"
        );
        assert_eq!(mounted_secrets(&job, &anonymous[2]), ["regcred"]);
    }
}

#[test]
fn build_job_with_kaniko_and_an_insecure_registry() {
    let job = build(Builder::Kaniko, true);
    let kaniko = steps(&job);
    let builder = &kaniko[1];
    assert_eq!(builder.image.as_deref(), Some(operator::KANIKO_IMAGE));
    let args = builder.args.as_ref().unwrap();
    for arg in [
        "--context=dir:///workspace",
        "--dockerfile=/workspace/Dockerfile",
        "--destination=registry.test/sless/sless-ns-hello:0123456789ab",
        "--no-push",
        "--tar-path=/output/image.tar",
        // Base images over plain HTTP from the registry too.
        "--insecure-registry=registry.test",
        "--skip-tls-verify-registry=registry.test",
    ] {
        assert!(args.contains(&arg.to_string()), "{arg} in {args:?}");
    }
    assert!(
        kaniko[2]
            .command
            .as_ref()
            .unwrap()
            .contains(&"--insecure".to_string())
    );

    // BuildKit reads its registry settings from buildkitd.toml, written before it starts.
    let buildkit = build(Builder::BuildKit, true);
    let buildkit = steps(&buildkit);
    let command = buildkit[1].command.as_ref().unwrap();
    assert_eq!(command[..2], ["sh".to_string(), "-c".to_string()]);
    assert!(command[2].contains("buildkitd.toml"), "{}", command[2]);
    assert!(command[2].contains("http = true"), "{}", command[2]);
    assert!(
        command[2].ends_with("exec buildctl-daemonless.sh \"$@\""),
        "{}",
        command[2]
    );
    assert_eq!(command[3], "buildctl-daemonless.sh");
    assert!(
        buildkit[2]
            .command
            .as_ref()
            .unwrap()
            .contains(&"--insecure".to_string())
    );
}

#[test]
fn cron_job_schedule_suspend_and_call() {
    let cron = |enabled| {
        manifests::cron_job(
            &CronTrigger {
                namespace: NS,
                trigger: "tick",
                function: "hello",
                schedule: "*/5 * * * *",
                enabled,
                timeout_sec: 30,
            },
            &config(),
        )
    };
    let on = cron(true);
    assert_eq!(on.metadata.namespace.as_deref(), Some(DEPLOY_NS));
    assert_eq!(on.metadata.name.as_deref(), Some("tick"));
    let labels = on.metadata.labels.as_ref().unwrap();
    assert_eq!(labels[LABEL_KIND], "trigger");
    assert_eq!(labels[LABEL_FUNCTION], "hello");
    let spec = on.spec.as_ref().unwrap();
    assert_eq!(spec.schedule, "*/5 * * * *");
    assert_eq!(spec.suspend, Some(false));
    assert_eq!(spec.concurrency_policy.as_deref(), Some("Forbid"));
    assert_eq!(cron(false).spec.unwrap().suspend, Some(true));

    let job = spec.job_template.spec.as_ref().unwrap();
    assert_eq!(job.backoff_limit, Some(0));
    let container = &pod(&job.template.spec).containers[0];
    assert_eq!(container.image.as_deref(), Some(operator::CURL_IMAGE));
    let args = container.args.as_ref().unwrap();
    // Through the data plane's /fn, which records the call.
    assert_eq!(
        args.last().map(String::as_str),
        Some(
            "http://sless-operator.sless-system.svc.cluster.local:8080/fn/sless-cdd874dfa31ba6ca/hello/"
        )
    );
    assert!(args.windows(2).any(|w| w == ["-X", "POST"]));
    assert!(args.contains(&"x-sless-trigger: tick".to_string()));
    // The token comes from the namespace's Secret, put in the args by the kubelet.
    assert!(args.contains(&"x-sless-trigger-token: $(SLESS_TRIGGER_TOKEN)".to_string()));
    let env = &container.env.as_ref().unwrap()[0];
    assert_eq!(env.name, "SLESS_TRIGGER_TOKEN");
    let secret = env
        .value_from
        .as_ref()
        .unwrap()
        .secret_key_ref
        .as_ref()
        .unwrap();
    assert_eq!(
        (secret.name.as_str(), secret.key.as_str()),
        ("sless-trigger-token", "token")
    );
    let security = container.security_context.as_ref().unwrap();
    assert_eq!(security.run_as_non_root, Some(true));
}

#[test]
fn the_trigger_token_secret_holds_the_token_of_its_namespace_only() {
    let config = config();
    let secret = manifests::trigger_token_secret(NS, &config);
    assert_eq!(secret.metadata.namespace.as_deref(), Some(DEPLOY_NS));
    assert_eq!(secret.metadata.name.as_deref(), Some("sless-trigger-token"));
    let token = &secret.data.as_ref().unwrap()["token"].0;
    assert!(config.trigger_key.verifies(NS, token));
    assert!(!config.trigger_key.verifies("sless-other", token));
}

#[test]
fn cron_pods_call_the_configured_data_plane_url() {
    let mut config = config();
    config.data_plane_url = Some("http://dp.example:9000/".into());
    let cron = manifests::cron_job(
        &CronTrigger {
            namespace: NS,
            trigger: "tick",
            function: "hello",
            schedule: "*/5 * * * *",
            enabled: true,
            timeout_sec: 0,
        },
        &config,
    );
    let job = cron.spec.unwrap().job_template.spec.unwrap();
    let args = pod(&job.template.spec).containers[0].args.clone().unwrap();
    assert_eq!(
        args.last().unwrap(),
        &format!("http://dp.example:9000/fn/{NS}/hello/")
    );
}

#[test]
fn run_job_carries_the_event_and_job_mode() {
    let env = BTreeMap::from([
        ("B".to_string(), "2".to_string()),
        ("A".to_string(), "1".to_string()),
    ]);
    let job = manifests::run_job(
        &RunJob {
            namespace: NS,
            name: "nightly",
            run_id: 3,
            image: "registry.test/sless/sless-ns-hello:0123456789ab",
            entrypoint: "handler.handle",
            env: &env,
            event_json: "{\"day\": 1}",
            timeout_sec: 10,
            memory_mb: 128,
            cpu_millis: 4000,
            disk_mb: 100,
            read_only_root: true,
        },
        &config(),
    );
    assert_eq!(job.metadata.name.as_deref(), Some("nightly-run-3"));
    assert_eq!(job.metadata.namespace.as_deref(), Some(DEPLOY_NS));
    let spec = job.spec.as_ref().unwrap();
    assert_eq!(spec.backoff_limit, Some(0));
    assert_eq!(spec.active_deadline_seconds, Some(10));
    let container = &pod(&spec.template.spec).containers[0];
    let env = env_of(container);
    let names: Vec<&str> = env.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "A",
            "B",
            "SLESS_ENTRYPOINT",
            "SLESS_EVENT_JSON",
            "SLESS_MODE"
        ]
    );
    assert!(env.contains(&("SLESS_EVENT_JSON".into(), "{\"day\": 1}".into())));
    assert!(env.contains(&("SLESS_MODE".into(), "job".into())));
    assert_eq!(container.image_pull_policy.as_deref(), Some("IfNotPresent"));
    let limits = container
        .resources
        .as_ref()
        .unwrap()
        .limits
        .as_ref()
        .unwrap();
    assert_eq!(limits["cpu"].0, "4000m");
    assert_eq!(limits["ephemeral-storage"].0, "100Mi");
    assert_eq!(limits["memory"].0, "128Mi");
}

#[test]
fn http_ingress_routes_the_fn_path_to_the_service() {
    let mut config = config();
    config.external_url = None;
    config.ingress.host = Some("fn.example.com".into());
    config.ingress.class = Some("nginx".into());
    let ingress = manifests::http_ingress(NS, "web", "hello", &config);
    assert_eq!(ingress.metadata.namespace.as_deref(), Some(DEPLOY_NS));
    let spec = ingress.spec.as_ref().unwrap();
    assert_eq!(spec.ingress_class_name.as_deref(), Some("nginx"));
    let rule = &spec.rules.as_ref().unwrap()[0];
    assert_eq!(rule.host.as_deref(), Some("fn.example.com"));
    let path = &rule.http.as_ref().unwrap().paths[0];
    assert_eq!(
        path.path.as_deref(),
        Some("/fn/sless-cdd874dfa31ba6ca/hello(/|$)(.*)")
    );
    let backend = path.backend.service.as_ref().unwrap();
    assert_eq!(backend.name, "hello");
    assert_eq!(backend.port.as_ref().unwrap().number, Some(8080));
    assert_eq!(
        config.function_url(NS, "hello").as_deref(),
        Some("http://fn.example.com/fn/sless-cdd874dfa31ba6ca/hello")
    );
}

#[test]
fn an_external_buildkit_daemon_builds_from_an_unprivileged_pod() {
    let mut config = config();
    config.buildkit_addr = Some("tcp://buildkitd.buildkit:1234".into());
    assert!(config.builds_unprivileged());
    let job = build_with(config);
    let build = &steps(&job)[1];
    let command = build.command.as_ref().unwrap();
    assert_eq!(
        command,
        &["buildctl", "--addr", "tcp://buildkitd.buildkit:1234"]
    );
    assert_eq!(build.args.as_ref().unwrap()[0], "build");
    // No rootless daemon here: no unconfined profile, no escalation, no state volume.
    let security = build.security_context.as_ref().unwrap();
    assert_eq!(security.allow_privilege_escalation, Some(false));
    assert_eq!(
        security.seccomp_profile.as_ref().unwrap().type_,
        "RuntimeDefault"
    );
    assert!(security.app_armor_profile.is_none());
    assert!(build.env.is_none(), "{:?}", build.env);
    // The push credential stays with the push step.
    assert!(mounted_secrets(&job, build).is_empty());
}

#[test]
fn build_pods_run_in_user_namespaces_when_asked() {
    let host_users = |user_namespaces: bool| {
        let mut config = config();
        config.build_user_namespaces = user_namespaces;
        let job = build_with(config);
        pod(&job.spec.as_ref().unwrap().template.spec).host_users
    };
    assert_eq!(
        host_users(false),
        None,
        "off by default: it needs the feature"
    );
    assert_eq!(host_users(true), Some(false));
}

#[test]
fn every_image_the_controllers_use_is_pinned() {
    let deployment = serde_json::to_string(&deployment()).unwrap();
    let jobs = [
        build(Builder::BuildKit, false),
        build(Builder::Kaniko, false),
    ];
    let mut images: Vec<String> = jobs
        .iter()
        .flat_map(|job| {
            let pod = pod(&job.spec.as_ref().unwrap().template.spec).clone();
            pod.containers
                .into_iter()
                .chain(pod.init_containers.unwrap_or_default())
                .filter_map(|c| c.image)
        })
        .collect();
    images.push(operator::CURL_IMAGE.into());
    for image in images {
        assert!(is_pinned(&image), "{image} is not pinned");
    }
    assert!(!deployment.contains(":latest"));
}
