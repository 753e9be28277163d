//! Autoscaling in Kubernetes mode through the shipped binary: `sless operator` processes
//! (the controllers with the autoscaler, and two `/fn` data-plane replicas) against the
//! kube-emulator, the function's pod a local server reached through `SLESS_CONNECT_TO`.
//! The test plays the Deployment controller: the ready replicas follow `spec.replicas`.

mod common;

use std::time::{Duration, Instant};

use common::authz::assert_authorized;
use common::kube_cluster::{
    Cluster, Operator, apply_trigger, cluster, eventually_within, wait_ready,
};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use operator::names::build_job_name;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sless_core::model::{build_namespace, deploy_namespace};

/// A user namespace as the REST API makes it.
fn sless_namespace(cluster: &Cluster, ns: &str) {
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": ns, "labels": {"app.kubernetes.io/managed-by": "sless"}}});
    cluster.emu.create("v1", "namespaces", namespace).unwrap();
}

/// The function's pod: answers after `?ms=` milliseconds.
async fn serve_pod() -> std::net::SocketAddr {
    let pod = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = pod.local_addr().unwrap();
    let app = axum::Router::new().fallback(
        |query: axum::extract::Query<std::collections::HashMap<String, u64>>| async move {
            let ms = query.get("ms").copied().unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            "hello from the pod"
        },
    );
    tokio::spawn(async move { axum::serve(pod, app).await.unwrap() });
    address
}

/// What the Deployment controller and the kubelet do: the ready replicas follow
/// `spec.replicas` a little later.
fn play_deployment_controller(cluster: &Cluster, ns: &str, name: &str) {
    let emu = cluster.emu.clone();
    let (ns, name) = (ns.to_string(), name.to_string());
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let Some(deployment) = emu.get("apps/v1", "deployments", Some(&ns), &name) else {
                continue;
            };
            let wanted = &deployment["spec"]["replicas"];
            let status = &deployment["status"];
            if status["readyReplicas"] == *wanted
                && status["observedGeneration"] == deployment["metadata"]["generation"]
            {
                continue;
            }
            let status = json!({"observedGeneration": deployment["metadata"]["generation"],
                "replicas": wanted, "updatedReplicas": wanted, "readyReplicas": wanted,
                "availableReplicas": wanted});
            let _ = emu.update_status("apps/v1", "deployments", Some(&ns), &name, status);
        }
    });
}

fn replicas(cluster: &Cluster, deploy_ns: &str) -> Option<i64> {
    cluster
        .get("apps/v1", "deployments", deploy_ns, "hello")
        .and_then(|d| d["spec"]["replicas"].as_i64())
}

/// A built function `hello` with an http trigger and the given scaling fields.
async fn built_function(cluster: &Cluster, operator: &Operator, ns: &str, scaling: Value) {
    let resource = ApiResource::erase::<sless_core::model::Function>(&());
    let functions: Api<DynamicObject> = Api::namespaced_with(cluster.client.clone(), ns, &resource);
    let key = format!("contexts/{ns}/hello/1.tar.gz");
    let mut function = DynamicObject::new("hello", &resource);
    let mut spec = json!({"runtime": "python3.11", "entrypoint": "handler.handle",
        "memoryMb": 128, "timeoutSec": 30, "s3Key": key});
    spec.as_object_mut()
        .unwrap()
        .extend(scaling.as_object().unwrap().clone());
    function.data = json!({ "spec": spec });
    functions
        .create(&PostParams::default(), &function)
        .await
        .unwrap();
    let build_ns = build_namespace(ns);
    let build = build_job_name("hello", &key);
    eventually_within(operator, "the build Job", Duration::from_secs(30), || {
        cluster.get("batch/v1", "jobs", &build_ns, &build)
    })
    .await;
    cluster.finish_job(&build_ns, &build, true);
    apply_trigger(
        cluster,
        ns,
        "web",
        json!({"type": "http", "functionRef": "hello"}),
    )
    .await;
}

async fn call(http: &reqwest::Client, base: &str, ns: &str, ms: u64) -> (StatusCode, String) {
    let response = http
        .get(format!("{base}/fn/{ns}/hello?ms={ms}"))
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .unwrap();
    let status = response.status();
    (status, response.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_scales_from_zero_on_a_call_out_on_summed_concurrency_and_back_to_zero() {
    let cluster = cluster().await;
    let ns = "team-s";
    sless_namespace(&cluster, ns);
    let deploy_ns = deploy_namespace(ns);
    let pod = serve_pod().await;
    let authority = operator::names::service_authority(ns, "hello", "cluster.local");
    let idle = [("SLESS_SCALE_TO_ZERO_AFTER", "2")];
    let controllers =
        cluster.operator_with_env("controllers", &["--components", "controllers"], &idle);
    let connect_to = format!("{authority}={pod}");
    let data_plane = |client: &str| {
        cluster.operator_with_env(
            client,
            &["--components", "api"],
            &[("SLESS_CONNECT_TO", connect_to.as_str())],
        )
    };
    // The first replica runs as a pod, as in the install: its load Lease is the pod's.
    let pod_object = cluster
        .emu
        .create(
            "v1",
            "pods",
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "sless-api-1", "namespace": "sless-system"},
                "spec": {"containers": [{"name": "api", "image": "sless"}]}}),
        )
        .unwrap();
    let uid = pod_object["metadata"]["uid"].as_str().unwrap().to_string();
    let first = cluster.operator_with_env(
        "api-1",
        &["--components", "api"],
        &[
            ("SLESS_CONNECT_TO", connect_to.as_str()),
            ("SLESS_POD_NAME", "sless-api-1"),
            ("SLESS_POD_UID", uid.as_str()),
        ],
    );
    let second = data_plane("api-2");
    for operator in [&controllers, &first, &second] {
        wait_ready(operator).await;
    }
    play_deployment_controller(&cluster, &deploy_ns, "hello");
    built_function(
        &cluster,
        &controllers,
        ns,
        json!({"maxInstances": 3, "targetConcurrency": 4}),
    )
    .await;

    // The bounds for the autoscaler on the Deployment; started once (the Deployment's
    // default of 1 replica, or for the trigger), it idles to 0.
    eventually_within(
        &controllers,
        "the Deployment's bounds",
        Duration::from_secs(30),
        || {
            let deployment = cluster.get("apps/v1", "deployments", &deploy_ns, "hello")?;
            let bounds = &deployment["metadata"]["annotations"]["sless.kube5s.ru/scaling"];
            (bounds == "min=0 max=3 target=4").then_some(())
        },
    )
    .await;
    eventually_within(
        &controllers,
        "scaled to zero when idle",
        Duration::from_secs(30),
        || {
            let deployment = cluster.get("apps/v1", "deployments", &deploy_ns, "hello")?;
            let gone =
                deployment["spec"]["replicas"] == 0 && deployment["status"]["readyReplicas"] == 0;
            gone.then_some(())
        },
    )
    .await;
    // The data planes follow the Deployment's status through their watch.
    tokio::time::sleep(Duration::from_millis(500)).await;

    // 0 → 1 on a call: the call is held, not refused, and answered by the new pod.
    let http = reqwest::Client::new();
    let started = Instant::now();
    let answer = call(&http, &first.base, ns, 0).await;
    assert_eq!(
        answer,
        (StatusCode::OK, "hello from the pod".to_string()),
        "{}",
        controllers.log()
    );
    assert_eq!(replicas(&cluster, &deploy_ns), Some(1));
    assert!(started.elapsed() < Duration::from_secs(10));

    // 1 → N on the calls in flight summed over both data planes: 4 on each, 4 per
    // instance wanted: 2 instances (either replica alone would want 1).
    let mut calls = Vec::new();
    for base in [&first.base, &second.base] {
        for _ in 0..4 {
            let (http, base) = (http.clone(), base.clone());
            calls.push(tokio::spawn(
                async move { call(&http, &base, ns, 4000).await },
            ));
        }
    }
    eventually_within(
        &controllers,
        "two instances for 8 calls in flight",
        Duration::from_secs(4),
        || (replicas(&cluster, &deploy_ns) == Some(2)).then_some(()),
    )
    .await;
    for answer in calls {
        assert_eq!(answer.await.unwrap().0, StatusCode::OK);
    }
    // More calls than max_instances × target: capped at max_instances.
    let mut calls = Vec::new();
    for _ in 0..20 {
        let (http, base) = (http.clone(), first.base.clone());
        calls.push(tokio::spawn(
            async move { call(&http, &base, ns, 3000).await },
        ));
    }
    eventually_within(
        &controllers,
        "max_instances under more load",
        Duration::from_secs(4),
        || (replicas(&cluster, &deploy_ns) == Some(3)).then_some(()),
    )
    .await;
    for answer in calls {
        assert_eq!(answer.await.unwrap().0, StatusCode::OK);
    }

    // N → 0 once idle.
    eventually_within(
        &controllers,
        "back to zero when idle",
        Duration::from_secs(20),
        || (replicas(&cluster, &deploy_ns) == Some(0)).then_some(()),
    )
    .await;
    let status = cluster
        .get(common::kube_cluster::FUNCTIONS, "functions", ns, "hello")
        .unwrap();
    assert_eq!(status["status"]["phase"], "Ready", "{status}");

    // The pod's load Lease goes with the pod.
    let lease = cluster
        .get(
            "coordination.k8s.io/v1",
            "leases",
            "sless-system",
            "sless-load-sless-api-1",
        )
        .unwrap();
    assert_eq!(lease["metadata"]["ownerReferences"][0]["uid"], uid.as_str());
    cluster
        .emu
        .delete("v1", "pods", Some("sless-system"), "sless-api-1")
        .unwrap();
    assert!(
        cluster
            .get(
                "coordination.k8s.io/v1",
                "leases",
                "sless-system",
                "sless-load-sless-api-1"
            )
            .is_none()
    );

    // Every request is one RBAC and the admission policies let through.
    let needs = assert_authorized(
        &cluster.emu,
        "controllers",
        &["rbac.yaml"],
        "sless-operator",
    );
    assert!(
        needs
            .iter()
            .any(|n| n.resource == "deployments/scale" && n.verb == "patch")
    );
    let needs = assert_authorized(&cluster.emu, "api-1", &["rbac.yaml"], "sless-operator");
    assert!(
        needs
            .iter()
            .any(|n| n.resource == "leases" && n.verb == "update")
    );
    assert!(
        needs
            .iter()
            .all(|n| !(n.resource.starts_with("deployments") && n.verb == "patch")),
        "the data plane never scales"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_an_hpa_scales_is_left_to_it() {
    let cluster = cluster().await;
    let ns = "team-h";
    sless_namespace(&cluster, ns);
    let deploy_ns = deploy_namespace(ns);
    let operator =
        cluster.operator_with_env("operator", &[], &[("SLESS_SCALE_TO_ZERO_AFTER", "1")]);
    wait_ready(&operator).await;
    play_deployment_controller(&cluster, &deploy_ns, "hello");
    built_function(&cluster, &operator, ns, json!({})).await;
    eventually_within(&operator, "the Deployment", Duration::from_secs(30), || {
        cluster.get("apps/v1", "deployments", &deploy_ns, "hello")
    })
    .await;

    // An SRE's HPA takes the Deployment over and scales it to 3.
    let hpa = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "hello", "namespace": deploy_ns},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "hello"},
                 "minReplicas": 3, "maxReplicas": 6}});
    cluster
        .emu
        .create("autoscaling/v2", "horizontalpodautoscalers", hpa)
        .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), &deploy_ns);
    let hpa_writes = PatchParams {
        field_manager: Some("horizontal-pod-autoscaler".into()),
        ..PatchParams::default()
    };
    // Once the autoscaler has seen the HPA, its idle scale-down no longer comes.
    tokio::time::sleep(Duration::from_secs(1)).await;
    deployments
        .patch_scale(
            "hello",
            &hpa_writes,
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    // Idle for several times the setting, and the function reconciled again (an env
    // change rolls the Deployment): the HPA's replicas stay.
    let resource = ApiResource::erase::<sless_core::model::Function>(&());
    let functions: Api<DynamicObject> = Api::namespaced_with(cluster.client.clone(), ns, &resource);
    functions
        .patch(
            "hello",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"env": {"A": "1"}}})),
        )
        .await
        .unwrap();
    eventually_within(
        &operator,
        "the new env applied",
        Duration::from_secs(15),
        || {
            let deployment = cluster.get("apps/v1", "deployments", &deploy_ns, "hello")?;
            let env = &deployment["spec"]["template"]["spec"]["containers"][0]["env"];
            env.as_array()?
                .iter()
                .any(|e| e["name"] == "A")
                .then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        replicas(&cluster, &deploy_ns),
        Some(3),
        "{}",
        operator.log()
    );

    // Gone, the sless autoscaler scales it again (idle: down to zero).
    cluster
        .emu
        .delete(
            "autoscaling/v2",
            "horizontalpodautoscalers",
            Some(&deploy_ns),
            "hello",
        )
        .unwrap();
    eventually_within(
        &operator,
        "scaled to zero without the HPA",
        Duration::from_secs(15),
        || (replicas(&cluster, &deploy_ns) == Some(0)).then_some(()),
    )
    .await;
    let needs = assert_authorized(&cluster.emu, "operator", &["rbac.yaml"], "sless-operator");
    assert!(
        needs
            .iter()
            .any(|n| n.resource == "horizontalpodautoscalers" && n.verb == "watch")
    );
}
