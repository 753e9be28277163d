//! OpenTelemetry spans of every call, exported over OTLP/HTTP (protobuf) when the
//! standard `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set;
//! nothing is built or sent otherwise. The spans are made from the call's record once it
//! ends, so the invoke path only checks whether export is on: the proxy's span (server)
//! continues the caller's `traceparent`, and under it the call to the function (client)
//! has the span id the function was given as its parent, so spans the function makes
//! itself hang below it; a call that waited for an instance to start has a `cold start`
//! span beside it, before it. Batching, retries and the wire format are the SDK's.

use std::borrow::Cow;
use std::sync::OnceLock;
use std::time::SystemTime;

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::ExporterBuildError;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    BatchSpanProcessor, SpanData, SpanEvents, SpanExporter as _, SpanLinks, SpanProcessor,
};

use super::headers::call_id::TraceIds;
use super::log::Invocation;

static EXPORT: OnceLock<BatchSpanProcessor> = OnceLock::new();

/// The environment variables that turn export on, as the OTLP exporters read them.
const ENDPOINT_VARIABLES: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// Exports spans until dropped (then sends what is queued).
pub struct TraceExport(());

impl Drop for TraceExport {
    fn drop(&mut self) {
        if let Some(export) = EXPORT.get() {
            let _ = export.force_flush();
        }
    }
}

/// Starts the export when the environment asks for it; None (and nothing started)
/// otherwise. Once per process.
pub fn export_from_env() -> Result<Option<TraceExport>, ExporterBuildError> {
    let Some(variable) = ENDPOINT_VARIABLES
        .into_iter()
        .find(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()))
    else {
        return Ok(None);
    };
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()?;
    exporter.set_resource(&Resource::builder().with_service_name("sless").build());
    if EXPORT
        .set(BatchSpanProcessor::builder(exporter).build())
        .is_err()
    {
        tracing::warn!("trace export started twice; the first one exports");
    }
    tracing::info!(
        "{variable} is set: exporting call spans over OTLP/HTTP ({})",
        std::env::var(variable).unwrap_or_default()
    );
    Ok(Some(TraceExport(())))
}

/// Queues the spans of one ended call; nothing when export is off or the caller's
/// trace is not sampled.
pub(super) fn export(namespace: &str, name: &str, call: &Invocation) {
    let (Some(export), Some(trace)) = (EXPORT.get(), call.trace) else {
        return;
    };
    if !trace.sampled {
        return;
    }
    for span in spans(namespace, name, call, trace) {
        export.on_end(span);
    }
}

/// The proxy's span and, under it, the wait for a cold start (if any) and the call to
/// the function.
fn spans(namespace: &str, name: &str, call: &Invocation, trace: TraceIds) -> Vec<SpanData> {
    let trace_id = TraceId::from_bytes(trace.trace_id);
    let context = |span_id: SpanId| {
        SpanContext::new(
            trace_id,
            span_id,
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        )
    };
    let proxy_span = SpanId::from_bytes(rand::random::<u64>().max(1).to_be_bytes());
    let start: SystemTime = call.time.into();
    let end = start + call.duration;
    let failed = call.status >= 500 || call.error.is_some();
    let status = if failed {
        Status::error(match call.error {
            Some(error) => format!("{error:?}"),
            None => format!("answered {}", call.status),
        })
    } else {
        Status::Unset
    };
    let mut attributes = vec![
        KeyValue::new("http.request.method", call.method.as_str().to_owned()),
        KeyValue::new("url.path", call.path.clone()),
        KeyValue::new("http.response.status_code", i64::from(call.status)),
        KeyValue::new("sless.namespace", namespace.to_owned()),
        KeyValue::new("sless.function", name.to_owned()),
        KeyValue::new("sless.request_id", call.request_id.to_string()),
        KeyValue::new("sless.trigger", call.trigger.as_str()),
    ];
    if let Some(trigger_name) = &call.trigger_name {
        attributes.push(KeyValue::new(
            "sless.trigger_name",
            trigger_name.to_string(),
        ));
    }
    if call.refused {
        attributes.push(KeyValue::new("sless.refused", true));
    }
    let span = |name: String, kind, span_id, parent, remote_parent, attributes| SpanData {
        span_context: context(span_id),
        parent_span_id: parent,
        parent_span_is_remote: remote_parent,
        span_kind: kind,
        name: Cow::Owned(name),
        start_time: start,
        end_time: end,
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status: status.clone(),
        instrumentation_scope: InstrumentationScope::builder("sless").build(),
    };
    let function_attributes = || {
        let mut attributes = vec![
            KeyValue::new("sless.namespace", namespace.to_owned()),
            KeyValue::new("sless.function", name.to_owned()),
            KeyValue::new("sless.request_id", call.request_id.to_string()),
        ];
        if let Some(version) = &call.version {
            attributes.push(KeyValue::new("sless.version", version.to_string()));
        }
        attributes
    };
    let mut spans = vec![span(
        format!("{} /fn/{namespace}/{name}", call.method),
        SpanKind::Server,
        proxy_span,
        trace
            .caller_span_id
            .map_or(SpanId::INVALID, SpanId::from_bytes),
        trace.caller_span_id.is_some(),
        attributes,
    )];
    // The function was called once the instance it waited for was up.
    let called = start + call.start_wait;
    if call.cold {
        spans.push(SpanData {
            end_time: called,
            status: Status::Unset,
            ..span(
                "cold start".into(),
                SpanKind::Internal,
                SpanId::from_bytes(rand::random::<u64>().max(1).to_be_bytes()),
                proxy_span,
                false,
                function_attributes(),
            )
        });
    }
    spans.push(SpanData {
        start_time: called,
        ..span(
            format!("call {namespace}/{name}"),
            SpanKind::Client,
            SpanId::from_bytes(trace.call_span_id),
            proxy_span,
            false,
            function_attributes(),
        )
    });
    spans
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::http::Method;

    use super::*;
    use crate::proxy::Via;

    fn call(start_wait: Option<Duration>) -> Invocation {
        let mut call = Invocation {
            request_id: "r1".into(),
            trigger: Via::Http,
            trigger_name: None,
            time: "2025-01-02T03:04:05Z".parse().unwrap(),
            method: Method::POST,
            path: "/".into(),
            status: 200,
            duration: Duration::from_millis(900),
            error: None,
            refused: false,
            version: None,
            cold: false,
            start_wait: Duration::ZERO,
            trace: None,
        };
        call.served_by(Some("20250102030405".into()), start_wait);
        call
    }

    const TRACE: TraceIds = TraceIds {
        trace_id: [7; 16],
        call_span_id: [9; 8],
        caller_span_id: None,
        sampled: true,
    };

    #[test]
    fn a_cold_call_has_its_start_as_a_span_under_the_proxys_before_the_call() {
        let cold = spans("ns", "f", &call(Some(Duration::from_millis(600))), TRACE);
        let names: Vec<&str> = cold.iter().map(|s| &*s.name).collect();
        assert_eq!(names, ["POST /fn/ns/f", "cold start", "call ns/f"]);
        let (proxy, start, function) = (&cold[0], &cold[1], &cold[2]);
        for child in [start, function] {
            assert_eq!(child.parent_span_id, proxy.span_context.span_id());
            assert_eq!(
                child.span_context.trace_id(),
                TraceId::from_bytes(TRACE.trace_id)
            );
        }
        assert_eq!(start.start_time, proxy.start_time);
        let waited = Duration::from_millis(600);
        assert_eq!(start.end_time, proxy.start_time + waited);
        assert_eq!(function.start_time, start.end_time);
        assert_eq!(function.end_time, proxy.end_time);
        assert!(
            start
                .attributes
                .contains(&KeyValue::new("sless.version", "20250102030405"))
        );

        let warm = spans("ns", "f", &call(None), TRACE);
        let names: Vec<&str> = warm.iter().map(|s| &*s.name).collect();
        assert_eq!(names, ["POST /fn/ns/f", "call ns/f"]);
        assert_eq!(warm[1].start_time, warm[0].start_time);
    }
}
