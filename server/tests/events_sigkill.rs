//! `sless up --amqp-url` as a real process, SIGKILLed while it consumes: after a
//! restart on the same data dir every published message was processed at least once.

#[path = "../../crates/gateway/tests/common/broker.rs"]
mod broker;
mod common;

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{start_with_env, token, upload_handler};
use serde_json::{Value, json};

const HANDLER: &[u8] = include_bytes!("../../crates/gateway/tests/fixtures/event_handler.py");

/// Message ids the handler answered 2xx for, and all its calls.
fn seen(file: &Path) -> (HashSet<String>, usize) {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let calls: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ok = calls
        .iter()
        .filter(|c| c["ok"] == true)
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect();
    (ok, calls.len())
}

async fn wait_seen(file: &Path, within: Duration, done: impl Fn(&HashSet<String>, usize) -> bool) {
    let deadline = Instant::now() + within;
    loop {
        let (ok, calls) = seen(file);
        if done(&ok, calls) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{calls} calls, {} messages answered",
            ok.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn sigkill_mid_stream_loses_no_message() {
    let broker = broker::Broker::start().await;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let url = broker.url();
    let env = [("SLESS_AMQP_URL", url.as_str())];
    let first = start_with_env(&data, &env);
    let token = token(&data, "kim");
    let ns = sless_core::model::namespace_for_sub("kim");
    let client = reqwest::Client::new();
    let api = |base: &str, path: &str| format!("{base}/v1/namespaces/{ns}/{path}");
    let post = |url: String, body: Value| client.post(url).bearer_auth(&token).json(&body).send();

    let created = post(
        api(&first.base, "functions"),
        json!({"name": "sturdy", "runtime": "python3.11", "timeout_sec": 10}),
    )
    .await
    .unwrap();
    assert_eq!(created.status(), 201);
    let created = post(
        api(&first.base, "triggers"),
        json!({"name": "sturdy", "type": "event", "function_ref": "sturdy",
               "queue": "sturdy-orders", "concurrency": 2}),
    )
    .await
    .unwrap();
    assert_eq!(created.status(), 201);
    upload_handler(
        &client,
        &api(&first.base, "functions/sturdy/upload"),
        &token,
        HANDLER,
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let trigger: Value =
            common::get_json(&client, &api(&first.base, "triggers/sturdy"), &token).await;
        if trigger["active"] == true {
            break;
        }
        assert!(Instant::now() < deadline, "never consumed: {trigger}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let publisher = broker.client().await;
    let ids: Vec<String> = (0..100).map(|i| format!("sturdy-{i:03}")).collect();
    for id in &ids {
        publisher
            .publish(
                "sturdy-orders",
                json!({"sleep": 0.05}).to_string().as_bytes(),
                id,
            )
            .await;
    }
    let file = data
        .join("builds")
        .join(&ns)
        .join("function-sturdy/.scratch/seen.txt");
    wait_seen(&file, Duration::from_secs(60), |_, calls| calls >= 10).await;
    // SIGKILL: the messages in hand are neither answered nor acked.
    drop(first);
    let (before, _) = seen(&file);
    assert!(before.len() < ids.len(), "killed mid-stream");

    let _second = start_with_env(&data, &env);
    wait_seen(&file, Duration::from_secs(180), |ok, _| {
        ok.len() == ids.len()
    })
    .await;
    let (ok, calls) = seen(&file);
    assert!(ids.iter().all(|id| ok.contains(id)), "none lost");
    assert_eq!(publisher.depth("sturdy-orders").await, 0);
    println!(
        "{calls} calls for {} messages across the SIGKILL",
        ids.len()
    );
}
