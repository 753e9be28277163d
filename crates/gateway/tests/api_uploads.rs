//! Uploads over HTTP: validation, the stored objects, build contexts, source listings.

mod common;

use common::*;
use gateway::api::ApiConfig;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sless_core::auth::KeySource;

async fn create(server: &TestServer, user: &User, kind: &str, name: &str, runtime: &str) {
    let response = server
        .client
        .post(server.url(&format!("/v1/namespaces/{}/{kind}", user.ns)))
        .bearer_auth(&user.token)
        .json(&json!({"name": name, "runtime": runtime}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
}

async fn upload(server: &TestServer, user: &User, path: &str, zip: Vec<u8>) -> (StatusCode, Value) {
    let response = server
        .client
        .post(server.url(&format!("/v1/namespaces/{}/{path}/upload", user.ns)))
        .bearer_auth(&user.token)
        .multipart(code_form(zip))
        .send()
        .await
        .unwrap();
    (response.status(), response.json().await.unwrap())
}

async fn source(server: &TestServer, user: &User, path: &str) -> Value {
    let response = server
        .client
        .get(server.url(&format!("/v1/namespaces/{}/{path}/source", user.ns)))
        .bearer_auth(&user.token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    response.json().await.unwrap()
}

/// Name, runtime, files, and the dependency step the Dockerfile must carry.
type DockerfileCase<'a> = (&'a str, &'a str, &'a [(&'a str, &'a [u8])], Option<&'a str>);

fn dockerfile_of(context: &[u8]) -> String {
    let files = untar(context);
    assert_eq!(files[0].0, "Dockerfile", "the Dockerfile comes first");
    String::from_utf8(files[0].1.clone()).unwrap()
}

#[tokio::test]
async fn upload_stores_zip_and_context_and_sets_building() {
    let server = TestServer::start().await;
    let alice = user("alice");
    create(&server, &alice, "functions", "hello", "python3.11").await;
    let zip = zip_of(&[
        (
            "handler.py",
            b"def handle(event):\n    return {'ok': True}\n",
        ),
        ("requirements.txt", b"six==1.16.0\n"),
        ("lib/util.py", b"X = 1\n"),
    ]);
    let (status, body) = upload(&server, &alice, "functions/hello", zip.clone()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["phase"], "Building");
    let context_key = body["s3_key"].as_str().unwrap().to_string();
    let prefix = format!("contexts/{}/hello/", alice.ns);
    assert!(
        context_key.starts_with(&prefix) && context_key.ends_with(".tar.gz"),
        "{context_key}"
    );
    let version = &context_key[prefix.len()..context_key.len() - ".tar.gz".len()];
    assert_eq!(version.len(), 14, "version is YYYYMMDDhhmmss: {version}");
    assert!(version.chars().all(|c| c.is_ascii_digit()));

    // Both objects, read back through the S3 API.
    let zip_key = format!("functions/{}/hello/{version}.zip", alice.ns);
    let stored_zip = server
        .objects
        .get(&zip_key)
        .await
        .unwrap()
        .expect("zip stored");
    assert_eq!(
        stored_zip.as_ref(),
        zip.as_slice(),
        "the zip is stored as uploaded"
    );
    let head = server
        .objects
        .client()
        .head_object()
        .bucket("sless")
        .key(&context_key)
        .send()
        .await
        .unwrap();
    assert!(head.content_length().unwrap() > 0);
    let context = server.objects.get(&context_key).await.unwrap().unwrap();
    let dockerfile = dockerfile_of(&context);
    assert!(
        dockerfile.starts_with("FROM sless/runtime-python3.11:v"),
        "{dockerfile}"
    );
    assert!(!dockerfile.contains("latest"));
    assert!(dockerfile.contains("COPY . /app/function/"));
    assert!(dockerfile.contains("pip install --no-cache-dir -r requirements.txt"));
    let names: Vec<_> = untar(&context).into_iter().map(|(n, _)| n).collect();
    assert!(names.contains(&"lib/util.py".to_string()), "{names:?}");

    let files = source(&server, &alice, "functions/hello").await;
    let names: Vec<_> = files
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["handler.py", "requirements.txt", "lib/util.py"]);
    assert_eq!(
        files[0]["content"],
        "def handle(event):\n    return {'ok': True}\n"
    );

    // Other code uploaded in the same second gets its own version; the same zip again
    // is the same version (tests/versions.rs).
    let other = zip_of(&[("handler.py", b"def handle(event):\n    return 2\n")]);
    let (_, again) = upload(&server, &alice, "functions/hello", other).await;
    assert_ne!(again["s3_key"], body["s3_key"]);
}

#[tokio::test]
async fn dockerfile_per_runtime_with_and_without_dependencies() {
    let server = TestServer::start().await;
    let alice = user("alice");
    let cases: [DockerfileCase; 6] = [
        (
            "py-plain",
            "python3.11",
            &[("handler.py", b"def handle(e): return e")],
            None,
        ),
        (
            "py-deps",
            "python3.11",
            &[("handler.py", b"x"), ("requirements.txt", b"six")],
            Some("pip install --no-cache-dir -r requirements.txt"),
        ),
        (
            "js-plain",
            "nodejs20",
            &[("handler.js", b"exports.handle = e => e")],
            None,
        ),
        (
            "js-deps",
            "nodejs20",
            &[("handler.js", b"x"), ("package.json", b"{}")],
            Some("npm install --omit=dev"),
        ),
        (
            "go-plain",
            "go1.23",
            &[("handler.go", b"package handler")],
            None,
        ),
        (
            "go-deps",
            "go1.23",
            &[("handler.go", b"package handler"), ("go.mod", b"module x")],
            Some("go mod download"),
        ),
    ];
    for (name, runtime, files, step) in cases {
        create(&server, &alice, "services", name, runtime).await;
        let (status, body) =
            upload(&server, &alice, &format!("services/{name}"), zip_of(files)).await;
        assert_eq!(status, StatusCode::OK, "{name}: {body}");
        let context = server
            .objects
            .get(body["s3_key"].as_str().unwrap())
            .await
            .unwrap()
            .unwrap();
        let dockerfile = dockerfile_of(&context);
        assert!(
            dockerfile.starts_with(&format!("FROM sless/runtime-{runtime}:v")),
            "{dockerfile}"
        );
        for dependency_step in ["pip install", "npm install", "go mod download"] {
            let expected = step.is_some_and(|s| s.contains(dependency_step));
            assert_eq!(
                dockerfile.contains(dependency_step),
                expected,
                "{name}: {dockerfile}"
            );
        }
        let listed = source(&server, &alice, &format!("services/{name}")).await;
        assert!(
            listed
                .as_array()
                .unwrap()
                .iter()
                .all(|f| f["name"] != "Dockerfile")
        );
    }
}

#[tokio::test]
async fn bad_uploads_keep_the_previous_code() {
    let limits = sless_core::upload::UploadLimits {
        max_zip_bytes: 2 * 1024 * 1024,
        max_uncompressed_bytes: 8 * 1024 * 1024,
        ..Default::default()
    };
    let config = ApiConfig {
        upload_limits: limits,
        ..ApiConfig::default()
    };
    let server = TestServer::start_with(config, KeySource::Hs256Secret(SECRET.to_vec())).await;
    let alice = user("alice");
    create(&server, &alice, "functions", "safe", "python3.11").await;
    let good = zip_of(&[("handler.py", b"def handle(e): return 'v1'")]);
    let (_, first) = upload(&server, &alice, "functions/safe", good).await;
    let key = first["s3_key"].clone();

    let symlink_zip = {
        use std::io::Write;
        let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        writer
            .start_file("handler.py", zip::write::SimpleFileOptions::default())
            .unwrap();
        writer.write_all(b"x").unwrap();
        writer
            .add_symlink(
                "link",
                "/etc/passwd",
                zip::write::SimpleFileOptions::default(),
            )
            .unwrap();
        writer.finish().unwrap().into_inner()
    };
    let bomb = {
        use std::io::Write;
        let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        writer
            .start_file("zeros.bin", zip::write::SimpleFileOptions::default())
            .unwrap();
        let block = vec![0u8; 1024 * 1024];
        for _ in 0..20 {
            writer.write_all(&block).unwrap();
        }
        writer.finish().unwrap().into_inner()
    };
    assert!(bomb.len() < 100 * 1024, "the bomb is small: {}", bomb.len());
    let oversized = vec![7u8; 3 * 1024 * 1024];

    let cases: Vec<(&str, Vec<u8>, StatusCode, &str)> = vec![
        (
            "not a zip",
            b"plain text, no zip".to_vec(),
            StatusCode::BAD_REQUEST,
            "zip",
        ),
        (
            "zip-slip",
            zip_of(&[("../evil.py", b"x")]),
            StatusCode::BAD_REQUEST,
            "../evil.py",
        ),
        (
            "absolute",
            zip_of(&[("/etc/cron.d/x", b"x")]),
            StatusCode::BAD_REQUEST,
            "/etc/cron.d/x",
        ),
        ("symlink", symlink_zip, StatusCode::BAD_REQUEST, "link"),
        ("bomb", bomb, StatusCode::PAYLOAD_TOO_LARGE, "MiB"),
        (
            "oversized",
            oversized,
            StatusCode::PAYLOAD_TOO_LARGE,
            "limit",
        ),
    ];
    for (case, zip, expected, needle) in cases {
        let (status, body) = upload(&server, &alice, "functions/safe", zip).await;
        assert_eq!(status, expected, "{case}: {body}");
        let message = body["error"].as_str().unwrap();
        assert!(message.contains(needle), "{case}: {message}");
    }

    let response = server
        .client
        .post(server.url(&format!(
            "/v1/namespaces/{}/functions/safe/upload",
            alice.ns
        )))
        .bearer_auth(&alice.token)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);

    let response = server
        .client
        .get(server.url(&format!("/v1/namespaces/{}/functions/safe", alice.ns)))
        .bearer_auth(&alice.token)
        .send()
        .await
        .unwrap();
    let current: Value = response.json().await.unwrap();
    assert_eq!(
        current["s3_key"], key,
        "the previous code is still in place"
    );
    let files = source(&server, &alice, "functions/safe").await;
    assert_eq!(files[0]["content"], "def handle(e): return 'v1'");
    let stored = server
        .objects
        .list(&format!("functions/{}/safe/", alice.ns))
        .await
        .unwrap();
    assert_eq!(
        stored.len(),
        1,
        "no object from a refused upload: {stored:?}"
    );
}

#[tokio::test]
async fn source_flags_binary_and_truncated_files() {
    let limits = ApiConfig {
        max_source_file_bytes: 1000,
        ..ApiConfig::default()
    };
    let server = TestServer::start_with(limits, KeySource::Hs256Secret(SECRET.to_vec())).await;
    let alice = user("alice");
    create(&server, &alice, "functions", "mixed", "python3.11").await;
    let big = "x".repeat(5000);
    let zip = zip_of(&[
        ("handler.py", b"def handle(e): return e"),
        ("logo.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"),
        ("big.txt", big.as_bytes()),
        ("empty.txt", b""),
    ]);
    upload(&server, &alice, "functions/mixed", zip).await;
    let files = source(&server, &alice, "functions/mixed").await;
    let by_name = |n: &str| {
        files
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == n)
            .unwrap()
            .clone()
    };
    assert_eq!(by_name("logo.png")["binary"], true);
    assert_eq!(by_name("logo.png")["content"], Value::Null);
    assert_eq!(by_name("big.txt")["truncated"], true);
    assert_eq!(by_name("big.txt")["content"].as_str().unwrap().len(), 1000);
    assert_eq!(by_name("big.txt")["size"], 5000);
    assert_eq!(by_name("empty.txt")["content"], "");

    let response = server
        .client
        .get(server.url(&format!(
            "/v1/namespaces/{}/functions/nothing/source",
            alice.ns
        )))
        .bearer_auth(&alice.token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn self_contained_job_takes_code_but_a_function_job_does_not() {
    let server = TestServer::start().await;
    let alice = user("alice");
    let jobs = format!("/v1/namespaces/{}/jobs", alice.ns);
    for body in [
        json!({"name": "own", "runtime": "python3.11", "event_json": "{}"}),
        json!({"name": "borrowed", "function_ref": "hello", "event_json": "{}"}),
    ] {
        let response = server
            .client
            .post(server.url(&jobs))
            .bearer_auth(&alice.token)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
    }
    let zip = zip_of(&[("handler.py", b"def handle(e): return 1")]);
    let (status, body) = upload(&server, &alice, "jobs/own", zip.clone()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let key = body["s3_key"].as_str().unwrap();
    assert!(
        key.starts_with(&format!("contexts/{}/_jobs/own/", alice.ns)),
        "{key}"
    );
    let (status, body) = upload(&server, &alice, "jobs/borrowed", zip).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"].as_str().unwrap().contains("self-contained"),
        "{body}"
    );
}
