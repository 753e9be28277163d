//! One Function or Service as its console page shows it: the workload, its triggers
//! (cron ones with their last and next run), its recent calls through `/fn` with totals,
//! percentiles and calls per minute, its logs and its latest build log. Also the
//! text/plain and JSON renderings curl gets on the same URL.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sless_api::{LogLineResponse, WorkloadResponse};

use crate::listing::TriggerView;

/// Calls listed on the page (the API keeps the last 100 by default; the percentiles use
/// them all).
pub const SHOWN_CALLS: usize = 50;
pub const FETCHED_CALLS: usize = 100;
pub const LOG_LINES: usize = 200;
/// The chart's and the percentiles' window, in minutes.
const WINDOW_MINUTES: i64 = 60;

/// One call, as `/invocations` reports it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Call {
    /// Its `X-Request-Id`: the key of its lines in the logs.
    #[serde(default)]
    pub request_id: String,
    /// How it came: http, event or cron.
    #[serde(default)]
    pub trigger: String,
    pub time: String,
    pub method: String,
    pub path: String,
    pub status: u16,
    pub duration_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The version of the code that served it, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// It waited for an instance to start.
    #[serde(default)]
    pub cold: bool,
}

/// The answer of a call made from the invoke form, kept for the page shown after it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InvokeOutcome {
    pub method: String,
    pub path: String,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// As text, cut at [`INVOKE_BODY_LIMIT`].
    pub body: String,
    pub json: bool,
    pub duration_ms: f64,
}

/// The part of an answer body the page shows (it is kept in the session until shown).
pub const INVOKE_BODY_LIMIT: usize = 64 * 1024;

/// Every call since the platform started.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CallTotals {
    pub count: u64,
    /// Answered with a status >= 500.
    pub errors: u64,
    pub total_duration_ms: f64,
}

#[derive(Deserialize)]
struct CallsResponse {
    #[serde(default)]
    stats: CallTotals,
    #[serde(default)]
    invocations: Vec<Call>,
}

/// Calls per minute, oldest minute first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Minute {
    pub calls: u32,
    pub errors: u32,
}

/// What the page says about calls: totals, the last hour's percentiles and chart.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CallSummary {
    pub totals: CallTotals,
    /// Errors over calls, in percent; None before the first call.
    pub error_rate: Option<f64>,
    pub last_hour_calls: usize,
    pub p50_ms: Option<f64>,
    pub p95_ms: Option<f64>,
    pub per_minute: Vec<Minute>,
    /// Newest first, at most [`SHOWN_CALLS`].
    pub recent: Vec<Call>,
}

impl CallSummary {
    /// From the `/invocations` answer, as of `now`.
    pub fn from_api(value: serde_json::Value, now: DateTime<Utc>) -> Result<Self, String> {
        let response: CallsResponse = serde_json::from_value(value)
            .map_err(|e| format!("the API's invocations could not be read: {e}"))?;
        Ok(Self::of(response.stats, response.invocations, now))
    }

    pub fn of(totals: CallTotals, mut calls: Vec<Call>, now: DateTime<Utc>) -> Self {
        let error_rate =
            (totals.count > 0).then(|| 100.0 * totals.errors as f64 / totals.count as f64);
        let mut per_minute = vec![Minute::default(); WINDOW_MINUTES as usize];
        let mut durations = Vec::new();
        for call in &calls {
            let Ok(at) = DateTime::parse_from_rfc3339(&call.time) else {
                continue;
            };
            let age = (now - at.with_timezone(&Utc)).num_minutes();
            if !(0..WINDOW_MINUTES).contains(&age) {
                continue;
            }
            durations.push(call.duration_ms);
            let minute = &mut per_minute[(WINDOW_MINUTES - 1 - age) as usize];
            minute.calls += 1;
            minute.errors += u32::from(call.status >= 500);
        }
        durations.sort_by(f64::total_cmp);
        calls.truncate(SHOWN_CALLS);
        CallSummary {
            totals,
            error_rate,
            last_hour_calls: durations.len(),
            p50_ms: percentile(&durations, 50.0),
            p95_ms: percentile(&durations, 95.0),
            per_minute,
            recent: calls,
        }
    }
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// A trigger with, for cron ones, when it last ran and when it runs next.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TriggerRuns {
    #[serde(flatten)]
    pub trigger: TriggerView,
    /// None when stopped, not cron, or the schedule does not parse.
    pub next_run: Option<String>,
}

impl TriggerRuns {
    pub fn of(trigger: TriggerView, now: DateTime<Utc>) -> Self {
        let next_run = trigger
            .schedule
            .as_deref()
            .filter(|_| trigger.trigger_type == "cron" && trigger.enabled)
            .and_then(|s| s.parse::<croner::Cron>().ok())
            .and_then(|cron| cron.find_next_occurrence(&now, false).ok())
            .map(|at| at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        TriggerRuns { trigger, next_run }
    }
}

/// Everything the function page shows.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FunctionView {
    pub workload: WorkloadResponse,
    pub triggers: Vec<TriggerRuns>,
    pub calls: CallSummary,
    /// Oldest first (newest at the bottom), at most [`LOG_LINES`].
    pub logs: Vec<LogLineResponse>,
    /// None before the first build.
    pub build_log: Option<String>,
    /// The kept versions of the code, newest first.
    pub versions: Vec<sless_api::VersionResponse>,
}

impl FunctionView {
    pub fn stopped(&self) -> bool {
        crate::listing::http_stopped(self.triggers.iter().map(|t| &t.trigger))
    }

    /// The workload's URL, else its http trigger's.
    pub fn url(&self) -> Option<&str> {
        self.workload.url.as_deref().or_else(|| {
            self.triggers
                .iter()
                .find(|t| t.trigger.trigger_type == "http")
                .and_then(|t| t.trigger.url.as_deref())
        })
    }
}

/// The error lines of a failure message (sless_api's rule, shared with the runners'
/// causes), one per line; None when no line names an error.
pub fn error_lines(message: &str) -> Option<String> {
    let lines = sless_api::text::error_lines(message);
    (!lines.is_empty()).then(|| lines.join("\n"))
}

fn or_dash(value: Option<&str>) -> &str {
    value.unwrap_or("-")
}

fn millis(value: Option<f64>) -> String {
    value.map_or_else(|| "-".into(), |ms| format!("{ms:.1} ms"))
}

/// The page as text for curl. Writing to a String cannot fail.
pub fn render_text(view: &FunctionView) -> String {
    let w = &view.workload;
    let mut out = String::new();
    let state = if view.stopped() { " (stopped)" } else { "" };
    let _ = writeln!(
        out,
        "{} {}  {}  {}{state}",
        w.kind, w.name, w.runtime, w.phase
    );
    let _ = writeln!(out, "url:         {}", or_dash(view.url()));
    let _ = writeln!(out, "entrypoint:  {}", w.entrypoint);
    let _ = writeln!(out, "memory:      {} MB", w.memory_mb);
    let _ = writeln!(out, "cpu:         {} millicores", w.cpu_millis);
    let _ = writeln!(out, "disk:        {} MB", w.disk_mb);
    let _ = writeln!(out, "timeout:     {} s", w.timeout_sec);
    let running = match w.instances {
        Some(0) => "0 running (cold), ".to_string(),
        Some(n) => format!("{n} running (warm), "),
        None => String::new(),
    };
    let _ = writeln!(
        out,
        "instances:   {running}{}-{}, target {} calls each",
        w.min_instances, w.max_instances, w.target_concurrency
    );
    let _ = writeln!(out, "egress:      {}", w.egress);
    let env: Vec<&str> = w.env_vars.keys().map(String::as_str).collect();
    let env = env.join(",");
    let _ = writeln!(
        out,
        "env:         {}",
        or_dash(Some(env.as_str()).filter(|s| !s.is_empty()))
    );
    let _ = writeln!(out, "last built:  {}", or_dash(w.last_built_at.as_deref()));
    if let Some(message) = &w.message {
        let _ = writeln!(out, "message:     {message}");
    }
    let _ = writeln!(out, "\ntriggers:");
    for t in &view.triggers {
        let state = if t.trigger.enabled { "on" } else { "off" };
        let _ = write!(out, "  {}  {}  {state}", t.trigger.name, t.trigger.label());
        if t.trigger.trigger_type == "cron" {
            let _ = write!(
                out,
                "  last {}  next {}",
                or_dash(t.trigger.last_run.as_deref()),
                or_dash(t.next_run.as_deref())
            );
        }
        out.push('\n');
    }
    let c = &view.calls;
    let rate = c
        .error_rate
        .map_or_else(|| "-".into(), |r| format!("{r:.1}%"));
    let _ = writeln!(
        out,
        "\ncalls: {} total, {} errors ({rate}); last hour: {} calls, p50 {}, p95 {}",
        c.totals.count,
        c.totals.errors,
        c.last_hour_calls,
        millis(c.p50_ms),
        millis(c.p95_ms)
    );
    for call in &c.recent {
        let _ = writeln!(
            out,
            "  {}  {:<5} {:<6} {}  {}  {:.1} ms{}  {}  {}",
            call.time,
            call.trigger,
            call.method,
            call.status,
            call.path,
            call.duration_ms,
            if call.cold { " (cold)" } else { "" },
            call.version.as_deref().unwrap_or("-"),
            call.request_id
        );
    }
    let _ = writeln!(out, "\nlogs (last {}):", view.logs.len());
    for line in &view.logs {
        let _ = writeln!(out, "  {}", line.text());
    }
    if let Some(log) = &view.build_log {
        let _ = writeln!(out, "\nbuild log:\n{log}");
    }
    out
}

/// What a log line's version stamp (`20261207001122`, `-1` when two uploads share a
/// second) says to a person: when that version was uploaded; sless's own lines have
/// none.
pub fn version_label(version: &str) -> String {
    let (stamp, nth) = version.split_once('-').unwrap_or((version, ""));
    match chrono::NaiveDateTime::parse_from_str(stamp, "%Y%m%d%H%M%S") {
        Ok(at) if nth.is_empty() => format!("version uploaded {}", at.format("%Y-%m-%d %H:%M:%S")),
        Ok(at) => format!(
            "version uploaded {} (#{nth})",
            at.format("%Y-%m-%d %H:%M:%S")
        ),
        Err(_) => "sless".to_string(),
    }
}

pub fn render_json(view: &FunctionView) -> String {
    #[derive(Serialize)]
    struct Json<'a> {
        #[serde(flatten)]
        view: &'a FunctionView,
        stopped: bool,
    }
    // Plain data of strings and numbers: serialisation cannot fail.
    serde_json::to_string_pretty(&Json {
        view,
        stopped: view.stopped(),
    })
    .unwrap_or_else(|_| "{}".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(minutes_ago: i64, status: u16, ms: f64, now: DateTime<Utc>) -> Call {
        Call {
            request_id: format!("call-{minutes_ago}"),
            trigger: "http".into(),
            time: (now - chrono::Duration::minutes(minutes_ago)).to_rfc3339(),
            method: "POST".into(),
            path: "/".into(),
            status,
            duration_ms: ms,
            error: None,
            version: None,
            cold: false,
        }
    }

    #[test]
    fn summary_counts_the_last_hour_per_minute_with_percentiles() {
        let now = Utc::now();
        let mut calls: Vec<Call> = (1..=100)
            .map(|i| call(0, if i % 10 == 0 { 500 } else { 200 }, i as f64, now))
            .collect();
        calls.push(call(5, 200, 1000.0, now));
        calls.push(call(90, 200, 5000.0, now));
        let totals = CallTotals {
            count: 102,
            errors: 10,
            total_duration_ms: 0.0,
        };
        let s = CallSummary::of(totals, calls, now);
        assert_eq!(s.last_hour_calls, 101);
        assert_eq!(s.p50_ms, Some(51.0));
        assert_eq!(s.p95_ms, Some(96.0));
        assert_eq!(s.per_minute.len(), 60);
        assert_eq!(
            s.per_minute[59],
            Minute {
                calls: 100,
                errors: 10
            }
        );
        assert_eq!(s.per_minute[54].calls, 1);
        assert_eq!(s.recent.len(), SHOWN_CALLS);
        let rate = s.error_rate.unwrap();
        assert!((rate - 9.8).abs() < 0.01, "{rate}");
        assert_eq!(
            CallSummary::of(CallTotals::default(), vec![], now).p50_ms,
            None
        );
    }
}
