//! The install manifests in `operator/deploy/` and the objects the controllers build,
//! checked as data; when `kubernetes-validate` (PyPI) is installed, also against the
//! Kubernetes 1.34 schemas with `--strict`, offline.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use operator::manifests::{
    self, BuildJob, CronTrigger, RunJob, Workload, is_pinned, registry_secret_copy,
};
use operator::{Builder, KubeConfig};
use serde::Deserialize;
use serde_json::{Value, json};
use sless_core::model::{Kind, Runtime, WorkloadSpec};

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

/// Every Kubernetes object of the install, as (file, JSON).
fn install_objects() -> Vec<(String, Value)> {
    let mut objects = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(deploy_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .filter(|p| !p.ends_with("kustomization.yaml"))
        .collect();
    files.sort();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let value = Value::deserialize(doc).unwrap();
            if !value.is_null() {
                objects.push((
                    path.file_name().unwrap().to_string_lossy().into_owned(),
                    value,
                ));
            }
        }
    }
    objects
}

fn images(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                if key == "image" {
                    if let Some(image) = child.as_str() {
                        out.push(image.to_string());
                    }
                } else {
                    images(child, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| images(v, out)),
        _ => {}
    }
}

#[test]
fn no_latest_tag_anywhere_in_the_install() {
    for entry in std::fs::read_dir(deploy_dir()).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            !text.contains(":latest"),
            "{} names :latest",
            path.display()
        );
    }
    let dockerfile = std::fs::read_to_string(deploy_dir().join("Dockerfile")).unwrap();
    let froms: Vec<&str> = dockerfile
        .lines()
        .filter_map(|l| l.strip_prefix("FROM "))
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(froms.len(), 2, "multi-stage");
    for image in froms {
        assert!(is_pinned(image), "FROM {image} is not pinned");
    }
    assert!(
        dockerfile.contains("\nUSER 10001"),
        "the image runs as non-root"
    );
    let mut all = Vec::new();
    for (_, object) in install_objects() {
        images(&object, &mut all);
    }
    assert!(!all.is_empty());
    for image in all {
        assert!(is_pinned(&image), "{image}");
    }
}

#[test]
fn install_deployments_run_restricted() {
    let deployments: Vec<Deployment> = install_objects()
        .into_iter()
        .filter(|(_, o)| o["kind"] == "Deployment")
        .map(|(_, o)| serde_json::from_value(o).unwrap())
        .collect();
    let mut names: Vec<_> = deployments
        .iter()
        .map(|d| d.metadata.name.clone().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "sless-api",
            "sless-console",
            "sless-controllers",
            "sless-dispatcher"
        ]
    );
    for deployment in deployments {
        let pod = deployment.spec.unwrap().template.spec.unwrap();
        assert_eq!(pod.security_context.unwrap().run_as_non_root, Some(true));
        for container in pod.containers {
            let security = container.security_context.unwrap();
            assert_eq!(security.allow_privilege_escalation, Some(false));
            assert_eq!(security.read_only_root_filesystem, Some(true));
            assert_eq!(container.args.as_ref().unwrap()[0], "operator");
        }
    }
}

/// No single point of failure on the call path: the data plane runs two replicas or
/// more, rolled one at a time, behind a disruption budget, and the Service sends calls
/// to it alone; the controllers stand by in a second replica.
#[test]
fn the_data_plane_is_replicated_and_apart_from_the_controllers() {
    let objects = install_objects();
    let find = |kind: &str, name: &str| {
        objects
            .iter()
            .map(|(_, o)| o)
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"))
            .clone()
    };
    let component = |deployment: &Value| {
        deployment["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == "SLESS_COMPONENTS")
            .map(|e| e["value"].clone())
    };
    let api = find("Deployment", "sless-api");
    assert_eq!(component(&api), Some(json!("api")));
    assert!(api["spec"]["replicas"].as_i64().unwrap() >= 2);
    assert_eq!(api["spec"]["strategy"]["type"], "RollingUpdate");
    assert_eq!(
        api["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"],
        0
    );
    let pdb = find("PodDisruptionBudget", "sless-api");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        api["spec"]["selector"]["matchLabels"]
    );
    let service = find("Service", "sless-operator");
    assert_eq!(
        service["spec"]["selector"],
        api["spec"]["selector"]["matchLabels"]
    );

    let controllers = find("Deployment", "sless-controllers");
    assert_eq!(component(&controllers), Some(json!("controllers")));
    assert!(controllers["spec"]["replicas"].as_i64().unwrap() >= 2);
}

#[test]
fn the_data_plane_the_network_policies_allow_is_the_install_s() {
    let pod_names: Vec<String> = install_objects()
        .into_iter()
        .filter(|(_, o)| o["kind"] == "Deployment" && o["metadata"]["namespace"] == "sless-system")
        .filter_map(|(_, o)| {
            o["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    for name in manifests::network::DATA_PLANE_PODS {
        assert!(
            pod_names.iter().any(|p| p == name),
            "{name} in {pod_names:?}"
        );
    }
    let policy = manifests::data_plane_ingress("sless-ab", &KubeConfig::new("r"));
    let from = &policy.spec.unwrap().ingress.unwrap()[0]
        .from
        .clone()
        .unwrap()[0];
    let namespace = from
        .namespace_selector
        .as_ref()
        .unwrap()
        .match_labels
        .as_ref()
        .unwrap();
    assert_eq!(namespace["kubernetes.io/metadata.name"], "sless-system");

    // Cron pods call /fn through the Service `DATA_PLANE_SERVICE`: its pods and port are
    // the ones their egress policy allows.
    let service = install_objects()
        .into_iter()
        .map(|(_, o)| o)
        .find(|o| o["kind"] == "Service" && o["metadata"]["name"] == operator::DATA_PLANE_SERVICE)
        .expect("the data plane's Service");
    let cron =
        serde_json::to_value(manifests::cron_egress("sless-ab", &KubeConfig::new("r"))).unwrap();
    let to = &cron["spec"]["egress"][1];
    assert_eq!(
        to["to"][0]["podSelector"]["matchLabels"],
        service["spec"]["selector"]
    );
    assert_eq!(to["ports"][0]["port"], service["spec"]["ports"][0]["port"]);
    assert_eq!(
        to["to"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        service["metadata"]["namespace"]
    );
}

/// The rules of the install's ClusterRole `name`.
fn cluster_role(name: &str) -> Vec<PolicyRule> {
    let role: ClusterRole = install_objects()
        .into_iter()
        .find(|(_, o)| o["kind"] == "ClusterRole" && o["metadata"]["name"] == name)
        .map(|(_, o)| serde_json::from_value(o).unwrap())
        .unwrap();
    role.rules.unwrap()
}

fn grants(rules: &[PolicyRule], group: &str, resource: &str, verb: &str) -> bool {
    rules.iter().any(|r| {
        r.api_groups
            .as_deref()
            .unwrap_or_default()
            .iter()
            .any(|g| g == group)
            && r.resources
                .as_deref()
                .unwrap_or_default()
                .iter()
                .any(|x| x == resource)
            && r.verbs.iter().any(|v| v == verb)
    })
}

#[test]
fn the_dispatcher_reads_triggers_and_writes_only_their_status() {
    let rules = cluster_role("sless-dispatcher");
    let allows = |group: &str, resource: &str, verb: &str| grants(&rules, group, resource, verb);
    for resource in ["functions", "services", "triggers"] {
        for verb in ["get", "list", "watch"] {
            assert!(
                allows("sless.kube5s.ru", resource, verb),
                "{resource} {verb}"
            );
        }
        for verb in ["create", "update", "patch", "delete"] {
            assert!(
                !allows("sless.kube5s.ru", resource, verb),
                "{resource} {verb}"
            );
        }
    }
    assert!(allows("sless.kube5s.ru", "triggers/status", "patch"));
    assert!(!allows("sless.kube5s.ru", "functions/status", "patch"));
    assert!(allows("apps", "deployments", "watch"));
    assert!(!allows("apps", "deployments", "patch"));
    for verb in ["get", "list", "watch", "create", "patch"] {
        assert!(!allows("", "secrets", verb), "secrets {verb}");
    }
}

#[test]
fn the_data_plane_runs_under_its_own_account_that_cannot_act_as_the_controllers() {
    let account = |name: &str| {
        install_objects()
            .into_iter()
            .map(|(_, o)| o)
            .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == name)
            .unwrap()["spec"]["template"]["spec"]["serviceAccountName"]
            .clone()
    };
    assert_eq!(account("sless-api"), "sless-api");
    assert_eq!(account("sless-controllers"), "sless-operator");
    let rules = cluster_role("sless-api");
    let allows = |group: &str, resource: &str, verb: &str| grants(&rules, group, resource, verb);
    for resource in ["functions", "services", "triggers", "functionjobs"] {
        for verb in ["get", "list", "watch", "create", "patch", "delete"] {
            assert!(
                allows("sless.kube5s.ru", resource, verb),
                "{resource} {verb}"
            );
        }
    }
    assert!(allows("", "namespaces", "create"));
    assert!(!allows("", "namespaces", "patch"));
    assert!(allows("apps", "deployments", "watch"));
    for (group, resource) in [
        ("apps", "deployments"),
        ("batch", "jobs"),
        ("batch", "cronjobs"),
        ("", "services"),
        ("networking.k8s.io", "networkpolicies"),
        ("networking.k8s.io", "ingresses"),
        ("rbac.authorization.k8s.io", "rolebindings"),
        ("", "secrets"),
    ] {
        for verb in ["create", "patch", "delete"] {
            assert!(!allows(group, resource, verb), "{resource} {verb}");
        }
    }
    for verb in ["get", "list", "watch"] {
        assert!(!allows("", "secrets", verb), "secrets {verb}");
    }
    assert!(!rules.iter().any(|r| r.verbs.iter().any(|v| v == "*")));
}

#[test]
fn the_cluster_role_grants_what_the_controllers_do_and_no_secret_reads() {
    let rules = cluster_role("sless-operator");
    let allows = |group: &str, resource: &str, verb: &str| grants(&rules, group, resource, verb);
    for resource in ["functions", "services", "triggers", "functionjobs"] {
        for verb in ["get", "list", "watch", "create", "patch", "delete"] {
            assert!(
                allows("sless.kube5s.ru", resource, verb),
                "{resource} {verb}"
            );
        }
        assert!(allows(
            "sless.kube5s.ru",
            &format!("{resource}/status"),
            "patch"
        ));
    }
    for (group, resource) in [
        ("apps", "deployments"),
        ("batch", "jobs"),
        ("batch", "cronjobs"),
    ] {
        for verb in ["list", "watch", "create", "patch", "delete"] {
            assert!(allows(group, resource, verb), "{resource} {verb}");
        }
    }
    for verb in ["list", "watch", "create", "patch", "delete"] {
        assert!(
            allows("networking.k8s.io", "networkpolicies", verb),
            "networkpolicies {verb}"
        );
    }
    for resource in ["resourcequotas", "limitranges"] {
        for verb in ["list", "watch", "create", "patch"] {
            assert!(allows("", resource, verb), "{resource} {verb}");
        }
    }
    for verb in ["list", "watch"] {
        assert!(allows("", "pods", verb), "pods {verb}");
    }
    assert!(allows("", "namespaces", "create"));
    assert!(allows("", "pods/log", "get"));
    // Secrets are written only through the role the operator binds in its own
    // namespaces, and never read cluster-wide.
    for verb in ["get", "list", "watch", "create", "patch"] {
        assert!(!allows("", "secrets", verb), "secrets {verb} cluster-wide");
    }
    let secrets = cluster_role(operator::manifests::SECRETS_ROLE);
    assert!(grants(&secrets, "", "secrets", "patch"));
    assert!(!grants(&secrets, "", "secrets", "get"));
    assert!(allows("rbac.authorization.k8s.io", "rolebindings", "patch"));
    let binds: Vec<_> = rules
        .iter()
        .filter(|r| r.verbs.iter().any(|v| v == "bind" || v == "escalate"))
        .collect();
    assert_eq!(binds.len(), 1, "one rule binds roles");
    assert_eq!(
        binds[0].resource_names.as_deref(),
        Some(&[operator::manifests::SECRETS_ROLE.to_string()][..]),
        "the operator may bind the secrets role and no other"
    );
    assert!(!rules.iter().any(|r| r.verbs.iter().any(|v| v == "*")));
}

/// One of each object the controllers create, as the controllers build them.
fn controller_objects() -> Vec<Value> {
    let mut config = KubeConfig::new("registry.test/sless");
    config.registry_secret = Some("regcred".into());
    config.ingress.namespace = Some("ingress-nginx".into());
    let spec = WorkloadSpec {
        runtime: Runtime::Nodejs20,
        entrypoint: "handler.handle".into(),
        memory_mb: 128,
        cpu_millis: 1000,
        disk_mb: 512,
        timeout_sec: 0,
        env: BTreeMap::from([("A".to_string(), "1".to_string())]),
        s3_key: Some("contexts/sless-ab/hello/20250101120000.tar.gz".into()),
        replicas: Some(2),
        min_instances: None,
        max_instances: None,
        target_concurrency: None,
        egress: Default::default(),
    };
    let image = "registry.test/sless/sless-sless-ab-hello:0123456789ab";
    let mut out = vec![
        serde_json::to_value(manifests::namespace(
            "sless-fn-sless-ab",
            Some("sless-ab"),
            Some(manifests::PodSecurity::Restricted),
        ))
        .unwrap(),
        serde_json::to_value(manifests::deployment(
            &Workload {
                kind: Kind::Function,
                namespace: "sless-ab",
                name: "hello",
                spec: &spec,
                image,
                bounds: operator::autoscale::Bounds {
                    min: 2,
                    max: 2,
                    target: 10,
                },
                restarted_at: Some("2025-01-01T12:00:00Z"),
            },
            &config,
        ))
        .unwrap(),
        serde_json::to_value(manifests::service(Kind::Function, "sless-ab", "hello")).unwrap(),
        serde_json::to_value(manifests::cron_job(
            &CronTrigger {
                namespace: "sless-ab",
                trigger: "tick",
                function: "hello",
                schedule: "0 * * * *",
                enabled: false,
                timeout_sec: 0,
            },
            &config,
        ))
        .unwrap(),
        serde_json::to_value(manifests::http_ingress("sless-ab", "web", "hello", &config)).unwrap(),
        serde_json::to_value(manifests::run_job(
            &RunJob {
                namespace: "sless-ab",
                name: "nightly",
                run_id: 1,
                image,
                entrypoint: "handler.handle",
                env: &BTreeMap::new(),
                event_json: "{}",
                timeout_sec: 60,
                memory_mb: 128,
                cpu_millis: 1000,
                disk_mb: 512,
                read_only_root: true,
            },
            &config,
        ))
        .unwrap(),
        serde_json::to_value(manifests::default_deny("sless-ab")).unwrap(),
        serde_json::to_value(manifests::data_plane_ingress("sless-ab", &config)).unwrap(),
        serde_json::to_value(manifests::cron_egress("sless-ab", &config)).unwrap(),
        serde_json::to_value(manifests::trigger_token_secret("sless-ab", &config)).unwrap(),
        serde_json::to_value(manifests::build_boundary("sless-ab", &config)).unwrap(),
        serde_json::to_value(manifests::build_egress_policy(
            Kind::Function,
            "sless-ab",
            "hello",
            &"10.0.0.5:5432".parse().unwrap(),
        ))
        .unwrap(),
        serde_json::to_value(manifests::resource_quota(
            "sless-ab",
            &manifests::TenantQuota::default(),
        ))
        .unwrap(),
        serde_json::to_value(manifests::limit_range("sless-ab")).unwrap(),
        serde_json::to_value(registry_secret_copy(
            &Secret {
                metadata: kube::api::ObjectMeta {
                    name: Some("regcred".into()),
                    ..Default::default()
                },
                type_: Some("kubernetes.io/dockerconfigjson".into()),
                ..Default::default()
            },
            "sless-fn-sless-ab",
        ))
        .unwrap(),
    ];
    for egress in [
        "internet",
        "none",
        "10.0.0.5:5432,169.254.0.0/16,api.example.com:443",
    ] {
        out.push(
            serde_json::to_value(manifests::egress_policy(
                Kind::Function,
                "sless-ab",
                "hello",
                "workload",
                &egress.parse().unwrap(),
            ))
            .unwrap(),
        );
    }
    // In-pod BuildKit, kaniko, both in user namespaces, and the client of an external
    // BuildKit daemon.
    let variants = [
        (Builder::BuildKit, false, None),
        (Builder::Kaniko, false, None),
        (Builder::BuildKit, true, None),
        (Builder::Kaniko, true, None),
        (
            Builder::BuildKit,
            false,
            Some("tcp://buildkitd.buildkit:1234"),
        ),
    ];
    for (builder, user_namespaces, addr) in variants {
        config.builder = builder;
        config.build_user_namespaces = user_namespaces;
        config.buildkit_addr = addr.map(String::from);
        out.push(
            serde_json::to_value(manifests::build_job(
                &BuildJob {
                    kind: Kind::Function,
                    namespace: "sless-ab",
                    name: "hello",
                    s3_key: "contexts/sless-ab/hello/20250101120000.tar.gz",
                    context_url: "https://s3.test/x",
                    image,
                },
                &config,
            ))
            .unwrap(),
        );
    }
    out
}

#[test]
fn controller_objects_validate_against_the_kubernetes_schemas() {
    let objects = controller_objects();
    let mut yaml = String::new();
    for object in &objects {
        assert!(
            object["apiVersion"].is_string() && object["kind"].is_string(),
            "{object}"
        );
        // JSON documents (valid YAML): a YAML dump would leave RFC 3339 strings
        // unquoted, and YAML 1.1 readers take them for timestamps.
        yaml.push_str("---\n");
        yaml.push_str(&serde_json::to_string_pretty(object).unwrap());
        yaml.push('\n');
    }
    let dump = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sless-controller-objects.yaml");
    std::fs::write(&dump, yaml).unwrap();

    let validator = std::process::Command::new("kubernetes-validate")
        .arg("--version")
        .output();
    if validator.is_err() {
        // CI installs it (.ci/run): there a missing validator is a broken setup, not a skip.
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "kubernetes-validate is missing under CI=true; .ci/run installs it with pip"
        );
        eprintln!(
            "kubernetes-validate is not installed (pip install kubernetes-validate); \
             schema validation of {} skipped",
            dump.display()
        );
        return;
    }
    let mut files = vec![dump];
    for name in [
        "namespace.yaml",
        "crds.yaml",
        "rbac.yaml",
        "admission.yaml",
        "config.yaml",
        "operator.yaml",
        "console.yaml",
        "ingress.example.yaml",
    ] {
        files.push(deploy_dir().join(name));
    }
    // The oldest Kubernetes the install is checked on, and the validator's newest.
    for version in [Some("1.31.0"), None] {
        let mut validate = std::process::Command::new("kubernetes-validate");
        validate.args(["--strict", "--quiet"]);
        if let Some(version) = version {
            validate.args(["-k", version]);
        }
        let output = validate.args(&files).output().unwrap();
        assert!(
            output.status.success(),
            "kubernetes-validate --strict ({}) failed:\n{}{}",
            version.unwrap_or("newest"),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

fn images_script(args: &[&str]) -> std::process::Output {
    std::process::Command::new("bash")
        .arg(deploy_dir().join("../../scripts/images"))
        .args(args)
        .env("SLESS_IMAGE_TOOL", "podman")
        .output()
        .unwrap()
}

#[test]
fn scripts_images_builds_every_image_under_the_names_the_install_uses() {
    let prefix = "registry.test:5000/team";
    let output = images_script(&["--dry-run", "--insecure", prefix]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let commands: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("+ "))
        .collect();

    // The operator image, under the name the Deployments use but for the prefix.
    let version = env!("CARGO_PKG_VERSION");
    let operator = format!("{prefix}/sless:v{version}");
    assert!(commands.contains(&&*format!(
        "podman build -f operator/deploy/Dockerfile -t {operator} ."
    )));
    assert!(commands.contains(&&*format!("podman push --tls-verify=false {operator}")));
    let mut install_images = Vec::new();
    for (_, object) in install_objects() {
        images(&object, &mut install_images);
    }
    let shipped = format!("registry.example.com/sless/sless:v{version}");
    assert!(install_images.contains(&shipped), "{install_images:?}");
    assert!(stdout.contains(&format!("registry.example.com/sless/sless={operator}")));

    // Every runtime's base, under the name build contexts put in FROM.
    for runtime in Runtime::ALL {
        let base = sless_core::upload::base_image(prefix, runtime);
        let dir = format!("runtimes/{}", runtime.as_str());
        assert!(
            commands.contains(&&*format!(
                "podman build -f {dir}/Dockerfile -t {base} {dir}"
            )),
            "no build of {base}: {commands:?}"
        );
        assert!(commands.contains(&&*format!("podman push --tls-verify=false {base}")));
    }
    assert_eq!(commands.len(), 2 * (1 + Runtime::ALL.len()), "{commands:?}");
}

#[test]
fn scripts_images_refuses_a_missing_or_malformed_prefix() {
    for args in [
        &["--dry-run"][..],
        &["--dry-run", "reg.test/a b"],
        &["--bogus", "reg"],
    ] {
        let output = images_script(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
    }
}

/// The Service of the install named `name`: the `app.kubernetes.io/name` its selector
/// picks and the ports it exposes (number and name).
fn install_service(name: &str) -> (String, Vec<(i64, String)>) {
    let (_, service) = install_objects()
        .into_iter()
        .find(|(_, o)| o["kind"] == "Service" && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("the install has no Service {name}"));
    let selects = service["spec"]["selector"]["app.kubernetes.io/name"]
        .as_str()
        .unwrap()
        .to_string();
    let ports = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["port"].as_i64().unwrap(),
                p["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    (selects, ports)
}

#[test]
fn both_route_examples_send_the_api_and_fn_to_the_data_plane_and_the_rest_to_the_console() {
    let objects = install_objects();
    let find = |kind: &str| {
        objects
            .iter()
            .find(|(_, o)| o["kind"] == kind)
            .map(|(_, o)| o.clone())
            .unwrap_or_else(|| panic!("no {kind} example"))
    };
    // (path prefix, Service, port number or name) of each example.
    let ingress = find("Ingress");
    let mut routes: Vec<(String, String, String, String)> = Vec::new();
    for path in ingress["spec"]["rules"][0]["http"]["paths"]
        .as_array()
        .unwrap()
    {
        let service = &path["backend"]["service"];
        routes.push((
            "Ingress".into(),
            path["path"].as_str().unwrap().into(),
            service["name"].as_str().unwrap().into(),
            service["port"]["name"].as_str().unwrap().into(),
        ));
    }
    let route = find("HTTPRoute");
    for rule in route["spec"]["rules"].as_array().unwrap() {
        let backend = &rule["backendRefs"][0];
        for matched in rule["matches"].as_array().unwrap() {
            assert_eq!(matched["path"]["type"], "PathPrefix");
            routes.push((
                "HTTPRoute".into(),
                matched["path"]["value"].as_str().unwrap().into(),
                backend["name"].as_str().unwrap().into(),
                backend["port"].as_i64().unwrap().to_string(),
            ));
        }
    }
    for example in ["Ingress", "HTTPRoute"] {
        for (prefix, component) in [
            ("/v1", "sless-api"),
            ("/fn", "sless-api"),
            ("/", "sless-console"),
        ] {
            let (_, _, service, port) = routes
                .iter()
                .find(|(e, p, _, _)| e == example && p == prefix)
                .unwrap_or_else(|| panic!("the {example} example does not route {prefix}"));
            let (selects, ports) = install_service(service);
            assert_eq!(selects, component, "{example} {prefix} goes to {service}");
            assert!(
                ports
                    .iter()
                    .any(|(number, name)| *port == number.to_string() || port == name),
                "{example} {prefix}: {service} has no port {port}"
            );
        }
    }
    let timeout = route["spec"]["rules"][0]["timeouts"]["request"]
        .as_str()
        .unwrap();
    assert_eq!(timeout, "910s", "as long as the Ingress's read timeout");
    assert_eq!(
        ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-read-timeout"],
        "910"
    );
}
