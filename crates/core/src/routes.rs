//! Where `/fn/{ns}/{name}` goes: the seam between the runners (embedded processes or
//! Kubernetes Services), which know, and the proxy (`sless-gateway`), which asks.

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

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
        instances: Instances,
        /// `None` = no limit.
        timeout: Option<Duration>,
        /// The version (as `GET .../versions` lists it) its instances run, when the
        /// runner knows it: what each call's record names.
        version: Option<Arc<str>>,
    },
    /// Running for a trigger other than http (an event trigger): `/fn` answers 503
    /// with the reason, the trigger's own calls (the proxy's `call`) go through.
    Hidden {
        reason: String,
        kind: Kind,
        instances: Instances,
        timeout: Option<Duration>,
        version: Option<Arc<str>>,
    },
}

/// Where the instances of a ready workload answer.
#[derive(Clone, Debug)]
pub enum Instances {
    /// One address that balances itself (a Kubernetes Service).
    One(Address),
    /// The instances a runner started, each with its calls in flight; none while the
    /// workload is scaled to zero, and then a call asks the [`Scaler`] for one.
    Scaled {
        ready: Arc<[Arc<Slot>]>,
        scaler: Arc<Scaler>,
    },
}

impl From<Address> for Instances {
    fn from(address: Address) -> Self {
        Instances::One(address)
    }
}

impl PartialEq for Instances {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Instances::One(a), Instances::One(b)) => a == b,
            (
                Instances::Scaled {
                    ready: a,
                    scaler: s,
                },
                Instances::Scaled {
                    ready: b,
                    scaler: t,
                },
            ) => {
                Arc::ptr_eq(s, t)
                    && a.len() == b.len()
                    && a.iter().zip(b.iter()).all(|(x, y)| Arc::ptr_eq(x, y))
            }
            _ => false,
        }
    }
}

impl Eq for Instances {}

impl Instances {
    /// A call's place on the instance with the fewest calls in flight; None when no
    /// instance is ready (the scaler is asked for one). Past the target concurrency
    /// on every instance, the scaler is asked for another.
    pub fn lease(&self) -> Option<Lease> {
        self.lease_near(None)
    }

    /// As [`Instances::lease`], but a call from a connection that holds a connection to
    /// the instance at `kept` stays there while that instance is under the target
    /// concurrency: moving to the least busy instance on every call costs a new
    /// connection to the function for a third of the calls (16 callers, 4 instances).
    pub fn lease_near(&self, kept: Option<&Address>) -> Option<Lease> {
        let (ready, scaler) = match self {
            Instances::One(address) => return Some(Lease::Fixed(address.clone())),
            Instances::Scaled { ready, scaler } => (ready, scaler),
        };
        let target = scaler.target_concurrency.load(Ordering::Relaxed);
        if let Some(kept) = kept
            && let Some(slot) = ready
                .iter()
                .find(|s| s.address() == kept && !s.is_closing())
            && slot.in_flight() < u64::from(target)
            && let Some(in_flight) = slot.try_lease()
        {
            if in_flight > target {
                scaler.want_more();
            }
            return Some(Lease::Slot(slot.clone()));
        }
        // A slot that closes between the look and the lease is skipped on the next look.
        for _ in 0..ready.len() {
            let Some(slot) = ready
                .iter()
                .filter(|s| !s.is_closing())
                .min_by_key(|s| s.in_flight())
            else {
                break;
            };
            if let Some(in_flight) = slot.try_lease() {
                if in_flight > target {
                    scaler.want_more();
                }
                return Some(Lease::Slot(slot.clone()));
            }
        }
        scaler.want_more();
        None
    }

    /// Whether `address` is still one of these instances.
    pub fn contains(&self, address: &Address) -> bool {
        match self {
            Instances::One(one) => one == address,
            Instances::Scaled { ready, .. } => ready.iter().any(|s| s.address() == address),
        }
    }
}

/// Bits of [`Slot`]'s state: calls in flight in the low bits, then "closing", then the
/// count of calls ever leased.
const IN_FLIGHT: u64 = (1 << 24) - 1;
const CLOSING: u64 = 1 << 24;
const LEASED: u64 = 1 << 25;

/// One instance of a scaled workload as the proxy sees it. Its state is one atomic
/// word, so a call takes and gives back its place with one operation each, and the
/// runner can close it without a lock: a call that leases after the close sees it and
/// goes elsewhere, one that leased before is waited for.
#[derive(Debug)]
pub struct Slot {
    address: Address,
    state: AtomicU64,
}

impl Slot {
    pub fn new(address: Address) -> Arc<Self> {
        Arc::new(Self {
            address,
            state: AtomicU64::new(0),
        })
    }

    pub fn address(&self) -> &Address {
        &self.address
    }

    pub fn in_flight(&self) -> u64 {
        self.state.load(Ordering::SeqCst) & IN_FLIGHT
    }

    /// Calls ever leased here: unchanged between two looks means no call came.
    pub fn leased(&self) -> u64 {
        self.state.load(Ordering::SeqCst) / LEASED
    }

    pub fn is_closing(&self) -> bool {
        self.state.load(Ordering::Relaxed) & CLOSING != 0
    }

    /// No call leases it from now on; the calls in flight, returned, go on.
    pub fn close(&self) -> u64 {
        self.state.fetch_or(CLOSING, Ordering::SeqCst) & IN_FLIGHT
    }

    /// The calls in flight with this one, or None when it is closing.
    fn try_lease(&self) -> Option<u32> {
        let before = self.state.fetch_add(LEASED + 1, Ordering::SeqCst);
        if before & CLOSING != 0 {
            self.state.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(u32::try_from((before & IN_FLIGHT) + 1).unwrap_or(u32::MAX))
    }
}

/// A call's place on an instance, given back when the call ends.
#[derive(Debug)]
pub enum Lease {
    Fixed(Address),
    Slot(Arc<Slot>),
}

impl Lease {
    pub fn address(&self) -> &Address {
        match self {
            Lease::Fixed(address) => address,
            Lease::Slot(slot) => &slot.address,
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Lease::Slot(slot) = self {
            slot.state.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// How calls ask a runner for one more instance of a workload: a flag and a wake-up,
/// set once however many calls ask before the runner looks.
#[derive(Debug)]
pub struct Scaler {
    /// Calls in flight on every instance past which another is wanted.
    pub target_concurrency: AtomicU32,
    wanted: AtomicBool,
    notify: Notify,
}

impl Scaler {
    pub fn new(target_concurrency: u32) -> Arc<Self> {
        Arc::new(Self {
            target_concurrency: AtomicU32::new(target_concurrency),
            wanted: AtomicBool::new(false),
            notify: Notify::new(),
        })
    }

    pub fn want_more(&self) {
        if !self.wanted.swap(true, Ordering::SeqCst) {
            self.notify.notify_one();
        }
    }

    /// Resolves once a call wanted another instance since the last time.
    pub async fn wanted(&self) {
        loop {
            if self.wanted.swap(false, Ordering::SeqCst) {
                return;
            }
            self.notify.notified().await;
        }
    }
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

    /// Instances of a workload running now, as its runner knows them (the status
    /// the API shows); None where this table does not count them.
    fn instances(&self, _namespace: &str, _name: &str) -> Option<u32> {
        None
    }
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
    /// The function's version it ran.
    pub version: Option<String>,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn scaled(slots: &[Arc<Slot>], target: u32) -> (Instances, Arc<Scaler>) {
        let scaler = Scaler::new(target);
        let instances = Instances::Scaled {
            ready: slots.iter().cloned().collect(),
            scaler: scaler.clone(),
        };
        (instances, scaler)
    }

    fn slot(name: &str) -> Arc<Slot> {
        Slot::new(Address::Tcp(name.into()))
    }

    #[test]
    fn calls_go_to_the_instance_with_the_fewest_in_flight() {
        let (a, b) = (slot("a"), slot("b"));
        let (instances, _) = scaled(&[a.clone(), b.clone()], 10);
        let first = instances.lease().unwrap();
        let second = instances.lease().unwrap();
        assert_ne!(first.address(), second.address());
        assert_eq!((a.in_flight(), b.in_flight()), (1, 1));
        drop(first);
        let third = instances.lease().unwrap();
        assert_eq!(a.in_flight() + b.in_flight(), 2);
        drop((second, third));
        assert_eq!(
            (a.in_flight(), b.in_flight(), a.leased() + b.leased()),
            (0, 0, 3)
        );
    }

    #[test]
    fn a_connection_stays_on_its_instance_until_the_target() {
        let (a, b) = (slot("a"), slot("b"));
        let (instances, _) = scaled(&[a.clone(), b.clone()], 2);
        let busy = instances.lease_near(Some(a.address())).unwrap();
        assert_eq!(busy.address(), a.address());
        // b is idle, yet a (1 in flight, under the target of 2) keeps its caller.
        let kept = instances.lease_near(Some(a.address())).unwrap();
        assert_eq!(kept.address(), a.address());
        // At the target it goes to the least busy one.
        assert_eq!(
            instances.lease_near(Some(a.address())).unwrap().address(),
            b.address()
        );
        drop((busy, kept));
        a.close();
        assert_eq!(
            instances.lease_near(Some(a.address())).unwrap().address(),
            b.address(),
            "never to a closing instance"
        );
        let gone = slot("c");
        assert_eq!(
            instances
                .lease_near(Some(gone.address()))
                .unwrap()
                .address(),
            b.address()
        );
    }

    #[test]
    fn a_closing_instance_takes_no_call_and_counts_those_it_has() {
        let (a, b) = (slot("a"), slot("b"));
        let (instances, _) = scaled(&[a.clone(), b.clone()], 10);
        let on_a = instances.lease().unwrap();
        assert_eq!(on_a.address(), a.address());
        assert_eq!(a.close(), 1, "the call in flight is reported");
        for _ in 0..3 {
            assert_eq!(instances.lease().unwrap().address(), b.address());
        }
        drop(on_a);
        assert_eq!(a.in_flight(), 0);
        b.close();
        assert!(instances.lease().is_none());
    }

    #[tokio::test]
    async fn no_instance_or_every_one_past_the_target_asks_for_another() {
        let (empty, scaler) = scaled(&[], 1);
        assert!(empty.lease().is_none());
        tokio::time::timeout(std::time::Duration::from_secs(1), scaler.wanted())
            .await
            .expect("an empty pool asks for an instance");

        let (one, scaler) = scaled(&[slot("a")], 1);
        let _first = one.lease().unwrap();
        let asked = tokio::time::timeout(std::time::Duration::from_millis(50), scaler.wanted());
        assert!(
            asked.await.is_err(),
            "one call in flight is the target, not past it"
        );
        let _second = one.lease().unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(1), scaler.wanted())
            .await
            .expect("past the target asks for another");
    }
}
