//! Prometheus metrics of the whole process, served at `GET /metrics` (OpenMetrics text).
//! One registry per process: the proxy, the runners and the controllers all count into
//! [`metrics()`], so nothing has to be threaded through their constructors.

use std::sync::{Arc, LazyLock, OnceLock};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Workload {
    namespace: String,
    name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Call {
    namespace: String,
    name: String,
    /// `2xx`, `4xx`, `5xx`, ...
    class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Build {
    namespace: String,
    name: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildResult {
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Trigger {
    namespace: String,
    trigger: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventOutcome {
    namespace: String,
    trigger: String,
    /// `delivered`, `failed` (one attempt), `dead_lettered`.
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReviewOutcome {
    /// `safe`, `refused`, `skipped`, `failed`.
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Scale {
    namespace: String,
    name: String,
    /// `up` (an instance started for calls) or `down` (one stopped when idle).
    direction: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Reconcile {
    kind: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReconcileError {
    kind: String,
    error: String,
}

/// 1 ms to ~65 s.
fn call_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// 0.1 s to ~27 min.
fn build_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.1, 2.0, 15))
}

type HistogramFamily<S> = Family<S, Histogram>;

pub struct Metrics {
    registry: Registry,
    calls: Family<Call, Counter>,
    call_seconds: HistogramFamily<Workload>,
    in_flight: Family<Workload, Gauge>,
    builds: Family<Build, Counter>,
    build_seconds: HistogramFamily<BuildResult>,
    restarts: Family<Workload, Counter>,
    instances: Family<Workload, Gauge>,
    scale_events: Family<Scale, Counter>,
    cold_starts: Family<Workload, Counter>,
    cron_fires: Family<Trigger, Counter>,
    event_messages: Family<EventOutcome, Counter>,
    reconciles: Family<Reconcile, Counter>,
    reconcile_errors: Family<ReconcileError, Counter>,
    reviews: Family<ReviewOutcome, Counter>,
    review_seconds: HistogramFamily<ReviewOutcome>,
}

/// The process's metrics.
pub fn metrics() -> &'static Metrics {
    static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);
    &METRICS
}

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("sless");
        let calls = Family::default();
        registry.register(
            "calls",
            "Calls through /fn by function or service and status class",
            calls.clone(),
        );
        let call_seconds: HistogramFamily<Workload> = Family::new_with_constructor(call_histogram);
        registry.register(
            "call_duration_seconds",
            "Duration of calls through /fn, head to end of body",
            call_seconds.clone(),
        );
        let in_flight = Family::default();
        registry.register(
            "calls_in_flight",
            "Calls through /fn not answered yet",
            in_flight.clone(),
        );
        let builds = Family::default();
        registry.register(
            "builds",
            "Builds of uploads by result (succeeded, failed)",
            builds.clone(),
        );
        let build_seconds: HistogramFamily<BuildResult> =
            Family::new_with_constructor(build_histogram);
        registry.register(
            "build_duration_seconds",
            "Duration of builds by result (embedded mode)",
            build_seconds.clone(),
        );
        let restarts = Family::default();
        registry.register(
            "instance_restarts",
            "Instances restarted after they exited (embedded mode)",
            restarts.clone(),
        );
        let instances = Family::default();
        registry.register(
            "instances",
            "Instances running per function or service (Kubernetes mode: ready pods)",
            instances.clone(),
        );
        let scale_events = Family::default();
        registry.register(
            "scale_events",
            "Instances started for calls (up) or stopped when idle (down) (embedded mode)",
            scale_events.clone(),
        );
        let cold_starts = Family::default();
        registry.register(
            "cold_starts",
            "Instances started for calls while none ran: the calls waited (embedded mode)",
            cold_starts.clone(),
        );
        let cron_fires = Family::default();
        registry.register(
            "cron_fires",
            "Calls made by cron triggers (embedded mode; on Kubernetes, CronJobs)",
            cron_fires.clone(),
        );
        let event_messages = Family::default();
        registry.register(
            "event_messages",
            "Messages of event triggers by outcome (delivered, failed attempt, dead_lettered)",
            event_messages.clone(),
        );
        let reconciles = Family::default();
        registry.register(
            "reconciles",
            "Controller reconciles by kind and result (Kubernetes mode)",
            reconciles.clone(),
        );
        let reconcile_errors = Family::default();
        registry.register(
            "reconcile_errors",
            "Controller reconcile errors by kind and error",
            reconcile_errors.clone(),
        );
        let reviews = Family::default();
        registry.register(
            "code_reviews",
            "Pre-build code reviews of uploads by outcome (safe, refused, skipped, failed)",
            reviews.clone(),
        );
        let review_seconds: HistogramFamily<ReviewOutcome> =
            Family::new_with_constructor(call_histogram);
        registry.register(
            "code_review_duration_seconds",
            "Duration of pre-build code reviews by outcome",
            review_seconds.clone(),
        );
        Metrics {
            registry,
            calls,
            call_seconds,
            in_flight,
            builds,
            build_seconds,
            restarts,
            instances,
            scale_events,
            cold_starts,
            cron_fires,
            event_messages,
            reconciles,
            reconcile_errors,
            reviews,
            review_seconds,
        }
    }

    /// The OpenMetrics text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }

    /// The call metrics of one function or service, for its caller to keep: a call
    /// then builds no label set and takes no lock of the registry.
    pub fn calls_of(&self, namespace: &str, name: &str) -> CallMetrics {
        let workload = workload(namespace, name);
        CallMetrics {
            seconds: self.call_seconds.get_or_create(&workload).clone(),
            in_flight: self.in_flight.get_or_create(&workload).clone(),
            classes: Arc::default(),
            workload: Arc::new(workload),
        }
    }

    /// A finished build; its duration where the runner timed it (embedded mode).
    pub fn build(&self, namespace: &str, name: &str, succeeded: bool, took: Option<Duration>) {
        let result = if succeeded { "succeeded" } else { "failed" };
        self.builds
            .get_or_create(&Build {
                namespace: namespace.into(),
                name: name.into(),
                result: result.into(),
            })
            .inc();
        if let Some(took) = took {
            self.build_seconds
                .get_or_create(&BuildResult {
                    result: result.into(),
                })
                .observe(took.as_secs_f64());
        }
    }

    pub fn restart(&self, namespace: &str, name: &str) {
        self.restarts
            .get_or_create(&workload(namespace, name))
            .inc();
    }

    /// The instances a workload runs now.
    pub fn instances(&self, namespace: &str, name: &str, running: u32) {
        self.instances
            .get_or_create(&workload(namespace, name))
            .set(i64::from(running));
    }

    /// A deleted workload leaves no gauge behind.
    pub fn forget_instances(&self, namespace: &str, name: &str) {
        self.instances.remove(&workload(namespace, name));
    }

    /// An instance started for calls; `cold` when none was running (the calls waited).
    pub fn scaled_up(&self, namespace: &str, name: &str, cold: bool) {
        self.scale(namespace, name, "up", 1);
        if cold {
            self.cold_starts
                .get_or_create(&workload(namespace, name))
                .inc();
        }
    }

    /// `stopped` idle instances stopped.
    pub fn scaled_down(&self, namespace: &str, name: &str, stopped: u64) {
        self.scale(namespace, name, "down", stopped);
    }

    fn scale(&self, namespace: &str, name: &str, direction: &str, by: u64) {
        self.scale_events
            .get_or_create(&Scale {
                namespace: namespace.into(),
                name: name.into(),
                direction: direction.into(),
            })
            .inc_by(by);
    }

    pub fn cron_fire(&self, namespace: &str, trigger: &str) {
        self.cron_fires
            .get_or_create(&Trigger {
                namespace: namespace.into(),
                trigger: trigger.into(),
            })
            .inc();
    }

    /// A message of an event trigger: `delivered`, `failed` or `dead_lettered`.
    pub fn event_message(&self, namespace: &str, trigger: &str, outcome: &'static str) {
        self.event_messages
            .get_or_create(&EventOutcome {
                namespace: namespace.into(),
                trigger: trigger.into(),
                outcome: outcome.into(),
            })
            .inc();
    }

    /// A pre-build code review: `safe`, `refused`, `skipped` or `failed`.
    pub fn code_review(&self, outcome: &'static str, took: Duration) {
        let label = ReviewOutcome {
            outcome: outcome.into(),
        };
        self.reviews.get_or_create(&label).inc();
        self.review_seconds
            .get_or_create(&label)
            .observe(took.as_secs_f64());
    }

    /// A reconcile's outcome; `error` is a short, bounded label (the error's kind).
    pub fn reconcile(&self, kind: &str, error: Option<&str>) {
        let result = if error.is_some() { "error" } else { "ok" };
        self.reconciles
            .get_or_create(&Reconcile {
                kind: kind.into(),
                result: result.into(),
            })
            .inc();
        if let Some(error) = error {
            self.reconcile_errors
                .get_or_create(&ReconcileError {
                    kind: kind.into(),
                    error: error.into(),
                })
                .inc();
        }
    }
}

fn workload(namespace: &str, name: &str) -> Workload {
    Workload {
        namespace: namespace.into(),
        name: name.into(),
    }
}

/// Handles to one workload's call metrics ([`Metrics::calls_of`]).
#[derive(Clone)]
pub struct CallMetrics {
    workload: Arc<Workload>,
    /// The calls counter of each status class (index: status / 100), created at its
    /// first call so that classes never seen stay out of the exposition.
    classes: Arc<[OnceLock<Counter>; 10]>,
    seconds: Histogram,
    in_flight: Gauge,
}

impl CallMetrics {
    pub fn call(&self, status: u16, took: Duration) {
        let class = usize::from(status / 100).min(9);
        self.classes[class]
            .get_or_init(|| {
                metrics()
                    .calls
                    .get_or_create(&Call {
                        namespace: self.workload.namespace.clone(),
                        name: self.workload.name.clone(),
                        class: format!("{class}xx"),
                    })
                    .clone()
            })
            .inc();
        self.seconds.observe(took.as_secs_f64());
    }

    /// Counts a call in flight until the guard is dropped.
    pub fn in_flight(&self) -> InFlight {
        self.in_flight.inc();
        InFlight(self.in_flight.clone())
    }
}

/// Decrements the in-flight gauge when the call ends, however it ends.
pub struct InFlight(Gauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}
