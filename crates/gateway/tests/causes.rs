//! A cause on every failure surface, with real builds and processes: a failed build, a
//! handler that does not load, an instance that crashes and a call past its timeout
//! each say why in the `/fn` answer and the function's status, and never a server path.

mod common;

use std::time::{Duration, Instant};

use common::api::Api;
use common::*;
use reqwest::StatusCode;
use serde_json::{Value, json};

fn error(body: &Value) -> &str {
    body["error"].as_str().unwrap_or_default()
}

/// No answer or status names a place on the server: its data dir or a tool's path.
fn assert_no_server_path(server: &TestServer, text: &str) {
    let data_dir = server.data_dir().display().to_string();
    assert!(!text.contains(&data_dir), "the data dir leaks: {text}");
    assert!(!text.contains("/usr/"), "a tool's path leaks: {text}");
}

/// The function once it is Failed.
async fn failed(api: &Api<'_>, name: &str, within: Duration) -> Value {
    let function = api
        .wait_for(
            &format!("functions/{name}"),
            "phase",
            &["Failed", "Ready"],
            within,
        )
        .await;
    assert_eq!(function["phase"], "Failed", "{function}");
    function
}

fn first_line(message: &Value) -> &str {
    message.as_str().unwrap_or_default().lines().next().unwrap()
}

#[tokio::test]
async fn a_failed_build_answers_with_the_error_lines_of_the_build() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let api = Api::new(&server, "grace");
    api.create_and_upload(
        json!({"name": "nopkg", "runtime": "python3.11", "timeout_sec": 5}),
        &[
            ("handler.py", b"def handle(event):\n    return 'up'\n"),
            ("requirements.txt", b"sless-no-such-package==9.9.9\n"),
        ],
    )
    .await;
    let function = failed(&api, "nopkg", Duration::from_secs(120)).await;
    // pip's own words, not the build log's first line (`[...] fetching ...`).
    let cause = first_line(&function["message"]);
    assert!(
        cause.contains("ERROR: No matching distribution found for sless-no-such-package"),
        "{function}"
    );
    assert_no_server_path(&server, cause);

    let (status, body) = api.answer_saying("nopkg", "failed to build").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(
        error(&body),
        format!("function \"nopkg\" failed to build: {cause}")
    );
}

#[tokio::test]
async fn a_build_without_error_lines_answers_with_its_last_line() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let api = Api::new(&server, "ivan");
    let broken_go = b"package handler\n\nfunc Handle(event map[string]any) (any, error) {\n\treturn undefinedName, nil\n}\n";
    api.create_and_upload(
        json!({"name": "gobroken", "runtime": "go1.23", "timeout_sec": 5}),
        &[("handler.go", broken_go)],
    )
    .await;
    failed(&api, "gobroken", Duration::from_secs(180)).await;
    let (status, body) = api.answer_saying("gobroken", "failed to build").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let text = error(&body);
    assert!(
        text.starts_with("function \"gobroken\" failed to build: ")
            && text.contains("undefinedName"),
        "{text}"
    );
    assert_no_server_path(&server, text);
}

/// A handler that does not load: `/fn` answers the runtime's report of it and the
/// status says it is restarting, with the same cause.
async fn assert_did_not_start(api: &Api<'_>, spec: Value, files: &[(&str, &[u8])], cause: &str) {
    let name = spec["name"].as_str().unwrap().to_string();
    api.create_and_upload(spec, files).await;
    let (status, body) = api.answer_saying(&name, "did not start").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let text = error(&body);
    assert!(
        text.starts_with(&format!(
            "function {name:?} did not start: cannot load handler: {cause}"
        )),
        "{text}"
    );
    assert_no_server_path(api.server, text);

    let function = failed(api, &name, Duration::from_secs(30)).await;
    let message = function["message"].as_str().unwrap();
    assert!(
        message.starts_with("restarting in ")
            && message.contains(&format!(" s: cannot load handler: {cause}")),
        "{message}"
    );
    assert!(!message.contains('\n'), "one line: {message:?}");
    assert_no_server_path(api.server, message);
}

#[tokio::test]
async fn a_handler_that_does_not_load_answers_with_the_exception() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let api = Api::new(&server, "heidi");
    let handler: &[u8] = b"def handle(event):\n    return 'up'\n";
    assert_did_not_start(
        &api,
        json!({"name": "badentry", "runtime": "python3.11", "entrypoint": "handler.nope"}),
        &[("handler.py", handler)],
        "RuntimeError: module 'handler' has no attribute 'nope'",
    )
    .await;
    assert_did_not_start(
        &api,
        json!({"name": "syntax", "runtime": "python3.11"}),
        &[("handler.py", b"def handle(event:\n    return 1\n")],
        "SyntaxError: ",
    )
    .await;
    assert_did_not_start(
        &api,
        json!({"name": "throws", "runtime": "nodejs20"}),
        &[(
            "handler.js",
            b"throw new Error('DATABASE_URL is not set');\nexports.handle = async () => 'up';\n",
        )],
        "Error: DATABASE_URL is not set",
    )
    .await;
}

#[tokio::test]
async fn a_handler_that_exits_at_import_backs_off_with_one_line_per_attempt() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let api = Api::new(&server, "judy");
    let handler = b"import json\n\nraise RuntimeError('the config is missing')\n";
    api.create_and_upload(
        json!({"name": "broken", "runtime": "python3.11", "timeout_sec": 5}),
        &[("handler.py", handler)],
    )
    .await;
    let (status, body) = api.answer_saying("broken", "did not start").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(
        error(&body),
        "function \"broken\" did not start: cannot load handler: RuntimeError: the config is \
         missing"
    );

    // The whole detail (the traceback with its paths) is in the function's logs.
    let data_dir = server.data_dir().display().to_string();
    let logs = api.get("functions/broken/logs?tail=100").await;
    let lines: Vec<&str> = logs
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["line"].as_str())
        .collect();
    assert!(
        lines.iter().any(|l| l.starts_with("Traceback")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains(&data_dir) && l.contains("handler.py")),
        "{lines:?}"
    );

    // Tried again after 1 s, then 2 s, then 4 s: one line of sless's per attempt.
    let logs = api
        .wait_until(
            "functions/broken/logs?tail=200",
            Duration::from_secs(30),
            |logs| announced(logs, " did not start: ").len() >= 3,
        )
        .await;
    let attempts = announced(&logs, " did not start: ");
    assert_eq!(delays(&attempts)[..3], [1, 2, 4], "{logs}");
    assert_kept(&attempts);
    assert_one_line_each(&logs);
}

#[tokio::test]
async fn a_crash_loop_backs_off_and_the_phase_says_so() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let api = Api::new(&server, "karl");
    // Healthy first, then a worker thread dies and takes the process with it.
    let handler = b"import os, threading, time, traceback\n\n\
def worker():\n    time.sleep(1.5)\n    try:\n        {}['db']\n    except KeyError:\n        \
traceback.print_exc()\n        os._exit(1)\n\n\
threading.Thread(target=worker, daemon=True).start()\n\n\
def handle(event):\n    return 'up'\n";
    api.create_and_upload(
        json!({"name": "crashy", "runtime": "python3.11", "timeout_sec": 5}),
        &[("handler.py", handler)],
    )
    .await;
    let logs = api
        .wait_until(
            "functions/crashy/logs?tail=200",
            Duration::from_secs(40),
            |logs| announced(logs, " crashed: ").len() >= 3,
        )
        .await;
    // 1 s doubling, each delay kept: 6 restarts in a minute at most.
    let crashes = announced(&logs, " crashed: ");
    assert_eq!(delays(&crashes)[..3], [1, 2, 4], "{logs}");
    assert_kept(&crashes);
    let line = crashes[0].1;
    assert!(
        line.contains("crashed: KeyError: 'db' (exited with exit status: 1); restarting in 1 s"),
        "{line}"
    );
    assert_one_line_each(&logs);
    // While it waits 4 s, the phase and `/fn` say so.
    let function = api.get("functions/crashy").await;
    assert_eq!(function["phase"], "Failed", "{function}");
    let message = function["message"].as_str().unwrap();
    assert!(
        message.starts_with("restarting in ")
            && message.ends_with(" s: KeyError: 'db' (exited with exit status: 1)"),
        "{message}"
    );
    let (status, body) = api
        .call_until("crashy", &json!({}), Duration::ZERO, |_| true)
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(
        error(&body).starts_with("function \"crashy\" crashed and is restarting in "),
        "{body}"
    );
}

#[tokio::test]
async fn a_call_past_its_timeout_answers_504_at_the_timeout() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let api = Api::new(&server, "lena");
    let handler = b"import time\n\ndef handle(event):\n    time.sleep(event.get('sleep', 0))\n    return 'up'\n";
    api.deploy_spec(
        json!({"name": "slow", "runtime": "python3.11", "timeout_sec": 1}),
        &[("handler.py", handler)],
    )
    .await;
    assert_eq!(api.invoke("slow", json!({})).await.0, StatusCode::OK);
    let started = Instant::now();
    let (status, body) = api
        .call_until("slow", &json!({"sleep": 5}), Duration::ZERO, |_| true)
        .await;
    let took = started.elapsed();
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{body}");
    assert_eq!(
        error(&body),
        "function \"slow\" did not answer within 1 s (its timeout_sec)"
    );
    // It comes at timeout_sec + 0.25 s; the upper bound leaves a busy test machine
    // room and still fails the old wait (timeout_sec + 2 s).
    assert!(
        took >= Duration::from_secs(1) && took <= Duration::from_millis(2400),
        "the 504 came {took:?} after the call, its timeout_sec being 1 s"
    );
}

/// sless's `[sless] version ...` lines containing `what`, with their times, oldest first.
fn announced<'a>(logs: &'a Value, what: &str) -> Vec<(&'a str, &'a str)> {
    logs.as_array()
        .unwrap()
        .iter()
        .filter_map(|l| Some((l["time"].as_str()?, l["line"].as_str()?)))
        .filter(|(_, line)| line.starts_with("[sless] version ") && line.contains(what))
        .collect()
}

/// The delays the lines announce (`...; trying again in N s`, `restarting in N s`).
fn delays(lines: &[(&str, &str)]) -> Vec<u64> {
    lines
        .iter()
        .filter_map(|(_, line)| line.rsplit_once(" in ")?.1.strip_suffix(" s")?.parse().ok())
        .collect()
}

/// Each next attempt came no sooner than the delay its line announced.
fn assert_kept(lines: &[(&str, &str)]) {
    let delays = delays(lines);
    for (pair, delay) in lines.windows(2).zip(delays) {
        let at = |time: &str| chrono::DateTime::parse_from_rfc3339(time).unwrap();
        let waited = at(pair[1].0) - at(pair[0].0);
        assert!(
            waited.num_milliseconds() >= (delay * 1000) as i64,
            "{pair:?}: announced {delay} s"
        );
    }
}

fn assert_one_line_each(logs: &Value) {
    for entry in logs.as_array().unwrap() {
        let line = entry["line"].as_str().unwrap();
        assert!(!line.contains('\n'), "one line per entry: {line:?}");
    }
}
