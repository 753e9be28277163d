//! The operator's controllers, run in process against the emulator over HTTP: a
//! Function with code gets a build Job, the Job's success makes it Ready (a failure,
//! Failed with the build log's tail), and deleting it runs the finalizer's cleanup; a
//! running workload is Ready only once its Deployment is available, and Failed with
//! the kubelet's reason when its pod crash-loops. The test plays the Job and
//! Deployment controllers and the kubelet.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use kube_emulator::Emulator;
use operator::context_url::ContextUrls;
use operator::{Context, KubePodLogs};
use serde_json::{Value, json};

struct FixedUrls;

#[async_trait::async_trait]
impl ContextUrls for FixedUrls {
    async fn presigned_get(
        &self,
        key: &str,
        _ttl: Duration,
    ) -> Result<String, operator::PresignError> {
        Ok(format!("http://contexts.invalid/{key}"))
    }
}

/// Polls the emulator's state until `check` gives a value.
async fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    for _ in 0..200 {
        if let Some(found) = check() {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

fn status(emu: &Emulator, name: &str) -> Value {
    emu.get(
        "sless.kube5s.ru/v1alpha1",
        "functions",
        Some("default"),
        name,
    )
    .map(|f| f["status"].clone())
    .unwrap_or_default()
}

fn function(name: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "default"},
           "spec": {"runtime": "python3.11", "entrypoint": "main.handler", "memoryMb": 128,
                    "timeoutSec": 30, "s3Key": format!("default/{name}/v1.zip")}})
}

/// The build Job the operator started for a function.
async fn build_job(emu: &Emulator, name: &str) -> String {
    eventually("a build Job", || {
        emu.list("batch/v1", "jobs", Some("sless-build-default"))
            .into_iter()
            .filter_map(|j| j["metadata"]["name"].as_str().map(str::to_string))
            .find(|j| j.contains(name))
    })
    .await
}

/// The emulator with the CRDs installed and the controllers running against it.
async fn start() -> (Emulator, Client, tokio::task::JoinHandle<impl Sized>) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (emu, addr) = Emulator::start().await.unwrap();
    let client =
        Client::try_from(kube::Config::new(format!("http://{addr}").parse().unwrap())).unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let yaml = operator::crds::crds_yaml().unwrap();
    for document in yaml.split("\n---\n").filter(|d| d.contains("kind:")) {
        let crd: CustomResourceDefinition = serde_yaml::from_str(document).unwrap();
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
    let ctx = Context::new(
        client.clone(),
        operator::KubeConfig::new("registry.invalid"),
        Arc::new(FixedUrls),
        Arc::new(KubePodLogs::new(client.clone())),
    );
    let controllers = tokio::spawn(operator::run_controllers(
        ctx,
        operator::Readiness::default(),
    ));
    (emu, client, controllers)
}

#[tokio::test]
async fn controllers_build_a_function_and_clean_it_up() {
    let (emu, client, controllers) = start().await;

    emu.create("sless.kube5s.ru/v1alpha1", "functions", function("hello"))
        .unwrap();
    let job = build_job(&emu, "hello").await;
    eventually("phase Building", || {
        (status(&emu, "hello")["phase"] == "Building").then_some(())
    })
    .await;
    let created = emu
        .get(
            "sless.kube5s.ru/v1alpha1",
            "functions",
            Some("default"),
            "hello",
        )
        .unwrap();
    assert!(
        created["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty())
    );
    emu.complete_job("sless-build-default", &job).unwrap();
    eventually("phase Ready", || {
        (status(&emu, "hello")["phase"] == "Ready").then_some(())
    })
    .await;

    // A failed build reports the tail of the build pod's log.
    emu.create("sless.kube5s.ru/v1alpha1", "functions", function("broken"))
        .unwrap();
    let job = build_job(&emu, "broken").await;
    emu.add_job_pod(
        "sless-build-default",
        &job,
        "Failed",
        "step 1\nerror: no such module\n",
    )
    .unwrap();
    emu.fail_job("sless-build-default", &job).unwrap();
    let failed = eventually("phase Failed", || {
        let s = status(&emu, "broken");
        (s["phase"] == "Failed").then_some(s)
    })
    .await;
    let message = failed["message"].as_str().unwrap_or_default();
    assert!(message.contains("error: no such module"), "{message}");

    let functions: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("sless.kube5s.ru", "v1alpha1", "Function"),
            "functions",
        ),
    );
    functions
        .delete("hello", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the Function gone after cleanup", || {
        emu.get(
            "sless.kube5s.ru/v1alpha1",
            "functions",
            Some("default"),
            "hello",
        )
        .is_none()
        .then_some(())
    })
    .await;
    controllers.abort();
}

fn service_status(emu: &Emulator, name: &str) -> Value {
    emu.get(
        "sless.kube5s.ru/v1alpha1",
        "services",
        Some("default"),
        name,
    )
    .map(|f| f["status"].clone())
    .unwrap_or_default()
}

fn condition<'a>(status: &'a Value, kind: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|all| all.iter().find(|c| c["type"] == kind))
        .unwrap_or_else(|| panic!("no condition {kind} in {status}"))
}

#[tokio::test]
async fn a_workload_is_ready_only_once_its_deployment_is_available_and_a_crash_loop_says_why() {
    let (emu, _client, controllers) = start().await;
    let deploy_ns = "sless-fn-default";
    // A Service always runs one instance.
    let mut service = function("api");
    service["spec"]["s3Key"] = json!("default/api/v1.zip");
    emu.create("sless.kube5s.ru/v1alpha1", "services", service)
        .unwrap();
    let job = build_job(&emu, "api").await;
    emu.complete_job("sless-build-default", &job).unwrap();
    let starting = eventually("the Deployment, and the Service starting", || {
        emu.get("apps/v1", "deployments", Some(deploy_ns), "api")?;
        let s = service_status(&emu, "api");
        (s["phase"] == "Building" && s["message"].as_str()?.contains("is starting")).then_some(s)
    })
    .await;
    assert_eq!(condition(&starting, "Ready")["status"], "False");
    assert_eq!(condition(&starting, "Ready")["reason"], "Deploying");
    assert_eq!(
        condition(&starting, "ResourcesAvailable")["status"],
        "Unknown"
    );
    // Timestamps have whole seconds: the next write comes in a later one.
    tokio::time::sleep(Duration::from_millis(1100)).await;

    // The kubelet reports the container crash-looping after an OOM kill.
    let pod = emu
        .add_deployment_pod(
            deploy_ns,
            "api",
            Some(kube_emulator::Waiting {
                reason: "CrashLoopBackOff".into(),
                message: "back-off 40s restarting failed container=function".into(),
                last_exit: Some("OOMKilled".into()),
            }),
        )
        .unwrap();
    let pod_name = pod["metadata"]["name"].as_str().unwrap().to_string();
    let failed = eventually("phase Failed with the kubelet's reason", || {
        let s = service_status(&emu, "api");
        (s["phase"] == "Failed").then_some(s)
    })
    .await;
    let message = failed["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("pod {pod_name}: CrashLoopBackOff: back-off 40s")),
        "{message}"
    );
    assert!(
        message.contains("last exit: OOMKilled (exit code 137)"),
        "{message}"
    );
    assert_eq!(condition(&failed, "Ready")["reason"], "CrashLoopBackOff");
    assert_eq!(
        condition(&failed, "Ready")["lastTransitionTime"],
        condition(&starting, "Ready")["lastTransitionTime"],
        "Ready stayed False: its transition time stays"
    );
    assert_eq!(condition(&failed, "ContainerHealthy")["status"], "False");
    assert_eq!(condition(&failed, "ContainerHealthy")["message"], message);
    let warned = emu
        .list("events.k8s.io/v1", "events", Some("default"))
        .into_iter()
        .any(|e| e["reason"] == "CrashLoopBackOff" && e["type"] == "Warning");
    assert!(warned, "a Warning event for the crash loop");

    // The Deployment controller reports the replica available: Ready.
    emu.set_deployment_available(deploy_ns, "api", 1).unwrap();
    let ready = eventually("phase Ready", || {
        let s = service_status(&emu, "api");
        (s["phase"] == "Ready").then_some(s)
    })
    .await;
    assert_eq!(condition(&ready, "Ready")["status"], "True");
    assert_eq!(condition(&ready, "ResourcesAvailable")["status"], "True");
    assert_eq!(condition(&ready, "ContainerHealthy")["status"], "True");
    controllers.abort();
}

#[tokio::test]
async fn each_tenant_gets_its_boundaries_and_they_come_back_when_deleted_by_hand() {
    let (emu, client, controllers) = start().await;
    let deploy_ns = "sless-fn-default";
    emu.create("sless.kube5s.ru/v1alpha1", "functions", function("hello"))
        .unwrap();
    let job = build_job(&emu, "hello").await;
    emu.complete_job("sless-build-default", &job).unwrap();
    let policy = |name: &str| {
        emu.get(
            "networking.k8s.io/v1",
            "networkpolicies",
            Some(deploy_ns),
            name,
        )
    };
    let egress = eventually("the function's egress policy", || {
        policy("hello-workload-egress")
    })
    .await;
    let build = emu
        .get(
            "networking.k8s.io/v1",
            "networkpolicies",
            Some("sless-build-default"),
            "sless-build",
        )
        .expect("the build namespace's policy");
    // Every build pod: the DNS, and the registry on its port only.
    assert_eq!(
        build["spec"]["egress"][0]["to"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "kube-system"
    );
    for rule in build["spec"]["egress"].as_array().unwrap() {
        assert!(
            rule["ports"].is_array(),
            "a rule open on every port: {rule}"
        );
    }
    // The install steps of this function's build: its own egress (the internet).
    let install = emu
        .get(
            "networking.k8s.io/v1",
            "networkpolicies",
            Some("sless-build-default"),
            "hello-function-build-egress",
        )
        .expect("the build's own egress policy");
    assert_eq!(
        install["spec"]["podSelector"]["matchLabels"]["sless.kube5s.ru/component"],
        "build"
    );
    assert_eq!(
        install["spec"]["egress"][1]["to"][0]["ipBlock"],
        egress["spec"]["egress"][1]["to"][0]["ipBlock"],
        "the same as the running function's"
    );
    let deny = policy("sless-default-deny").expect("default deny");
    assert_eq!(deny["spec"]["podSelector"], json!({}));
    assert_eq!(deny["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    let data_plane = policy("sless-data-plane").expect("the data plane's allow");
    let from = &data_plane["spec"]["ingress"][0]["from"][0];
    assert_eq!(
        from["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "sless-system"
    );
    assert_eq!(data_plane["spec"]["ingress"][0]["ports"][0]["port"], 8080);
    // The default egress is the internet: public addresses, never metadata.
    let internet = &egress["spec"]["egress"][1]["to"][0]["ipBlock"];
    assert_eq!(internet["cidr"], "0.0.0.0/0");
    assert!(
        internet["except"]
            .as_array()
            .unwrap()
            .contains(&json!("169.254.0.0/16"))
    );
    let quota = emu
        .get("v1", "resourcequotas", Some(deploy_ns), "sless-quota")
        .expect("the ResourceQuota");
    assert_eq!(quota["spec"]["hard"]["limits.memory"], "8192Mi");
    assert_eq!(quota["spec"]["hard"]["count/deployments.apps"], "100");
    let limits = emu
        .get("v1", "limitranges", Some(deploy_ns), "sless-limits")
        .expect("the LimitRange");
    assert_eq!(limits["spec"]["limits"][0]["max"]["memory"], "4096Mi");

    // Deleted by hand, each comes back.
    for (api_version, plural, name) in [
        (
            "networking.k8s.io/v1",
            "networkpolicies",
            "sless-default-deny",
        ),
        (
            "networking.k8s.io/v1",
            "networkpolicies",
            "sless-data-plane",
        ),
        (
            "networking.k8s.io/v1",
            "networkpolicies",
            "hello-workload-egress",
        ),
        ("v1", "resourcequotas", "sless-quota"),
        ("v1", "limitranges", "sless-limits"),
    ] {
        emu.delete(api_version, plural, Some(deploy_ns), name)
            .unwrap();
        eventually(&format!("{plural}/{name} back"), || {
            emu.get(api_version, plural, Some(deploy_ns), name)
        })
        .await;
    }

    // A list: its addresses; a name cannot be expressed, so it is blocked and said.
    let functions: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("sless.kube5s.ru", "v1alpha1", "Function"),
            "functions",
        ),
    );
    functions
        .patch(
            "hello",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"spec": {"egress": ["10.0.0.5:5432", "api.example.com:443"]}}),
            ),
        )
        .await
        .unwrap();
    eventually("the listed address allowed, the name said", || {
        let rules = policy("hello-workload-egress")?["spec"]["egress"].clone();
        let message = status(&emu, "hello")["message"].as_str()?.to_string();
        (rules.as_array()?.len() == 1 && message.contains("api.example.com:443")).then_some(())
    })
    .await;
    let rules = policy("hello-workload-egress").unwrap()["spec"]["egress"].clone();
    assert_eq!(rules[0]["to"][0]["ipBlock"]["cidr"], "10.0.0.5/32");
    assert_eq!(rules[0]["ports"][0]["port"], 5432);

    // `egress: none` leaves the function's pods no egress at all.
    functions
        .patch(
            "hello",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"egress": "none"}})),
        )
        .await
        .unwrap();
    eventually("an egress policy allowing nothing", || {
        let rules = policy("hello-workload-egress")?["spec"]["egress"].clone();
        (rules == json!([]) || rules.is_null()).then_some(())
    })
    .await;
    controllers.abort();
}
