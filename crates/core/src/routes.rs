//! Where `/fn/{ns}/{name}` goes: the seam between the runners (embedded processes or
//! Kubernetes Services), which know, and the proxy (`sless-gateway`), which asks.

use std::sync::Arc;
use std::time::Duration;

use crate::model::Kind;

/// Where a call to `/fn/{ns}/{name}` goes right now. The only part of the proxy that
/// differs between embedded mode (the runner's local ports) and Kubernetes (Service DNS).
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
        /// `host:port` of the instance; shared, as every call clones its route.
        authority: Arc<str>,
        /// `None` = no limit.
        timeout: Option<Duration>,
    },
    /// Running for a trigger other than http (an event trigger): `/fn` answers 503
    /// with the reason, the trigger's own calls (the proxy's `call`) go through.
    Hidden {
        reason: String,
        kind: Kind,
        authority: Arc<str>,
        timeout: Option<Duration>,
    },
}

/// Answers [`Route`]s from memory: the invoke path never waits on the store.
pub trait RouteTable: Send + Sync + 'static {
    fn route(&self, namespace: &str, name: &str) -> Route;
}
