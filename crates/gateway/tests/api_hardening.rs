//! Hostile and racing clients against the real API (embedded store): writes that races
//! must not lose or duplicate, input bounds, and limits that keep memory bounded.

mod common;

use std::time::Duration;

use common::*;
use gateway::api::ApiConfig;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sless_core::auth::KeySource;
use sless_core::model::{Function, Kind, Phase};
use sless_core::store::modify_status;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn send(
    server: &TestServer,
    user: &User,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = server
        .client
        .request(method, server.url(path))
        .bearer_auth(&user.token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    let value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text:?}"));
    (status, value)
}

fn function(name: &str) -> Value {
    json!({"name": name, "runtime": "python3.11", "entrypoint": "handler.handle"})
}

async fn upload(server: &TestServer, user: &User, name: &str, zip: Vec<u8>) -> (StatusCode, Value) {
    let response = server
        .client
        .post(server.url(&format!(
            "/v1/namespaces/{}/functions/{name}/upload",
            user.ns
        )))
        .bearer_auth(&user.token)
        .multipart(code_form(zip))
        .send()
        .await
        .unwrap();
    (response.status(), response.json().await.unwrap())
}

/// Text that deflates only about 2:1, so big files stay under every ratio limit.
fn noisy_text(bytes: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    (0..bytes)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            b"0123456789abcdef"[(state >> 60) as usize]
        })
        .collect()
}

#[tokio::test]
async fn racing_creates_of_one_name_as_function_and_service_leave_one() {
    let server = TestServer::start().await;
    let alice = user("alice");
    let creates = (0..40).map(|i| {
        let kind = if i % 2 == 0 { "functions" } else { "services" };
        let path = format!("/v1/namespaces/{}/{kind}", alice.ns);
        let (server, alice) = (&server, &alice);
        async move { send(server, alice, Method::POST, &path, Some(function("dup"))).await }
    });
    let answers = futures::future::join_all(creates).await;
    let created = answers
        .iter()
        .filter(|(s, _)| *s == StatusCode::CREATED)
        .count();
    let conflicts = answers
        .iter()
        .filter(|(s, _)| *s == StatusCode::CONFLICT)
        .count();
    assert_eq!((created, conflicts), (1, 39), "{answers:?}");
    let mut stored = 0;
    for kind in ["functions", "services"] {
        let (_, list) = send(
            &server,
            &alice,
            Method::GET,
            &format!("/v1/namespaces/{}/{kind}", alice.ns),
            None,
        )
        .await;
        stored += list.as_array().unwrap().len();
    }
    assert_eq!(stored, 1, "exactly one resource holds the name");
}

#[tokio::test]
async fn puts_without_a_version_all_win_while_status_is_written() {
    let server = TestServer::start().await;
    let alice = user("alice");
    let base = format!("/v1/namespaces/{}/functions", alice.ns);
    let (status, _) = send(&server, &alice, Method::POST, &base, Some(function("lww"))).await;
    assert_eq!(status, StatusCode::CREATED);
    let path = format!("{base}/lww");

    // The runner's status writes go on meanwhile.
    let store = server.store.clone();
    let ns = alice.ns.clone();
    let status_writer = tokio::spawn(async move {
        for i in 0..200 {
            modify_status::<Function, _>(&*store, &ns, "lww", |o| {
                o.status.message = Some(format!("status write {i}"));
            })
            .await
            .unwrap();
        }
    });
    let puts = (0..30).map(|i| {
        let mut body = function("lww");
        body["memory_mb"] = json!(128 + i);
        let (server, alice, path) = (&server, &alice, &path);
        async move { send(server, alice, Method::PUT, path, Some(body)).await }
    });
    let answers = futures::future::join_all(puts).await;
    for (status, body) in &answers {
        assert_eq!(*status, StatusCode::OK, "{body}");
    }
    status_writer.await.unwrap();
    let (_, stored) = send(&server, &alice, Method::GET, &path, None).await;
    let memory = stored["memory_mb"].as_u64().unwrap();
    assert!(
        (128..158).contains(&memory),
        "one of the writers won: {memory}"
    );
}

#[tokio::test]
async fn concurrent_trigger_patches_never_conflict() {
    let server = TestServer::start().await;
    let alice = user("alice");
    let ns = &alice.ns;
    send(
        &server,
        &alice,
        Method::POST,
        &format!("/v1/namespaces/{ns}/functions"),
        Some(function("f")),
    )
    .await;
    let (status, _) = send(
        &server,
        &alice,
        Method::POST,
        &format!("/v1/namespaces/{ns}/triggers"),
        Some(json!({"name": "t", "type": "http", "function_ref": "f"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let path = format!("/v1/namespaces/{ns}/triggers/t");
    let patches = (0..30).map(|i| {
        let (server, alice, path) = (&server, &alice, &path);
        async move {
            send(
                server,
                alice,
                Method::PATCH,
                path,
                Some(json!({"enabled": i % 2 == 0})),
            )
            .await
        }
    });
    for (status, body) in futures::future::join_all(patches).await {
        assert_eq!(status, StatusCode::OK, "{body}");
    }
}

#[tokio::test]
async fn an_http_trigger_of_a_ready_function_answers_with_its_url() {
    let config = ApiConfig {
        external_url: Some("https://fn.example.test/".into()),
        ..ApiConfig::default()
    };
    let server = TestServer::start_with(config, KeySource::Hs256Secret(SECRET.to_vec())).await;
    let alice = user("alice");
    let ns = &alice.ns;
    for name in ["ready", "pending"] {
        send(
            &server,
            &alice,
            Method::POST,
            &format!("/v1/namespaces/{ns}/functions"),
            Some(function(name)),
        )
        .await;
    }
    modify_status::<Function, _>(&*server.store, ns, "ready", |o| {
        o.status.phase = Phase::Ready;
    })
    .await
    .unwrap();
    let triggers = format!("/v1/namespaces/{ns}/triggers");
    let (status, created) = send(
        &server,
        &alice,
        Method::POST,
        &triggers,
        Some(json!({"name": "web", "type": "http", "function_ref": "ready"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(
        created["url"],
        format!("https://fn.example.test/fn/{ns}/ready"),
        "{created}"
    );
    // Not Ready yet: the runner fills it in later.
    let (_, created) = send(
        &server,
        &alice,
        Method::POST,
        &triggers,
        Some(json!({"name": "later", "type": "http", "function_ref": "pending"})),
    )
    .await;
    assert_eq!(created["url"], Value::Null, "{created}");
}

#[tokio::test]
async fn input_bounds_are_400_with_the_field_named() {
    let server = TestServer::start().await;
    let alice = user("alice");
    let ns = &alice.ns;
    let functions = format!("/v1/namespaces/{ns}/functions");

    let mut body = function("nul");
    body["env_vars"] = json!({"TOKEN": "abc\u{0}def"});
    let (status, answer) = send(&server, &alice, Method::POST, &functions, Some(body)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    let error = answer["error"].as_str().unwrap();
    assert!(
        error.starts_with("env_vars:") && error.contains("NUL"),
        "{error}"
    );

    let event = json!({"data": "x".repeat(200 * 1024)}).to_string();
    let (status, answer) = send(
        &server,
        &alice,
        Method::POST,
        &format!("/v1/namespaces/{ns}/jobs"),
        Some(json!({"name": "big", "runtime": "python3.11", "event_json": event})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().starts_with("event_json:"),
        "{answer}"
    );

    send(
        &server,
        &alice,
        Method::POST,
        &functions,
        Some(function("f")),
    )
    .await;
    for query in ["tail=-1", "tail=many"] {
        for what in ["logs", "invocations"] {
            let (status, answer) = send(
                &server,
                &alice,
                Method::GET,
                &format!("{functions}/f/{what}?{query}"),
                None,
            )
            .await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{what}?{query}: {answer}");
            assert!(
                answer["error"].as_str().unwrap().contains("tail"),
                "{answer}"
            );
        }
    }

    let long = format!("{}handler.py", "dir/".repeat(1500));
    let (status, answer) = upload(&server, &alice, "f", zip_of(&[(&long, b"x = 1\n")])).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("limit of 1024"),
        "{answer}"
    );
}

#[tokio::test]
async fn a_zip_of_many_small_bombs_is_refused_by_the_archive_ratio() {
    let server = TestServer::start().await;
    let alice = user("alice");
    send(
        &server,
        &alice,
        Method::POST,
        &format!("/v1/namespaces/{}/functions", alice.ns),
        Some(function("bomb")),
    )
    .await;
    // 240 entries of 1 MiB: each is under the per-entry check.
    let data = vec![b'a'; 1024 * 1024];
    let names: Vec<String> = (0..240).map(|i| format!("f{i}.txt")).collect();
    let entries: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &data[..])).collect();
    let zip = zip_of(&entries);
    assert!(zip.len() < 3 * 1024 * 1024, "{}", zip.len());
    let (status, answer) = upload(&server, &alice, "bomb", zip).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    let error = answer["error"].as_str().unwrap();
    assert!(error.contains("allowed ratio of 100:1"), "{error}");
}

/// GETs `path` until `done` holds (within 90 s); the last answer.
async fn poll(
    server: &TestServer,
    user: &User,
    path: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let (_, value) = send(server, user, Method::GET, path, None).await;
        if done(&value) {
            return value;
        }
        assert!(tokio::time::Instant::now() < deadline, "{path}: {value}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_runaway_stderr_line_is_cut_at_16_kib() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let alice = user("alice");
    let ns = &alice.ns;
    send(
        &server,
        &alice,
        Method::POST,
        &format!("/v1/namespaces/{ns}/functions"),
        Some(function("noisy")),
    )
    .await;
    send(
        &server,
        &alice,
        Method::POST,
        &format!("/v1/namespaces/{ns}/triggers"),
        Some(json!({"name": "web", "type": "http", "function_ref": "noisy"})),
    )
    .await;
    // 64 MiB without a newline, then a short line.
    let handler = br#"import sys

def handle(event):
    chunk = 'x' * (1 << 20)
    for _ in range(64):
        sys.stderr.write(chunk)
    sys.stderr.write('\nafter\n')
    sys.stderr.flush()
    return 'ok'
"#;
    let (status, answer) =
        upload(&server, &alice, "noisy", zip_of(&[("handler.py", handler)])).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let function = format!("/v1/namespaces/{ns}/functions/noisy");
    let ready = poll(&server, &alice, &function, |f| f["phase"] != "Building").await;
    assert_eq!(ready["phase"], "Ready", "{ready}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let response = server
            .client
            .post(server.url(&format!("/fn/{ns}/noisy")))
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        if response.status() == StatusCode::OK {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}",
            response.status()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let logs = poll(
        &server,
        &alice,
        &format!("{function}/logs?tail=50"),
        |logs| {
            logs.as_array()
                .unwrap()
                .iter()
                .any(|l| l["line"] == "after")
        },
    )
    .await;
    let lines = logs.as_array().unwrap();
    let cut: Vec<&Value> = lines
        .iter()
        .filter(|l| l["line"].as_str().unwrap().starts_with("xxx"))
        .collect();
    assert_eq!(cut.len(), 1, "one cut line, the rest skipped");
    let line = cut[0]["line"].as_str().unwrap();
    // 16 KiB as printed, the runtime's call tag (`[<request id>] `) included.
    assert!(
        (16 * 1024 - 100..=16 * 1024).contains(&line.len()),
        "{}",
        line.len()
    );
    assert!(
        line.ends_with("[line truncated]"),
        "{}",
        &line[line.len() - 40..]
    );
    assert_eq!(cut[0]["stream"], "stderr");
}

/// Sends `head` on a fresh connection and returns what the server answers within 5 s
/// without the client sending a byte of body.
async fn answer_to_headers_only(server: &TestServer, head: &str) -> String {
    let address = server.base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !String::from_utf8_lossy(&answer).contains("\"error\"") {
        match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
            Ok(Ok(0)) | Err(_) => break,
            Ok(Ok(n)) => answer.extend_from_slice(&chunk[..n]),
            Ok(Err(e)) => panic!("reading the answer: {e}"),
        }
    }
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn an_oversize_content_length_gets_413_before_any_body_byte() {
    let server = TestServer::start().await;
    let alice = user("alice");
    send(
        &server,
        &alice,
        Method::POST,
        &format!("/v1/namespaces/{}/functions", alice.ns),
        Some(function("f")),
    )
    .await;
    for expect in ["", "Expect: 100-continue\r\n"] {
        let head = format!(
            "POST /v1/namespaces/{}/functions/f/upload HTTP/1.1\r\nHost: sless\r\n\
             Authorization: Bearer {}\r\n\
             Content-Type: multipart/form-data; boundary=b\r\n\
             Content-Length: 10737418240\r\n{expect}\r\n",
            alice.ns, alice.token
        );
        let answer = answer_to_headers_only(&server, &head).await;
        assert!(
            answer.starts_with("HTTP/1.1 413"),
            "{expect:?}: answered {answer:?}"
        );
        assert!(!answer.contains("100 Continue"), "{answer}");
        assert!(answer.contains("limit of 50 MiB"), "{answer}");
    }
}

#[tokio::test]
async fn a_source_listing_holds_at_most_its_cap() {
    let config = ApiConfig {
        max_source_answer_bytes: 2 * 1024 * 1024,
        ..ApiConfig::default()
    };
    let server = TestServer::start_with(config, KeySource::Hs256Secret(SECRET.to_vec())).await;
    let alice = user("alice");
    send(
        &server,
        &alice,
        Method::POST,
        &format!("/v1/namespaces/{}/functions", alice.ns),
        Some(function("big")),
    )
    .await;
    let files: Vec<(String, Vec<u8>)> = (0..6)
        .map(|i| (format!("data{i}.txt"), noisy_text(1024 * 1024, i)))
        .collect();
    let entries: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(n, d)| (n.as_str(), d.as_slice()))
        .collect();
    let (status, answer) = upload(&server, &alice, "big", zip_of(&entries)).await;
    assert_eq!(status, StatusCode::OK, "{answer}");

    let (status, listing) = send(
        &server,
        &alice,
        Method::GET,
        &format!("/v1/namespaces/{}/functions/big/source", alice.ns),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let listing = listing.as_array().unwrap();
    assert_eq!(listing.len(), 6, "every file is listed");
    let held: usize = listing
        .iter()
        .map(|f| f["content"].as_str().map_or(0, str::len))
        .sum();
    assert_eq!(held, 2 * 1024 * 1024, "content stops at the cap");
    assert_eq!(
        listing[0]["content"].as_str().unwrap().as_bytes(),
        files[0].1.as_slice()
    );
    for file in &listing[2..] {
        assert_eq!(file["truncated"], true, "{}", file["name"]);
        assert_eq!(file["size"], 1024 * 1024);
    }
}

/// A stored object that no longer decodes is the server's fault: the caller gets a 500
/// that names a request id (its own `X-Request-Id` when it is a sane one), never the
/// detail, which goes to the log under the same id.
#[tokio::test]
async fn an_internal_error_shows_the_caller_an_id_not_the_detail() {
    let server = TestServer::start().await;
    let alice = user("alice");
    let functions = format!("/v1/namespaces/{}/functions", alice.ns);
    let (status, answer) = send(
        &server,
        &alice,
        Method::POST,
        &functions,
        Some(function("broken")),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let mut raw = server
        .store
        .get(Kind::Function, &alice.ns, "broken")
        .await
        .unwrap()
        .unwrap();
    raw.spec = json!("secret-detail: not a spec");
    server.store.update(&raw).await.unwrap();

    let get = |path: String, request_id: Option<String>| {
        let mut request = server
            .client
            .get(server.url(&path))
            .bearer_auth(&alice.token);
        if let Some(id) = request_id {
            request = request.header("X-Request-Id", id);
        }
        async move {
            let response = request.send().await.unwrap();
            let status = response.status();
            let id = response
                .headers()
                .get("x-request-id")
                .map(|v| v.to_str().unwrap().to_string());
            (status, id, response.text().await.unwrap())
        }
    };
    let broken = format!("{functions}/broken");

    let (status, id, body) = get(broken.clone(), Some("case-42.a_B".into())).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(id.as_deref(), Some("case-42.a_B"));
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({"error": "internal error (id case-42.a_B)"})
    );

    // No id, or one that is not 1-64 of [A-Za-z0-9._-]: a fresh one, the same in both.
    for given in [None, Some("has space".into()), Some("x".repeat(65))] {
        let (status, id, body) = get(broken.clone(), given.clone()).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{given:?}");
        let id = id.unwrap();
        assert_eq!(id.len(), 16, "{id}");
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        assert_eq!(body, format!(r#"{{"error":"internal error (id {id})"}}"#));
    }

    // The listing reads the same object; caller-facing errors keep their text.
    let (status, _, body) = get(functions.clone(), None).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        !body.contains("secret") && !body.contains("cannot be read"),
        "{body}"
    );
    let (status, id, body) = get(format!("{functions}/missing"), Some("r1".into())).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(id.as_deref(), Some("r1"));
    assert!(body.contains(r#"function \"missing\" not found"#), "{body}");
}

/// Peak resident memory of this process since the last reset, in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
}

fn reset_peak_rss() {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
}

/// Mostly one letter with a random one every 24 bytes: deflates about 40:1, under the
/// archive-wide ratio.
fn sparse_text(bytes: usize, seed: u64) -> Vec<u8> {
    let noise = noisy_text(bytes / 24 + 1, seed);
    (0..bytes)
        .map(|i| if i % 24 == 0 { noise[i / 24] } else { b'a' })
        .collect()
}

/// 7 concurrent uploads of `zip`; returns the peak RSS growth in MiB.
async fn upload_seven(server: &TestServer, alice: &User, zip: &[u8], expected: StatusCode) -> u64 {
    let bodies: Vec<Vec<u8>> = (0..7).map(|_| zip.to_vec()).collect();
    reset_peak_rss();
    let before = peak_rss();
    let uploads = bodies
        .into_iter()
        .enumerate()
        .map(|(i, zip)| async move { upload(server, alice, &format!("m{i}"), zip).await });
    for (status, answer) in futures::future::join_all(uploads).await {
        assert_eq!(status, expected, "{answer}");
    }
    peak_rss().saturating_sub(before) >> 20
}

fn two_hundred_forty_files(file: &[u8]) -> Vec<u8> {
    let names: Vec<String> = (0..240).map(|i| format!("f{i}.txt")).collect();
    let entries: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), file)).collect();
    zip_of(&entries)
}

async fn create_functions(server: &TestServer, alice: &User, count: usize) {
    for i in 0..count {
        send(
            server,
            alice,
            Method::POST,
            &format!("/v1/namespaces/{}/functions", alice.ns),
            Some(function(&format!("m{i}"))),
        )
        .await;
    }
}

/// A measurement, not a check: `cargo test --test api_hardening -- --ignored
/// --nocapture memory`. Prints the peak RSS growth (client included) of 7 concurrent
/// uploads of 240 files of 1 MiB, refused and accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn memory_of_concurrent_uploads() {
    let server = TestServer::start().await;
    let alice = user("alice");
    create_functions(&server, &alice, 7).await;
    let bomb = two_hundred_forty_files(&vec![b'a'; 1024 * 1024]);
    let growth = upload_seven(&server, &alice, &bomb, StatusCode::BAD_REQUEST).await;
    println!(
        "7 concurrent uploads of a {} KiB zip of 240 x 1 MiB (refused): peak RSS growth {growth} MiB",
        bomb.len() >> 10
    );
    let accepted = two_hundred_forty_files(&sparse_text(1024 * 1024, 7));
    let growth = upload_seven(&server, &alice, &accepted, StatusCode::OK).await;
    println!(
        "7 concurrent uploads of a {} KiB zip of 240 x 1 MiB (accepted): peak RSS growth {growth} MiB",
        accepted.len() >> 10
    );
}

/// A measurement, not a check (see above): 16 concurrent source listings of an upload
/// of 240 files of 1 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn memory_of_concurrent_source_listings() {
    let server = TestServer::start().await;
    let alice = user("alice");
    create_functions(&server, &alice, 1).await;
    let zip = two_hundred_forty_files(&sparse_text(1024 * 1024, 7));
    let (status, answer) = upload(&server, &alice, "m0", zip).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let path = format!("/v1/namespaces/{}/functions/m0/source", alice.ns);
    reset_peak_rss();
    let before = peak_rss();
    let listings = (0..16).map(|_| async {
        let mut response = server
            .client
            .get(server.url(&path))
            .bearer_auth(&alice.token)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let mut size = 0;
        while let Some(chunk) = response.chunk().await.unwrap() {
            size += chunk.len();
        }
        size
    });
    let sizes = futures::future::join_all(listings).await;
    let growth = peak_rss().saturating_sub(before) >> 20;
    println!(
        "16 concurrent source listings ({} KiB answers): peak RSS growth {growth} MiB",
        sizes[0] >> 10
    );
}
