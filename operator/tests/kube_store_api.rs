//! The REST API on the CustomResource store: the same CRUD, 409 and validation checks
//! as `api_resources.rs`, with `KubeStore` over an in-memory Kubernetes API instead of
//! SQLite; plus the store seam's own semantics.

mod common;
mod kube_common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::{SECRET, User, code_form, user, zip_of};
use operator::api::{ApiConfig, AppState};
use operator::auth::{AuthConfig, Authenticator, KeySource};
use operator::k8s::{ContextUrls, KubeRoutes, KubeStore, S3ContextUrls};
use operator::model::{
    Function, FunctionSpec, Kind, Phase, Runtime, Trigger, TriggerSpec, TriggerType, WorkloadSpec,
};
use operator::proxy::{Proxy, ProxyConfig, Route, RouteTable};
use operator::s3::{EmbeddedS3, ObjectStore};
use operator::store::{Store, StoreError, StoreExt, modify_status};
use reqwest::{Method as M, StatusCode};
use serde_json::{Value, json};

struct Server {
    base: String,
    store: Arc<dyn Store>,
    objects: ObjectStore,
    client: reqwest::Client,
    _s3: EmbeddedS3,
    _dir: tempfile::TempDir,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn server() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let s3 = EmbeddedS3::start(
        &dir.path().join("objects"),
        SocketAddr::from(([127, 0, 0, 1], 0)),
    )
    .await
    .unwrap();
    let objects = ObjectStore::connect(&s3.config("sless")).await.unwrap();
    objects.ensure_bucket().await.unwrap();
    let store: Arc<dyn Store> = Arc::new(KubeStore::new(kube_common::fake_client().await));
    let routes = KubeRoutes::new("cluster.local");
    let proxy = Arc::new(Proxy::new(routes, ProxyConfig::default()));
    let auth = Authenticator::new(AuthConfig {
        key: KeySource::Hs256Secret(SECRET.to_vec()),
        admin_subjects: vec![],
        issuer: None,
        audience: None,
        leeway_sec: 0,
    })
    .unwrap();
    let state = Arc::new(AppState {
        store: store.clone(),
        objects: objects.clone(),
        auth: Arc::new(auth),
        logs: Arc::new(operator::logs::LogBook::new(10)),
        proxy: proxy.clone(),
        config: ApiConfig::default(),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = operator::api::router(state).merge(operator::proxy::router(proxy));
    let task = tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    Server {
        base,
        store,
        objects,
        client: reqwest::Client::new(),
        _s3: s3,
        _dir: dir,
        task,
    }
}

async fn send(
    server: &Server,
    user: &User,
    method: M,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = server
        .client
        .request(method, format!("{}{path}", server.base))
        .bearer_auth(&user.token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    let value = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"))
    };
    (status, value)
}

fn function(name: &str) -> Value {
    json!({"name": name, "runtime": "python3.11", "entrypoint": "handler.handle",
           "memory_mb": 256, "timeout_sec": 30, "env_vars": {"GREETING": "hi"}})
}

#[tokio::test]
async fn function_crud_conflicts_and_zero_values() {
    let server = server().await;
    let alice = user("alice");
    let base = format!("/v1/namespaces/{}/functions", alice.ns);

    let (status, created) = send(&server, &alice, M::POST, &base, Some(function("hello"))).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["phase"], "Pending");
    assert_eq!(created["env_vars"]["GREETING"], "hi");
    assert!(!created["resource_version"].as_str().unwrap().is_empty());
    assert!(created["created_at"].as_str().unwrap().ends_with('Z'));

    let (status, minimal) = send(
        &server,
        &alice,
        M::POST,
        &base,
        Some(json!({"name": "minimal", "runtime": "nodejs20"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(minimal["memory_mb"], 128);

    let (status, body) = send(&server, &alice, M::POST, &base, Some(function("hello"))).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(
        body["error"].as_str().unwrap().contains("already exists"),
        "{body}"
    );

    let (_, list) = send(&server, &alice, M::GET, &base, None).await;
    let names: Vec<_> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].clone())
        .collect();
    assert_eq!(names, [json!("hello"), json!("minimal")]);

    let mut changed = function("hello");
    changed["memory_mb"] = json!(512);
    changed["env_vars"] = json!({"OTHER": "x"});
    let (status, updated) = send(
        &server,
        &alice,
        M::PUT,
        &format!("{base}/hello"),
        Some(changed),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{updated}");
    let (_, fetched) = send(&server, &alice, M::GET, &format!("{base}/hello"), None).await;
    assert_eq!(fetched["memory_mb"], 512);
    // PUT replaces the spec: the removed env var is gone.
    assert_eq!(fetched["env_vars"], json!({"OTHER": "x"}));

    for (field, zero) in [
        ("runtime", json!("")),
        ("entrypoint", json!("")),
        ("memory_mb", json!(0)),
    ] {
        let mut body = function("hello");
        body[field] = zero;
        let (status, error) = send(
            &server,
            &alice,
            M::PUT,
            &format!("{base}/hello"),
            Some(body),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{field}");
        assert!(
            error["error"].as_str().unwrap().starts_with(field),
            "{error}"
        );
    }

    let (status, _) = send(&server, &alice, M::DELETE, &format!("{base}/hello"), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = send(&server, &alice, M::GET, &format!("{base}/hello"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body["error"].as_str().unwrap().contains("not found"));
    let (status, _) = send(&server, &alice, M::DELETE, &format!("{base}/hello"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_stale_resource_version_is_a_409() {
    let server = server().await;
    let alice = user("alice");
    let base = format!("/v1/namespaces/{}/functions", alice.ns);
    let ensure = format!("/v1/namespaces/{}/ensure", alice.ns);
    let (a, b) = tokio::join!(
        send(&server, &alice, M::POST, &ensure, None),
        send(&server, &alice, M::POST, &ensure, None)
    );
    let mut statuses = [a.0, b.0];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::OK, StatusCode::CREATED]);

    let (_, created) = send(&server, &alice, M::POST, &base, Some(function("race"))).await;
    let version = created["resource_version"].clone();
    let update = |memory: u32| {
        let mut body = function("race");
        body["memory_mb"] = json!(memory);
        body["resource_version"] = version.clone();
        body
    };
    let path = format!("{base}/race");
    let (first, second) = tokio::join!(
        send(&server, &alice, M::PUT, &path, Some(update(512))),
        send(&server, &alice, M::PUT, &path, Some(update(1024)))
    );
    let mut statuses = [first.0, second.0];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::OK, StatusCode::CONFLICT]);
    let winner = if first.0 == StatusCode::OK {
        first.1
    } else {
        second.1
    };
    let (_, stored) = send(&server, &alice, M::GET, &path, None).await;
    assert_eq!(
        stored["memory_mb"], winner["memory_mb"],
        "the loser did not overwrite"
    );
    let (status, body) = send(&server, &alice, M::PUT, &path, Some(update(2048))).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("changed by someone else"),
        "{body}"
    );
}

#[tokio::test]
async fn failed_functions_are_replaced_and_names_are_shared_with_services() {
    let server = server().await;
    let alice = user("alice");
    let functions = format!("/v1/namespaces/{}/functions", alice.ns);
    let services = format!("/v1/namespaces/{}/services", alice.ns);
    send(
        &server,
        &alice,
        M::POST,
        &functions,
        Some(function("flaky")),
    )
    .await;
    modify_status::<Function, _>(&*server.store, &alice.ns, "flaky", |o| {
        o.status.phase = Phase::Failed;
        o.status.message = Some("build failed".into());
    })
    .await
    .unwrap();
    let mut again = function("flaky");
    again["memory_mb"] = json!(1024);
    let (status, body) = send(&server, &alice, M::POST, &functions, Some(again)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["memory_mb"], 1024);
    assert_eq!(body["phase"], "Pending");

    let (status, svc) = send(&server, &alice, M::POST, &services, Some(function("api"))).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(svc["kind"], "service");
    let (status, body) = send(&server, &alice, M::POST, &functions, Some(function("api"))).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(
        body["error"].as_str().unwrap().contains("share names"),
        "{body}"
    );
}

#[tokio::test]
async fn triggers_patch_in_place_and_jobs_bump_run_id() {
    let server = server().await;
    let alice = user("alice");
    let triggers = format!("/v1/namespaces/{}/triggers", alice.ns);
    let (status, web) = send(
        &server,
        &alice,
        M::POST,
        &triggers,
        Some(json!({"name": "web", "type": "http", "function_ref": "hello"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{web}");
    assert_eq!(web["enabled"], true);
    let (status, patched) = send(
        &server,
        &alice,
        M::PATCH,
        &format!("{triggers}/web"),
        Some(json!({"enabled": false})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(patched["enabled"], false);
    assert_eq!(patched["created_at"], web["created_at"], "patched in place");
    let (status, _) = send(
        &server,
        &alice,
        M::POST,
        &triggers,
        Some(json!({"name": "web", "type": "http", "function_ref": "hello"})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);

    let jobs = format!("/v1/namespaces/{}/jobs", alice.ns);
    let (status, job) = send(
        &server,
        &alice,
        M::POST,
        &jobs,
        Some(json!({"name": "nightly", "function_ref": "hello", "event_json": "{\"day\": 1}"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    assert_eq!(job["run_id"], 0);
    let (status, bumped) = send(
        &server,
        &alice,
        M::PATCH,
        &format!("{jobs}/nightly"),
        Some(json!({"run_id": 1})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(bumped["run_id"], 1);
    let (status, replaced) = send(
        &server,
        &alice,
        M::PUT,
        &format!("{jobs}/nightly"),
        Some(json!({"function_ref": "hello", "event_json": "{}", "run_id": 2})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{replaced}");
    assert_eq!(replaced["run_id"], 2);
    let (status, _) = send(&server, &alice, M::DELETE, &format!("{jobs}/nightly"), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn upload_sets_the_key_and_building_and_the_context_can_be_presigned() {
    let server = server().await;
    let alice = user("alice");
    let base = format!("/v1/namespaces/{}/functions", alice.ns);
    send(&server, &alice, M::POST, &base, Some(function("hello"))).await;
    let response = server
        .client
        .post(format!("{}{base}/hello/upload", server.base))
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
            timeout_sec: 30,
            env: Default::default(),
            s3_key: None,
            replicas: None,
        },
    }
}

#[tokio::test]
async fn the_store_seam_on_custom_resources() {
    let kube = KubeStore::new(kube_common::fake_client().await);
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
    let kube: Arc<dyn Store> = Arc::new(KubeStore::new(kube_common::fake_client().await));
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
    };
    kube.create_typed::<Trigger>(ns, "web", &trigger)
        .await
        .unwrap();
    let route = wait_for(|r| matches!(r, Route::Ready { .. })).await;
    assert_eq!(
        route,
        Route::Ready {
            kind: Kind::Function,
            authority: "hello.sless-fn-sless-ab.svc.cluster.local:8080".into(),
            timeout: Some(Duration::from_secs(30)),
        }
    );
    operator::store::modify::<Trigger, _>(&*kube, ns, "web", |t| t.spec.enabled = false)
        .await
        .unwrap();
    wait_for(|r| matches!(r, Route::Unavailable { reason } if reason.contains("is stopped"))).await;
    kube.delete(Kind::Function, ns, "hello").await.unwrap();
    wait_for(|r| *r == Route::Unknown).await;
    task.abort();
}
