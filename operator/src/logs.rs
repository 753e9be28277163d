//! Captured output of function instances: a bounded ring per workload, so the logs
//! endpoint and the console can show what a handler printed.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use serde::Serialize;

use crate::model::Kind;

/// Where the API reads captured output and build logs; each platform provides it.
#[async_trait::async_trait]
pub trait WorkloadLogs: Send + Sync + 'static {
    /// The last `lines` lines of a workload's output, oldest first.
    fn tail(&self, namespace: &str, name: &str, lines: usize) -> Vec<LogLine>;
    /// The whole log of the latest build, if there was one.
    async fn build_log(&self, kind: Kind, namespace: &str, name: &str) -> Option<String>;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    Stdout,
    Stderr,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LogLine {
    /// RFC 3339 with milliseconds.
    pub time: String,
    pub stream: Stream,
    /// Which upload the printing instance runs (its version stamp).
    pub version: String,
    pub line: String,
}

/// Lines longer than this are cut: one runaway print must not eat the ring.
const MAX_LINE_BYTES: usize = 8 * 1024;

pub struct LogBook {
    capacity: usize,
    rings: Mutex<HashMap<(String, String), VecDeque<LogLine>>>,
}

impl LogBook {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            rings: Mutex::new(HashMap::new()),
        }
    }

    pub fn push(&self, namespace: &str, name: &str, stream: Stream, version: &str, line: &str) {
        let mut line = line.trim_end_matches(['\r', '\n']).to_string();
        if line.len() > MAX_LINE_BYTES {
            let mut cut = MAX_LINE_BYTES;
            while !line.is_char_boundary(cut) {
                cut -= 1;
            }
            line.truncate(cut);
            line.push_str(" [line truncated]");
        }
        let entry = LogLine {
            time: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            stream,
            version: version.to_string(),
            line,
        };
        let mut rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        let ring = rings
            .entry((namespace.to_string(), name.to_string()))
            .or_default();
        if ring.len() == self.capacity {
            ring.pop_front();
        }
        ring.push_back(entry);
    }

    /// The last `n` lines, oldest first.
    pub fn tail(&self, namespace: &str, name: &str, n: usize) -> Vec<LogLine> {
        let rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        rings
            .get(&(namespace.to_string(), name.to_string()))
            .map(|ring| {
                ring.iter()
                    .skip(ring.len().saturating_sub(n))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn forget(&self, namespace: &str, name: &str) {
        let mut rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        rings.remove(&(namespace.to_string(), name.to_string()));
    }
}

/// Output only, no builds: for an API that runs no workloads itself.
#[async_trait::async_trait]
impl WorkloadLogs for LogBook {
    fn tail(&self, namespace: &str, name: &str, lines: usize) -> Vec<LogLine> {
        LogBook::tail(self, namespace, name, lines)
    }

    async fn build_log(&self, _kind: Kind, _namespace: &str, _name: &str) -> Option<String> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_keeps_the_newest_lines() {
        let book = LogBook::new(3);
        for i in 0..5 {
            book.push("ns", "f", Stream::Stdout, "v1", &format!("line {i}\n"));
        }
        let lines: Vec<_> = book
            .tail("ns", "f", 10)
            .into_iter()
            .map(|l| l.line)
            .collect();
        assert_eq!(lines, ["line 2", "line 3", "line 4"]);
        let last: Vec<_> = book
            .tail("ns", "f", 1)
            .into_iter()
            .map(|l| l.line)
            .collect();
        assert_eq!(last, ["line 4"]);
        assert!(book.tail("ns", "other", 10).is_empty());
    }

    #[test]
    fn long_lines_are_cut() {
        let book = LogBook::new(3);
        book.push("ns", "f", Stream::Stderr, "v1", &"é".repeat(10_000));
        let line = &book.tail("ns", "f", 1)[0].line;
        assert!(line.len() < MAX_LINE_BYTES + 32);
        assert!(line.ends_with("[line truncated]"));
    }
}
