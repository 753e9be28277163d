//! What the proxy saw: per function, a bounded ring of recent calls and running totals,
//! for the console and the API, and the handles to its Prometheus metrics. Kept across
//! restarts when an archive is given (embedded mode): a call only marks its function
//! changed, and [`InvocationLog::flush`] saves the changed ones in the background.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock, RwLockReadGuard};
use std::time::Duration;

use axum::http::Method;
use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sless_core::calls::{CallArchive, SavedCalls};
use sless_core::metrics::{CallMetrics, InFlight, metrics};
use sless_core::store;

use super::Caller;
use super::headers::call_id::{self, TraceIds};

/// Which calls a function's records keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// The newest calls kept per function.
    pub max_count: usize,
    /// Older calls are not listed, and are dropped when the records are loaded.
    pub max_age: Duration,
}

impl Retention {
    pub const DEFAULT: Retention = Retention {
        max_count: 100,
        max_age: Duration::from_secs(7 * 24 * 3600),
    };
}

impl Default for Retention {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// How a call came: the public `/fn` route, an event trigger's delivery, a cron
/// trigger's fire or the console's Invoke form.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Via {
    Http,
    Event,
    Cron,
    Console,
    /// A job run of the function (a process of its own, recorded when it ended).
    Job,
}

impl Via {
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Http => "http",
            Via::Event => "event",
            Via::Cron => "cron",
            Via::Console => "console",
            Via::Job => "job",
        }
    }
}

impl From<Caller> for Via {
    fn from(caller: Caller) -> Self {
        match caller {
            Caller::Public => Via::Http,
            Caller::Event => Via::Event,
            Caller::Cron => Via::Cron,
            Caller::Console => Via::Console,
        }
    }
}

/// Kept as taken and formatted only when read or saved: most calls are never looked at.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
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
    #[serde(serialize_with = "method_name", deserialize_with = "method_from_name")]
    pub method: Method,
    /// The path after `/fn/{ns}/{name}` (`/` when empty), without the query.
    pub path: String,
    /// The function's status, or 502/504 when its answer broke off or ran out of time
    /// after the head had gone to the caller (see `error`).
    pub status: u16,
    /// Until the response body ended (or the caller left); in milliseconds.
    #[serde(
        rename = "duration_ms",
        serialize_with = "milliseconds",
        deserialize_with = "from_milliseconds"
    )]
    pub duration: Duration,
    /// Why the answer was cut after its head went out; the caller saw the connection
    /// close.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<CallError>,
    /// sless refused the call without reaching the function (stopped, not started,
    /// no code): not counted as the function's error.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub refused: bool,
    /// The version of the code that served it, as `GET .../versions` lists it; None
    /// when the runner does not know it (a rollout in Kubernetes) or no code served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<Arc<str>>,
    /// The call waited for an instance to start: the first after an upload, a start
    /// or a scale to zero; a job run, which is a process of its own.
    #[serde(default)]
    pub cold: bool,
    /// How long it waited for that instance; only for the cold start's span at the end
    /// of the call.
    #[serde(skip)]
    pub start_wait: Duration,
    /// The call's W3C trace: its id is shown (to find the call's spans); the span ids
    /// are only for the export at the end of the call.
    #[serde(
        rename = "trace_id",
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "trace_id_hex",
        deserialize_with = "trace_id_from_hex"
    )]
    pub trace: Option<TraceIds>,
}

impl Invocation {
    /// Names the version that served the call and, when it waited for an instance to
    /// start, how long.
    pub(crate) fn served_by(&mut self, version: Option<Arc<str>>, start_wait: Option<Duration>) {
        self.version = version;
        self.cold = start_wait.is_some();
        self.start_wait = start_wait.unwrap_or_default();
    }
}

fn trace_id_hex<S: Serializer>(trace: &Option<TraceIds>, s: S) -> Result<S::Ok, S::Error> {
    let mut text = [0u8; 32];
    let trace_id = trace.map_or([0; 16], |t| t.trace_id);
    call_id::hex(&trace_id, &mut text);
    s.serialize_str(std::str::from_utf8(&text).unwrap_or_default())
}

fn trace_id_from_hex<'de, D: Deserializer<'de>>(d: D) -> Result<Option<TraceIds>, D::Error> {
    let text = String::deserialize(d)?;
    let trace_id = u128::from_str_radix(&text, 16)
        .map_err(serde::de::Error::custom)?
        .to_be_bytes();
    Ok(Some(TraceIds {
        trace_id,
        call_span_id: [0; 8],
        caller_span_id: None,
        sampled: false,
    }))
}

fn rfc3339_millis<S: Serializer>(time: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&time.to_rfc3339_opts(SecondsFormat::Millis, true))
}

fn method_name<S: Serializer>(method: &Method, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(method.as_str())
}

fn method_from_name<'de, D: Deserializer<'de>>(d: D) -> Result<Method, D::Error> {
    let name = String::deserialize(d)?;
    Method::from_bytes(name.as_bytes()).map_err(D::Error::custom)
}

fn milliseconds<S: Serializer>(duration: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(millis(*duration))
}

/// Rounded to whole nanoseconds, so that what [`milliseconds`] wrote reads back equal.
fn from_milliseconds<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let ms = f64::deserialize(d)?;
    if !(ms.is_finite() && ms >= 0.0) {
        return Err(D::Error::custom(format!(
            "{ms} is not a duration in milliseconds"
        )));
    }
    Ok(Duration::from_nanos((ms * 1e6).round() as u64))
}

/// Exact for whole microseconds, unlike `as_secs_f64() * 1000.0`.
fn millis(duration: Duration) -> f64 {
    duration.as_nanos() as f64 / 1e6
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum CallError {
    /// The call ran past the function's `timeout_sec`.
    Timeout,
    /// The function's answer was malformed or broke off.
    BadAnswer,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct InvocationStats {
    pub count: u64,
    /// Calls the function answered with a status >= 500 (or ran out of time on).
    pub errors: u64,
    /// Calls sless refused (stopped, not started, no code).
    pub refused: u64,
    pub total_duration_ms: f64,
}

/// Also the document saved in the archive.
#[derive(Default, Serialize, Deserialize)]
struct History {
    /// Newest first.
    recent: VecDeque<Invocation>,
    stats: InvocationStats,
}

/// One function's calls: looked up once per call, which then counts and records into it.
pub(crate) struct Calls {
    namespace: Box<str>,
    name: Box<str>,
    metrics: CallMetrics,
    history: Mutex<History>,
    /// `Retention::max_count`, at hand for each call.
    max_count: usize,
    /// Recorded into since the last save: the invoke path writes nothing else.
    changed: AtomicBool,
}

impl Calls {
    pub(crate) fn in_flight(&self) -> InFlight {
        self.metrics.in_flight()
    }

    pub(crate) fn record(&self, invocation: Invocation) {
        self.metrics.call(invocation.status, invocation.duration);
        super::traces::export(&self.namespace, &self.name, &invocation);
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
        if history.recent.len() >= self.max_count {
            history.recent.pop_back();
        }
        history.recent.push_front(invocation);
        self.changed.store(true, Ordering::Relaxed);
    }

    fn history(&self) -> MutexGuard<'_, History> {
        self.history.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The document the archive keeps.
    fn document(&self) -> Vec<u8> {
        serde_json::to_vec(&*self.history()).expect("a history encodes as JSON")
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
pub struct InvocationLog {
    by_namespace: RwLock<ByNamespace>,
    retention: Retention,
    /// Where records are saved, once [`InvocationLog::load`] has read it.
    archive: OnceLock<Arc<dyn CallArchive>>,
    /// Taken by a flush and by a forget, so that a flush cannot save a function that is
    /// being forgotten.
    turn: tokio::sync::Mutex<()>,
}

impl InvocationLog {
    pub fn new(retention: Retention) -> Self {
        Self {
            by_namespace: RwLock::default(),
            retention,
            archive: OnceLock::new(),
            turn: tokio::sync::Mutex::new(()),
        }
    }

    pub fn retention(&self) -> Retention {
        self.retention
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
                let history = History {
                    recent: VecDeque::with_capacity(self.retention.max_count),
                    stats: InvocationStats::default(),
                };
                self.entry(namespace, name, history, false)
            })
            .clone()
    }

    fn entry(&self, namespace: &str, name: &str, history: History, changed: bool) -> Arc<Calls> {
        Arc::new(Calls {
            namespace: namespace.into(),
            name: name.into(),
            metrics: metrics().calls_of(namespace, name),
            history: Mutex::new(history),
            max_count: self.retention.max_count,
            changed: AtomicBool::new(changed),
        })
    }

    /// Takes back the records `archive` holds, within the retention, and saves to it
    /// from now on. Called once, before serving; a document that does not decode is
    /// skipped (and replaced at the function's next call).
    pub async fn load(&self, archive: Arc<dyn CallArchive>) -> store::Result<()> {
        let saved = archive.load_all().await?;
        let cutoff = self.cutoff();
        let mut map = self.by_namespace.write().unwrap_or_else(|e| e.into_inner());
        for SavedCalls {
            namespace,
            name,
            document,
        } in saved
        {
            let mut history: History = match serde_json::from_slice(&document) {
                Ok(history) => history,
                Err(e) => {
                    tracing::warn!(%namespace, %name, error = %e, "call records not loaded");
                    continue;
                }
            };
            let before = history.recent.len();
            history.recent.retain(|i| i.time >= cutoff);
            history.recent.truncate(self.retention.max_count);
            // What retention dropped goes from the archive too, at the next flush.
            let trimmed = history.recent.len() < before;
            let calls = self.entry(&namespace, &name, history, trimmed);
            map.entry(namespace).or_default().insert(name, calls);
        }
        drop(map);
        if self.archive.set(archive).is_err() {
            tracing::warn!("call records loaded twice; saving to the first archive");
        }
        Ok(())
    }

    /// Saves the functions called since their last save; one that fails is tried again
    /// at the next flush.
    pub async fn flush(&self) {
        let Some(archive) = self.archive.get() else {
            return;
        };
        let _turn = self.turn.lock().await;
        let changed: Vec<(String, String, Arc<Calls>)> = self
            .read()
            .iter()
            .flat_map(|(namespace, names)| {
                names
                    .iter()
                    // Cleared before the document is taken: a call recorded meanwhile
                    // marks it again.
                    .filter(|(_, calls)| calls.changed.swap(false, Ordering::Relaxed))
                    .map(|(name, calls)| (namespace.clone(), name.clone(), calls.clone()))
            })
            .collect();
        if changed.is_empty() {
            return;
        }
        let documents: Vec<SavedCalls> = changed
            .iter()
            .map(|(namespace, name, calls)| SavedCalls {
                namespace: namespace.clone(),
                name: name.clone(),
                document: calls.document(),
            })
            .collect();
        if let Err(e) = archive.save(&documents).await {
            for (_, _, calls) in &changed {
                calls.changed.store(true, Ordering::Relaxed);
            }
            tracing::warn!(functions = changed.len(), error = %e, "call records not saved");
        }
    }

    /// Calls before this are past the retention's age.
    fn cutoff(&self) -> DateTime<Utc> {
        TimeDelta::from_std(self.retention.max_age)
            .ok()
            .and_then(|age| Utc::now().checked_sub_signed(age))
            .unwrap_or(DateTime::<Utc>::MIN_UTC)
    }

    /// Up to `limit` calls that `filter` keeps, newest first.
    pub fn recent(
        &self,
        namespace: &str,
        name: &str,
        filter: &Filter,
        limit: usize,
    ) -> Vec<Invocation> {
        let cutoff = self.cutoff();
        self.find(namespace, name)
            .map(|c| {
                c.history()
                    .recent
                    .iter()
                    .filter(|i| i.time >= cutoff && filter.keeps(i))
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
        let cutoff = self.cutoff();
        let history = calls.history();
        history
            .recent
            .iter()
            .find(|i| &*i.request_id == request_id && i.time >= cutoff)
            .cloned()
    }

    pub fn stats(&self, namespace: &str, name: &str) -> InvocationStats {
        self.find(namespace, name)
            .map(|c| c.history().stats.clone())
            .unwrap_or_default()
    }

    /// Drops a function's history, in memory and in the archive, when it is deleted.
    pub async fn forget(&self, namespace: &str, name: &str) -> store::Result<()> {
        let _turn = self.turn.lock().await;
        {
            let mut map = self.by_namespace.write().unwrap_or_else(|e| e.into_inner());
            if let Some(names) = map.get_mut(namespace) {
                names.remove(name);
                if names.is_empty() {
                    map.remove(namespace);
                }
            }
        }
        match self.archive.get() {
            Some(archive) => archive.forget(namespace, name).await,
            None => Ok(()),
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
            version: None,
            cold: false,
            start_wait: Duration::ZERO,
            time: DateTime::UNIX_EPOCH,
            method: Method::GET,
            path: path.into(),
            status,
            duration: Duration::from_nanos((ms * 1e6) as u64),
            error: None,
            trace: None,
        }
    }

    /// The tests' calls are at the epoch.
    const UNAGED: Retention = Retention {
        max_count: 100,
        max_age: Duration::MAX,
    };

    impl InvocationLog {
        fn record(&self, namespace: &str, name: &str, invocation: Invocation) {
            self.calls(namespace, name).record(invocation);
        }
    }

    /// An archive in memory, counting its saves.
    #[derive(Default)]
    struct Shelf {
        documents: Mutex<HashMap<(String, String), Vec<u8>>>,
        saves: std::sync::atomic::AtomicUsize,
    }

    #[async_trait::async_trait]
    impl CallArchive for Shelf {
        async fn save(&self, documents: &[SavedCalls]) -> store::Result<()> {
            self.saves.fetch_add(documents.len(), Ordering::Relaxed);
            let mut shelf = self.documents.lock().unwrap();
            for saved in documents {
                let key = (saved.namespace.clone(), saved.name.clone());
                shelf.insert(key, saved.document.clone());
            }
            Ok(())
        }

        async fn load_all(&self) -> store::Result<Vec<SavedCalls>> {
            let documents = self.documents.lock().unwrap();
            Ok(documents
                .iter()
                .map(|((namespace, name), document)| SavedCalls {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    document: document.clone(),
                })
                .collect())
        }

        async fn forget(&self, namespace: &str, name: &str) -> store::Result<()> {
            let key = (namespace.to_owned(), name.to_owned());
            self.documents.lock().unwrap().remove(&key);
            Ok(())
        }
    }

    #[test]
    fn reads_back_what_it_saves() {
        let mut invocation = call("/a", 504, 1.25);
        invocation.time = "2025-01-02T03:04:05.678Z".parse().unwrap();
        invocation.method = Method::from_bytes(b"PROPFIND").unwrap();
        invocation.error = Some(CallError::Timeout);
        invocation.trigger_name = Some("nightly".into());
        invocation.refused = true;
        invocation.version = Some("20250102030405-2".into());
        invocation.cold = true;
        let text = serde_json::to_string(&invocation).unwrap();
        assert_eq!(
            serde_json::from_str::<Invocation>(&text).unwrap(),
            invocation
        );
        let plain = call("/b", 200, 1.234567);
        let text = serde_json::to_string(&plain).unwrap();
        assert_eq!(serde_json::from_str::<Invocation>(&text).unwrap(), plain);
    }

    #[tokio::test]
    async fn saves_what_changed_and_loads_within_the_retention() {
        let shelf = Arc::new(Shelf::default());
        let log = InvocationLog::new(Retention::DEFAULT);
        log.load(shelf.clone()).await.unwrap();
        let now = Utc::now();
        for i in 0..5 {
            let mut invocation = call(&format!("/{i}"), 200, 1.0);
            // Two of them eight days old.
            invocation.time = now - TimeDelta::days(if i < 2 { 8 } else { 0 });
            log.record("ns", "f", invocation);
        }
        log.record("ns", "g", call("/g", 200, 1.0));
        assert_eq!(
            log.recent("ns", "f", &Filter::default(), 10).len(),
            3,
            "aged"
        );
        log.flush().await;
        log.flush().await;
        assert_eq!(shelf.saves.load(Ordering::Relaxed), 2, "once each");

        let reloaded = InvocationLog::new(Retention {
            max_count: 2,
            ..Retention::DEFAULT
        });
        reloaded.load(shelf.clone()).await.unwrap();
        let paths: Vec<String> = reloaded
            .recent("ns", "f", &Filter::default(), 10)
            .into_iter()
            .map(|i| i.path)
            .collect();
        assert_eq!(paths, ["/4", "/3"]);
        assert_eq!(reloaded.stats("ns", "f").count, 5, "the totals stay");
        assert!(
            reloaded
                .recent("ns", "g", &Filter::default(), 10)
                .is_empty()
        );

        // Trimmed on load, so saved again; g, all aged, too.
        reloaded.flush().await;
        assert_eq!(shelf.saves.load(Ordering::Relaxed), 4);
        let history: History =
            serde_json::from_slice(&shelf.documents.lock().unwrap()[&("ns".into(), "f".into())])
                .unwrap();
        assert_eq!(history.recent.len(), 2);

        reloaded.forget("ns", "f").await.unwrap();
        assert_eq!(shelf.load_all().await.unwrap().len(), 1, "g is left");
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
                "cold": false,
            })
        );
    }

    #[test]
    fn keeps_the_newest_hundred_newest_first() {
        let log = InvocationLog::new(UNAGED);
        for i in 0..250 {
            log.record("ns", "f", call(&format!("/{i}"), 200, 1.0));
        }
        let all = Filter::default();
        let recent = log.recent("ns", "f", &all, usize::MAX);
        assert_eq!(recent.len(), UNAGED.max_count);
        assert_eq!(recent[0].path, "/249");
        assert_eq!(recent[99].path, "/150");
        assert_eq!(log.recent("ns", "f", &all, 3).len(), 3);
        assert_eq!(log.by_request_id("ns", "f", "id/200").unwrap().path, "/200");
        assert!(log.by_request_id("ns", "f", "id/10").is_none(), "dropped");
        assert_eq!(log.stats("ns", "f").count, 250);
    }

    #[test]
    fn stats_count_the_functions_errors_apart_from_refusals() {
        let log = InvocationLog::new(UNAGED);
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
        let log = InvocationLog::new(UNAGED);
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

    #[tokio::test]
    async fn functions_are_separate_and_forgettable() {
        let log = InvocationLog::new(UNAGED);
        log.record("ns", "f", call("/a", 200, 1.0));
        log.record("ns", "g", call("/b", 200, 1.0));
        log.record("other", "f", call("/c", 200, 1.0));
        let all = Filter::default();
        assert_eq!(log.recent("ns", "f", &all, 10)[0].path, "/a");
        assert_eq!(log.recent("other", "f", &all, 10)[0].path, "/c");

        log.forget("ns", "f").await.unwrap();
        assert!(log.recent("ns", "f", &all, 10).is_empty());
        assert_eq!(log.stats("ns", "f"), InvocationStats::default());
        assert_eq!(log.stats("ns", "g").count, 1);
        log.forget("ns", "g").await.unwrap();
        log.forget("nowhere", "x").await.unwrap();
        assert!(log.read().get("ns").is_none());
    }
}
