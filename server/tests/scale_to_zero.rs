//! `sless up --scale-to-zero-after`: an idle function's process stops, its next call
//! starts one and waits for it, and after a restart it comes back with its first call.
//! The instances running are in the API, `sless ls`, the console's listing and
//! `/metrics` at every step.

mod common;

use std::time::{Duration, Instant};

use common::{start_with_env, token, upload_handler};
use serde_json::{Value, json};

const HANDLER: &[u8] = b"import os\n\ndef handle(event):\n    return os.getpid()\n";
// Long enough for the checks made while an instance runs.
const IDLE: &[(&str, &str)] = &[("SLESS_SCALE_TO_ZERO_AFTER", "3")];

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

/// `sless token --admin`: `/metrics` is for admins.
fn admin_token(data: &std::path::Path) -> String {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_sless"))
        .args(["token", "--admin", "--sub", "ops", "--data-dir"])
        .arg(data)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

/// What each place says of the function's instances: the API's count, the INSTANCES
/// cell of `sless ls` and of the console's text listing.
struct Seen {
    api: Value,
    ls: String,
    console: String,
}

async fn instances_seen(client: &reqwest::Client, base: &str, ns: &str, token: &str) -> Seen {
    let function = common::get_json(
        client,
        &format!("{base}/v1/namespaces/{ns}/functions/nap"),
        token,
    )
    .await;
    let ls = std::process::Command::new(env!("CARGO_BIN_EXE_sless"))
        .args(["ls", "--endpoint", base, "--token", token])
        .output()
        .unwrap();
    assert!(ls.status.success(), "{ls:?}");
    let console = client
        .get(format!("{base}/funcs/{ns}"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // NAME KIND RUNTIME PHASE TRIGGERS INSTANCES URL
    let cell = |table: &str| {
        let row = table
            .lines()
            .find(|l| l.starts_with("nap "))
            .unwrap_or_else(|| panic!("{table}"));
        row.split_whitespace().nth(5).unwrap().to_string()
    };
    Seen {
        api: function["instances"].clone(),
        ls: cell(&String::from_utf8_lossy(&ls.stdout)),
        console: cell(&console),
    }
}

/// `sless_<metric>{...name="nap"...}`'s value; 0 when the series is not there yet.
async fn metric(client: &reqwest::Client, base: &str, admin: &str, metric: &str) -> f64 {
    let text = client
        .get(format!("{base}/metrics"))
        .bearer_auth(admin)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let prefix = format!("sless_{metric}{{");
    text.lines()
        .filter(|l| l.starts_with(&prefix) && l.contains("name=\"nap\""))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

async fn assert_instances(
    client: &reqwest::Client,
    base: &str,
    ns: &str,
    token: &str,
    admin: &str,
    running: u64,
) {
    let seen = instances_seen(client, base, ns, token).await;
    assert_eq!(seen.api, running, "the API's instances");
    let cell = format!("{running}/0-4");
    assert_eq!(
        (seen.ls.as_str(), seen.console.as_str()),
        (cell.as_str(), cell.as_str())
    );
    assert_eq!(
        metric(client, base, admin, "instances").await,
        running as f64
    );
    // The function page says warm or cold.
    let page = client
        .get(format!("{base}/funcs/{ns}/function/nap"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let warmth = if running == 0 { "cold" } else { "warm" };
    let line = format!("instances:   {running} running ({warmth}), 0-4");
    assert!(page.contains(&line), "{page}");
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
    let admin = admin_token(&data);
    let base = first.base.clone();
    // Right after the upload: the call waits for the build and the start.
    let started = pid_of_call(&client, &url(&base)).await;
    assert_instances(&client, &base, &ns, &token, &admin, 1).await;
    wait_gone(started).await;
    // The count follows the stop (published before the process is gone).
    assert_instances(&client, &base, &ns, &token, &admin, 0).await;
    assert_eq!(
        metric(&client, &base, &admin, "scale_events_total").await,
        1.0,
        "one down"
    );
    assert_eq!(
        metric(&client, &base, &admin, "cold_starts_total").await,
        0.0
    );
    let again = pid_of_call(&client, &url(&base)).await;
    assert_ne!(again, started);
    assert_instances(&client, &base, &ns, &token, &admin, 1).await;
    // The start for the call: a scale event up and a cold start.
    assert_eq!(
        metric(&client, &base, &admin, "scale_events_total").await,
        2.0
    );
    assert_eq!(
        metric(&client, &base, &admin, "cold_starts_total").await,
        1.0
    );
    wait_gone(again).await;
    assert_instances(&client, &base, &ns, &token, &admin, 0).await;

    drop(first);
    let second = start_with_env(&data, IDLE);
    assert_instances(&client, &second.base, &ns, &token, &admin, 0).await;
    let back = pid_of_call(&client, &url(&second.base)).await;
    assert!(alive(back));
    assert_instances(&client, &second.base, &ns, &token, &admin, 1).await;
    let function: Value =
        common::get_json(&client, &api(&second.base, "functions/nap"), &token).await;
    assert_eq!(function["phase"], "Ready", "{function}");
}
