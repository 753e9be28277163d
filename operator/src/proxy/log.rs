//! What the proxy saw: per function, a bounded ring of recent calls and running totals,
//! for the console and the API. In memory only; a restart starts from zero.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use serde::Serialize;

/// Calls kept per function.
pub const RECENT_INVOCATIONS: usize = 100;

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Invocation {
    /// When the call arrived, RFC 3339 with milliseconds.
    pub time: String,
    pub method: String,
    /// The path after `/fn/{ns}/{name}` (`/` when empty), without the query.
    pub path: String,
    /// The function's status, or 502/504 when its answer broke off or ran out of time
    /// after the head had gone to the caller (see `error`).
    pub status: u16,
    /// Until the response body ended (or the caller left).
    pub duration_ms: f64,
    /// Why the answer was cut after its head went out; the caller saw the connection
    /// close.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<CallError>,
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

/// Keyed namespace → name so that lookups by `&str` never allocate; only the first call
/// to a function creates its entry.
#[derive(Default)]
pub struct InvocationLog {
    by_namespace: Mutex<HashMap<String, HashMap<String, History>>>,
}

impl InvocationLog {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn record(&self, namespace: &str, name: &str, invocation: Invocation) {
        let mut map = self.lock();
        let names = match map.get_mut(namespace) {
            Some(names) => names,
            None => map.entry(namespace.to_owned()).or_default(),
        };
        let history = match names.get_mut(name) {
            Some(history) => history,
            None => names.entry(name.to_owned()).or_insert_with(|| History {
                recent: VecDeque::with_capacity(RECENT_INVOCATIONS),
                stats: InvocationStats::default(),
            }),
        };
        history.stats.count += 1;
        if invocation.status >= 500 {
            history.stats.errors += 1;
        }
        history.stats.total_duration_ms += invocation.duration_ms;
        if history.recent.len() == RECENT_INVOCATIONS {
            history.recent.pop_back();
        }
        history.recent.push_front(invocation);
    }

    /// Up to `limit` calls, newest first.
    pub fn recent(&self, namespace: &str, name: &str, limit: usize) -> Vec<Invocation> {
        self.lock()
            .get(namespace)
            .and_then(|names| names.get(name))
            .map(|h| h.recent.iter().take(limit).cloned().collect())
            .unwrap_or_default()
    }

    pub fn stats(&self, namespace: &str, name: &str) -> InvocationStats {
        self.lock()
            .get(namespace)
            .and_then(|names| names.get(name))
            .map(|h| h.stats.clone())
            .unwrap_or_default()
    }

    /// Drops a function's history, when it is deleted.
    pub fn forget(&self, namespace: &str, name: &str) {
        let mut map = self.lock();
        if let Some(names) = map.get_mut(namespace) {
            names.remove(name);
            if names.is_empty() {
                map.remove(namespace);
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, HashMap<String, History>>> {
        // A panic elsewhere while holding the lock leaves plain counters behind, still
        // fine to read and update.
        self.by_namespace.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(path: &str, status: u16, ms: f64) -> Invocation {
        Invocation {
            time: "2025-01-01T00:00:00.000Z".into(),
            method: "GET".into(),
            path: path.into(),
            status,
            duration_ms: ms,
            error: None,
        }
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
        assert!(log.lock().get("ns").is_none());
    }
}
