//! The store seam on CustomResources: `KubeStore` over an in-memory Kubernetes API
//! (spec and status writes, conflicts, namespaces, terminating objects, change
//! notifications, the proxy's routes). The REST API CRUD, 409 and validation suite
//! runs on this store too, in `api_resources.rs` (`kube::*`).

#[path = "../../crates/gateway/tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::Duration;

use common::kube_common::fake_client;
use common::{StoreKind, TestServer, code_form, user, zip_of};
use operator::{ContextUrls, KubeRoutes, KubeStore, S3ContextUrls};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sless_core::model::{
    Function, FunctionSpec, Kind, Phase, Runtime, Trigger, TriggerSpec, TriggerType, WorkloadSpec,
};
use sless_core::routes::{Address, Route, RouteTable};
use sless_core::store::{Store, StoreError, StoreExt, modify_status};

#[tokio::test]
async fn upload_sets_the_key_and_building_and_the_context_can_be_presigned() {
    let server = TestServer::start_on(StoreKind::Kube).await;
    let alice = user("alice");
    let base = format!("/v1/namespaces/{}/functions", alice.ns);
    let response = server
        .client
        .post(server.url(&base))
        .bearer_auth(&alice.token)
        .json(&json!({"name": "hello", "runtime": "python3.11"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let response = server
        .client
        .post(server.url(&format!("{base}/hello/upload")))
        .bearer_auth(&alice.token)
        .multipart(code_form(zip_of(&[(
            "handler.py",
            b"def handle(e):\n    return e\n",
        )])))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["phase"], "Building");
    let key = body["s3_key"].as_str().unwrap().to_string();
    assert!(key.starts_with(&format!("contexts/{}/hello/", alice.ns)));

    // What a build Job's fetch step does with the presigned URL.
    let url = S3ContextUrls::new(server.objects.clone())
        .presigned_get(&key, Duration::from_secs(600))
        .await
        .unwrap();
    let fetched = reqwest::get(&url).await.unwrap();
    assert_eq!(fetched.status(), StatusCode::OK, "{url}");
    let bytes = fetched.bytes().await.unwrap();
    assert_eq!(Some(bytes), server.objects.get(&key).await.unwrap());
}

fn spec() -> FunctionSpec {
    FunctionSpec {
        workload: WorkloadSpec {
            runtime: Runtime::Python311,
            entrypoint: "handler.handle".into(),
            memory_mb: 128,
            cpu_millis: 1000,
            disk_mb: 512,
            timeout_sec: 30,
            env: Default::default(),
            s3_key: None,
            replicas: None,
            min_instances: None,
            max_instances: None,
            target_concurrency: None,
            egress: Default::default(),
        },
    }
}

#[tokio::test]
async fn the_store_seam_on_custom_resources() {
    let kube = KubeStore::new(fake_client().await);
    let mut changes = kube.subscribe();
    let store: &dyn Store = &kube;
    assert!(store.ensure_namespace("ns").await.unwrap());
    assert!(!store.ensure_namespace("ns").await.unwrap());

    let created = store
        .create_typed::<Function>("ns", "f", &spec())
        .await
        .unwrap();
    assert_eq!(changes.recv().await.unwrap().name, "f");
    assert_eq!(created.status.phase, Phase::Pending);
    assert!(matches!(
        store.create_typed::<Function>("ns", "f", &spec()).await,
        Err(StoreError::AlreadyExists { .. })
    ));

    let mut first = created.clone();
    first.spec.workload.memory_mb = 256;
    first.meta.annotations.insert("a".into(), "1".into());
    let updated = store.update_typed(&first).await.unwrap();
    assert_ne!(updated.meta.resource_version, created.meta.resource_version);
    assert_eq!(updated.annotation("a"), Some("1"));

    let mut stale = created.clone();
    stale.spec.workload.memory_mb = 512;
    assert!(matches!(
        store.update_typed(&stale).await,
        Err(StoreError::Conflict { .. })
    ));
    assert!(matches!(
        store.update_status_typed(&stale).await,
        Err(StoreError::Conflict { .. })
    ));

    // Status goes through the status subresource and leaves spec and metadata alone.
    let mut with_status = updated.clone();
    with_status.status.message = Some("hello".into());
    let written = store.update_status_typed(&with_status).await.unwrap();
    assert_eq!(written.status.message.as_deref(), Some("hello"));
    assert_eq!(written.spec.workload.memory_mb, 256);
    assert_eq!(written.annotation("a"), Some("1"));
    // Clearing a field clears it (not a merge).
    let mut cleared = written.clone();
    cleared.status.message = None;
    assert_eq!(
        store
            .update_status_typed(&cleared)
            .await
            .unwrap()
            .status
            .message,
        None
    );

    store
        .create_typed::<Function>("other", "g", &spec())
        .await
        .unwrap();
    let all: Vec<_> = store
        .list_typed::<Function>(None)
        .await
        .unwrap()
        .into_iter()
        .map(|o| (o.meta.namespace, o.meta.name))
        .collect();
    assert_eq!(
        all,
        [("ns".into(), "f".into()), ("other".into(), "g".into())]
    );

    assert!(store.delete(Kind::Function, "ns", "f").await.unwrap());
    assert!(!store.delete(Kind::Function, "ns", "f").await.unwrap());
    assert!(
        store
            .get(Kind::Function, "ns", "f")
            .await
            .unwrap()
            .is_none()
    );
    assert!(matches!(
        store.update_typed(&written).await,
        Err(StoreError::NotFound { .. })
    ));
}

#[tokio::test]
async fn an_object_being_deleted_is_gone_for_the_api() {
    // A Function whose finalizer still runs: marked, not removed.
    let terminating = json!({
        "apiVersion": "sless.kube5s.ru/v1alpha1",
        "kind": "Function",
        "metadata": {"name": "old", "namespace": "ns", "finalizers": ["sless.kube5s.ru/cleanup"],
                     "deletionTimestamp": "2025-01-01T00:00:00Z"},
        "spec": serde_json::to_value(spec()).unwrap(),
    });
    let client = kube_fake_client::ClientBuilder::new()
        .with_resource::<Function>()
        .with_runtime_objects(vec![terminating])
        .build()
        .await
        .unwrap();
    let kube = KubeStore::new(client).with_terminating_wait(Duration::from_millis(300));
    let store: &dyn Store = &kube;
    assert!(
        store
            .get(Kind::Function, "ns", "old")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .list(Kind::Function, Some("ns"))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(!store.delete(Kind::Function, "ns", "old").await.unwrap());
    // Re-creating waits for the cleanup, then reports the name as taken.
    let started = std::time::Instant::now();
    assert!(matches!(
        store.create_typed::<Function>("ns", "old", &spec()).await,
        Err(StoreError::AlreadyExists { .. })
    ));
    assert!(started.elapsed() >= Duration::from_millis(300));
}

#[tokio::test]
async fn routes_follow_the_store() {
    let kube: Arc<dyn Store> = Arc::new(KubeStore::new(fake_client().await));
    let routes = KubeRoutes::new("cluster.local");
    let task = routes.spawn(kube.clone(), Duration::from_secs(3600));
    let ns = "sless-ab";
    let mut ready = spec();
    ready.workload.s3_key = Some("contexts/sless-ab/hello/1.tar.gz".into());
    kube.create_typed::<Function>(ns, "hello", &ready)
        .await
        .unwrap();
    modify_status::<Function, _>(&*kube, ns, "hello", |f| f.status.phase = Phase::Ready)
        .await
        .unwrap();
    let wait_for = |want: fn(&Route) -> bool| {
        let routes = routes.clone();
        async move {
            for _ in 0..100 {
                if want(&routes.route(ns, "hello")) {
                    return routes.route(ns, "hello");
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            panic!("route never matched: {:?}", routes.route(ns, "hello"));
        }
    };
    let route = wait_for(
        |r| matches!(r, Route::Unavailable { reason } if reason.contains("no http trigger")),
    )
    .await;
    assert!(matches!(route, Route::Unavailable { .. }));

    let trigger = TriggerSpec {
        trigger_type: TriggerType::Http,
        function_ref: "hello".into(),
        schedule: None,
        queue: None,
        enabled: true,
        concurrency: None,
        max_retries: None,
    };
    kube.create_typed::<Trigger>(ns, "web", &trigger)
        .await
        .unwrap();
    let route = wait_for(|r| matches!(r, Route::Ready { .. })).await;
    let Route::Ready {
        kind,
        instances,
        timeout,
        version,
    } = route
    else {
        unreachable!()
    };
    assert_eq!(
        (kind, timeout, version),
        (
            Kind::Function,
            Some(Duration::from_secs(30)),
            Some("1".into())
        )
    );
    // The Service, with the calls through it counted for the autoscaler.
    let call = instances.lease().unwrap();
    assert_eq!(
        *call.address(),
        Address::Tcp("hello.sless-fn-sless-ab.svc.cluster.local:8080".into())
    );
    let load = routes.load()[&(ns.to_string(), "hello".to_string())];
    assert_eq!((load.in_flight, load.calls, load.held), (1, 1, false));
    drop(call);
    let load = routes.load()[&(ns.to_string(), "hello".to_string())];
    assert_eq!((load.in_flight, load.calls), (0, 1));
    // The next version rolling out: the pods may run either, so the calls' version is
    // not known.
    modify_status::<Function, _>(&*kube, ns, "hello", |f| {
        f.status.phase = Phase::Building;
        f.status.image_ref = Some("registry/hello:1".into());
    })
    .await
    .unwrap();
    wait_for(|r| matches!(r, Route::Ready { version: None, .. })).await;
    modify_status::<Function, _>(&*kube, ns, "hello", |f| f.status.image_ref = None)
        .await
        .unwrap();
    // A version being built: calls wait for it rather than fail at once.
    modify_status::<Function, _>(&*kube, ns, "hello", |f| f.status.phase = Phase::Building)
        .await
        .unwrap();
    wait_for(|r| matches!(r, Route::Starting { reason } if reason.contains("is being built")))
        .await;
    modify_status::<Function, _>(&*kube, ns, "hello", |f| f.status.phase = Phase::Ready)
        .await
        .unwrap();
    wait_for(|r| matches!(r, Route::Ready { .. })).await;
    sless_core::store::modify::<Trigger, _>(&*kube, ns, "web", |t| t.spec.enabled = false)
        .await
        .unwrap();
    wait_for(|r| matches!(r, Route::Unavailable { reason } if reason.contains("is stopped"))).await;
    kube.delete(Kind::Function, ns, "hello").await.unwrap();
    wait_for(|r| *r == Route::Unknown).await;
    task.abort();
}

#[tokio::test]
async fn an_unreadable_object_does_not_take_the_namespace_routes_down() {
    let kube: Arc<dyn Store> = Arc::new(KubeStore::new(fake_client().await));
    let routes = KubeRoutes::new("cluster.local");
    let ns = "sless-ab";
    let mut ready = spec();
    ready.workload.s3_key = Some("contexts/sless-ab/hello/1.tar.gz".into());
    kube.create_typed::<Function>(ns, "hello", &ready)
        .await
        .unwrap();
    modify_status::<Function, _>(&*kube, ns, "hello", |f| f.status.phase = Phase::Ready)
        .await
        .unwrap();
    let trigger = TriggerSpec {
        trigger_type: TriggerType::Http,
        function_ref: "hello".into(),
        schedule: None,
        queue: None,
        enabled: true,
        concurrency: None,
        max_retries: None,
    };
    kube.create_typed::<Trigger>(ns, "web", &trigger)
        .await
        .unwrap();
    // What `kubectl apply` could leave behind where no schema refused it.
    let mut bad = serde_json::to_value(spec()).unwrap();
    bad["memoryMb"] = json!(4294967296u64);
    kube.create(Kind::Function, ns, "bad", bad, json!({}))
        .await
        .unwrap();

    routes.refresh_namespace(&*kube, ns).await.unwrap();
    assert!(matches!(routes.route(ns, "hello"), Route::Ready { .. }));
    match routes.route(ns, "bad") {
        Route::Unavailable { reason } => {
            assert!(
                reason.contains("function \"bad\" cannot be read"),
                "{reason}"
            )
        }
        other => panic!("bad object routed: {other:?}"),
    }
}
