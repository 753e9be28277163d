//! The embedded platform end to end: uploads become real runtime processes behind
//! `/fn`, triggers start and stop them, cron fires, jobs run.

#[path = "../../gateway/tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::api::Api;
use common::*;
use reqwest::StatusCode;
use serde_json::{Value, json};

const PY_HANDLER: &[u8] = br#"
import six

def handle(event):
    if event.get("fail"):
        raise ValueError("asked to fail")
    print("python handled", event["_http"]["path"], flush=True)
    return {"runtime": "python", "path": event["_http"]["path"], "query": event["_http"]["query"],
            "six": six.__name__, "echo": event.get("msg")}
"#;

const JS_HANDLER: &[u8] = br#"
const isNumber = require('is-number');
exports.handle = async (event) => {
  if (event.fail) { throw new Error('asked to fail'); }
  return { runtime: 'node', path: event._http.path, query: event._http.query,
           isNumber: isNumber(event.n), echo: event.msg };
};
"#;

const GO_HANDLER: &[u8] = br#"package handler

import (
	"errors"
	"fmt"
)

func Handle(event map[string]any) (any, error) {
	fmt.Println("go handler saw", event["msg"])
	if event["fail"] == true {
		return nil, errors.New("asked to fail")
	}
	http, _ := event["_http"].(map[string]any)
	return map[string]any{"runtime": "go", "path": http["path"], "query": http["query"], "echo": event["msg"]}, nil
}
"#;

async fn check_runtime(api: &Api<'_>, name: &str) {
    let (status, body) = api
        .invoke(
            &format!("{name}/sub/path?x=1&y=two"),
            json!({"msg": "hi", "n": 5}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{name}: {body}");
    assert_eq!(body["path"], "/sub/path", "{body}");
    assert_eq!(body["query"]["x"], "1");
    assert_eq!(body["query"]["y"], "two");
    assert_eq!(body["echo"], "hi");
    let (status, body) = api.invoke(name, json!({"fail": true})).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        body["error"].as_str().unwrap().contains("asked to fail"),
        "{body}"
    );
    let (status, _) = api.invoke(name, json!({})).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "{name} keeps serving after an exception"
    );
}

#[tokio::test]
async fn python_function_with_a_dependency() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let api = Api::new(&server, "py-user");
    let ready = api
        .deploy(
            "py",
            "python3.11",
            &[
                ("handler.py", PY_HANDLER),
                ("requirements.txt", b"six==1.16.0\n"),
            ],
        )
        .await;
    assert!(ready["last_built_at"].is_string());
    assert_eq!(ready["url"], api.fn_url("py"));
    check_runtime(&api, "py").await;
    let (_, body) = api.invoke("py", json!({})).await;
    assert_eq!(
        body["six"], "six",
        "the requirements.txt dependency is importable"
    );

    // What the handler printed reaches the logs endpoint.
    let logs = api.get("functions/py/logs?tail=50").await;
    assert!(
        logs.as_array()
            .unwrap()
            .iter()
            .any(|l| l["line"] == "python handled /sub/path"),
        "{logs}"
    );
    let build_log = server
        .client
        .get(api.v1("functions/py/build-log"))
        .bearer_auth(&api.user.token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        build_log.contains("pip") && build_log.contains("build succeeded"),
        "{build_log}"
    );
    let invocations = api.get("functions/py/invocations").await;
    assert!(
        invocations["stats"]["count"].as_u64().unwrap() >= 3,
        "{invocations}"
    );
    assert!(
        invocations["stats"]["errors"].as_u64().unwrap() >= 1,
        "{invocations}"
    );
    assert_eq!(invocations["invocations"][0]["method"], "POST");
}

#[tokio::test]
async fn node_function_with_a_dependency() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let api = Api::new(&server, "js-user");
    let package = br#"{"name": "fn", "version": "1.0.0", "dependencies": {"is-number": "7.0.0"}}"#;
    api.deploy(
        "js",
        "nodejs20",
        &[("handler.js", JS_HANDLER), ("package.json", package)],
    )
    .await;
    check_runtime(&api, "js").await;
    let (_, body) = api.invoke("js", json!({"n": 5})).await;
    assert_eq!(
        body["isNumber"], true,
        "the package.json dependency is importable"
    );
}

/// What the handler can import beyond its own requirements: the host interpreter's
/// site-packages hold pip (every Python that can install requirements has it) and, on
/// hosts like the issue's, kubernetes_validate and yaml.
const PY_ISOLATION_HANDLER: &[u8] = br#"
import sys

def handle(event):
    importable = []
    for name in ("pip", "kubernetes_validate", "yaml"):
        try:
            __import__(name)
            importable.append(name)
        except ImportError:
            pass
    import six
    return {"importable": importable, "six": six.__name__,
            "site_dirs": [p for p in sys.path if "site-packages" in p or "dist-packages" in p]}
"#;

#[tokio::test]
async fn python_sees_its_requirements_and_the_standard_library_only() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let api = Api::new(&server, "py-isolated");
    // A PYTHONPATH in the function's env does not open the host's packages either.
    let host_site = std::process::Command::new("python3")
        .args(["-c", "import site; print(site.getsitepackages()[0])"])
        .output()
        .unwrap();
    let host_site = String::from_utf8(host_site.stdout)
        .unwrap()
        .trim()
        .to_string();
    api.deploy_spec(
        json!({"name": "iso", "runtime": "python3.11", "timeout_sec": 5,
               "env_vars": {"PYTHONPATH": host_site}}),
        &[
            ("handler.py", PY_ISOLATION_HANDLER),
            ("requirements.txt", b"six==1.16.0\n"),
        ],
    )
    .await;
    let (status, body) = api.invoke("iso", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["importable"],
        json!([]),
        "host packages leak in: {body}"
    );
    assert_eq!(body["site_dirs"], json!([]), "{body}");
    assert_eq!(body["six"], "six", "the declared dependency still imports");
}

const JS_ISOLATION_HANDLER: &[u8] = br#"
const found = (m) => { try { require.resolve(m); return true; } catch { return false; } };
exports.handle = async () => ({
  global: found('npm/package.json') || found('corepack/package.json'),
  dependency: found('is-number'),
});
"#;

#[tokio::test]
async fn node_sees_no_global_modules() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let api = Api::new(&server, "js-isolated");
    let global_root = std::process::Command::new("npm")
        .args(["root", "-g"])
        .output()
        .unwrap();
    let global_root = String::from_utf8(global_root.stdout)
        .unwrap()
        .trim()
        .to_string();
    assert!(
        std::path::Path::new(&global_root).join("npm").is_dir(),
        "npm is installed globally at {global_root}"
    );
    let package = br#"{"name": "fn", "version": "1.0.0", "dependencies": {"is-number": "7.0.0"}}"#;
    api.deploy_spec(
        json!({"name": "iso", "runtime": "nodejs20", "timeout_sec": 5,
               "env_vars": {"NODE_PATH": global_root}}),
        &[
            ("handler.js", JS_ISOLATION_HANDLER),
            ("package.json", package),
        ],
    )
    .await;
    let (status, body) = api.invoke("iso", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["global"], false, "global modules leak in: {body}");
    assert_eq!(body["dependency"], true, "{body}");
}

#[tokio::test]
async fn go_function() {
    assert!(
        std::process::Command::new("go")
            .arg("version")
            .output()
            .is_ok(),
        "the go1.23 runtime needs `go` on PATH: apt-get install golang-go"
    );
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let api = Api::new(&server, "go-user");
    api.deploy("gofn", "go1.23", &[("handler.go", GO_HANDLER)])
        .await;
    check_runtime(&api, "gofn").await;
    // The line the call printed is the call's.
    let call = json!({"msg": "the tagged one"});
    assert_eq!(
        api.call_as("gofn", "go-call-1", &call).await,
        StatusCode::OK
    );
    let record = api
        .wait_until(
            "functions/gofn/invocations/go-call-1",
            Duration::from_secs(5),
            |record| !record["logs"].as_array().unwrap().is_empty(),
        )
        .await;
    let lines: Vec<&str> = record["logs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|line| line["line"].as_str().unwrap())
        .collect();
    assert_eq!(lines, ["go handler saw the tagged one"], "{record}");
}

#[tokio::test]
async fn stopping_and_starting_the_http_trigger() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let api = Api::new(&server, "toggle-user");
    api.deploy(
        "tog",
        "python3.11",
        &[("handler.py", b"def handle(e):\n    return 'up'\n")],
    )
    .await;
    let (status, _) = api.invoke("tog", json!({})).await;
    assert_eq!(status, StatusCode::OK);

    let (status, _) = api
        .send(
            reqwest::Method::PATCH,
            "triggers/tog-http",
            Some(json!({"enabled": false})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let stopped = api
        .invoke_until("tog", StatusCode::SERVICE_UNAVAILABLE)
        .await;
    let reason = stopped["error"].as_str().unwrap_or_default();
    assert!(
        reason.contains("stopped") && reason.contains("tog-http"),
        "{reason}"
    );
    api.wait_until("triggers/tog-http", Duration::from_secs(5), |t| {
        t["active"] == false
    })
    .await;

    api.send(
        reqwest::Method::PATCH,
        "triggers/tog-http",
        Some(json!({"enabled": true})),
    )
    .await;
    let (status, body) = api.invoke("tog", json!({})).await;
    assert_eq!((status, body), (StatusCode::OK, json!("up")));

    let (status, body) = api.invoke("does-not-exist", json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");

    api.post(
        "triggers",
        json!({"name": "dangling", "type": "http", "function_ref": "ghost"}),
    )
    .await;
    let dangling = api
        .wait_until("triggers/dangling", Duration::from_secs(10), |t| {
            t["message"]
                .as_str()
                .is_some_and(|m| m.contains("not found"))
        })
        .await;
    assert_eq!(dangling["active"], false);
}

#[tokio::test]
async fn ready_means_serving_and_a_call_waits_for_a_starting_function() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let api = Api::new(&server, "cold-user");
    // Two seconds to import: a start that is easy to catch in the middle.
    let handler = b"import time\ntime.sleep(2)\n\ndef handle(e):\n    return 'awake'\n";
    let uploading = Instant::now();
    api.deploy("slow", "python3.11", &[("handler.py", handler)])
        .await;
    // Ready means serving: not before the handler has imported.
    assert!(
        uploading.elapsed() >= Duration::from_millis(1900),
        "Ready after {:?}, before the instance could serve",
        uploading.elapsed()
    );
    let response = server.client.post(api.fn_url("slow")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK, "callable once Ready");
    let toggle = |enabled: bool| {
        api.send(
            reqwest::Method::PATCH,
            "triggers/slow-http",
            Some(json!({"enabled": enabled})),
        )
    };
    assert_eq!(toggle(false).await.0, StatusCode::OK);
    api.invoke_until("slow", StatusCode::SERVICE_UNAVAILABLE)
        .await;

    assert_eq!(toggle(true).await.0, StatusCode::OK);
    // Long enough for the runner to react, well inside the two-second start.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let response = server.client.post(api.fn_url("slow")).send().await.unwrap();
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert_eq!((status, body), (StatusCode::OK, json!("awake")));
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "answered in {:?}: the call did not wait for the start",
        started.elapsed()
    );
}

#[tokio::test]
async fn the_first_call_after_an_upload_waits_for_the_build() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let api = Api::new(&server, "eager-user");
    api.post(
        "functions",
        json!({"name": "eager", "runtime": "python3.11"}),
    )
    .await;
    api.post(
        "triggers",
        json!({"name": "eager-http", "type": "http", "function_ref": "eager"}),
    )
    .await;
    // A requirement makes the build take a while: the call lands in the middle of it.
    api.upload(
        "functions/eager",
        &[
            (
                "handler.py",
                b"import six\n\ndef handle(e):\n    return 'built'\n",
            ),
            ("requirements.txt", b"six\n"),
        ],
    )
    .await;
    let response = server
        .client
        .post(api.fn_url("eager"))
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body = response.text().await.unwrap();
    assert_eq!((status, body.as_str()), (StatusCode::OK, "\"built\""));
}

#[tokio::test]
async fn a_moved_or_deleted_trigger_wakes_the_functions_it_named() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let api = Api::new(&server, "move-user");
    let handler = |word: &str| format!("def handle(e):\n    return '{word}'\n");
    api.deploy(
        "first",
        "python3.11",
        &[("handler.py", handler("first").as_bytes())],
    )
    .await;
    api.deploy(
        "second",
        "python3.11",
        &[("handler.py", handler("second").as_bytes())],
    )
    .await;

    // first-http now feeds `second`: `first` has no trigger left and stops.
    let (status, moved) = api
        .send(
            reqwest::Method::PUT,
            "triggers/first-http",
            Some(json!({"type": "http", "function_ref": "second"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{moved}");
    api.invoke_until("first", StatusCode::SERVICE_UNAVAILABLE)
        .await;

    // Deleting second-http leaves `second` served through first-http.
    let (status, _) = api
        .send(reqwest::Method::DELETE, "triggers/second-http", None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = api.invoke("second", json!({})).await;
    assert_eq!((status, body), (StatusCode::OK, json!("second")));

    // Deleting the last trigger of `second` stops it.
    let (status, _) = api
        .send(reqwest::Method::DELETE, "triggers/first-http", None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    api.invoke_until("second", StatusCode::SERVICE_UNAVAILABLE)
        .await;
}

#[tokio::test]
async fn cron_trigger_calls_the_function_until_disabled() {
    // 60 scheduler seconds per real second: "* * * * *" fires about every second.
    let (server, _runner) = TestServer::platform(|c| {
        c.cron_time_scale = 60;
        c.cron_tick = Duration::from_millis(200);
    })
    .await;
    let api = Api::new(&server, "cron-user");
    api.post(
        "functions",
        json!({"name": "ticker", "runtime": "python3.11"}),
    )
    .await;
    api.post(
        "triggers",
        json!({"name": "every-minute", "type": "cron", "function_ref": "ticker",
        "schedule": "* * * * *"}),
    )
    .await;
    api.upload("functions/ticker", &[("handler.py",
        b"def handle(event):\n    print('tick from', event.get('trigger'), flush=True)\n    return 'ok'\n")]).await;
    // The scheduler may record a run while the instance is still starting; the
    // trigger turns active once it serves.
    api.wait_until("triggers/every-minute", Duration::from_secs(120), |t| {
        t["last_schedule_time"].is_string() && t["active"] == true
    })
    .await;
    let ticks = |logs: &Value| {
        logs.as_array()
            .unwrap()
            .iter()
            .filter(|l| l["line"] == "tick from every-minute")
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while ticks(&api.get("functions/ticker/logs?tail=200").await) < 2 {
        assert!(
            Instant::now() < deadline,
            "the cron trigger did not call the handler twice"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Each fire is a call like any other: recorded with its trigger, counted, and the
    // lines it printed found from its record.
    let listing = api.get("functions/ticker/invocations?trigger=cron").await;
    let fired = listing["invocations"].as_array().unwrap();
    let answered = fired
        .iter()
        .find(|c| c["status"] == 200)
        .unwrap_or_else(|| panic!("{listing}"));
    assert_eq!(answered["trigger_name"], "every-minute", "{listing}");
    assert!(listing["stats"]["count"].as_u64() >= Some(2), "{listing}");
    let id = answered["request_id"].as_str().unwrap();
    let record = api.get(&format!("functions/ticker/invocations/{id}")).await;
    let printed: Vec<&str> = record["logs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["line"].as_str().unwrap())
        .collect();
    assert_eq!(printed, ["tick from every-minute"], "{record}");

    api.send(
        reqwest::Method::PATCH,
        "triggers/every-minute",
        Some(json!({"enabled": false})),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before = ticks(&api.get("functions/ticker/logs?tail=200").await);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = ticks(&api.get("functions/ticker/logs?tail=200").await);
    assert_eq!(before, after, "a disabled cron trigger does not fire");
}

const JOB_HANDLER: &[u8] = br#"
import time

def handle(event):
    print("job got", event, flush=True)
    if event.get("fail"):
        raise RuntimeError("job asked to fail")
    if event.get("sleep"):
        time.sleep(event["sleep"])
    return {"doubled": event.get("n", 0) * 2}
"#;

#[tokio::test]
async fn jobs_follow_run_id() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let api = Api::new(&server, "job-user");
    let long = Duration::from_secs(120);

    // Self-contained job: its own code, run_id 0 → Skipped.
    api.post(
        "jobs",
        json!({"name": "double", "runtime": "python3.11", "event_json": "{\"n\": 21}",
        "timeout_sec": 30}),
    )
    .await;
    api.upload("jobs/double", &[("handler.py", JOB_HANDLER)])
        .await;
    api.wait_for("jobs/double", "phase", &["Skipped"], long)
        .await;

    api.send(
        reqwest::Method::PATCH,
        "jobs/double",
        Some(json!({"run_id": 1})),
    )
    .await;
    let first = api
        .wait_until("jobs/double", long, |j| {
            j["phase"] == "Succeeded" || j["phase"] == "Failed"
        })
        .await;
    assert_eq!(first["phase"], "Succeeded", "{first}");
    assert_eq!(
        serde_json::from_str::<Value>(first["message"].as_str().unwrap()).unwrap(),
        json!({"doubled": 42})
    );
    assert!(
        first["log_tail"].as_str().unwrap().contains("job got"),
        "{first}"
    );
    assert_eq!(first["job_name"], "double-1");

    api.send(
        reqwest::Method::PATCH,
        "jobs/double",
        Some(json!({"run_id": 2, "event_json": "{\"n\": 5}"})),
    )
    .await;
    let second = api
        .wait_until("jobs/double", long, |j| {
            j["run_id"] == 2
                && j["job_name"] == "double-2"
                && (j["phase"] == "Succeeded" || j["phase"] == "Failed")
        })
        .await;
    assert_eq!(
        serde_json::from_str::<Value>(second["message"].as_str().unwrap()).unwrap(),
        json!({"doubled": 10})
    );

    // A job of an existing function, failing and timing out.
    api.post(
        "functions",
        json!({"name": "worker", "runtime": "python3.11"}),
    )
    .await;
    api.upload("functions/worker", &[("handler.py", JOB_HANDLER)])
        .await;
    api.wait_for("functions/worker", "phase", &["Ready"], long)
        .await;
    api.post("jobs", json!({"name": "boom", "function_ref": "worker", "event_json": "{\"fail\": true}", "run_id": 1})).await;
    let failed = api
        .wait_until("jobs/boom", long, |j| {
            j["phase"] == "Failed" || j["phase"] == "Succeeded"
        })
        .await;
    assert_eq!(failed["phase"], "Failed");
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("job asked to fail"),
        "{failed}"
    );

    api.post(
        "jobs",
        json!({"name": "slow", "function_ref": "worker", "event_json": "{\"sleep\": 30}",
        "run_id": 1, "timeout_sec": 1}),
    )
    .await;
    let started = Instant::now();
    let timed_out = api
        .wait_until("jobs/slow", long, |j| {
            j["phase"] == "Failed" || j["phase"] == "Succeeded"
        })
        .await;
    assert_eq!(timed_out["phase"], "Failed");
    assert!(
        timed_out["message"]
            .as_str()
            .unwrap()
            .contains("timeout_sec"),
        "{timed_out}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the job was killed at its timeout"
    );

    api.post(
        "jobs",
        json!({"name": "orphan", "function_ref": "nobody", "run_id": 1}),
    )
    .await;
    let orphan = api
        .wait_for("jobs/orphan", "phase", &["Failed"], long)
        .await;
    assert!(
        orphan["message"].as_str().unwrap().contains("not found"),
        "{orphan}"
    );
}

#[tokio::test]
async fn a_killed_process_is_restarted() {
    let (server, runner) = TestServer::platform(|_| {}).await;
    let api = Api::new(&server, "crash-user");
    api.deploy(
        "phoenix",
        "python3.11",
        &[("handler.py", b"def handle(e):\n    return 'alive'\n")],
    )
    .await;
    let (status, _) = api.invoke("phoenix", json!({})).await;
    assert_eq!(status, StatusCode::OK);
    let pid = runner
        .pid(&api.user.ns, "phoenix")
        .expect("an instance runs");
    unsafe_kill(pid);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let new_pid = runner.pid(&api.user.ns, "phoenix");
        if new_pid.is_some_and(|p| p != pid) {
            break;
        }
        assert!(Instant::now() < deadline, "no new instance after the kill");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, body) = api.invoke("phoenix", json!({})).await;
    assert_eq!((status, body), (StatusCode::OK, json!("alive")));
    let logs = api.get("functions/phoenix/logs?tail=50").await;
    assert!(logs.to_string().contains("restarting"), "{logs}");
}

fn unsafe_kill(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test]
async fn redeploy_under_load_loses_no_request() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let api = Api::new(&server, "deploy-user");
    api.deploy(
        "rolling",
        "python3.11",
        &[("handler.py", b"def handle(e):\n    return 'v1'\n")],
    )
    .await;
    let (status, _) = api.invoke("rolling", json!({})).await;
    assert_eq!(status, StatusCode::OK);

    let url = api.fn_url("rolling");
    let client = server.client.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let (mut seen, mut failures) = (Vec::new(), Vec::new());
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
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
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    api.upload(
        "functions/rolling",
        &[("handler.py", b"def handle(e):\n    return 'v2'\n")],
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, body) = api.invoke("rolling", json!({})).await;
        if body == json!("v2") {
            break;
        }
        assert!(Instant::now() < deadline, "v2 never served");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (seen, failures) = load.await.unwrap();
    assert!(
        failures.is_empty(),
        "failed requests during the redeploy: {failures:?}"
    );
    assert!(
        seen.contains(&json!("v1")) && seen.contains(&json!("v2")),
        "{} answers",
        seen.len()
    );
}

/// Processes this test process (the runner runs in it) started as standbys and still
/// waiting (in the directory they were started in), running `wrapper`.
fn standbys(wrapper: &str) -> Vec<u32> {
    let me = std::process::id().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // "pid (comm) state ppid ...": comm may hold spaces, so split after the ')'.
        let parent = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().nth(1));
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        // A bound one has moved to its function's code.
        let waiting = std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| {
            cwd.ends_with("r/code") && cwd.to_string_lossy().contains("/standby/")
        });
        if parent == Some(me.as_str())
            && environ.split(|b| *b == 0).any(|v| v == b"SLESS_STANDBY=1")
            && String::from_utf8_lossy(&cmdline).contains(wrapper)
            && waiting
        {
            found.push(pid);
        }
    }
    found
}

#[tokio::test]
async fn a_stopped_function_starts_from_a_standby_of_its_runtime() {
    let (server, runner) = TestServer::platform(|_| {}).await;
    let api = Api::new(&server, "standby-user");
    let python: &[u8] = b"import os\n\ndef handle(e):\n    return os.getcwd()\n";
    let node: &[u8] = b"exports.handle = async () => process.cwd();\n";
    for (name, runtime, wrapper, files) in [
        (
            "warm",
            "python3.11",
            "sless_runtime.py",
            [("handler.py", python)],
        ),
        (
            "warmjs",
            "nodejs20",
            "sless_runtime.js",
            [("handler.js", node)],
        ),
    ] {
        starts_from_standby(&api, &server, &runner, (name, runtime, wrapper), &files).await;
    }
}

async fn starts_from_standby(
    api: &Api<'_>,
    server: &TestServer,
    runner: &sless_embedded::LocalRunner,
    (name, runtime, wrapper): (&str, &str, &str),
    files: &[(&str, &[u8])],
) {
    api.deploy(name, runtime, files).await;
    let trigger = format!("triggers/{name}-http");
    let (status, _) = api
        .send(
            reqwest::Method::PATCH,
            &trigger,
            Some(json!({"enabled": false})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    api.invoke_until(name, StatusCode::SERVICE_UNAVAILABLE)
        .await;
    // Stopped: standbys of its runtime wait, started before any function was known.
    let deadline = Instant::now() + Duration::from_secs(10);
    let waiting = loop {
        let waiting = standbys(wrapper);
        if !waiting.is_empty() {
            break waiting;
        }
        assert!(Instant::now() < deadline, "{runtime}: no standby waits");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    api.send(
        reqwest::Method::PATCH,
        &trigger,
        Some(json!({"enabled": true})),
    )
    .await;
    let (status, cwd) = api.invoke(name, json!({})).await;
    assert_eq!(status, StatusCode::OK, "{runtime}: {cwd}");
    // It serves its code where the standby sees it mounted.
    let standby_dir = server.data_dir().join("standby");
    assert!(
        std::path::Path::new(cwd.as_str().unwrap()).starts_with(&standby_dir),
        "{runtime}: served from {cwd}"
    );
    let pid = runner.pid(&api.user.ns, name).unwrap();
    assert!(
        waiting.contains(&pid),
        "{runtime}: the instance {pid} is none of the standbys that waited: {waiting:?}"
    );
}
