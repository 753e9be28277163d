//! What the proxy saw: per function, a bounded ring of recent calls and running totals,
//! for the console and the API, and the handles to its Prometheus metrics. In memory
//! only; a restart starts from zero.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard};
use std::time::Duration;

use axum::http::Method;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize, Serializer};
use sless_core::metrics::{CallMetrics, InFlight, metrics};

use super::Caller;

/// Calls kept per function.
pub const RECENT_INVOCATIONS: usize = 100;

/// How a call came: the public `/fn` route, an event trigger's delivery or a cron
/// trigger's fire.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Via {
    Http,
    Event,
    Cron,
}

impl From<Caller> for Via {
    fn from(caller: Caller) -> Self {
        match caller {
            Caller::Public => Via::Http,
            Caller::Event => Via::Event,
            Caller::Cron => Via::Cron,
        }
    }
}

/// Kept as taken and formatted only when read: most calls are never looked at.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Invocation {
    /// The call's `X-Request-Id` (the caller's, or made by sless).
    pub request_id: Box<str>,
    pub trigger: Via,
    /// The trigger that made the call, for calls sless makes (events, cron).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trigger_name: Option<Box<str>>,
    /// When the call arrived; RFC 3339 with milliseconds.
    #[serde(serialize_with = "rfc3339_millis")]
    pub time: DateTime<Utc>,
    #[serde(serialize_with = "method_name")]
    pub method: Method,
    /// The path after `/fn/{ns}/{name}` (`/` when empty), without the query.
    pub path: String,
    /// The function's status, or 502/504 when its answer broke off or ran out of time
    /// after the head had gone to the caller (see `error`).
    pub status: u16,
    /// Until the response body ended (or the caller left); in milliseconds.
    #[serde(rename = "duration_ms", serialize_with = "milliseconds")]
    pub duration: Duration,
    /// Why the answer was cut after its head went out; the caller saw the connection
    /// close.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<CallError>,
    /// sless refused the call without reaching the function (stopped, not started,
    /// no code): not counted as the function's error.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub refused: bool,
}

fn rfc3339_millis<S: Serializer>(time: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&time.to_rfc3339_opts(SecondsFormat::Millis, true))
}

fn method_name<S: Serializer>(method: &Method, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(method.as_str())
}

fn milliseconds<S: Serializer>(duration: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(millis(*duration))
}

/// Exact for whole microseconds, unlike `as_secs_f64() * 1000.0`.
fn millis(duration: Duration) -> f64 {
    duration.as_nanos() as f64 / 1e6
}

#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum CallError {
    /// The call ran past the function's `timeout_sec`.
    Timeout,
    /// The function's answer was malformed or broke off.
    BadAnswer,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct InvocationStats {
    pub count: u64,
    /// Calls the function answered with a status >= 500 (or ran out of time on).
    pub errors: u64,
    /// Calls sless refused (stopped, not started, no code).
    pub refused: u64,
    pub total_duration_ms: f64,
}

#[derive(Default)]
struct History {
    /// Newest first.
    recent: VecDeque<Invocation>,
    stats: InvocationStats,
}

/// One function's calls: looked up once per call, which then counts and records into it.
pub(crate) struct Calls {
    metrics: CallMetrics,
    history: Mutex<History>,
}

impl Calls {
    pub(crate) fn in_flight(&self) -> InFlight {
        self.metrics.in_flight()
    }

    pub(crate) fn record(&self, invocation: Invocation) {
        self.metrics.call(invocation.status, invocation.duration);
        // A panic elsewhere while holding the lock leaves plain counters behind, still
        // fine to read and update.
        let mut history = self.history.lock().unwrap_or_else(|e| e.into_inner());
        history.stats.count += 1;
        if invocation.refused {
            history.stats.refused += 1;
        } else if invocation.status >= 500 {
            history.stats.errors += 1;
        }
        history.stats.total_duration_ms += millis(invocation.duration);
        if history.recent.len() == RECENT_INVOCATIONS {
            history.recent.pop_back();
        }
        history.recent.push_front(invocation);
    }

    fn history(&self) -> MutexGuard<'_, History> {
        self.history.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Which recent calls a listing shows.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    pub trigger: Option<Via>,
    /// An exact status, or a class: `2xx`, `4xx`, `5xx`.
    pub status: Option<String>,
    /// Calls from this time on (RFC 3339).
    pub since: Option<DateTime<Utc>>,
}

impl Filter {
    /// Why the filter cannot be applied, if it cannot.
    pub fn problem(&self) -> Option<String> {
        let status = self.status.as_deref()?;
        let valid = matches!(status.as_bytes(), [b'1'..=b'5', b'x' | b'X', b'x' | b'X'])
            || status.parse::<u16>().is_ok_and(|s| (100..600).contains(&s));
        (!valid).then(|| {
            format!("status: {status:?} is not a status; use a code like 503 or a class like 5xx")
        })
    }

    fn keeps(&self, invocation: &Invocation) -> bool {
        self.trigger.is_none_or(|t| t == invocation.trigger)
            && self.since.is_none_or(|since| invocation.time >= since)
            && self
                .status
                .as_deref()
                .is_none_or(|s| status_matches(s, invocation.status))
    }
}

/// Whether `status` is `wanted`: `503`, or a class such as `5xx`.
fn status_matches(wanted: &str, status: u16) -> bool {
    match wanted.as_bytes() {
        [class @ b'1'..=b'5', b'x' | b'X', b'x' | b'X'] => u16::from(class - b'0') == status / 100,
        _ => wanted.parse() == Ok(status),
    }
}

type ByNamespace = HashMap<String, HashMap<String, Arc<Calls>>>;

/// Keyed namespace → name so that lookups by `&str` never allocate; only the first call
/// to a function creates its entry.
#[derive(Default)]
pub struct InvocationLog {
    by_namespace: RwLock<ByNamespace>,
}

impl InvocationLog {
    pub fn new() -> Self {
        Self::default()
    }

    /// The entry of a function, created at its first call.
    pub(crate) fn calls(&self, namespace: &str, name: &str) -> Arc<Calls> {
        if let Some(calls) = self.find(namespace, name) {
            return calls;
        }
        let mut map = self.by_namespace.write().unwrap_or_else(|e| e.into_inner());
        map.entry(namespace.to_owned())
            .or_default()
            .entry(name.to_owned())
            .or_insert_with(|| {
                Arc::new(Calls {
                    metrics: metrics().calls_of(namespace, name),
                    history: Mutex::new(History {
                        recent: VecDeque::with_capacity(RECENT_INVOCATIONS),
                        stats: InvocationStats::default(),
                    }),
                })
            })
            .clone()
    }

    /// Up to `limit` calls that `filter` keeps, newest first.
    pub fn recent(
        &self,
        namespace: &str,
        name: &str,
        filter: &Filter,
        limit: usize,
    ) -> Vec<Invocation> {
        self.find(namespace, name)
            .map(|c| {
                c.history()
                    .recent
                    .iter()
                    .filter(|i| filter.keeps(i))
                    .take(limit)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The call with this request id, if it is still among the recent ones.
    pub fn by_request_id(
        &self,
        namespace: &str,
        name: &str,
        request_id: &str,
    ) -> Option<Invocation> {
        let calls = self.find(namespace, name)?;
        let history = calls.history();
        history
            .recent
            .iter()
            .find(|i| &*i.request_id == request_id)
            .cloned()
    }

    pub fn stats(&self, namespace: &str, name: &str) -> InvocationStats {
        self.find(namespace, name)
            .map(|c| c.history().stats.clone())
            .unwrap_or_default()
    }

    /// Drops a function's history, when it is deleted.
    pub fn forget(&self, namespace: &str, name: &str) {
        let mut map = self.by_namespace.write().unwrap_or_else(|e| e.into_inner());
        if let Some(names) = map.get_mut(namespace) {
            names.remove(name);
            if names.is_empty() {
                map.remove(namespace);
            }
        }
    }

    fn find(&self, namespace: &str, name: &str) -> Option<Arc<Calls>> {
        self.read().get(namespace)?.get(name).cloned()
    }

    fn read(&self) -> RwLockReadGuard<'_, ByNamespace> {
        // Poisoned only by a panic in a map operation; the map itself stays whole.
        self.by_namespace.read().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(path: &str, status: u16, ms: f64) -> Invocation {
        Invocation {
            request_id: format!("id{path}").into(),
            trigger: Via::Http,
            trigger_name: None,
            refused: false,
            time: DateTime::UNIX_EPOCH,
            method: Method::GET,
            path: path.into(),
            status,
            duration: Duration::from_nanos((ms * 1e6) as u64),
            error: None,
        }
    }

    impl InvocationLog {
        fn record(&self, namespace: &str, name: &str, invocation: Invocation) {
            self.calls(namespace, name).record(invocation);
        }
    }

    #[test]
    fn serializes_as_the_api_documents() {
        let mut invocation = call("/a", 200, 1.5);
        invocation.time = "2025-01-02T03:04:05.678901Z".parse().unwrap();
        assert_eq!(
            serde_json::to_value(&invocation).unwrap(),
            serde_json::json!({
                "request_id": "id/a",
                "trigger": "http",
                "time": "2025-01-02T03:04:05.678Z",
                "method": "GET",
                "path": "/a",
                "status": 200,
                "duration_ms": 1.5,
            })
        );
    }

    #[test]
    fn keeps_the_newest_hundred_newest_first() {
        let log = InvocationLog::new();
        for i in 0..250 {
            log.record("ns", "f", call(&format!("/{i}"), 200, 1.0));
        }
        let all = Filter::default();
        let recent = log.recent("ns", "f", &all, usize::MAX);
        assert_eq!(recent.len(), RECENT_INVOCATIONS);
        assert_eq!(recent[0].path, "/249");
        assert_eq!(recent[99].path, "/150");
        assert_eq!(log.recent("ns", "f", &all, 3).len(), 3);
        assert_eq!(log.by_request_id("ns", "f", "id/200").unwrap().path, "/200");
        assert!(log.by_request_id("ns", "f", "id/10").is_none(), "dropped");
        assert_eq!(log.stats("ns", "f").count, 250);
    }

    #[test]
    fn stats_count_the_functions_errors_apart_from_refusals() {
        let log = InvocationLog::new();
        log.record("ns", "f", call("/", 200, 1.5));
        log.record("ns", "f", call("/", 404, 2.0));
        log.record("ns", "f", call("/", 502, 0.5));
        log.record("ns", "f", call("/", 504, 1.0));
        let mut stopped = call("/", 503, 0.0);
        stopped.refused = true;
        log.record("ns", "f", stopped);
        assert_eq!(
            log.stats("ns", "f"),
            InvocationStats {
                count: 5,
                errors: 2,
                refused: 1,
                total_duration_ms: 5.0
            }
        );
    }

    #[test]
    fn filters_by_trigger_status_and_time() {
        let log = InvocationLog::new();
        let mut event = call("/event", 500, 1.0);
        event.trigger = Via::Event;
        event.time = "2025-01-02T00:00:00Z".parse().unwrap();
        log.record("ns", "f", event);
        log.record("ns", "f", call("/ok", 200, 1.0));
        log.record("ns", "f", call("/missing", 404, 1.0));
        let paths = |filter: Filter| -> Vec<String> {
            log.recent("ns", "f", &filter, 10)
                .into_iter()
                .map(|i| i.path)
                .collect()
        };
        let status = |s: &str| Filter {
            status: Some(s.into()),
            ..Filter::default()
        };
        assert_eq!(paths(status("4xx")), ["/missing"]);
        assert_eq!(paths(status("200")), ["/ok"]);
        assert_eq!(paths(status("5XX")), ["/event"]);
        let events = Filter {
            trigger: Some(Via::Event),
            ..Filter::default()
        };
        assert_eq!(paths(events), ["/event"]);
        let since = Filter {
            since: Some("2025-01-01T00:00:00Z".parse().unwrap()),
            ..Filter::default()
        };
        assert_eq!(paths(since), ["/event"], "the others are at the epoch");
        assert!(status("5xx").problem().is_none());
        assert!(status("503").problem().is_none());
        for bad in ["abc", "6xx", "99", "50x"] {
            assert!(status(bad).problem().unwrap().contains("like 5xx"), "{bad}");
        }
    }

    #[test]
    fn functions_are_separate_and_forgettable() {
        let log = InvocationLog::new();
        log.record("ns", "f", call("/a", 200, 1.0));
        log.record("ns", "g", call("/b", 200, 1.0));
        log.record("other", "f", call("/c", 200, 1.0));
        let all = Filter::default();
        assert_eq!(log.recent("ns", "f", &all, 10)[0].path, "/a");
        assert_eq!(log.recent("other", "f", &all, 10)[0].path, "/c");

        log.forget("ns", "f");
        assert!(log.recent("ns", "f", &all, 10).is_empty());
        assert_eq!(log.stats("ns", "f"), InvocationStats::default());
        assert_eq!(log.stats("ns", "g").count, 1);
        log.forget("ns", "g");
        log.forget("nowhere", "x");
        assert!(log.read().get("ns").is_none());
    }
}
