//! What the proxy saw: per function, a bounded ring of recent calls and running totals,
//! for the console and the API, and the handles to its Prometheus metrics. In memory
//! only; a restart starts from zero.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard};
use std::time::Duration;

use axum::http::Method;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Serialize, Serializer};
use sless_core::metrics::{CallMetrics, InFlight, metrics};

/// Calls kept per function.
pub const RECENT_INVOCATIONS: usize = 100;

/// Kept as taken and formatted only when read: most calls are never looked at.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Invocation {
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
    /// Calls answered with a status >= 500.
    pub errors: u64,
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
        if invocation.status >= 500 {
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

    /// Up to `limit` calls, newest first.
    pub fn recent(&self, namespace: &str, name: &str, limit: usize) -> Vec<Invocation> {
        self.find(namespace, name)
            .map(|c| c.history().recent.iter().take(limit).cloned().collect())
            .unwrap_or_default()
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
        let recent = log.recent("ns", "f", usize::MAX);
        assert_eq!(recent.len(), RECENT_INVOCATIONS);
        assert_eq!(recent[0].path, "/249");
        assert_eq!(recent[99].path, "/150");
        assert_eq!(log.recent("ns", "f", 3).len(), 3);
        assert_eq!(log.stats("ns", "f").count, 250);
    }

    #[test]
    fn stats_count_server_errors_only() {
        let log = InvocationLog::new();
        log.record("ns", "f", call("/", 200, 1.5));
        log.record("ns", "f", call("/", 404, 2.0));
        log.record("ns", "f", call("/", 502, 0.5));
        log.record("ns", "f", call("/", 504, 1.0));
        assert_eq!(
            log.stats("ns", "f"),
            InvocationStats {
                count: 4,
                errors: 2,
                total_duration_ms: 5.0
            }
        );
    }

    #[test]
    fn functions_are_separate_and_forgettable() {
        let log = InvocationLog::new();
        log.record("ns", "f", call("/a", 200, 1.0));
        log.record("ns", "g", call("/b", 200, 1.0));
        log.record("other", "f", call("/c", 200, 1.0));
        assert_eq!(log.recent("ns", "f", 10)[0].path, "/a");
        assert_eq!(log.recent("other", "f", 10)[0].path, "/c");

        log.forget("ns", "f");
        assert!(log.recent("ns", "f", 10).is_empty());
        assert_eq!(log.stats("ns", "f"), InvocationStats::default());
        assert_eq!(log.stats("ns", "g").count, 1);
        log.forget("ns", "g");
        log.forget("nowhere", "x");
        assert!(log.read().get("ns").is_none());
    }
}
