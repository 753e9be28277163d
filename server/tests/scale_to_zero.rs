//! `sless up --scale-to-zero-after`: an idle function's process stops, its next call
//! starts one and waits for it, and after a restart it comes back with its first call.

mod common;

use std::time::{Duration, Instant};

use common::{start_with_env, token, upload_handler};
use serde_json::{Value, json};

const HANDLER: &[u8] = b"import os\n\ndef handle(event):\n    return os.getpid()\n";
const IDLE: &[(&str, &str)] = &[("SLESS_SCALE_TO_ZERO_AFTER", "1")];

fn alive(pid: u64) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// One call, no retry: it must answer 200 (a call to a scaled-to-zero function waits).
async fn pid_of_call(client: &reqwest::Client, url: &str) -> u64 {
    let response = client.post(url).send().await.unwrap();
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{body}");
    body.as_u64().unwrap()
}

async fn wait_gone(pid: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while alive(pid) {
        assert!(Instant::now() < deadline, "process {pid} is still there");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn an_idle_function_stops_and_comes_back_with_its_next_call_also_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let first = start_with_env(&data, IDLE);
    let token = token(&data, "zoe");
    let ns = sless_core::model::namespace_for_sub("zoe");
    let client = reqwest::Client::new();
    let api = |base: &str, path: &str| format!("{base}/v1/namespaces/{ns}/{path}");
    for (path, body) in [
        ("functions", json!({"name": "nap", "runtime": "python3.11"})),
        (
            "triggers",
            json!({"name": "nap-http", "type": "http", "function_ref": "nap"}),
        ),
    ] {
        let response = client
            .post(api(&first.base, path))
            .bearer_auth(&token)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201);
    }
    upload_handler(
        &client,
        &api(&first.base, "functions/nap/upload"),
        &token,
        HANDLER,
    )
    .await;
    let url = |base: &str| format!("{base}/fn/{ns}/nap");
    // Right after the upload: the call waits for the build and the start.
    let started = pid_of_call(&client, &url(&first.base)).await;
    wait_gone(started).await;
    let again = pid_of_call(&client, &url(&first.base)).await;
    assert_ne!(again, started);
    wait_gone(again).await;

    drop(first);
    let second = start_with_env(&data, IDLE);
    let back = pid_of_call(&client, &url(&second.base)).await;
    assert!(alive(back));
    let function: Value =
        common::get_json(&client, &api(&second.base, "functions/nap"), &token).await;
    assert_eq!(function["phase"], "Ready", "{function}");
}
