//! Call records kept across restarts of the embedded platform, within their retention,
//! and forgotten with their function (a real SQLite file, real processes).

mod common;

use std::time::{Duration, Instant};

use common::api::Api;
use common::*;
use gateway::proxy::Retention;
use reqwest::StatusCode;
use serde_json::{Value, json};

const HANDLER: &[u8] = b"def handle(event):\n    return 'ok'\n";

const NO_TWEAK: RunnerTweak = |_| {};

/// The document the archive holds for `name`, once `done` holds for it.
async fn saved_until(server: &TestServer, ns: &str, name: &str, done: impl Fn(&Value) -> bool) {
    let archive = server.archive.as_ref().expect("an embedded server");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let saved = archive.load_all().await.unwrap();
        let document = saved
            .iter()
            .find(|s| s.namespace == ns && s.name == name)
            .map(|s| serde_json::from_slice(&s.document).unwrap())
            .unwrap_or(Value::Null);
        if done(&document) {
            return;
        }
        assert!(Instant::now() < deadline, "not saved: {document}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn ids(listing: &Value) -> Vec<&str> {
    listing["invocations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["request_id"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn records_and_totals_survive_a_restart_within_their_retention() {
    let (server, runner) = TestServer::platform(NO_TWEAK).await;
    let api = Api::new(&server, "keeper");
    let ns = api.user.ns.clone();
    api.deploy_spec(
        json!({"name": "kept", "runtime": "python3.11"}),
        &[("handler.py", HANDLER)],
    )
    .await;
    api.invoke("kept", json!({})).await;
    for i in 0..5 {
        assert_eq!(
            api.call_as("kept", &format!("kept-{i}"), &json!({})).await,
            200
        );
    }
    let before = api.get("functions/kept/invocations").await;
    let count = before["stats"]["count"].clone();
    assert_eq!(
        &ids(&before)[..5],
        ["kept-4", "kept-3", "kept-2", "kept-1", "kept-0"]
    );
    // Saved in the background, within the flush interval, before any restart.
    saved_until(&server, &ns, "kept", |d| d["stats"]["count"] == count).await;
    // Stopped, so that the restarted runner does not start it beside the old instance.
    api.send(
        reqwest::Method::PATCH,
        "triggers/kept-http",
        Some(json!({"enabled": false})),
    )
    .await;
    drop(api);

    let (server, runner) = server.restart(runner, NO_TWEAK, Retention::DEFAULT).await;
    let api = Api::new(&server, "keeper");
    assert_eq!(api.get("functions/kept/invocations").await, before);
    let record = api.get("functions/kept/invocations/kept-3").await;
    assert_eq!(record["status"], 200, "{record}");
    drop(api);

    // Fewer kept: the newest three, the totals unchanged.
    let fewer = Retention {
        max_count: 3,
        ..Retention::DEFAULT
    };
    let (server, runner) = server.restart(runner, NO_TWEAK, fewer).await;
    let api = Api::new(&server, "keeper");
    let listing = api.get("functions/kept/invocations").await;
    assert_eq!(ids(&listing), ["kept-4", "kept-3", "kept-2"]);
    assert_eq!(listing["stats"], before["stats"]);
    // Cut on disk too.
    saved_until(&server, &ns, "kept", |d| {
        d["recent"].as_array().is_some_and(|r| r.len() == 3)
    })
    .await;
    drop(api);

    // Older than the age kept: gone once loaded, listed or looked up.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let young = Retention {
        max_age: Duration::from_secs(1),
        ..Retention::DEFAULT
    };
    let (server, _runner) = server.restart(runner, NO_TWEAK, young).await;
    let api = Api::new(&server, "keeper");
    let listing = api.get("functions/kept/invocations").await;
    assert!(ids(&listing).is_empty(), "{listing}");
    assert_eq!(listing["stats"], before["stats"]);
    let (status, _) = api
        .send(
            reqwest::Method::GET,
            "functions/kept/invocations/kept-4",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    saved_until(&server, &ns, "kept", |d| {
        d["recent"].as_array().is_some_and(|r| r.is_empty())
    })
    .await;
}

#[tokio::test]
async fn a_deleted_function_forgets_its_records() {
    let (server, runner) = TestServer::platform(NO_TWEAK).await;
    let api = Api::new(&server, "forgetful");
    let ns = api.user.ns.clone();
    api.deploy_spec(
        json!({"name": "gone", "runtime": "python3.11"}),
        &[("handler.py", HANDLER)],
    )
    .await;
    api.invoke("gone", json!({})).await;
    assert_eq!(api.call_as("gone", "gone-1", &json!({})).await, 200);
    saved_until(&server, &ns, "gone", |d| {
        d["stats"]["count"].as_u64() >= Some(2)
    })
    .await;

    let (status, body) = api
        .send(reqwest::Method::DELETE, "functions/gone", None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    saved_until(&server, &ns, "gone", Value::is_null).await;

    api.post(
        "functions",
        json!({"name": "gone", "runtime": "python3.11"}),
    )
    .await;
    let fresh = api.get("functions/gone/invocations").await;
    assert_eq!(fresh["stats"]["count"], 0, "{fresh}");
    assert!(ids(&fresh).is_empty(), "{fresh}");
    drop(api);

    let (server, _runner) = server.restart(runner, NO_TWEAK, Retention::DEFAULT).await;
    let api = Api::new(&server, "forgetful");
    let fresh = api.get("functions/gone/invocations").await;
    assert_eq!(fresh["stats"]["count"], 0, "{fresh}");
    assert!(ids(&fresh).is_empty(), "{fresh}");
}
