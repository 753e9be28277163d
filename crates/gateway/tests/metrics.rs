//! `GET /metrics`: Prometheus text after real calls and a real build, for admins only.

mod common;

use common::*;
use prometheus_parse::{Sample, Scrape, Value};
use reqwest::StatusCode;
use serde_json::json;

const HANDLER: &[u8] =
    b"def handle(event):\n    if event.get('fail'):\n        raise ValueError('asked to fail')\n    return 'ok'\n";

fn value(sample: &Sample) -> f64 {
    match &sample.value {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
        Value::Histogram(_) | Value::Summary(_) => f64::NAN,
    }
}

/// The value of the sample `name` whose labels include every pair of `labels`.
fn find(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape
        .samples
        .iter()
        .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(value)
}

#[tokio::test]
async fn metrics_count_calls_and_builds_and_are_for_admins() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let owner = user("metrics-user");
    let api = |path: &str| server.url(&format!("/v1/namespaces/{}/{path}", owner.ns));
    let post = |path: &str, body: serde_json::Value| {
        server
            .client
            .post(api(path))
            .bearer_auth(&owner.token)
            .json(&body)
            .send()
    };
    assert!(
        post(
            "functions",
            json!({"name": "counted", "runtime": "python3.11"})
        )
        .await
        .unwrap()
        .status()
        .is_success()
    );
    assert!(
        post(
            "triggers",
            json!({"name": "counted-http", "type": "http", "function_ref": "counted"})
        )
        .await
        .unwrap()
        .status()
        .is_success()
    );
    let uploaded = server
        .client
        .post(api("functions/counted/upload"))
        .bearer_auth(&owner.token)
        .multipart(code_form(zip_of(&[("handler.py", HANDLER)])))
        .send()
        .await
        .unwrap();
    assert_eq!(uploaded.status(), StatusCode::OK);

    let call = |body: serde_json::Value| {
        server
            .client
            .post(server.url(&format!("/fn/{}/counted", owner.ns)))
            .json(&body)
            .send()
    };
    // Right after the upload: the call waits for the runner to see it and build it.
    for _ in 0..3 {
        assert_eq!(call(json!({})).await.unwrap().status(), StatusCode::OK);
    }
    let failed = call(json!({"fail": true})).await.unwrap();
    assert_eq!(failed.status(), StatusCode::INTERNAL_SERVER_ERROR);

    let metrics = server.url("/metrics");
    let anonymous = server.client.get(&metrics).send().await.unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    let tenant = server
        .client
        .get(&metrics)
        .bearer_auth(&owner.token)
        .send()
        .await
        .unwrap();
    assert_eq!(tenant.status(), StatusCode::FORBIDDEN);
    assert!(tenant.text().await.unwrap().contains("admin"));

    let answer = server
        .client
        .get(&metrics)
        .bearer_auth(admin().token)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    let content_type = answer.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    let text = answer.text().await.unwrap();
    let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
    let ours = [("namespace", owner.ns.as_str()), ("name", "counted")];

    let ok = find(
        &scrape,
        "sless_calls_total",
        &[ours[0], ours[1], ("class", "2xx")],
    );
    assert_eq!(ok, Some(3.0), "{text}");
    let errors = find(
        &scrape,
        "sless_calls_total",
        &[ours[0], ours[1], ("class", "5xx")],
    );
    assert_eq!(errors, Some(1.0), "{text}");
    let timed = find(&scrape, "sless_call_duration_seconds_count", &ours);
    assert_eq!(
        timed,
        Some(ok.unwrap() + 1.0),
        "every call is timed\n{text}"
    );
    let in_flight = find(&scrape, "sless_calls_in_flight", &ours);
    assert_eq!(in_flight, Some(0.0), "{text}");
    let builds = find(
        &scrape,
        "sless_builds_total",
        &[ours[0], ours[1], ("result", "succeeded")],
    );
    assert_eq!(builds, Some(1.0), "{text}");
}

#[tokio::test]
async fn every_call_is_recorded_under_its_request_id() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let api = common::api::Api::new(&server, "records");
    api.deploy_spec(
        json!({"name": "rec", "runtime": "python3.11"}),
        &[("handler.py", HANDLER)],
    )
    .await;
    api.invoke("rec", json!({})).await;
    assert_eq!(api.call_as("rec", "rec-ok", &json!({})).await, 200);
    assert_eq!(
        api.call_as("rec", "rec-fail", &json!({"fail": true})).await,
        500
    );

    let record = api.get("functions/rec/invocations/rec-ok").await;
    assert_eq!(
        (&record["request_id"], &record["trigger"], &record["status"]),
        (&json!("rec-ok"), &json!("http"), &json!(200)),
        "{record}"
    );
    let failed = api.get("functions/rec/invocations?status=5xx").await;
    let ids: Vec<&str> = failed["invocations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["request_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["rec-fail"]);
    assert!(
        api.get("functions/rec/invocations?trigger=event").await["invocations"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    // A stopped trigger's refusal is recorded as sless's, not as the function's error.
    api.send(
        reqwest::Method::PATCH,
        "triggers/rec-http",
        Some(json!({"enabled": false})),
    )
    .await;
    let refused = api
        .call_until("rec", &json!({}), std::time::Duration::from_secs(10), |s| {
            s == StatusCode::SERVICE_UNAVAILABLE
        })
        .await;
    assert_eq!(refused.0, StatusCode::SERVICE_UNAVAILABLE);
    let listing = api.get("functions/rec/invocations").await;
    let all = listing["invocations"].as_array().unwrap();
    assert_eq!(all[0]["refused"], true, "{listing}");
    // (A call racing the stop may meet the instance going away: a 502 of its own.)
    let errors = all
        .iter()
        .filter(|i| i["status"].as_u64() >= Some(500) && i.get("refused").is_none())
        .count();
    let refused = all.iter().filter(|i| i["refused"] == true).count();
    assert!(errors >= 1 && refused >= 1, "{listing}");
    assert_eq!(listing["stats"]["errors"], errors, "{listing}");
    assert_eq!(listing["stats"]["refused"], refused, "{listing}");

    let (status, body) = api
        .send(
            reqwest::Method::GET,
            "functions/rec/invocations/nobody",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("no call \"nobody\""),
        "{body}"
    );
    let (status, body) = api
        .send(
            reqwest::Method::GET,
            "functions/rec/invocations?status=abc",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    // Another tenant cannot read them.
    let other = common::api::Api::new(&server, "records-other");
    let (status, _) = other
        .server
        .client
        .get(server.url(&format!(
            "/v1/namespaces/{}/functions/rec/invocations/rec-ok",
            api.user.ns
        )))
        .bearer_auth(&other.user.token)
        .send()
        .await
        .map(|r| (r.status(), ()))
        .unwrap();
    assert_eq!(status, StatusCode::FORBIDDEN);
}
