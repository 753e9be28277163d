//! A job's run history (docs/spec.md §3, FunctionJob): every run's record in its status,
//! newest first, bounded in count and bytes. Both runners write a run's status through
//! [`FunctionJobStatus::advance`], so the history rule is here only. Kept in the status
//! because that is where a job lives in both modes: the SQLite row (kept across
//! restarts, deleted with the job) and the CustomResource (whose object must stay far
//! under the API server's 1.5 MiB request limit, hence [`RUNS_MAX_BYTES`]).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{FunctionJobStatus, JobPhase};
use crate::logs::{first_bytes, last_bytes};
use crate::request_id::new_request_id;

/// Runs kept per job unless `--job-runs-kept` says otherwise.
pub const DEFAULT_JOB_RUNS_KEPT: usize = 50;
/// A run's output kept as its log tail (in the status and in each record).
pub const JOB_LOG_TAIL_BYTES: usize = 4096;
/// A record keeps this much of its event and of its result.
pub const RUN_TEXT_BYTES: usize = 2048;
/// The history's records together, as JSON, at most (older runs are dropped first);
/// 50 records at their largest fit.
pub const RUNS_MAX_BYTES: usize = 512 * 1024;

/// One run of a job as its history keeps it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobRun {
    pub run_id: i64,
    /// The run's id (its event's `_request_id`), made when the run began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The event it ran with, cut to [`RUN_TEXT_BYTES`].
    #[serde(default)]
    pub event_json: String,
    #[serde(default)]
    pub phase: JobPhase,
    /// The result or the failure reason, cut to [`RUN_TEXT_BYTES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_tail: Option<String>,
    /// The version of the code it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

impl FunctionJobStatus {
    /// `next`, the status a runner made for the run it observes, with this (the stored)
    /// status's history carried over: the run keeps its request id (a new run gets a
    /// new one), gets a duration when it has both times, and its record is put first
    /// (or replaces its older one); at most `keep` runs and [`RUNS_MAX_BYTES`] stay.
    pub fn advance(
        &self,
        mut next: FunctionJobStatus,
        event_json: &str,
        keep: usize,
    ) -> FunctionJobStatus {
        next.runs = self.runs.clone();
        let Some(run_id) = next.observed_run_id.filter(|id| *id > 0) else {
            return next;
        };
        if next.request_id.is_none() {
            next.request_id = match &self.request_id {
                Some(id) if self.observed_run_id == Some(run_id) => Some(id.clone()),
                _ => Some(new_request_id()),
            };
        }
        if next.duration_ms.is_none() {
            next.duration_ms =
                elapsed_ms(next.start_time.as_deref(), next.completion_time.as_deref());
        }
        let record = JobRun {
            run_id,
            request_id: next.request_id.clone(),
            event_json: first_bytes(event_json, RUN_TEXT_BYTES),
            phase: next.phase,
            message: next
                .message
                .as_deref()
                .map(|m| first_bytes(m, RUN_TEXT_BYTES)),
            start_time: next.start_time.clone(),
            completion_time: next.completion_time.clone(),
            duration_ms: next.duration_ms,
            log_tail: next
                .log_tail
                .as_deref()
                .map(|t| last_bytes(t, JOB_LOG_TAIL_BYTES)),
            version: next.version.clone(),
        };
        next.runs.retain(|r| r.run_id != run_id);
        next.runs.insert(0, record);
        next.runs.truncate(keep.max(1));
        let mut total: usize = next.runs.iter().map(json_len).sum();
        while total > RUNS_MAX_BYTES && next.runs.len() > 1 {
            total -= next.runs.pop().as_ref().map_or(0, json_len);
        }
        next
    }

    /// The record of run `run_id`, if the history still has it.
    pub fn run(&self, run_id: i64) -> Option<&JobRun> {
        self.runs.iter().find(|r| r.run_id == run_id)
    }
}

fn json_len(run: &JobRun) -> usize {
    serde_json::to_string(run).map_or(0, |s| s.len())
}

/// Milliseconds from `start` to `end` (RFC 3339), when both parse and are in order.
fn elapsed_ms(start: Option<&str>, end: Option<&str>) -> Option<u64> {
    let parse = |t: &str| chrono::DateTime::parse_from_rfc3339(t).ok();
    let (start, end) = (parse(start?)?, parse(end?)?);
    u64::try_from((end - start).num_milliseconds()).ok()
}

/// The event a run is given: `_request_id` added when it is a JSON object, as a call
/// through `/fn` carries it (runtimes/README.md).
pub fn run_event(event_json: &str, request_id: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(event_json) {
        Ok(serde_json::Value::Object(mut event)) => {
            event.insert("_request_id".into(), request_id.into());
            serde_json::Value::Object(event).to_string()
        }
        _ => event_json.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finished(run_id: i64, message: &str) -> FunctionJobStatus {
        FunctionJobStatus {
            phase: JobPhase::Succeeded,
            observed_run_id: Some(run_id),
            start_time: Some("2026-01-01T00:00:00Z".into()),
            completion_time: Some("2026-01-01T00:00:02Z".into()),
            message: Some(message.into()),
            log_tail: Some(format!("log of {run_id}")),
            ..Default::default()
        }
    }

    #[test]
    fn runs_are_kept_newest_first_and_cut_to_keep() {
        let mut status = FunctionJobStatus::default();
        for run_id in 1..=3 {
            let running = FunctionJobStatus {
                phase: JobPhase::Running,
                observed_run_id: Some(run_id),
                ..Default::default()
            };
            status = status.advance(running, &format!("{{\"n\":{run_id}}}"), 2);
            let id = status.request_id.clone().unwrap();
            status = status.advance(finished(run_id, &run_id.to_string()), "{}", 2);
            // The same run keeps its id from start to end.
            assert_eq!(status.request_id.as_deref(), Some(id.as_str()));
            assert_eq!(status.runs[0].request_id.as_deref(), Some(id.as_str()));
        }
        let ids: Vec<i64> = status.runs.iter().map(|r| r.run_id).collect();
        assert_eq!(ids, [3, 2]);
        assert_eq!(status.runs[0].message.as_deref(), Some("3"));
        assert_eq!(status.runs[0].duration_ms, Some(2000));
        assert_eq!(status.runs[1].log_tail.as_deref(), Some("log of 2"));
        assert_ne!(status.runs[0].request_id, status.runs[1].request_id);
        assert_eq!(status.run(2).map(|r| r.phase), Some(JobPhase::Succeeded));
        assert!(status.run(1).is_none());
    }

    #[test]
    fn run_zero_is_no_run_but_keeps_the_history() {
        let status = FunctionJobStatus::default().advance(finished(1, "1"), "{}", 50);
        let skipped = FunctionJobStatus {
            phase: JobPhase::Skipped,
            observed_run_id: Some(0),
            ..Default::default()
        };
        let next = status.advance(skipped, "{}", 50);
        assert_eq!(next.runs.len(), 1);
        assert_eq!(next.request_id, None);
    }

    /// The Kubernetes object stays far under 1 MiB: 50 runs at their largest, with
    /// text that JSON escapes at six times its size.
    #[test]
    fn the_history_stays_within_its_byte_budget() {
        let control = "\u{1}".repeat(64 * 1024);
        let mut status = FunctionJobStatus::default();
        for run_id in 1..=50 {
            let mut next = finished(run_id, &control);
            next.log_tail = Some(control.clone());
            status = status.advance(next, &control, 50);
        }
        let bytes = serde_json::to_string(&status.runs).unwrap().len();
        assert!(bytes <= RUNS_MAX_BYTES, "{bytes}");
        assert!(status.runs.len() < 50 && status.runs[0].run_id == 50);

        let plain = "x".repeat(64 * 1024);
        let mut status = FunctionJobStatus::default();
        for run_id in 1..=50 {
            let mut next = finished(run_id, &plain);
            next.log_tail = Some(plain.clone());
            status = status.advance(next, &plain, 50);
        }
        assert_eq!(status.runs.len(), 50);
        let runs = serde_json::to_string(&status.runs).unwrap().len();
        assert!(runs < RUNS_MAX_BYTES, "{runs}");
        let whole = serde_json::to_string(&status).unwrap().len();
        assert!(whole < 640 * 1024, "{whole}");
    }

    #[test]
    fn the_event_carries_the_request_id_when_it_is_an_object() {
        let event: serde_json::Value =
            serde_json::from_str(&run_event(r#"{"a":1}"#, "abc")).unwrap();
        assert_eq!(event, serde_json::json!({"a": 1, "_request_id": "abc"}));
        assert_eq!(run_event("[1]", "abc"), "[1]");
    }
}
