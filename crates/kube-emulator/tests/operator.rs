//! The operator's controllers, run in process against the emulator over HTTP: a
//! Function with code gets a build Job, the Job's success makes it Ready (a failure,
//! Failed with the build log's tail), and deleting it runs the finalizer's cleanup.
//! The test plays the Job controller.

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

#[tokio::test]
async fn controllers_build_a_function_and_clean_it_up() {
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
