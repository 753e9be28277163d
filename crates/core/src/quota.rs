//! Per-namespace quotas: how many objects a namespace may hold, how much memory its
//! running instances may reserve and how many uploads it may have in flight, so that no
//! tenant can starve another (docs/spec.md, "Quotas and limits").
//!
//! Object counts are checked in one place, [`QuotaStore`]: a [`Store`] wrapper that
//! counts and creates under a per-namespace lock, whatever handler asks.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::sync::broadcast;

use crate::model::Kind;
use crate::store::{Change, Part, RawObject, Result, Store, StoreError};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quotas {
    /// Functions and services together (they share names and `/fn` URLs).
    pub max_workloads: u64,
    pub max_triggers: u64,
    pub max_jobs: u64,
    /// Uploads being received or checked at once; more answer 429.
    pub max_uploads_in_flight: u64,
    /// Log streams (`logs?follow=true`) open at once; more answer 429.
    pub max_log_followers: u64,
}

/// The default of the embedded runner's quota on the `memory_mb` a namespace's running
/// instances and job runs add up to ([`MemoryLedger`]).
pub const DEFAULT_MAX_RUNNING_MEMORY_MB: u64 = 8192;

impl Default for Quotas {
    fn default() -> Self {
        Self {
            max_workloads: 100,
            max_triggers: 500,
            max_jobs: 100,
            max_uploads_in_flight: 2,
            max_log_followers: 8,
        }
    }
}

impl Quotas {
    /// The limit of an object-count quota.
    fn count_limit(&self, quota: Quota) -> u64 {
        match quota {
            Quota::Workloads => self.max_workloads,
            Quota::Triggers => self.max_triggers,
            Quota::Jobs => self.max_jobs,
            Quota::RunningMemory | Quota::UploadsInFlight | Quota::LogFollowers => u64::MAX,
        }
    }
}

/// One quota; its flag and environment variable are named in every refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quota {
    Workloads,
    Triggers,
    Jobs,
    RunningMemory,
    UploadsInFlight,
    LogFollowers,
}

impl Quota {
    /// The `sless up` / `sless operator` flag that sets it.
    pub fn flag(self) -> &'static str {
        match self {
            Quota::Workloads => "--max-workloads",
            Quota::Triggers => "--max-triggers",
            Quota::Jobs => "--max-jobs",
            Quota::RunningMemory => "--max-running-memory-mb",
            Quota::UploadsInFlight => "--max-uploads-in-flight",
            Quota::LogFollowers => "--max-log-followers",
        }
    }

    /// The environment variable behind [`Quota::flag`].
    pub fn env(self) -> &'static str {
        match self {
            Quota::Workloads => "SLESS_MAX_WORKLOADS",
            Quota::Triggers => "SLESS_MAX_TRIGGERS",
            Quota::Jobs => "SLESS_MAX_JOBS",
            Quota::RunningMemory => "SLESS_MAX_RUNNING_MEMORY_MB",
            Quota::UploadsInFlight => "SLESS_MAX_UPLOADS_IN_FLIGHT",
            Quota::LogFollowers => "SLESS_MAX_LOG_FOLLOWERS",
        }
    }

    /// The quota that counts objects of `kind`.
    pub fn of_kind(kind: Kind) -> Quota {
        match kind {
            Kind::Function | Kind::Service => Quota::Workloads,
            Kind::Trigger => Quota::Triggers,
            Kind::FunctionJob => Quota::Jobs,
        }
    }

    /// The kinds it counts.
    fn kinds(self) -> &'static [Kind] {
        match self {
            Quota::Workloads => &[Kind::Function, Kind::Service],
            Quota::Triggers => &[Kind::Trigger],
            Quota::Jobs => &[Kind::FunctionJob],
            Quota::RunningMemory | Quota::UploadsInFlight | Quota::LogFollowers => &[],
        }
    }
}

/// A refusal: which quota, its value, and what the namespace has or asks for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct QuotaExceeded {
    pub quota: Quota,
    pub namespace: String,
    /// What the namespace holds now (for memory: what it would run with the new instance).
    pub used: u64,
    pub limit: u64,
}

impl std::fmt::Display for QuotaExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let QuotaExceeded {
            quota,
            namespace,
            used,
            limit,
        } = self;
        let setting = format!("{} / {}", quota.flag(), quota.env());
        match quota {
            Quota::Workloads | Quota::Triggers | Quota::Jobs => {
                let what = match quota {
                    Quota::Workloads => "functions and services",
                    Quota::Triggers => "triggers",
                    _ => "jobs",
                };
                write!(
                    f,
                    "quota: namespace {namespace} has {used} {what}, the limit ({setting}); \
                     delete some or ask the operator to raise it"
                )
            }
            Quota::RunningMemory => write!(
                f,
                "quota: namespace {namespace} would run {used} MiB of instances (memory_mb \
                 summed), more than the limit of {limit} MiB ({setting}); stop another \
                 function (disable its triggers), lower memory_mb, or ask the operator to \
                 raise it"
            ),
            Quota::UploadsInFlight => write!(
                f,
                "quota: namespace {namespace} has {used} uploads in flight, the limit \
                 ({setting}); retry when one has finished"
            ),
            Quota::LogFollowers => write!(
                f,
                "quota: namespace {namespace} follows {used} logs already, the limit \
                 ({setting}); close one (or read without follow=true)"
            ),
        }
    }
}

impl Quota {
    /// A limit on things in flight: refusals ask to retry later (429), not to delete.
    pub fn is_in_flight(self) -> bool {
        matches!(self, Quota::UploadsInFlight | Quota::LogFollowers)
    }
}

/// How many locks namespaces share: creates in different namespaces rarely wait for
/// each other, and the table never grows.
const LOCK_STRIPES: usize = 64;

/// The store the API writes through: `create` refuses an object past its namespace's
/// quota. The count and the create happen under one lock per namespace (striped), so
/// racing creates in one process cannot pass the limit together.
pub struct QuotaStore {
    inner: Arc<dyn Store>,
    quotas: Quotas,
    locks: Vec<tokio::sync::Mutex<()>>,
    hasher: RandomState,
}

impl QuotaStore {
    pub fn new(inner: Arc<dyn Store>, quotas: Quotas) -> Self {
        Self {
            inner,
            quotas,
            locks: (0..LOCK_STRIPES)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
            hasher: RandomState::new(),
        }
    }

    fn lock(&self, namespace: &str) -> &tokio::sync::Mutex<()> {
        let stripe = self.hasher.hash_one(namespace) as usize % LOCK_STRIPES;
        &self.locks[stripe]
    }

    async fn check(&self, kind: Kind, namespace: &str) -> Result<()> {
        let quota = Quota::of_kind(kind);
        let limit = self.quotas.count_limit(quota);
        let mut used = 0;
        for &counted in quota.kinds() {
            used += self.inner.count(counted, namespace).await?;
        }
        if used >= limit {
            return Err(StoreError::Quota(QuotaExceeded {
                quota,
                namespace: namespace.to_string(),
                used,
                limit,
            }));
        }
        Ok(())
    }
}

#[async_trait]
impl Store for QuotaStore {
    async fn ensure_namespace(&self, namespace: &str) -> Result<bool> {
        self.inner.ensure_namespace(namespace).await
    }

    async fn list(&self, kind: Kind, namespace: Option<&str>) -> Result<Vec<RawObject>> {
        self.inner.list(kind, namespace).await
    }

    async fn get(&self, kind: Kind, namespace: &str, name: &str) -> Result<Option<RawObject>> {
        self.inner.get(kind, namespace, name).await
    }

    async fn count(&self, kind: Kind, namespace: &str) -> Result<u64> {
        self.inner.count(kind, namespace).await
    }

    async fn triggers_of(&self, namespace: &str, function: &str) -> Result<Vec<RawObject>> {
        self.inner.triggers_of(namespace, function).await
    }

    async fn create(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        spec: serde_json::Value,
        status: serde_json::Value,
    ) -> Result<RawObject> {
        let _guard = self.lock(namespace).lock().await;
        self.check(kind, namespace).await?;
        self.inner.create(kind, namespace, name, spec, status).await
    }

    async fn update(&self, object: &RawObject) -> Result<RawObject> {
        self.inner.update(object).await
    }

    async fn update_status(&self, object: &RawObject) -> Result<RawObject> {
        self.inner.update_status(object).await
    }

    async fn modify(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        part: Part,
        change: &mut (dyn for<'o> FnMut(&'o mut RawObject) -> Result<()> + Send),
    ) -> Result<RawObject> {
        self.inner.modify(kind, namespace, name, part, change).await
    }

    async fn delete(&self, kind: Kind, namespace: &str, name: &str) -> Result<bool> {
        self.inner.delete(kind, namespace, name).await
    }

    fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.inner.subscribe()
    }
}

/// Things in flight per namespace: uploads ([`Quotas::max_uploads_in_flight`]) or log
/// followers ([`Quotas::max_log_followers`]).
pub struct Slots {
    quota: Quota,
    limit: u64,
    in_flight: Mutex<HashMap<String, u64>>,
}

/// One place; dropping it frees the place.
pub struct Slot {
    slots: Arc<Slots>,
    namespace: String,
}

impl Slots {
    pub fn new(quota: Quota, limit: u64) -> Arc<Self> {
        Arc::new(Self {
            quota,
            limit,
            in_flight: Mutex::new(HashMap::new()),
        })
    }

    /// A place for one more of `namespace`, or the refusal (answered with 429).
    pub fn try_acquire(
        self: &Arc<Self>,
        namespace: &str,
    ) -> std::result::Result<Slot, QuotaExceeded> {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        let used = in_flight.entry(namespace.to_string()).or_insert(0);
        if *used >= self.limit {
            return Err(QuotaExceeded {
                quota: self.quota,
                namespace: namespace.to_string(),
                used: *used,
                limit: self.limit,
            });
        }
        *used += 1;
        Ok(Slot {
            slots: self.clone(),
            namespace: namespace.to_string(),
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut in_flight = self
            .slots
            .in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(used) = in_flight.get_mut(&self.namespace) {
            *used = used.saturating_sub(1);
            if *used == 0 {
                in_flight.remove(&self.namespace);
            }
        }
    }
}

/// Memory reserved by running instances per namespace
/// ([`Quotas::max_running_memory_mb`]); the embedded runner reserves before it starts
/// an instance and the reservation ends with it.
pub struct MemoryLedger {
    limit_mb: u64,
    reserved: Mutex<HashMap<String, u64>>,
}

/// Memory held for one instance; dropping it gives the memory back.
pub struct MemoryReservation {
    ledger: Arc<MemoryLedger>,
    namespace: String,
    mb: u64,
}

impl MemoryLedger {
    pub fn new(limit_mb: u64) -> Arc<Self> {
        Arc::new(Self {
            limit_mb,
            reserved: Mutex::new(HashMap::new()),
        })
    }

    /// Reserves `mb` for a new instance of `namespace`. `replacing` is the reservation of
    /// the instance it will replace: a roll-out to a new version is not counted twice.
    pub fn reserve(
        self: &Arc<Self>,
        namespace: &str,
        mb: u64,
        replacing: Option<&MemoryReservation>,
    ) -> std::result::Result<MemoryReservation, QuotaExceeded> {
        let mut reserved = self.reserved.lock().unwrap_or_else(|e| e.into_inner());
        let current = reserved.get(namespace).copied().unwrap_or(0);
        let freed = replacing
            .filter(|r| r.namespace == namespace)
            .map_or(0, |r| r.mb);
        let wanted = current.saturating_sub(freed) + mb;
        if wanted > self.limit_mb {
            return Err(QuotaExceeded {
                quota: Quota::RunningMemory,
                namespace: namespace.to_string(),
                used: wanted,
                limit: self.limit_mb,
            });
        }
        *reserved.entry(namespace.to_string()).or_insert(0) += mb;
        Ok(MemoryReservation {
            ledger: self.clone(),
            namespace: namespace.to_string(),
            mb,
        })
    }

    /// MiB reserved by `namespace`'s running instances now.
    pub fn reserved_mb(&self, namespace: &str) -> u64 {
        let reserved = self.reserved.lock().unwrap_or_else(|e| e.into_inner());
        reserved.get(namespace).copied().unwrap_or(0)
    }
}

impl Drop for MemoryReservation {
    fn drop(&mut self) {
        let mut reserved = self
            .ledger
            .reserved
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(mb) = reserved.get_mut(&self.namespace) {
            *mb = mb.saturating_sub(self.mb);
            if *mb == 0 {
                reserved.remove(&self.namespace);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upload_slots_refuse_past_the_limit_and_free_on_drop() {
        let slots = Slots::new(Quota::UploadsInFlight, 2);
        let a = slots.try_acquire("ns").unwrap();
        let _b = slots.try_acquire("ns").unwrap();
        let refused = slots.try_acquire("ns").err().unwrap();
        assert_eq!(refused.quota, Quota::UploadsInFlight);
        assert!(refused.to_string().contains("--max-uploads-in-flight"));
        // Another namespace has its own places.
        assert!(slots.try_acquire("other").is_ok());
        drop(a);
        assert!(slots.try_acquire("ns").is_ok());
    }

    #[test]
    fn memory_ledger_counts_running_instances_and_rollouts_once() {
        let ledger = MemoryLedger::new(1024);
        let first = ledger.reserve("ns", 512, None).unwrap();
        let _second = ledger.reserve("ns", 512, None).unwrap();
        let refused = ledger.reserve("ns", 128, None).err().unwrap();
        assert_eq!(refused.used, 1152);
        assert!(
            refused.to_string().contains("limit of 1024 MiB"),
            "{refused}"
        );
        assert!(
            refused.to_string().contains("SLESS_MAX_RUNNING_MEMORY_MB"),
            "{refused}"
        );
        // A new version of `first` replaces it: allowed, and briefly both are held.
        let rolled = ledger.reserve("ns", 512, Some(&first)).unwrap();
        assert_eq!(ledger.reserved_mb("ns"), 1536);
        drop(first);
        assert_eq!(ledger.reserved_mb("ns"), 1024);
        drop(rolled);
        assert_eq!(ledger.reserved_mb("ns"), 512);
        assert!(ledger.reserve("other", 1024, None).is_ok());
    }
}
