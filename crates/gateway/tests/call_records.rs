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

/// Calls `/fn/<name>` as the call `request_id`; its status and answer.
async fn answer_of(api: &Api<'_>, name: &str, request_id: &str) -> (StatusCode, Value) {
    let response = api
        .server
        .client
        .post(api.fn_url(name))
        .header("x-request-id", request_id)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    (
        response.status(),
        response.json().await.unwrap_or(Value::Null),
    )
}

/// Calls until `answer` comes (a new version rolls in); the request id of that call.
async fn first_answering(api: &Api<'_>, name: &str, answer: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    for i in 0.. {
        let request_id = format!("{answer}-{i}");
        if answer_of(api, name, &request_id).await.1 == json!(answer) {
            return request_id;
        }
        assert!(Instant::now() < deadline, "{answer} never served");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    unreachable!()
}

#[tokio::test]
async fn a_record_names_the_version_that_served_it_and_whether_it_waited_for_a_start() {
    let (server, _runner) = TestServer::platform(|config| {
        config.scale_to_zero_after = Duration::from_secs(2);
    })
    .await;
    let api = Api::new(&server, "versioned");
    let handler = |answer: &str| format!("def handle(e):\n    return {answer:?}\n");
    api.create_and_upload(
        json!({"name": "ver", "runtime": "python3.11", "timeout_sec": 5}),
        &[("handler.py", handler("v1").as_bytes())],
    )
    .await;
    // Right after the upload: the call waits for the build and the start.
    assert_eq!(
        answer_of(&api, "ver", "first").await,
        (StatusCode::OK, json!("v1"))
    );
    assert_eq!(answer_of(&api, "ver", "second").await.0, StatusCode::OK);
    let v1 = api.get("functions/ver").await["version"]
        .as_str()
        .unwrap()
        .to_string();
    let record = |id: &str| {
        let (api, path) = (&api, format!("functions/ver/invocations/{id}"));
        async move { api.get(&path).await }
    };
    // Whether the first call found the instance started already depends on timing;
    // the call after the scale to zero below is surely cold.
    let first = record("first").await;
    assert_eq!(first["version"], json!(v1), "{first}");
    let second = record("second").await;
    assert_eq!(
        (&second["version"], &second["cold"]),
        (&json!(v1), &json!(false)),
        "{second}"
    );
    let listed = api.get("functions/ver/invocations?tail=2").await;
    let fields =
        |call: &Value| [&call["request_id"], &call["version"], &call["cold"]].map(Clone::clone);
    assert_eq!(
        [
            fields(&listed["invocations"][0]),
            fields(&listed["invocations"][1])
        ],
        [fields(&second), fields(&first)],
        "the listing shows the same"
    );

    // Scaled to zero after 2 s without calls: the next call starts an instance again.
    api.wait_until(
        "functions/ver/logs?tail=100",
        Duration::from_secs(30),
        |logs| logs.to_string().contains("without calls"),
    )
    .await;
    assert_eq!(answer_of(&api, "ver", "woken").await.0, StatusCode::OK);
    assert_eq!(record("woken").await["cold"], true);

    let uploaded = api
        .upload("functions/ver", &[("handler.py", handler("v2").as_bytes())])
        .await;
    let v2 = uploaded["version"].as_str().unwrap().to_string();
    assert_ne!(v1, v2);
    let on_v2 = first_answering(&api, "ver", "v2").await;
    assert_eq!(record(&on_v2).await["version"], json!(v2));

    let (status, body) = api
        .send(
            reqwest::Method::POST,
            "functions/ver/rollback",
            Some(json!({"version": v1})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let back = first_answering(&api, "ver", "v1").await;
    assert_eq!(record(&back).await["version"], json!(v1));
}
