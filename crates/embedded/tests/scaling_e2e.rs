//! Scaling in embedded mode with real Python processes: an idle instance stops and the
//! next call starts one and waits for it, calls past the target concurrency start
//! more (up to `max_instances`, within the memory quota), `min_instances` stay, a
//! crash of one of several leaves the others serving, a restart brings functions back
//! lazily, and a call right after the API's answers finds the function.

#[path = "../../gateway/tests/common/mod.rs"]
mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::api::Api;
use common::*;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Answers with its process id; sleeps or dies when asked.
const HANDLER: &[u8] = br#"
import os, time

def handle(event):
    if event.get("die"):
        os._exit(3)
    time.sleep(event.get("sleep", 0))
    return {"pid": os.getpid()}
"#;

/// Instances stop after 1 s without a call.
fn short_idle(config: &mut sless_embedded::RunnerConfig) {
    config.scale_to_zero_after = Duration::from_secs(1);
}

/// One call, no retry: its status and body.
async fn call(api: &Api<'_>, name: &str, body: Value) -> (StatusCode, Value) {
    let response = api
        .server
        .client
        .post(api.fn_url(name))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// The pid a successful call answered from.
async fn pid_of_call(api: &Api<'_>, name: &str, body: Value) -> u32 {
    let (status, answer) = call(api, name, body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    u32::try_from(answer["pid"].as_u64().unwrap()).unwrap()
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Waits (up to 30 s) until `done` holds for the function's running pids.
async fn wait_for_pids(
    runner: &sless_embedded::LocalRunner,
    api: &Api<'_>,
    name: &str,
    what: &str,
    done: impl Fn(&[u32]) -> bool,
) -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let pids = runner.pids(&api.user.ns, name);
        if done(&pids) {
            return pids;
        }
        assert!(Instant::now() < deadline, "{what}: still {pids:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `clients` callers each calling `name` (a 0.5 s call) again and again for 3 s: the
/// pids that answered. Calls keep coming, so instances started meanwhile get some.
async fn steady_load(api: &Api<'_>, name: &str, clients: usize) -> HashSet<u64> {
    let until = Instant::now() + Duration::from_secs(3);
    let client = |_| async move {
        let mut pids = Vec::new();
        while Instant::now() < until {
            let (status, answer) = call(api, name, json!({"sleep": 0.5})).await;
            assert_eq!(status, StatusCode::OK, "{answer}");
            pids.push(answer["pid"].as_u64().unwrap());
        }
        pids
    };
    futures::future::join_all((0..clients).map(client))
        .await
        .into_iter()
        .flatten()
        .collect()
}

fn spec(name: &str, scaling: Value) -> Value {
    let mut spec = json!({"name": name, "runtime": "python3.11", "timeout_sec": 30});
    for (key, value) in scaling.as_object().unwrap() {
        spec[key] = value.clone();
    }
    spec
}

#[tokio::test]
async fn an_idle_function_stops_and_the_next_call_starts_one_and_waits() {
    let (server, runner) = TestServer::platform(short_idle).await;
    let api = Api::new(&server, "idle-user");
    api.deploy_spec(spec("napper", json!({})), &[("handler.py", HANDLER)])
        .await;
    let first = pid_of_call(&api, "napper", json!({})).await;

    wait_for_pids(&runner, &api, "napper", "the idle instance stops", |p| {
        p.is_empty()
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(15);
    while alive(first) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!alive(first), "the idle process {first} is gone");
    let status = api.get("functions/napper").await;
    assert_eq!(
        status["phase"], "Ready",
        "scaled to zero is still Ready: {status}"
    );

    // No 503: the call waits for the instance it starts.
    let second = pid_of_call(&api, "napper", json!({})).await;
    assert_ne!(second, first);
    assert_eq!(runner.pids(&api.user.ns, "napper"), vec![second]);
    // The call asked for one instance, not one per look while it waited.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(runner.pids(&api.user.ns, "napper").len() <= 1);

    let log = api.get("functions/napper/logs?tail=200").await;
    assert!(
        log.as_array().unwrap().iter().any(|l| l["line"]
            .as_str()
            .unwrap()
            .contains("stopped after 1 s without calls")),
        "the stop is logged: {log}"
    );
}

#[tokio::test]
async fn no_call_fails_while_instances_stop_and_start() {
    let (server, _runner) = TestServer::platform(short_idle).await;
    let api = Api::new(&server, "edge-user");
    api.deploy_spec(spec("edgy", json!({})), &[("handler.py", HANDLER)])
        .await;
    // Calls spaced around the idle time land while an instance stops, or just after.
    let mut pids = HashSet::new();
    for round in 0..12u64 {
        let (status, answer) = call(&api, "edgy", json!({"sleep": 0.2})).await;
        assert_eq!(status, StatusCode::OK, "call {round}: {answer}");
        pids.insert(answer["pid"].as_u64().unwrap());
        tokio::time::sleep(Duration::from_millis(900 + 100 * (round % 6))).await;
    }
    // A call in flight for longer than the idle time is not cut.
    let (status, answer) = call(&api, "edgy", json!({"sleep": 2.5})).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert!(pids.len() > 1, "instances stopped and started: {pids:?}");
}

#[tokio::test]
async fn concurrency_past_the_target_starts_more_instances_then_they_stop() {
    let (server, runner) = TestServer::platform(short_idle).await;
    let api = Api::new(&server, "busy-user");
    let scaling = json!({"max_instances": 3, "target_concurrency": 1});
    let ready = api
        .deploy_spec(spec("busy", scaling), &[("handler.py", HANDLER)])
        .await;
    assert_eq!(ready["max_instances"], 3);
    assert_eq!(ready["min_instances"], 0);

    let pids = steady_load(&api, "busy", 6).await;
    assert_eq!(
        pids.len(),
        3,
        "6 callers at target 1 spread over the 3 instances allowed: {pids:?}"
    );
    assert!(runner.pids(&api.user.ns, "busy").len() <= 3);
    wait_for_pids(&runner, &api, "busy", "back in to zero", |p| p.is_empty()).await;
}

#[tokio::test]
async fn min_instances_keep_running_and_the_quota_caps_scale_out() {
    let (server, runner) = TestServer::platform(|config| {
        short_idle(config);
        // Room for two 128 MiB instances of a namespace.
        config.max_running_memory_mb = 256;
    })
    .await;
    let api = Api::new(&server, "kept-user");
    let scaling = json!({"min_instances": 1, "max_instances": 4, "target_concurrency": 1});
    api.deploy_spec(spec("kept", scaling), &[("handler.py", HANDLER)])
        .await;
    let kept = wait_for_pids(&runner, &api, "kept", "one instance", |p| p.len() == 1).await[0];

    // Every call answers: past the quota they queue on the running instances.
    let pids = steady_load(&api, "kept", 6).await;
    assert_eq!(
        pids.len(),
        2,
        "the memory quota allows two instances: {pids:?}"
    );

    // Idle again: back to min_instances, and the one kept stays.
    wait_for_pids(&runner, &api, "kept", "back to one", |p| p.len() == 1).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let left = runner.pids(&api.user.ns, "kept");
    assert_eq!(left.len(), 1, "min_instances 1 is kept: {left:?}");
    assert!(alive(left[0]));
    assert!(left[0] == kept || pids.contains(&u64::from(left[0])));
}

#[tokio::test]
async fn a_crash_of_one_instance_leaves_the_others_serving() {
    let (server, runner) = TestServer::platform(|_| {}).await;
    let api = Api::new(&server, "crash-user");
    let scaling = json!({"min_instances": 2, "max_instances": 2});
    api.deploy_spec(spec("pair", scaling), &[("handler.py", HANDLER)])
        .await;
    let pids = wait_for_pids(&runner, &api, "pair", "two instances", |p| p.len() == 2).await;

    let (status, _) = call(&api, "pair", json!({"die": true})).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    wait_for_pids(&runner, &api, "pair", "the crash seen", |p| p != pids).await;
    // The other serves: no 503 while the crashed one is replaced.
    for _ in 0..10 {
        let pid = pid_of_call(&api, "pair", json!({})).await;
        assert!(alive(pid));
    }
    let after = wait_for_pids(&runner, &api, "pair", "two again", |p| {
        p.len() == 2 && p.iter().all(|pid| alive(*pid))
    })
    .await;
    assert_eq!(
        pids.iter().filter(|pid| after.contains(pid)).count(),
        1,
        "one survived, one is new: {pids:?} → {after:?}"
    );
}

#[tokio::test]
async fn a_restart_brings_scaled_to_zero_functions_back_on_their_first_call() {
    let (server, runner) = TestServer::platform(short_idle).await;
    let api = Api::new(&server, "restart-user");
    api.deploy_spec(spec("sleeper", json!({})), &[("handler.py", HANDLER)])
        .await;
    pid_of_call(&api, "sleeper", json!({})).await;
    wait_for_pids(&runner, &api, "sleeper", "scaled to zero", |p| p.is_empty()).await;

    let (server, runner) = server
        .restart(runner, short_idle, gateway::proxy::Retention::DEFAULT)
        .await;
    let api = Api::new(&server, "restart-user");
    let ready = api
        .wait_for(
            "functions/sleeper",
            "phase",
            &["Ready", "Failed"],
            Duration::from_secs(30),
        )
        .await;
    assert_eq!(ready["phase"], "Ready", "{ready}");
    // Nothing starts at boot for a function nobody calls.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(runner.pids(&api.user.ns, "sleeper").is_empty());
    pid_of_call(&api, "sleeper", json!({})).await;
    assert_eq!(runner.pids(&api.user.ns, "sleeper").len(), 1);
}

#[tokio::test]
async fn a_call_right_after_create_trigger_and_upload_waits_for_the_build() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let api = Api::new(&server, "fresh-user");
    for i in 0..5 {
        let name = format!("fresh{i}");
        api.create_and_upload(spec(&name, json!({})), &[("handler.py", HANDLER)])
            .await;
        let (status, answer) = call(&api, &name, json!({})).await;
        assert_eq!(status, StatusCode::OK, "{name}: {answer}");
    }
}

#[tokio::test]
async fn scaling_fields_are_checked_and_named() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let api = Api::new(&server, "fields-user");
    for (scaling, field) in [
        (json!({"min_instances": 101}), "min_instances"),
        (json!({"max_instances": 0}), "max_instances"),
        (json!({"max_instances": 101}), "max_instances"),
        (json!({"target_concurrency": 0}), "target_concurrency"),
        (
            json!({"min_instances": 3, "max_instances": 2}),
            "min_instances",
        ),
    ] {
        let (status, body) = api
            .send(
                reqwest::Method::POST,
                "functions",
                Some(spec("bad", scaling.clone())),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{scaling}: {body}");
        assert!(
            body["error"].as_str().unwrap().contains(field),
            "{scaling}: {body}"
        );
    }
    let function = api.post("functions", spec("fine", json!({}))).await;
    assert_eq!(
        (
            &function["min_instances"],
            &function["max_instances"],
            &function["target_concurrency"]
        ),
        (&json!(0), &json!(4), &json!(8)),
        "a Python function's defaults: {function}"
    );
    let service = api
        .post(
            "services",
            json!({"name": "svc", "runtime": "nodejs20", "min_instances": 2}),
        )
        .await;
    assert_eq!(service["min_instances"], 2);
    assert_eq!(service["max_instances"], 4);
    assert_eq!(service["target_concurrency"], 32);
    let service = api
        .post("services", json!({"name": "svc2", "runtime": "nodejs20"}))
        .await;
    assert_eq!(
        service["min_instances"], 1,
        "a service keeps one: {service}"
    );
}
