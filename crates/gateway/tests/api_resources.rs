//! CRUD, conflicts and validation of the REST API over real HTTP, each test run on
//! both stores: `sqlite::*` on `SqliteStore` (embedded mode), `kube::*` on `KubeStore`
//! (the CustomResources) over an in-memory Kubernetes API.

mod common;

use common::*;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sless_core::model::{Function, Phase};
use sless_core::store::modify_status;

async fn send(
    server: &TestServer,
    user: &User,
    method: reqwest::Method,
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
    let value = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"))
    };
    (status, value)
}

fn function(name: &str) -> Value {
    json!({"name": name, "runtime": "python3.11", "entrypoint": "handler.handle",
           "memory_mb": 256, "timeout_sec": 30, "env_vars": {"GREETING": "hi"}})
}

/// `$test(server)` as a `#[tokio::test]` in `mod sqlite` and in `mod kube`.
macro_rules! on_each_store {
    ($($test:ident),+ $(,)?) => {
        on_each_store!(@store sqlite, Sqlite, $($test),+);
        on_each_store!(@store kube, Kube, $($test),+);
    };
    (@store $module:ident, $kind:ident, $($test:ident),+) => {
        mod $module {
            $(
                #[tokio::test]
                async fn $test() {
                    let server = super::TestServer::start_on(super::StoreKind::$kind).await;
                    super::$test(server).await;
                }
            )+
        }
    };
}

on_each_store!(
    function_crud_with_defaults_and_conflicts,
    creating_over_a_failed_function_replaces_it,
    functions_and_services_share_names,
    trigger_crud_and_patch_in_place,
    job_crud_and_run_id_bump,
    bad_input_is_refused_with_the_rule,
    concurrent_ensure_and_conflicting_updates,
    egress_is_stored_and_bad_entries_are_refused,
    lists_page_by_name_with_a_cursor,
);

/// The names of a page answer, and its `next`.
fn page_of(answer: &Value) -> (Vec<String>, Option<String>) {
    let names = answer["items"]
        .as_array()
        .unwrap_or_else(|| panic!("a page: {answer}"))
        .iter()
        .map(|item| item["name"].as_str().unwrap().to_string())
        .collect();
    (names, answer["next"].as_str().map(String::from))
}

async fn lists_page_by_name_with_a_cursor(server: TestServer) {
    let alice = user("alice");
    let functions = format!("/v1/namespaces/{}/functions", alice.ns);
    let triggers = format!("/v1/namespaces/{}/triggers", alice.ns);
    use reqwest::Method as M;

    // Empty: an empty page, no next.
    let (status, empty) = send(
        &server,
        &alice,
        M::GET,
        &format!("{functions}?limit=2"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{empty}");
    assert_eq!(page_of(&empty), (vec![], None));

    // Created out of order; six is an exact multiple of the page size 3.
    for i in [4, 1, 5, 0, 3, 2] {
        let (status, body) = send(
            &server,
            &alice,
            M::POST,
            &functions,
            Some(function(&format!("f{i}"))),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let trigger =
            json!({"name": format!("t{i}"), "type": "http", "function_ref": format!("f{i}")});
        let (status, body) = send(&server, &alice, M::POST, &triggers, Some(trigger)).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    // Without a page asked for: every object, a JSON array, as before.
    let (_, all) = send(&server, &alice, M::GET, &functions, None).await;
    assert_eq!(all.as_array().map(Vec::len), Some(6), "{all}");

    let (_, first) = send(
        &server,
        &alice,
        M::GET,
        &format!("{functions}?limit=3"),
        None,
    )
    .await;
    assert_eq!(
        page_of(&first),
        (
            vec!["f0".into(), "f1".into(), "f2".into()],
            Some("f2".into())
        )
    );
    let (_, last) = send(
        &server,
        &alice,
        M::GET,
        &format!("{functions}?limit=3&after=f2"),
        None,
    )
    .await;
    assert_eq!(
        page_of(&last),
        (vec!["f3".into(), "f4".into(), "f5".into()], None)
    );
    // A cursor between names (its object deleted) and one past the end.
    let (_, between) = send(
        &server,
        &alice,
        M::GET,
        &format!("{triggers}?limit=2&after=t3a"),
        None,
    )
    .await;
    assert_eq!(page_of(&between), (vec!["t4".into(), "t5".into()], None));
    let (_, past) = send(
        &server,
        &alice,
        M::GET,
        &format!("{functions}?after=zzz"),
        None,
    )
    .await;
    assert_eq!(page_of(&past), (vec![], None));

    for (query, field) in [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=many", "limit"),
    ] {
        let (status, body) = send(
            &server,
            &alice,
            M::GET,
            &format!("{functions}?{query}"),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        let error = body["error"].as_str().unwrap();
        assert!(error.starts_with(&format!("{field}: ")), "{query}: {error}");
    }
    let jobs = format!("/v1/namespaces/{}/jobs?limit=5", alice.ns);
    let (status, body) = send(&server, &alice, M::GET, &jobs, None).await;
    assert_eq!((status, page_of(&body)), (StatusCode::OK, (vec![], None)));
}

async fn egress_is_stored_and_bad_entries_are_refused(server: TestServer) {
    let alice = user("alice");
    let base = format!("/v1/namespaces/{}/functions", alice.ns);
    use reqwest::Method as M;

    let open = json!({"name": "open", "runtime": "nodejs20"});
    let (status, created) = send(&server, &alice, M::POST, &base, Some(open)).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["egress"], "internet");

    let listed = json!(["api.example.com:443", "10.0.0.0/8", "[fd00::1]:5432"]);
    let mut body = function("listed");
    body["egress"] = listed.clone();
    let (status, created) = send(&server, &alice, M::POST, &base, Some(body.clone())).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["egress"], listed);
    let (_, fetched) = send(&server, &alice, M::GET, &format!("{base}/listed"), None).await;
    assert_eq!(fetched["egress"], listed, "stored as given");

    body["egress"] = json!("none");
    let (status, updated) = send(
        &server,
        &alice,
        M::PUT,
        &format!("{base}/listed"),
        Some(body.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{updated}");
    assert_eq!(updated["egress"], "none");

    let many: Vec<String> = (0..65).map(|i| format!("10.0.0.{i}:80")).collect();
    for (bad, says) in [
        (json!("everything"), "use \"internet\", \"none\" or a list"),
        (
            json!(["10.0.0.0/33"]),
            "\"10.0.0.0/33\" is not a valid CIDR",
        ),
        (json!(["example.com"]), "has no port"),
        (json!(["example.com:0"]), "bad port"),
        (json!(many), "at most 64"),
    ] {
        body["egress"] = bad.clone();
        let (status, error) = send(
            &server,
            &alice,
            M::PUT,
            &format!("{base}/listed"),
            Some(body.clone()),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
        let error = error["error"].as_str().unwrap();
        assert!(
            error.contains("egress") && error.contains(says),
            "{bad}: {error}"
        );
    }

    let jobs = format!("/v1/namespaces/{}/jobs", alice.ns);
    let job = json!({"name": "sync", "function_ref": "listed", "egress": ["10.1.0.0/16:443"]});
    let (status, created) = send(&server, &alice, M::POST, &jobs, Some(job)).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["egress"], json!(["10.1.0.0/16:443"]));
    let inherit = json!({"name": "plain", "function_ref": "listed"});
    let (_, created) = send(&server, &alice, M::POST, &jobs, Some(inherit)).await;
    assert_eq!(created.get("egress"), None, "absent: the function's");
}

async fn function_crud_with_defaults_and_conflicts(server: TestServer) {
    let alice = user("alice");
    let base = format!("/v1/namespaces/{}/functions", alice.ns);
    use reqwest::Method as M;

    let (status, created) = send(&server, &alice, M::POST, &base, Some(function("hello"))).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["name"], "hello");
    assert_eq!(created["kind"], "function");
    assert_eq!(created["memory_mb"], 256);
    assert_eq!(created["env_vars"]["GREETING"], "hi");
    assert_eq!(created["phase"], "Pending");
    assert_eq!(created["s3_key"], Value::Null);
    assert!(!created["resource_version"].as_str().unwrap().is_empty());
    assert!(created["created_at"].as_str().unwrap().ends_with('Z'));
    for field in ["message", "image_ref", "last_built_at", "url"] {
        assert!(created.get(field).is_some(), "response lacks {field}");
    }

    // Defaults apply when only name and runtime are given.
    let (status, minimal) = send(
        &server,
        &alice,
        M::POST,
        &base,
        Some(json!({"name": "minimal", "runtime": "nodejs20"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(minimal["entrypoint"], "handler.handle");
    assert_eq!(minimal["memory_mb"], 128);
    assert_eq!(minimal["timeout_sec"], 60);

    let (status, body) = send(&server, &alice, M::POST, &base, Some(function("hello"))).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(
        body["error"].as_str().unwrap().contains("already exists"),
        "{body}"
    );

    let (status, list) = send(&server, &alice, M::GET, &base, None).await;
    assert_eq!(status, StatusCode::OK);
    let names: Vec<_> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].clone())
        .collect();
    assert_eq!(names, vec![json!("hello"), json!("minimal")]);

    let mut changed = function("hello");
    changed["memory_mb"] = json!(512);
    changed["env_vars"] = json!({"OTHER": "x"});
    let (status, updated) = send(
        &server,
        &alice,
        M::PUT,
        &format!("{base}/hello"),
        Some(changed),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{updated}");
    assert_eq!(updated["memory_mb"], 512);
    let (_, fetched) = send(&server, &alice, M::GET, &format!("{base}/hello"), None).await;
    assert_eq!(fetched["memory_mb"], 512);
    // PUT replaces the spec: the removed env var is gone.
    assert_eq!(fetched["env_vars"], json!({"OTHER": "x"}));

    // PUT is a full replacement: zero values are refused, naming the field.
    for (field, zero) in [
        ("runtime", json!("")),
        ("entrypoint", json!("")),
        ("memory_mb", json!(0)),
    ] {
        let mut body = function("hello");
        body[field] = zero;
        let (status, error) = send(
            &server,
            &alice,
            M::PUT,
            &format!("{base}/hello"),
            Some(body),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{field}");
        assert!(
            error["error"].as_str().unwrap().starts_with(field),
            "{error}"
        );
    }

    let (status, _) = send(&server, &alice, M::DELETE, &format!("{base}/hello"), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = send(&server, &alice, M::GET, &format!("{base}/hello"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body["error"].as_str().unwrap().contains("not found"));
    let (status, _) = send(&server, &alice, M::DELETE, &format!("{base}/hello"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

async fn creating_over_a_failed_function_replaces_it(server: TestServer) {
    let alice = user("alice");
    let base = format!("/v1/namespaces/{}/functions", alice.ns);
    use reqwest::Method as M;
    send(&server, &alice, M::POST, &base, Some(function("flaky"))).await;
    modify_status::<Function, _>(&*server.store, &alice.ns, "flaky", |o| {
        o.status.phase = Phase::Failed;
        o.status.message = Some("build failed".into());
    })
    .await
    .unwrap();

    let mut again = function("flaky");
    again["memory_mb"] = json!(1024);
    let (status, body) = send(&server, &alice, M::POST, &base, Some(again)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["memory_mb"], 1024);
    assert_eq!(body["phase"], "Pending");
}

async fn functions_and_services_share_names(server: TestServer) {
    let alice = user("alice");
    use reqwest::Method as M;
    let functions = format!("/v1/namespaces/{}/functions", alice.ns);
    let services = format!("/v1/namespaces/{}/services", alice.ns);

    let (status, svc) = send(&server, &alice, M::POST, &services, Some(function("api"))).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(svc["kind"], "service");
    let (status, body) = send(&server, &alice, M::POST, &functions, Some(function("api"))).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(
        body["error"].as_str().unwrap().contains("share names"),
        "{body}"
    );

    send(
        &server,
        &alice,
        M::POST,
        &functions,
        Some(function("worker")),
    )
    .await;
    let (status, _) = send(
        &server,
        &alice,
        M::POST,
        &services,
        Some(function("worker")),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);

    let (_, list) = send(&server, &alice, M::GET, &services, None).await;
    assert_eq!(list.as_array().unwrap().len(), 1);
    let (status, _) = send(&server, &alice, M::DELETE, &format!("{services}/api"), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
}

async fn trigger_crud_and_patch_in_place(server: TestServer) {
    let alice = user("alice");
    use reqwest::Method as M;
    let base = format!("/v1/namespaces/{}/triggers", alice.ns);

    let (status, http) = send(
        &server,
        &alice,
        M::POST,
        &base,
        Some(json!({"name": "web", "type": "http", "function_ref": "hello"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{http}");
    assert_eq!(http["enabled"], true);
    assert_eq!(http["type"], "http");
    for field in ["active", "url", "last_schedule_time"] {
        assert!(http.get(field).is_some(), "response lacks {field}");
    }

    let (status, cron) = send(
        &server,
        &alice,
        M::POST,
        &base,
        Some(json!({"name": "tick",
        "type": "cron", "function_ref": "hello", "schedule": "*/5 * * * *", "enabled": false})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{cron}");
    assert_eq!(cron["schedule"], "*/5 * * * *");
    assert_eq!(cron["enabled"], false);

    let (status, body) = send(
        &server,
        &alice,
        M::POST,
        &base,
        Some(json!({"name": "bad",
        "type": "cron", "function_ref": "hello", "schedule": "* * * * * *"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"].as_str().unwrap().starts_with("schedule"),
        "{body}"
    );
    let (status, body) = send(
        &server,
        &alice,
        M::POST,
        &base,
        Some(json!({"name": "bad",
        "type": "webhook", "function_ref": "hello"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("http, cron, event"),
        "{body}"
    );

    let (status, patched) = send(
        &server,
        &alice,
        M::PATCH,
        &format!("{base}/web"),
        Some(json!({"enabled": false})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(patched["enabled"], false);
    assert_eq!(
        patched["created_at"], http["created_at"],
        "patched in place, not re-created"
    );
    let (_, fetched) = send(&server, &alice, M::GET, &format!("{base}/web"), None).await;
    assert_eq!(fetched["enabled"], false);

    let (status, _) = send(
        &server,
        &alice,
        M::POST,
        &base,
        Some(json!({"name": "web", "type": "http", "function_ref": "hello"})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, _) = send(&server, &alice, M::DELETE, &format!("{base}/tick"), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (_, list) = send(&server, &alice, M::GET, &base, None).await;
    assert_eq!(list.as_array().unwrap().len(), 1);
}

async fn job_crud_and_run_id_bump(server: TestServer) {
    let alice = user("alice");
    use reqwest::Method as M;
    let base = format!("/v1/namespaces/{}/jobs", alice.ns);

    let (status, job) = send(
        &server,
        &alice,
        M::POST,
        &base,
        Some(json!({"name": "nightly",
        "function_ref": "hello", "event_json": "{\"day\": 1}", "timeout_sec": 10})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    assert_eq!(job["run_id"], 0);
    assert_eq!(job["event_json"], "{\"day\": 1}");
    for field in [
        "phase",
        "message",
        "job_name",
        "start_time",
        "completion_time",
    ] {
        assert!(job.get(field).is_some(), "response lacks {field}");
    }

    let (status, bumped) = send(
        &server,
        &alice,
        M::PATCH,
        &format!("{base}/nightly"),
        Some(json!({"run_id": 1})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(bumped["run_id"], 1);
    let (status, replaced) = send(
        &server,
        &alice,
        M::PUT,
        &format!("{base}/nightly"),
        Some(json!({
        "function_ref": "hello", "event_json": "{}", "run_id": 2})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{replaced}");
    assert_eq!(replaced["run_id"], 2);

    let (status, own) = send(
        &server,
        &alice,
        M::POST,
        &base,
        Some(json!({"name": "adhoc",
        "runtime": "python3.11", "event_json": "{}"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{own}");
    assert_eq!(own["entrypoint"], "handler.handle");

    for (body, field) in [
        (json!({"name": "j", "event_json": "{}"}), "function_ref"),
        (
            json!({"name": "j", "function_ref": "f", "event_json": "{oops"}),
            "event_json",
        ),
        (
            json!({"name": "j", "function_ref": "f", "timeout_sec": 901}),
            "timeout_sec",
        ),
        (
            json!({"name": "j", "function_ref": "f", "run_id": -1}),
            "run_id",
        ),
    ] {
        let (status, error) = send(&server, &alice, M::POST, &base, Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{field}");
        assert!(
            error["error"].as_str().unwrap().starts_with(field),
            "{error}"
        );
    }
    let (status, _) = send(&server, &alice, M::DELETE, &format!("{base}/nightly"), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
}

async fn bad_input_is_refused_with_the_rule(server: TestServer) {
    let alice = user("alice");
    use reqwest::Method as M;
    let base = format!("/v1/namespaces/{}/functions", alice.ns);

    let cases = [
        (
            json!({"name": "Bad_Name", "runtime": "python3.11"}),
            "name",
            "DNS-1123",
        ),
        (
            json!({"name": "ok", "runtime": "ruby3.3"}),
            "runtime",
            "python3.11, nodejs20, go1.23",
        ),
        (
            json!({"name": "ok", "runtime": "python3.11", "timeout_sec": 901}),
            "timeout_sec",
            "0 for no limit",
        ),
        (
            json!({"name": "ok", "runtime": "python3.11", "memory_mb": 32}),
            "memory_mb",
            "64",
        ),
        (
            json!({"name": "ok", "runtime": "python3.11", "env_vars": {"1X": "v"}}),
            "env_vars",
            "environment variable",
        ),
        (
            json!({"name": "ok", "runtime": "python3.11", "entrypoint": "nodot"}),
            "entrypoint",
            "module.function",
        ),
        (json!({"name": "ok"}), "runtime", "required"),
    ];
    for (body, field, rule) in cases {
        let (status, error) = send(&server, &alice, M::POST, &base, Some(body.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        let message = error["error"].as_str().unwrap();
        assert!(
            message.starts_with(field) && message.contains(rule),
            "{body}: {message}"
        );
    }

    let response = server
        .client
        .post(server.url(&base))
        .bearer_auth(&alice.token)
        .header("content-type", "application/json")
        .body("{\"name\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let error: Value = response.json().await.unwrap();
    assert!(
        error["error"].as_str().unwrap().contains("not valid JSON"),
        "{error}"
    );

    let response = server
        .client
        .post(server.url(&base))
        .bearer_auth(&alice.token)
        .body("name=x")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);

    let (status, error) = send(
        &server,
        &alice,
        M::POST,
        &base,
        Some(json!({"name": "x", "runtime": "python3.11", "memory": 5})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        error["error"]
            .as_str()
            .unwrap()
            .contains("unknown field `memory`"),
        "{error}"
    );

    // Nothing was half-written by all of that.
    let (_, list) = send(&server, &alice, M::GET, &base, None).await;
    assert_eq!(list, json!([]));
}

async fn concurrent_ensure_and_conflicting_updates(server: TestServer) {
    let alice = user("alice");
    use reqwest::Method as M;
    let ensure = format!("/v1/namespaces/{}/ensure", alice.ns);
    let (a, b) = tokio::join!(
        send(&server, &alice, M::POST, &ensure, None),
        send(&server, &alice, M::POST, &ensure, None)
    );
    let mut statuses = [a.0, b.0];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::OK, StatusCode::CREATED]);
    assert_eq!(a.1["namespace"], alice.ns.as_str());
    let (status, again) = send(&server, &alice, M::POST, &ensure, None).await;
    assert_eq!(
        (status, again["status"].as_str()),
        (StatusCode::OK, Some("exists"))
    );

    let base = format!("/v1/namespaces/{}/functions", alice.ns);
    let (_, created) = send(&server, &alice, M::POST, &base, Some(function("race"))).await;
    let version = created["resource_version"].clone();
    let update = |memory: u32| {
        let mut body = function("race");
        body["memory_mb"] = json!(memory);
        body["resource_version"] = version.clone();
        body
    };
    let path = format!("{base}/race");
    let (first, second) = tokio::join!(
        send(&server, &alice, M::PUT, &path, Some(update(512))),
        send(&server, &alice, M::PUT, &path, Some(update(1024)))
    );
    let mut statuses = [first.0, second.0];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::OK, StatusCode::CONFLICT]);
    let winner = if first.0 == StatusCode::OK {
        first.1
    } else {
        second.1
    };
    let (_, stored) = send(&server, &alice, M::GET, &path, None).await;
    assert_eq!(
        stored["memory_mb"], winner["memory_mb"],
        "the loser did not overwrite"
    );
    let (status, body) = send(&server, &alice, M::PUT, &path, Some(update(2048))).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("changed by someone else"),
        "{body}"
    );
}

/// Listings are gzip or brotli when the client asks, plain when it does not.
#[tokio::test]
async fn listings_are_compressed_only_when_the_client_accepts_it() {
    use std::io::Read;
    let server = TestServer::start_on(StoreKind::Sqlite).await;
    let alice = user("alice");
    let base = format!("/v1/namespaces/{}/functions", alice.ns);
    for i in 0..20 {
        let (status, body) = send(
            &server,
            &alice,
            reqwest::Method::POST,
            &base,
            Some(function(&format!("fn-{i}"))),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let get = |encoding: Option<&'static str>| {
        let mut request = server
            .client
            .get(server.url(&base))
            .bearer_auth(&alice.token);
        if let Some(encoding) = encoding {
            request = request.header("accept-encoding", encoding);
        }
        request.send()
    };

    let plain = get(None).await.unwrap();
    assert!(plain.headers().get("content-encoding").is_none());
    let plain: Value = plain.json().await.unwrap();
    assert_eq!(plain.as_array().map(Vec::len), Some(20));

    let gzipped = get(Some("gzip")).await.unwrap();
    assert_eq!(gzipped.headers()["content-encoding"], "gzip");
    let bytes = gzipped.bytes().await.unwrap();
    let mut text = String::new();
    flate2::read::GzDecoder::new(&bytes[..])
        .read_to_string(&mut text)
        .unwrap();
    assert!(
        bytes.len() < text.len() / 2,
        "{} of {}",
        bytes.len(),
        text.len()
    );
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), plain);

    let brotli = get(Some("br")).await.unwrap();
    assert_eq!(brotli.headers()["content-encoding"], "br");
}
