//! Logs tied to calls: each line a handler prints carries its call's request id, so a
//! call's record shows its lines (and no other call's), logs filter by call and text,
//! and a follower gets new lines as they are printed.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sless_client::client::Kind;
use sless_client::client::{Client, Followed, LogFilter};

/// Prints three lines, an unended one and a stderr line, with pauses so that calls in
/// flight together interleave their output.
const PYTHON: &[u8] = br#"import sys, time
print("loading")
def handle(event):
    n = event["n"]
    for i in range(3):
        print(f"mark {n} line {i}")
        time.sleep(0.01)
    print(f"unended {n}", end="")
    sys.stderr.write(f"err {n}\n")
    return {"n": n}
"#;

const NODE: &[u8] = br#"console.log("loading");
exports.handle = async (event) => {
  const n = event.n;
  for (let i = 0; i < 3; i++) {
    console.log(`mark ${n} line ${i}`);
    await new Promise((r) => setTimeout(r, 10));
  }
  process.stdout.write(`unended ${n}`);
  console.error(`err ${n}`);
  return { n };
};
"#;

fn expected_lines(n: usize) -> BTreeSet<String> {
    [
        format!("mark {n} line 0"),
        format!("mark {n} line 1"),
        format!("mark {n} line 2"),
        format!("unended {n}"),
        format!("err {n}"),
    ]
    .into_iter()
    .collect()
}

/// 64 calls at once; each call's record lists exactly the lines it printed.
async fn calls_keep_their_own_lines(runtime: &str, handler: (&str, &[u8])) {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let api = common::api::Api::new(&server, "calllogs");
    api.deploy_spec(json!({"name": "talk", "runtime": runtime}), &[handler])
        .await;
    api.invoke("talk", json!({"n": 1000})).await;

    let calls = (0..64).map(|n| {
        let api = &api;
        async move {
            api.call_as("talk", &format!("c-{n}"), &json!({"n": n}))
                .await
        }
    });
    for status in futures::future::join_all(calls).await {
        assert_eq!(status, StatusCode::OK);
    }
    for n in 0..64 {
        let record = api.get(&format!("functions/talk/invocations/c-{n}")).await;
        assert_eq!(record["request_id"], format!("c-{n}"), "{record}");
        let lines: BTreeSet<String> = record["logs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                assert_eq!(l["request_id"], format!("c-{n}"), "{l}");
                l["line"].as_str().unwrap().to_string()
            })
            .collect();
        assert_eq!(lines, expected_lines(n), "{runtime} call {n}: {record}");
    }
    // Lines printed outside a call belong to none, and read without a tag.
    let all = api.get("functions/talk/logs?tail=1000").await;
    let loading = all
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["line"] == "loading")
        .unwrap_or_else(|| panic!("{all}"));
    assert_eq!(loading["request_id"], Value::Null);
}

#[tokio::test]
async fn python_calls_keep_their_own_lines() {
    calls_keep_their_own_lines("python3.11", ("handler.py", PYTHON)).await;
}

#[tokio::test]
async fn node_calls_keep_their_own_lines() {
    calls_keep_their_own_lines("nodejs20", ("handler.js", NODE)).await;
}

#[tokio::test]
async fn logs_filter_by_call_and_text_and_can_be_followed() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let api = common::api::Api::new(&server, "followlogs");
    api.deploy_spec(
        json!({"name": "talk", "runtime": "python3.11"}),
        &[("handler.py", PYTHON)],
    )
    .await;
    assert_eq!(
        api.call_as("talk", "first", &json!({"n": 1})).await,
        StatusCode::OK
    );
    assert_eq!(
        api.call_as("talk", "second", &json!({"n": 2})).await,
        StatusCode::OK
    );

    let client = Client::for_namespace(&server.base, &api.user.token, &api.user.ns).unwrap();
    let texts = |lines: Vec<sless_api::LogLineResponse>| -> Vec<String> {
        lines.into_iter().map(|l| l.line).collect()
    };
    let second = LogFilter {
        tail: 100,
        request_id: Some("second".into()),
        search: None,
    };
    let found = texts(
        client
            .find_logs(Kind::Function, "talk", &second)
            .await
            .unwrap(),
    );
    assert_eq!(
        found.iter().cloned().collect::<BTreeSet<_>>(),
        expected_lines(2)
    );
    let search = LogFilter {
        tail: 100,
        request_id: None,
        search: Some("MARK 1 LINE".into()),
    };
    let found = texts(
        client
            .find_logs(Kind::Function, "talk", &search)
            .await
            .unwrap(),
    );
    assert_eq!(found, ["mark 1 line 0", "mark 1 line 1", "mark 1 line 2"]);

    // Bad filters are refused with what to send instead.
    let (status, body) = api
        .send(
            reqwest::Method::GET,
            "functions/talk/logs?request_id=a%20b",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("request_id"),
        "{body}"
    );
    let long = "x".repeat(300);
    let (status, body) = api
        .send(
            reqwest::Method::GET,
            &format!("functions/talk/logs?q={long}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    // A follower of one call's lines gets each new line of that call as it is printed
    // (each within 5 s: a busy test machine is slow, the stream is not), and nothing of
    // other calls.
    let third = LogFilter {
        tail: 100,
        request_id: Some("third".into()),
        search: None,
    };
    let mut stream = std::pin::pin!(
        client
            .follow_logs(Kind::Function, "talk", &third)
            .await
            .unwrap()
    );
    assert_eq!(
        api.call_as("talk", "other", &json!({"n": 4})).await,
        StatusCode::OK
    );
    assert_eq!(
        api.call_as("talk", "third", &json!({"n": 3})).await,
        StatusCode::OK
    );
    let mut seen = BTreeSet::new();
    while seen.len() < 5 {
        let next = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("a line within 5 s")
            .expect("the stream stays open")
            .unwrap();
        let Followed::Line(line) = next else {
            panic!("no line may be missed: {next:?}")
        };
        assert_eq!(line.request_id.as_deref(), Some("third"), "{line:?}");
        seen.insert(line.line);
    }
    assert_eq!(seen, expected_lines(3));
}

#[tokio::test]
async fn followers_per_namespace_are_bounded() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let api = common::api::Api::new(&server, "manyfollowers");
    api.deploy_spec(
        json!({"name": "talk", "runtime": "python3.11"}),
        &[("handler.py", PYTHON)],
    )
    .await;
    let client = Client::for_namespace(&server.base, &api.user.token, &api.user.ns).unwrap();
    let mut open = Vec::new();
    for _ in 0..8 {
        open.push(
            client
                .follow_logs(Kind::Function, "talk", &LogFilter::tail(1))
                .await
                .unwrap(),
        );
    }
    let refused = client
        .follow_logs(Kind::Function, "talk", &LogFilter::tail(1))
        .await
        .err()
        .expect("a ninth follower is refused");
    assert_eq!(refused.status(), Some(429), "{refused}");
    assert!(
        refused.to_string().contains("--max-log-followers"),
        "{refused}"
    );
    // A closed follower frees its place (once the server notices: at the latest at the
    // next keep-alive it writes, every 15 s).
    drop(open.pop());
    let mut reopened = None;
    for _ in 0..250 {
        match client
            .follow_logs(Kind::Function, "talk", &LogFilter::tail(1))
            .await
        {
            Ok(stream) => {
                reopened = Some(stream);
                break;
            }
            Err(e) if e.status() == Some(429) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        reopened.is_some(),
        "the place of a closed follower comes back"
    );
}
