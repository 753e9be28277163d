//! Where `/fn/{ns}/{name}` goes: the seam between the runners (embedded processes or
//! Kubernetes Services), which know, and the proxy (`sless-gateway`), which asks.

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::model::Kind;

/// Where a call to `/fn/{ns}/{name}` goes right now. The only part of the proxy that
/// differs between embedded mode (the runner's Unix sockets) and Kubernetes (Service DNS).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// No function or service of that name.
    Unknown,
    /// It exists but cannot take calls; the reason is for the caller.
    Unavailable { reason: String },
    /// An instance is being started (e.g. a trigger was just started) or its first
    /// version built: calls wait up to the proxy's start wait for it instead of
    /// failing at once.
    Starting { reason: String },
    /// Exposed but without code yet. An upload may have just been stored and not seen
    /// by the runner: calls wait the proxy's upload wait for that before the 503.
    NoCode { reason: String },
    Ready {
        kind: Kind,
        address: Address,
        /// `None` = no limit.
        timeout: Option<Duration>,
    },
    /// Running for a trigger other than http (an event trigger): `/fn` answers 503
    /// with the reason, the trigger's own calls (the proxy's `call`) go through.
    Hidden {
        reason: String,
        kind: Kind,
        address: Address,
        timeout: Option<Duration>,
    },
}

/// Where an instance answers; shared, as every call clones its route.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Address {
    /// The listening socket sless made for an embedded instance: nothing else reaches
    /// the instance.
    Unix(Arc<Path>),
    /// `host:port`, e.g. a Kubernetes Service.
    Tcp(Arc<str>),
}

impl Address {
    /// The Host header a call carries: an instance on a socket has no host name.
    pub fn host(&self) -> &str {
        match self {
            Address::Unix(_) => "localhost",
            Address::Tcp(authority) => authority,
        }
    }
}

/// For errors callers may see: a socket's path is a detail of the server, not theirs.
impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Unix(_) => f.write_str("the instance's socket"),
            Address::Tcp(authority) => f.write_str(authority),
        }
    }
}

/// Answers [`Route`]s from memory: the invoke path never waits on the store.
pub trait RouteTable: Send + Sync + 'static {
    fn route(&self, namespace: &str, name: &str) -> Route;
}

/// A call sless makes for a scheduled trigger (a cron fire).
#[derive(Clone, Debug)]
pub struct TriggerCall {
    pub namespace: String,
    pub function: String,
    pub trigger: String,
    /// The event, as JSON.
    pub body: Vec<u8>,
}

/// What came of a [`TriggerCall`]: the status the caller got (the function's, or the
/// proxy's refusal) and the call's request id, under which it is recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TriggerAnswer {
    pub status: u16,
    pub request_id: String,
}

/// A job run of a function, made by the runner itself (a process of its own, not a call
/// through the proxy), told to the proxy to be recorded among the function's calls.
#[derive(Clone, Debug)]
pub struct JobRun {
    pub namespace: String,
    pub function: String,
    pub job: String,
    pub request_id: String,
    pub started: chrono::DateTime<chrono::Utc>,
    pub duration: std::time::Duration,
    pub outcome: JobOutcome,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobOutcome {
    Succeeded,
    Failed,
    TimedOut,
}

/// The other way across the seam: a runner's scheduler asks the proxy to make its
/// calls, so that they are routed, timed, limited and recorded like every other call,
/// and tells it of the job runs it made itself.
#[async_trait::async_trait]
pub trait TriggerCalls: Send + Sync + 'static {
    /// The answer, or why the call could not be made.
    async fn call_for_trigger(&self, call: TriggerCall) -> Result<TriggerAnswer, String>;
    /// Records an ended job run among its function's calls.
    fn record_job_run(&self, run: JobRun);
}
