//! Versions of functions and services: every accepted upload is one, the same bytes
//! twice are one, the oldest past `--keep-versions` are pruned with their objects, and
//! a rollback switches back to a kept version while calls go on.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::api::Api;
use common::*;
use gateway::api::ApiConfig;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// Uploads these exact zip bytes (a zip made twice need not be the same bytes).
async fn upload_zip(api: &Api<'_>, path: &str, zip: &[u8]) -> (StatusCode, Value) {
    let response = api
        .server
        .client
        .post(api.v1(&format!("{path}/upload")))
        .bearer_auth(&api.user.token)
        .multipart(code_form(zip.to_vec()))
        .send()
        .await
        .unwrap();
    (response.status(), response.json().await.unwrap())
}

fn handler(answer: &str) -> Vec<u8> {
    zip_of(&[(
        "handler.py",
        format!("def handle(e):\n    return {answer:?}\n").as_bytes(),
    )])
}

fn listed(versions: &Value) -> Vec<String> {
    versions
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_str().unwrap().to_string())
        .collect()
}

fn active(versions: &Value) -> Vec<String> {
    versions
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["active"] == true)
        .map(|v| v["version"].as_str().unwrap().to_string())
        .collect()
}

/// Keys of the objects stored under a name (zips, contexts, records).
async fn stored_objects(server: &TestServer, ns: &str, name: &str) -> Vec<String> {
    let mut keys = Vec::new();
    for prefix in ["functions", "contexts", "versions"] {
        keys.extend(
            server
                .objects
                .list(&format!("{prefix}/{ns}/{name}/"))
                .await
                .unwrap(),
        );
    }
    keys
}

#[tokio::test]
async fn versions_are_listed_deduplicated_and_pruned_in_both_stores() {
    for store in [StoreKind::Sqlite, StoreKind::Kube] {
        let config = ApiConfig {
            keep_versions: 3,
            ..ApiConfig::default()
        };
        let server = TestServer::start_on_with(store, config).await;
        let api = Api::new(&server, "version-user");
        api.post("services", json!({"name": "svc", "runtime": "python3.11"}))
            .await;
        let first = handler("one");
        let (status, body) = upload_zip(&api, "services/svc", &first).await;
        assert_eq!(status, StatusCode::OK, "{store:?}: {body}");
        let v1 = body["version"].as_str().unwrap().to_string();
        assert!(body["s3_key"].as_str().unwrap().contains(&v1), "{body}");

        let versions = api.get("services/svc/versions").await;
        assert_eq!(listed(&versions), [v1.as_str()], "{store:?}: {versions}");
        let entry = &versions[0];
        assert_eq!(entry["sha256"], hex::encode(Sha256::digest(&first)));
        assert_eq!(entry["size"], first.len());
        assert_eq!(entry["uploaded_by"], "version-user");
        assert_eq!(entry["active"], true);
        assert!(entry["created_at"].as_str().unwrap().starts_with("20"));

        let (_, body) = upload_zip(&api, "services/svc", &handler("two")).await;
        let v2 = body["version"].as_str().unwrap().to_string();
        assert_ne!(v1, v2);
        let versions = api.get("services/svc/versions").await;
        assert_eq!(listed(&versions), [v2.clone(), v1.clone()], "newest first");
        assert_eq!(active(&versions), [v2.as_str()]);

        // The same bytes again: no new version, the one holding them is the code again.
        let objects_before = stored_objects(&server, &api.user.ns, "svc").await;
        let (status, body) = upload_zip(&api, "services/svc", &first).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["version"], v1.as_str(), "{body}");
        let versions = api.get("services/svc/versions").await;
        assert_eq!(listed(&versions), [v2.clone(), v1.clone()], "{versions}");
        assert_eq!(active(&versions), [v1.as_str()]);
        assert_eq!(
            stored_objects(&server, &api.user.ns, "svc").await,
            objects_before
        );

        // Past 3 versions the oldest go, with all their objects.
        let mut newest = Vec::new();
        for answer in ["three", "four", "five"] {
            let (_, body) = upload_zip(&api, "services/svc", &handler(answer)).await;
            newest.insert(0, body["version"].as_str().unwrap().to_string());
        }
        let versions = api.get("services/svc/versions").await;
        assert_eq!(listed(&versions), newest, "{store:?}: {versions}");
        assert_eq!(active(&versions), [newest[0].clone()]);
        let objects = stored_objects(&server, &api.user.ns, "svc").await;
        assert_eq!(objects.len(), 9, "zip, context, record of 3: {objects:?}");
        let version_of = |key: &String| {
            key.rsplit('/')
                .next()
                .unwrap()
                .split('.')
                .next()
                .unwrap()
                .to_string()
        };
        assert!(
            objects.iter().all(|k| newest.contains(&version_of(k))),
            "{objects:?}"
        );

        // A pruned version: 404 naming the versions there are.
        let (status, body) = api
            .send(
                Method::POST,
                "services/svc/rollback",
                Some(json!({"version": v1})),
            )
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        let error = body["error"].as_str().unwrap();
        assert!(error.contains(&v1), "{error}");
        for kept in &newest {
            assert!(error.contains(kept.as_str()), "{error}");
        }
        let (status, _) = api
            .send(
                Method::GET,
                &format!("services/svc/versions/{v1}/source"),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND);

        // A kept version's source and a rollback to it.
        let oldest = &newest[2];
        let files = api
            .get(&format!("services/svc/versions/{oldest}/source"))
            .await;
        assert!(files.to_string().contains("three"), "{files}");
        let (status, body) = api
            .send(
                Method::POST,
                "services/svc/rollback",
                Some(json!({"version": oldest})),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["version"], oldest.as_str());
        assert_eq!(body["phase"], "Building", "until it serves: {body}");
        let versions = api.get("services/svc/versions").await;
        assert_eq!(listed(&versions), newest, "a rollback makes no version");
        assert_eq!(active(&versions), [oldest.as_str()]);
        let source = api.get("services/svc/source").await;
        assert!(source.to_string().contains("three"), "{source}");
    }
}

#[tokio::test]
async fn bad_rollbacks_and_other_tenants() {
    let server = TestServer::start().await;
    let alice = Api::new(&server, "alice-versions");
    let bob = Api::new(&server, "bob-versions");
    alice
        .post("functions", json!({"name": "f", "runtime": "python3.11"}))
        .await;
    let (_, body) = upload_zip(&alice, "functions/f", &handler("a")).await;
    let version = body["version"].as_str().unwrap().to_string();

    for bad in ["latest", "2026", "20260102030405-", "../20260102030405"] {
        let (status, body) = alice
            .send(
                Method::POST,
                "functions/f/rollback",
                Some(json!({"version": bad})),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert!(body["error"].as_str().unwrap().starts_with("version:"));
    }
    let (status, body) = alice
        .send(
            Method::POST,
            "functions/f/rollback",
            Some(json!({"versoin": version})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    // Built for another runtime: the rollback says what to change.
    let (status, body) = alice
        .send(
            Method::PUT,
            "functions/f",
            Some(json!({"runtime": "nodejs20", "entrypoint": "handler.handle", "memory_mb": 128})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = alice
        .send(
            Method::POST,
            "functions/f/rollback",
            Some(json!({"version": version})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("python3.11"),
        "{body}"
    );

    // Bob acts only on his namespace: alice's is 403, his own has no such function.
    for (method, path) in [
        (Method::GET, "functions/f/versions".to_string()),
        (
            Method::GET,
            format!("functions/f/versions/{version}/source"),
        ),
        (Method::POST, "functions/f/rollback".to_string()),
    ] {
        let body = (method == Method::POST).then(|| json!({"version": version}));
        let response = server
            .client
            .request(method.clone(), alice.v1(&path))
            .bearer_auth(&bob.user.token);
        let response = match &body {
            Some(body) => response.json(body),
            None => response,
        };
        let status = response.send().await.unwrap().status();
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}");
        let (status, _) = bob.send(method.clone(), &path, body).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}");
    }
    assert_eq!(active(&alice.get("functions/f/versions").await).len(), 1);
}

/// Answers of calls made one after another until `stop`; the failures apart.
fn call_while(
    api: &Api<'_>,
    name: &str,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<(Vec<Value>, Vec<String>)> {
    let url = api.fn_url(name);
    let client = api.server.client.clone();
    tokio::spawn(async move {
        let (mut seen, mut failures) = (Vec::new(), Vec::new());
        while !stop.load(Ordering::Relaxed) {
            match client.post(&url).send().await {
                Ok(r) if r.status() == StatusCode::OK => {
                    seen.push(r.json::<Value>().await.unwrap())
                }
                Ok(r) => failures.push(format!(
                    "{} {}",
                    r.status(),
                    r.text().await.unwrap_or_default()
                )),
                Err(e) => failures.push(e.to_string()),
            }
        }
        (seen, failures)
    })
}

async fn wait_serving(api: &Api<'_>, name: &str, answer: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, body) = api.invoke(name, json!({})).await;
        if body == json!(answer) {
            return;
        }
        assert!(Instant::now() < deadline, "{answer} never served: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn rollback_under_load_fails_no_call_and_builds_nothing() {
    let config = ApiConfig {
        keep_versions: 2,
        ..ApiConfig::default()
    };
    let (server, _runner) = TestServer::platform_with(config, |_| {}).await;
    let api = Api::new(&server, "rollback-user");
    let ready = api
        .deploy(
            "roll",
            "python3.11",
            &[("handler.py", b"def handle(e):\n    return 'v1'\n")],
        )
        .await;
    let v1 = ready["version"].as_str().unwrap().to_string();
    api.upload(
        "functions/roll",
        &[("handler.py", b"def handle(e):\n    return 'v2'\n")],
    )
    .await;
    wait_serving(&api, "roll", "v2").await;

    let stop = Arc::new(AtomicBool::new(false));
    let load = call_while(&api, "roll", stop.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, body) = api
        .send(
            Method::POST,
            "functions/roll/rollback",
            Some(json!({"version": v1})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    wait_serving(&api, "roll", "v1").await;
    // Calls sent to v2 just before the switch finish on it while it drains.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, Ordering::Relaxed);
    let (seen, failures) = load.await.unwrap();
    assert!(
        failures.is_empty(),
        "failed calls during the rollback: {failures:?}"
    );
    assert!(
        seen.contains(&json!("v1")) && seen.contains(&json!("v2")),
        "{} answers",
        seen.len()
    );

    let ready = api
        .wait_for(
            "functions/roll",
            "phase",
            &["Ready", "Failed"],
            Duration::from_secs(60),
        )
        .await;
    assert_eq!(
        (ready["phase"].as_str(), ready["version"].as_str()),
        (Some("Ready"), Some(v1.as_str())),
        "{ready}"
    );
    let logs = api.get("functions/roll/logs?tail=1000").await.to_string();
    let builds = logs.matches(&format!("version {v1} built in")).count();
    assert_eq!(
        builds, 1,
        "v1 was built once, not again for the rollback: {logs}"
    );

    // Builds of versions pruned past --keep-versions go too, once nothing runs them.
    let mut newest = Vec::new();
    for answer in ["v3", "v4"] {
        let code = format!("def handle(e):\n    return {answer:?}\n");
        let body = api
            .upload("functions/roll", &[("handler.py", code.as_bytes())])
            .await;
        newest.push(body["version"].as_str().unwrap().to_string());
        wait_serving(&api, "roll", answer).await;
    }
    let builds = server
        .data_dir()
        .join("builds")
        .join(&api.user.ns)
        .join("function-roll");
    // After the old instance has drained and stopped.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut built: Vec<String> = std::fs::read_dir(&builds)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| !n.starts_with('.') && !n.ends_with(".log"))
            .collect();
        built.sort();
        if built == newest {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "in {}: {built:?}",
            builds.display()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn the_same_code_again_builds_again_when_its_build_failed() {
    use sless_core::model::{Function, Phase};
    let server = TestServer::start().await;
    let api = Api::new(&server, "retry-user");
    api.post("functions", json!({"name": "f", "runtime": "python3.11"}))
        .await;
    let code = handler("flaky build");
    let (_, body) = upload_zip(&api, "functions/f", &code).await;
    let first = body["version"].as_str().unwrap().to_string();
    // What a runner writes when the build fails (say, a package index was down).
    sless_core::store::modify_status::<Function, _>(&*server.store, &api.user.ns, "f", |f| {
        f.status.phase = Phase::Failed;
    })
    .await
    .unwrap();
    let (status, body) = upload_zip(&api, "functions/f", &code).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["phase"], "Building", "{body}");
    let again = body["version"].as_str().unwrap().to_string();
    assert_ne!(again, first, "a new version, built anew");
    let versions = api.get("functions/f/versions").await;
    assert_eq!(listed(&versions), [again.clone(), first]);
}
