//! Call spans exported by the shipped binary over OTLP/HTTP when the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set, received by a collector stand-in on a loopback
//! port that decodes the real OTLP protobuf (the official `opentelemetry-proto`
//! definitions): one trace from the caller through the proxy to the function, with the
//! cold start of a call after the instance stopped idle in it.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message;
use serde_json::json;
use sless_core::model::namespace_for_sub;

/// The caller's trace: sampled, and one that asks not to be recorded.
const SAMPLED: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
/// The first call's, which waits for the instance to start.
const COLD: &str = "00-cccccccccccccccccccccccccccccccc-2222222222222222-01";
const NOT_SAMPLED: &str = "00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-1111111111111111-00";

/// Prints the trace context the function was given.
const HANDLER: &str = "def handle(event):\n    return event['_http']['headers']['traceparent']\n";

type Received = Arc<Mutex<Vec<(String, Span)>>>;

async fn receive(State(received): State<Received>, body: Bytes) -> Vec<u8> {
    let request = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
    let mut received = received.lock().unwrap();
    for resource in request.resource_spans {
        let service = resource
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|a| a.key == "service.name")
            .and_then(|a| match a.value.as_ref()?.value.as_ref()? {
                AnyValue::StringValue(name) => Some(name.clone()),
                _ => None,
            })
            .unwrap_or_default();
        for scope in resource.scope_spans {
            for span in scope.spans {
                received.push((service.clone(), span));
            }
        }
    }
    ExportTraceServiceResponse::default().encode_to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    let value = span
        .attributes
        .iter()
        .find(|a| a.key == key)?
        .value
        .as_ref()?;
    match value.value.as_ref()? {
        AnyValue::StringValue(text) => Some(text.clone()),
        AnyValue::IntValue(number) => Some(number.to_string()),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_is_one_trace_from_the_caller_through_the_proxy_to_the_function() {
    let received = Received::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let collector = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new()
        .route("/v1/traces", post(receive))
        .with_state(received.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let data = tempfile::tempdir().unwrap();
    let server = common::start_with_env(
        data.path(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &collector),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            // An idle instance stops soon, so a later call is surely a cold one.
            ("SLESS_SCALE_TO_ZERO_AFTER", "2"),
        ],
    );
    let token = common::token(data.path(), "traced");
    let ns = namespace_for_sub("traced");
    let client = reqwest::Client::new();
    let api = format!("{}/v1/namespaces/{ns}", server.base);
    for (path, body) in [
        ("functions", json!({"name": "f", "runtime": "python3.11"})),
        (
            "triggers",
            json!({"name": "web", "type": "http", "function_ref": "f"}),
        ),
    ] {
        let created = client
            .post(format!("{api}/{path}"))
            .bearer_auth(&token)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(created.status().is_success(), "{path}");
    }
    common::upload_handler(
        &client,
        &format!("{api}/functions/f/upload"),
        &token,
        HANDLER.as_bytes(),
    )
    .await;
    let url = format!("{}/fn/{ns}/f", server.base);
    let call = |traceparent: &'static str| {
        client
            .post(&url)
            .header("traceparent", traceparent)
            .json(&json!({}))
            .send()
    };
    let ready_by = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = call(NOT_SAMPLED).await.unwrap();
        if answer.status() == 200 {
            break;
        }
        assert!(
            Instant::now() < ready_by,
            "never ready: {}",
            answer.status()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let answer = call(SAMPLED).await.unwrap();
    assert_eq!(answer.status(), 200);
    let request_id = answer.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let seen: String = answer.json().await.unwrap();
    assert!(
        seen.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
        "{seen}"
    );
    let given_parent = &seen[36..52];

    let spans_of = |trace: &'static str, count: usize| {
        let received = received.clone();
        async move {
            let by = Instant::now() + Duration::from_secs(15);
            loop {
                let spans: Vec<(String, Span)> = received
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|(_, span)| hex(&span.trace_id) == trace)
                    .cloned()
                    .collect();
                if spans.len() >= count {
                    return spans;
                }
                assert!(Instant::now() < by, "spans not exported: {spans:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let spans = spans_of("4bf92f3577b34da6a3ce929d0e0e4736", 2).await;
    assert_eq!(spans.len(), 2, "a warm call has no cold start: {spans:?}");
    let find = |kind: SpanKind| {
        spans
            .iter()
            .find(|(_, span)| span.kind == kind as i32)
            .unwrap_or_else(|| panic!("no {kind:?} span: {spans:?}"))
    };
    let (service, proxy) = find(SpanKind::Server);
    let (_, function) = find(SpanKind::Client);
    assert_eq!(service, "sless");
    assert_eq!(
        hex(&proxy.parent_span_id),
        "00f067aa0ba902b7",
        "the proxy's span continues the caller's"
    );
    assert_eq!(function.parent_span_id, proxy.span_id);
    assert_eq!(
        hex(&function.span_id),
        given_parent,
        "the function's own spans hang below the call's"
    );
    assert_eq!(attribute(proxy, "sless.request_id"), Some(request_id));
    assert_eq!(attribute(proxy, "sless.trigger").as_deref(), Some("http"));
    assert_eq!(
        attribute(proxy, "http.response.status_code").as_deref(),
        Some("200")
    );
    assert!(proxy.end_time_unix_nano > proxy.start_time_unix_nano);

    // Once the idle instance has stopped, a call waits for a new one: a span of its own
    // under the proxy's.
    let stopped_by = Instant::now() + Duration::from_secs(30);
    loop {
        let function: serde_json::Value = client
            .get(format!("{api}/functions/f"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if function["instances"] == 0 {
            break;
        }
        assert!(
            Instant::now() < stopped_by,
            "never scaled to zero: {function}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let cold_call = call(COLD).await.unwrap();
    assert_eq!(cold_call.status(), 200);
    let cold = spans_of("cccccccccccccccccccccccccccccccc", 3).await;
    let named = |name: &str| {
        cold.iter()
            .map(|(_, span)| span)
            .find(|span| span.name == name)
            .unwrap_or_else(|| panic!("no {name:?} span: {cold:?}"))
    };
    let proxy = named(&format!("POST /fn/{ns}/f"));
    let start = named("cold start");
    let function = named(&format!("call {ns}/f"));
    assert_eq!(cold.len(), 3, "{cold:?}");
    assert_eq!(start.parent_span_id, proxy.span_id);
    assert_eq!(function.parent_span_id, proxy.span_id);
    assert!(
        start.start_time_unix_nano >= proxy.start_time_unix_nano
            && start.end_time_unix_nano <= function.start_time_unix_nano,
        "the start comes before the call: {cold:?}"
    );

    // Exported in order: the unsampled calls before it were left out, not delayed.
    let unsampled = received
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, span)| hex(&span.trace_id).starts_with("aaaa"))
        .count();
    assert_eq!(unsampled, 0, "a caller's unsampled trace is not recorded");
}
