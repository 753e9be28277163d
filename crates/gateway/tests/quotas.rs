//! Per-namespace quotas and the env cap over real HTTP: objects past a quota are 403,
//! uploads past the places in flight 429 with Retry-After, running memory past its quota
//! keeps an instance from starting with the reason in its status.

mod common;

use std::time::Duration;

use common::api::Api;
use common::*;
use gateway::api::ApiConfig;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sless_core::quota::Quotas;
use tokio::io::AsyncWriteExt;

fn with_quotas(quotas: Quotas) -> ApiConfig {
    ApiConfig {
        quotas,
        ..ApiConfig::default()
    }
}

async fn create(server: &TestServer, user: &User, path: &str, body: Value) -> (StatusCode, Value) {
    let response = server
        .client
        .post(server.url(&format!("/v1/namespaces/{}/{path}", user.ns)))
        .bearer_auth(&user.token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    (status, response.json().await.unwrap())
}

fn error(body: &Value) -> &str {
    body["error"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn objects_past_a_quota_are_refused_with_403_naming_it() {
    let quotas = Quotas {
        max_workloads: 2,
        max_triggers: 2,
        max_jobs: 1,
        ..Quotas::default()
    };
    let server = TestServer::start_with(
        with_quotas(quotas),
        sless_core::auth::KeySource::Hs256Secret(SECRET.to_vec()),
    )
    .await;
    let alice = user("alice");
    let ns = &alice.ns;

    // Functions and services count together.
    let function = |name: &str| json!({"name": name, "runtime": "python3.11"});
    assert_eq!(
        create(&server, &alice, "functions", function("f1")).await.0,
        201
    );
    assert_eq!(
        create(&server, &alice, "services", function("s1")).await.0,
        201
    );
    let (status, body) = create(&server, &alice, "functions", function("f2")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        error(&body),
        format!(
            "quota: namespace {ns} has 2 functions and services, the limit (--max-workloads / \
             SLESS_MAX_WORKLOADS); delete some or ask the operator to raise it"
        )
    );
    let (status, _) = create(&server, &alice, "services", function("s2")).await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    let trigger = |name: &str| json!({"name": name, "type": "http", "function_ref": "f1"});
    assert_eq!(
        create(&server, &alice, "triggers", trigger("t1")).await.0,
        201
    );
    assert_eq!(
        create(&server, &alice, "triggers", trigger("t2")).await.0,
        201
    );
    let (status, body) = create(&server, &alice, "triggers", trigger("t3")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(error(&body).contains("has 2 triggers"), "{body}");
    assert!(
        error(&body).contains("--max-triggers / SLESS_MAX_TRIGGERS"),
        "{body}"
    );

    let job = |name: &str| json!({"name": name, "function_ref": "f1"});
    assert_eq!(create(&server, &alice, "jobs", job("j1")).await.0, 201);
    let (status, body) = create(&server, &alice, "jobs", job("j2")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        error(&body).contains("--max-jobs / SLESS_MAX_JOBS"),
        "{body}"
    );

    // Another namespace has its own quotas.
    let bob = user("bob");
    assert_eq!(
        create(&server, &bob, "functions", function("f1")).await.0,
        201
    );
    assert_eq!(
        create(&server, &bob, "triggers", trigger("t1")).await.0,
        201
    );

    // Deleting one makes room again.
    let deleted = server
        .client
        .delete(server.url(&format!("/v1/namespaces/{ns}/triggers/t1")))
        .bearer_auth(&alice.token)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        create(&server, &alice, "triggers", trigger("t3")).await.0,
        201
    );
}

#[tokio::test]
async fn racing_creates_never_pass_the_quota() {
    for kind in [StoreKind::Sqlite, StoreKind::Kube] {
        let quotas = Quotas {
            max_triggers: 5,
            ..Quotas::default()
        };
        let server = TestServer::start_on_with(kind, with_quotas(quotas)).await;
        let carol = user("carol");
        let attempts = (0..20).map(|i| {
            let body = json!({"name": format!("t{i}"), "type": "http", "function_ref": "f"});
            create(&server, &carol, "triggers", body)
        });
        let statuses: Vec<StatusCode> = futures::future::join_all(attempts)
            .await
            .into_iter()
            .map(|(status, _)| status)
            .collect();
        let created = statuses
            .iter()
            .filter(|s| **s == StatusCode::CREATED)
            .count();
        let refused = statuses
            .iter()
            .filter(|s| **s == StatusCode::FORBIDDEN)
            .count();
        assert_eq!((created, refused), (5, 15), "{kind:?}: {statuses:?}");
    }
}

#[tokio::test]
async fn env_vars_over_64_kib_are_refused_with_400() {
    let server = TestServer::start().await;
    let dora = user("dora");
    let big = "x".repeat(70_000);
    let expected = "env_vars: the names and values total 70001 bytes, more than the limit of \
                    65536 bytes (64 KiB)";

    let (status, body) = create(
        &server,
        &dora,
        "functions",
        json!({"name": "f", "runtime": "python3.11", "env_vars": {"A": big}}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(error(&body).starts_with(expected), "{body}");

    let (status, body) = create(
        &server,
        &dora,
        "jobs",
        json!({"name": "j", "runtime": "python3.11", "env_vars": {"A": big}}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(error(&body).starts_with(expected), "{body}");

    // A replace cannot slip it in either.
    let (status, _) = create(
        &server,
        &dora,
        "functions",
        json!({"name": "f", "runtime": "python3.11"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let replaced = server
        .client
        .put(server.url(&format!("/v1/namespaces/{}/functions/f", dora.ns)))
        .bearer_auth(&dora.token)
        .json(&json!({"runtime": "python3.11", "env_vars": {"A": big}}))
        .send()
        .await
        .unwrap();
    assert_eq!(replaced.status(), StatusCode::BAD_REQUEST);
}

/// Starts an upload and leaves it unfinished: its place stays taken until the
/// returned connection is dropped.
async fn hanging_upload(server: &TestServer, user: &User, name: &str) -> tokio::net::TcpStream {
    let address = server.base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let boundary = "sless-test-boundary";
    let head = format!(
        "POST /v1/namespaces/{}/functions/{name}/upload HTTP/1.1\r\nHost: {address}\r\n\
         Authorization: Bearer {}\r\nContent-Type: multipart/form-data; boundary={boundary}\r\n\
         Content-Length: 10000000\r\n\r\n--{boundary}\r\nContent-Disposition: form-data; \
         name=\"code\"; filename=\"code.zip\"\r\nContent-Type: application/zip\r\n\r\nPK",
        user.ns, user.token
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.flush().await.unwrap();
    stream
}

/// Whether the server has answered (or closed) a hanging upload's connection.
fn answered(stream: &tokio::net::TcpStream) -> bool {
    let mut buf = [0u8; 512];
    !matches!(stream.try_read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

async fn upload(server: &TestServer, user: &User, name: &str) -> reqwest::Response {
    server
        .client
        .post(server.url(&format!(
            "/v1/namespaces/{}/functions/{name}/upload",
            user.ns
        )))
        .bearer_auth(&user.token)
        .multipart(code_form(zip_of(&[(
            "handler.py",
            b"def handle(e):\n    return 1\n",
        )])))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn uploads_past_the_places_in_flight_are_429_with_retry_after() {
    let quotas = Quotas {
        max_uploads_in_flight: 1,
        ..Quotas::default()
    };
    let server = TestServer::start_with(
        with_quotas(quotas),
        sless_core::auth::KeySource::Hs256Secret(SECRET.to_vec()),
    )
    .await;
    let erin = user("erin");
    let frank = user("frank");
    for who in [&erin, &frank] {
        let body = json!({"name": "f", "runtime": "python3.11"});
        assert_eq!(create(&server, who, "functions", body).await.0, 201);
    }

    let mut hanging = hanging_upload(&server, &erin, "f").await;
    // The server takes the place once it has read the head. A probe that arrives first
    // takes the place itself and the hanging upload is answered 429: then it starts over.
    let mut refused = None;
    for _ in 0..50 {
        let response = upload(&server, &erin, "f").await;
        if response.status() == StatusCode::TOO_MANY_REQUESTS {
            refused = Some(response);
            break;
        }
        if answered(&hanging) {
            hanging = hanging_upload(&server, &erin, "f").await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let refused = refused.expect("a second upload while one is in flight is refused");
    assert_eq!(refused.headers()["retry-after"], "5");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(
        error(&body),
        format!(
            "quota: namespace {} has 1 uploads in flight, the limit (--max-uploads-in-flight / \
             SLESS_MAX_UPLOADS_IN_FLIGHT); retry when one has finished",
            erin.ns
        )
    );
    // Another namespace's places are its own.
    assert_eq!(upload(&server, &frank, "f").await.status(), StatusCode::OK);

    // A caller that goes away gives its place back.
    drop(hanging);
    let mut status = StatusCode::TOO_MANY_REQUESTS;
    for _ in 0..50 {
        status = upload(&server, &erin, "f").await.status();
        if status == StatusCode::OK {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status, StatusCode::OK);
}

const HANDLER: &[u8] = b"def handle(event):\n    return 'up'\n";

#[tokio::test]
async fn running_memory_past_the_quota_keeps_an_instance_from_starting() {
    let (server, _runner) = TestServer::platform(|c| c.max_running_memory_mb = 200).await;
    let api = Api::new(&server, "grace");
    let spec = |name: &str| json!({"name": name, "runtime": "python3.11", "memory_mb": 128, "timeout_sec": 5});
    api.deploy_spec(spec("first"), &[("handler.py", HANDLER)])
        .await;
    assert_eq!(api.invoke("first", json!({})).await.0, StatusCode::OK);

    api.create_and_upload(spec("second"), &[("handler.py", HANDLER)])
        .await;
    let failed = api
        .wait_for(
            "functions/second",
            "phase",
            &["Failed", "Ready"],
            Duration::from_secs(60),
        )
        .await;
    assert_eq!(failed["phase"], "Failed", "{failed}");
    let message = failed["message"].as_str().unwrap();
    assert!(
        message.starts_with("restarting in ")
            && message.contains(&format!(
                " s: quota: namespace {} would run 256 MiB of instances",
                api.user.ns
            )),
        "{message}"
    );
    assert!(
        message
            .contains("limit of 200 MiB (--max-running-memory-mb / SLESS_MAX_RUNNING_MEMORY_MB)"),
        "{message}"
    );
    let (status, body) = api.answer_saying("second", "did not start").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(
        error(&body).contains("did not start: quota: namespace"),
        "{body}"
    );

    // Stopping the first makes room: the second starts on its next try.
    let stopped = server
        .client
        .patch(api.v1("triggers/first-http"))
        .bearer_auth(&api.user.token)
        .json(&json!({"enabled": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(stopped.status(), StatusCode::OK);
    let (status, body) = api
        .call_until("second", &json!({}), Duration::from_secs(60), |s| {
            s == StatusCode::OK
        })
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn a_job_run_past_the_running_memory_quota_fails_and_says_why() {
    // A self-contained job runs with 128 MiB.
    let (server, _runner) = TestServer::platform(|c| c.max_running_memory_mb = 100).await;
    let api = Api::new(&server, "judy");
    api.post(
        "jobs",
        json!({"name": "j", "runtime": "python3.11", "timeout_sec": 30}),
    )
    .await;
    api.upload("jobs/j", &[("handler.py", HANDLER)]).await;
    api.send(reqwest::Method::PATCH, "jobs/j", Some(json!({"run_id": 1})))
        .await;
    let done = api
        .wait_until("jobs/j", Duration::from_secs(120), |j| {
            j["run_id"] == 1 && (j["phase"] == "Succeeded" || j["phase"] == "Failed")
        })
        .await;
    assert_eq!(done["phase"], "Failed", "{done}");
    let message = done["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!(
            "quota: namespace {} would run 128 MiB of instances",
            api.user.ns
        )),
        "{message}"
    );
}
