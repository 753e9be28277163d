//! The actor of one Function or Service: build each upload once, start each new
//! version once to prove it starts, then run between `min_instances` and
//! `max_instances` instances of the latest build while something needs it: one more
//! when calls ask (none ready, or every one past the target concurrency), one fewer
//! when one has had no call for the idle time. New versions roll in before the old
//! instances stop; crashes restart with backoff; the route lists the ready instances.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::egress::Egress;
use crate::process::{Function, Instance, Launch, Target};
use crate::{Endpoint, Shared};
use sless_api::text::names_an_error;
use sless_core::logs::Stream;
use sless_core::model::{
    ANNOTATION_LAST_BUILT_S3KEY, Kind, Phase, Runtime, Scaling, Trigger, TriggerStatus,
    TriggerType, WorkloadSpec, WorkloadStatus, now,
};
use sless_core::quota::MemoryReservation;
use sless_core::routes::{Address, Instances, Route, Scaler, Slot};
use sless_core::store::{Object, RawObject, StoreError};
use sless_core::upload::version_of;
use sless_core::workload::{Demand, demand, no_code};

/// How long an old instance has to finish the calls sent to it before a switch.
const DRAIN: Duration = Duration::from_secs(1);
/// How long an idle instance that stops waits for its calls in flight, for a function
/// without a timeout.
const MAX_RETIRE_WAIT: Duration = Duration::from_secs(900);
/// How often a stopping instance looks whether its calls are answered.
const RETIRE_POLL: Duration = Duration::from_millis(10);
const STOP_GRACE: Duration = Duration::from_secs(10);
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// An instance up this long has recovered: its crash count starts over.
const HEALTHY_RESET: Duration = Duration::from_secs(60);
/// Time for the output readers to take in what a process printed before it ended.
const OUTPUT_DRAIN: Duration = Duration::from_millis(50);

/// What an instance was started with; any change means a new instance.
#[derive(Clone, Debug, PartialEq)]
struct LaunchConfig {
    version: String,
    entrypoint: String,
    memory_mb: u32,
    cpu_millis: u32,
    disk_mb: u32,
    egress: Egress,
    env: BTreeMap<String, String>,
}

impl LaunchConfig {
    fn of(spec: &WorkloadSpec, version: &str) -> Self {
        Self {
            version: version.to_string(),
            entrypoint: spec.entrypoint.clone(),
            memory_mb: spec.memory_mb,
            cpu_millis: spec.cpu_millis,
            disk_mb: spec.disk_mb,
            egress: spec.egress.clone(),
            env: spec.env.clone(),
        }
    }
}

struct Running {
    config: LaunchConfig,
    instance: Instance,
    started: Instant,
    /// Its share of the namespace's running memory, given back when it is dropped.
    memory: MemoryReservation,
    /// What the proxy leases calls on.
    slot: Arc<Slot>,
    /// Calls leased at the last idle check, and since when that number has not moved.
    leased: u64,
    quiet_since: Instant,
}

impl Running {
    fn new(config: LaunchConfig, instance: Instance, memory: MemoryReservation) -> Self {
        let slot = Slot::new(Address::Unix(instance.socket().clone()));
        Self {
            config,
            instance,
            started: Instant::now(),
            memory,
            slot,
            leased: 0,
            quiet_since: Instant::now(),
        }
    }

    /// Stops it once the calls it has in flight are answered (at most `wait`): no new
    /// call comes to it from now on.
    fn retire(self, wait: Duration) -> tokio::task::JoinHandle<()> {
        self.slot.close();
        tokio::spawn(async move {
            let deadline = Instant::now() + wait;
            while self.slot.in_flight() > 0 && Instant::now() < deadline {
                tokio::time::sleep(RETIRE_POLL).await;
            }
            self.instance.stop(STOP_GRACE).await;
            drop(self.memory);
        })
    }
}

/// What the last reconcile decided to serve: what scaling between reconciles starts.
struct Serving {
    dir: PathBuf,
    spec: WorkloadSpec,
    config: LaunchConfig,
    demand: Demand,
    scaling: Scaling,
}

struct Actor {
    shared: Arc<Shared>,
    kind: Kind,
    ns: String,
    name: String,
    /// The instances, oldest first.
    running: Vec<Running>,
    /// Consecutive crashes or failed starts, for the backoff.
    failures: u32,
    /// A version that built but would not start; it is retried after the backoff.
    failed_start: Option<(LaunchConfig, String)>,
    /// Where calls ask for more instances; shared with the route.
    scaler: Arc<Scaler>,
    serving: Option<Serving>,
    /// The settings an instance has started with: with `min_instances` 0 a version
    /// starts once to prove it can, then only for calls.
    proven: Option<LaunchConfig>,
    /// A start for calls failed while others served: the next waits until then.
    scale_up_after: Option<Instant>,
    /// Before the first reconcile of this actor's life: a Ready status of the current
    /// version then says it was proven by the sless before a restart.
    first_pass: bool,
}

pub(super) async fn run(
    shared: Arc<Shared>,
    kind: Kind,
    ns: String,
    name: String,
    mut pokes: mpsc::Receiver<()>,
) {
    let mut actor = Actor {
        shared,
        kind,
        ns,
        name,
        running: Vec::new(),
        failures: 0,
        failed_start: None,
        scaler: Scaler::new(1),
        serving: None,
        proven: None,
        scale_up_after: None,
        first_pass: true,
    };
    let mut reconcile = true;
    loop {
        if reconcile {
            let write = actor.shared.unsettled_write(&actor.ns, &actor.name);
            match actor.reconcile().await {
                Ok(true) => actor.shared.settled(&actor.ns, &actor.name, write),
                Ok(false) => {
                    actor.deleted().await;
                    actor.shared.settled(&actor.ns, &actor.name, write);
                    return;
                }
                Err(e) => {
                    tracing::warn!(kind = %actor.kind, ns = %actor.ns, name = %actor.name, error = %e, "reconcile failed; retrying");
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    continue;
                }
            }
            actor.first_pass = false;
        }
        reconcile = true;
        if actor.failed_start.is_some() {
            let delay = actor.backoff();
            tokio::select! {
                poke = pokes.recv() => if poke.is_none() { return },
                _ = tokio::time::sleep(delay) => actor.failed_start = None,
            }
            continue;
        }
        let idle_check = actor.idle_check();
        let scaler = actor.scaler.clone();
        // Not listening while no instance can be added leaves the scaler's flag set, so
        // that calls stop waking this task (once per call at max_instances, a quarter of
        // the proxy's CPU under load).
        let can_grow = actor.can_grow();
        let backoff_ends = actor.scale_up_after.filter(|at| *at > Instant::now());
        tokio::select! {
            poke = pokes.recv() => if poke.is_none() { return },
            (index, status) = exited(&mut actor.running) => actor.crashed(index, status).await,
            () = scaler.wanted(), if can_grow => {
                actor.scale_up().await;
                reconcile = false;
            }
            () = tokio::time::sleep_until(backoff_ends.unwrap_or_else(Instant::now).into()), if backoff_ends.is_some() => {
                reconcile = false;
            }
            () = tokio::time::sleep(idle_check.unwrap_or_default()), if idle_check.is_some() => {
                actor.stop_idle();
                reconcile = false;
            }
        }
    }
}

/// The first instance to exit: its index and how it ended.
async fn exited(running: &mut [Running]) -> (usize, String) {
    if running.is_empty() {
        return std::future::pending().await;
    }
    let exits = running
        .iter_mut()
        .enumerate()
        .map(|(index, running)| Box::pin(async move { (index, running.instance.exited().await) }));
    futures::future::select_all(exits).await.0
}

impl Actor {
    fn backoff(&self) -> Duration {
        let exponent = self.failures.saturating_sub(1).min(9);
        (Duration::from_secs(1) * 2u32.pow(exponent)).min(MAX_BACKOFF)
    }

    /// One line of sless's own about `version` of this workload ("-" for none).
    fn log(&self, version: &str, line: &str) {
        self.shared.logs.push(
            &self.ns,
            &self.name,
            Stream::Stderr,
            version,
            &format!("[sless] {line}"),
        );
    }

    /// The last lines `version`'s instances printed, sless's own left out.
    fn printed(&self, version: &str) -> Vec<String> {
        self.shared
            .logs
            .tail(&self.ns, &self.name, 20)
            .into_iter()
            .filter(|l| l.version == version && !l.line.starts_with("[sless] "))
            .map(|l| l.line)
            .collect()
    }

    fn unavailable(&self, reason: String) {
        self.shared
            .set_route(&self.ns, &self.name, Route::Unavailable { reason });
    }

    async fn crashed(&mut self, index: usize, status: String) {
        if index >= self.running.len() {
            return;
        }
        let running = self.running.remove(index);
        running.slot.close();
        if running.started.elapsed() > HEALTHY_RESET {
            self.failures = 0;
        }
        self.failures += 1;
        sless_core::metrics::metrics().restart(&self.ns, &self.name);
        let delay = self.backoff();
        // Others left take the calls now. The last one stays in the route (closed)
        // until the reason replaces it, for a call that found it unreachable.
        if self.running.is_empty() {
            self.shared.set_endpoint(&self.ns, &self.name, None);
        } else {
            self.publish();
        }
        // Give the output readers a moment to drain what the process printed last.
        tokio::time::sleep(OUTPUT_DRAIN).await;
        let version = &running.config.version;
        let cause = match cause_line(&self.printed(version)) {
            Some(line) => format!("{line} (exited with {status})"),
            None => format!("exited with {status}"),
        };
        let cause = self.shared.public_line(&cause, None);
        if !self.running.is_empty() {
            // The others serve; the next reconcile starts one again if fewer than
            // min_instances are left.
            self.log(
                version,
                &format!(
                    "an instance of version {version} crashed: {cause}; {} other(s) serve",
                    self.running.len()
                ),
            );
            return;
        }
        // The last one: its version is started again after the backoff, as a new one.
        self.proven = None;
        self.unavailable(format!(
            "{} {:?} crashed and is restarting in {} s: {cause}",
            self.kind.noun(),
            self.name,
            delay.as_secs()
        ));
        // The status first: whoever reads the line finds the status saying so.
        let message = restarting(delay, &cause);
        if let Err(e) = self.write_failed(&message, None).await {
            tracing::debug!(ns = %self.ns, name = %self.name, error = %e, "crash not written to status");
        }
        self.log(
            version,
            &format!(
                "version {version} crashed: {cause}; restarting in {} s",
                delay.as_secs()
            ),
        );
        tokio::time::sleep(delay).await;
    }

    async fn deleted(&mut self) {
        self.shared.remove_route(&self.ns, &self.name);
        self.stop_instances().await;
        sless_core::metrics::metrics().forget_instances(&self.ns, &self.name);
        self.shared.logs.forget(&self.ns, &self.name);
        let root = self.shared.builds_root(self.kind, &self.ns, &self.name);
        if let Err(e) = tokio::fs::remove_dir_all(&root).await
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %root.display(), error = %e, "cannot remove old builds");
        }
        if self.kind == Kind::Function {
            let message = format!("function {:?} not found", self.name);
            self.update_triggers(|_| (false, None, Some(message.clone())))
                .await;
        }
    }

    async fn stop_instances(&mut self) {
        self.serving = None;
        self.shared.set_endpoint(&self.ns, &self.name, None);
        let stops = self.running.drain(..).map(|running| {
            running.slot.close();
            running.instance.stop(STOP_GRACE)
        });
        futures::future::join_all(stops).await;
    }

    /// Tells the proxy which instances serve the current version now.
    fn publish(&self) {
        let Some(serving) = &self.serving else {
            return;
        };
        let ready: Arc<[Arc<Slot>]> = self
            .running
            .iter()
            .filter(|r| r.config == serving.config)
            .map(|r| r.slot.clone())
            .collect();
        let endpoint = (!self.running.is_empty()).then(|| Endpoint {
            instances: u32::try_from(self.running.len()).unwrap_or(u32::MAX),
            pids: self
                .running
                .iter()
                .filter_map(|r| r.instance.pid())
                .collect(),
        });
        self.shared.set_endpoint(&self.ns, &self.name, endpoint);
        let instances = Instances::Scaled {
            ready,
            scaler: self.scaler.clone(),
        };
        let route = serving.demand.ready_route(
            self.kind,
            instances,
            serving.spec.timeout(),
            Some(serving.config.version.as_str().into()),
        );
        self.shared.set_route(&self.ns, &self.name, route);
    }

    /// Whether a call asking for another instance could get one now.
    fn can_grow(&self) -> bool {
        self.serving.as_ref().is_some_and(|serving| {
            self.running.len() < serving.scaling.max_instances as usize && self.may_start_more()
        })
    }

    /// Whether a start past a failed one (while others served) may be tried yet.
    fn may_start_more(&self) -> bool {
        self.scale_up_after
            .is_none_or(|after| Instant::now() >= after)
    }

    /// How often to look for idle instances: while more than `min_instances` run.
    fn idle_check(&self) -> Option<Duration> {
        let min = self.serving.as_ref()?.scaling.min_instances;
        (self.running.len() > min as usize).then(|| {
            (self.shared.config.scale_to_zero_after / 4)
                .clamp(Duration::from_millis(10), Duration::from_secs(5))
        })
    }

    /// Stops the instances that have had no call for the idle time, newest first,
    /// down to `min_instances`. Their calls in flight finish; new calls go to the
    /// others, or wait for an instance the next call starts.
    fn stop_idle(&mut self) {
        let Some(serving) = &self.serving else {
            return;
        };
        let min = serving.scaling.min_instances as usize;
        let idle = self.shared.config.scale_to_zero_after;
        let now = Instant::now();
        for running in &mut self.running {
            let leased = running.slot.leased();
            if leased != running.leased || running.slot.in_flight() > 0 {
                running.leased = leased;
                running.quiet_since = now;
            }
        }
        let mut stopped = Vec::new();
        let mut index = self.running.len();
        while index > 0 && self.running.len() > min {
            index -= 1;
            if now.duration_since(self.running[index].quiet_since) >= idle {
                stopped.push(self.running.remove(index));
            }
        }
        if stopped.is_empty() {
            return;
        }
        sless_core::metrics::metrics().scaled_down(&self.ns, &self.name, stopped.len() as u64);
        self.publish();
        let wait = serving
            .spec
            .timeout()
            .unwrap_or(MAX_RETIRE_WAIT)
            .saturating_add(STOP_GRACE);
        for running in stopped {
            let version = running.config.version.clone();
            running.retire(wait);
            self.log(
                &version,
                &format!(
                    "an instance of version {version} stopped after {} s without calls; {} left",
                    idle.as_secs(),
                    self.running.len()
                ),
            );
        }
        if self.running.is_empty()
            && let Some(serving) = &self.serving
        {
            self.shared.fill_standbys(serving.spec.runtime);
        }
    }

    /// Calls asked for one more instance (none is ready, or all are past the target
    /// concurrency): start it, up to `max_instances`.
    async fn scale_up(&mut self) {
        let Some(serving) = &self.serving else {
            return;
        };
        // Asked before the last start answered (or before a crash): still needed?
        let target = u64::from(serving.scaling.target_concurrency);
        let needed = self
            .running
            .iter()
            .filter(|r| r.config == serving.config && !r.slot.is_closing())
            .all(|r| r.slot.in_flight() > target);
        if !needed
            || self.running.len() >= serving.scaling.max_instances as usize
            || !self.may_start_more()
        {
            return;
        }
        let (dir, spec, config) = (
            serving.dir.clone(),
            serving.spec.clone(),
            serving.config.clone(),
        );
        // None ran: the calls that asked wait for this one.
        let cold = self.running.is_empty();
        let Err(message) = self.start_one(&dir, &spec, config).await else {
            sless_core::metrics::metrics().scaled_up(&self.ns, &self.name, cold);
            return;
        };
        if self.failed_start.is_none() {
            // Others serve (the quota may be full): calls queue on them; more are
            // tried after the backoff.
            self.scale_up_after = Some(Instant::now() + self.backoff());
        } else if let Err(e) = self.write_failed(&message, None).await {
            tracing::debug!(ns = %self.ns, name = %self.name, error = %e, "start failure not written to status");
        }
    }

    /// Starts one more instance of `config` and publishes it; on failure, logs the
    /// attempt, sets the backoff and returns the status message. With no instance left
    /// serving, calls are answered with the cause.
    async fn start_one(
        &mut self,
        dir: &Path,
        spec: &WorkloadSpec,
        config: LaunchConfig,
    ) -> Result<(), String> {
        let starting = Instant::now();
        match self.start(dir, spec, &config).await {
            Ok((instance, memory)) => {
                self.scale_up_after = None;
                self.switch_to(instance, memory, config, starting.elapsed());
                self.publish();
                Ok(())
            }
            Err(cause) => {
                self.failures += 1;
                let delay = self.backoff();
                let cause = self.shared.public_line(&cause, Some(dir));
                let version = &config.version;
                let noun = self.kind.noun();
                // One line per attempt: what the process printed is in the log already.
                self.log(
                    version,
                    &format!(
                        "version {version} did not start: {cause}; trying again in {} s",
                        delay.as_secs()
                    ),
                );
                let message = restarting(delay, &cause);
                if !self.running.iter().any(|r| r.config == config) {
                    self.unavailable(format!("{noun} {:?} did not start: {cause}", self.name));
                    self.failed_start = Some((config, message.clone()));
                }
                Err(message)
            }
        }
    }

    /// `Ok(false)` once the object is gone.
    async fn reconcile(&mut self) -> Result<bool, StoreError> {
        let store = self.shared.store.clone();
        let Some(raw) = store.get(self.kind, &self.ns, &self.name).await? else {
            return Ok(false);
        };
        let spec: WorkloadSpec = decode(&raw, "spec", &raw.spec)?;
        let status: WorkloadStatus = decode(&raw, "status", &raw.status)?;
        let triggers = self.triggers().await?;
        let noun = self.kind.noun();
        let name = &self.name.clone();

        let demand = demand(
            self.kind,
            name,
            triggers.iter().map(|t| (t.meta.name.as_str(), &t.spec)),
        );
        let url = demand.has_url.then(|| self.shared.url(&self.ns, name));

        let Some(key) = spec.s3_key.clone() else {
            self.stop_instances().await;
            self.shared.fill_standbys(spec.runtime);
            let reason = no_code(self.kind, name);
            match demand.exposed {
                Ok(()) => self
                    .shared
                    .set_route(&self.ns, name, Route::NoCode { reason }),
                Err(_) => self.unavailable(reason),
            }
            self.write_status(|s| {
                s.phase = Phase::Pending;
                s.url = url.clone();
            })
            .await?;
            self.update_triggers(|_| (false, None, None)).await;
            return Ok(true);
        };

        let version = version_of(&key).to_string();
        let root = self.shared.builds_root(self.kind, &self.ns, name);
        let dir = root.join(&version);
        let built_key = raw
            .meta
            .annotations
            .get(ANNOTATION_LAST_BUILT_S3KEY)
            .cloned();
        let failed_before =
            built_key.as_deref() == Some(key.as_str()) && status.phase == Phase::Failed;
        // Set when this pass built the version: recorded with the phase that follows
        // (Ready once an instance serves it, or Failed).
        let mut built_at = None;
        // Why this pass's build failed; the status read before it does not say yet.
        let mut build_failure = None;
        if !dir.is_dir() && !failed_before {
            if self.running.is_empty() {
                let reason = format!("{noun} {name:?} is building version {version}");
                if demand.exposed.is_ok() {
                    // A first call right after the upload waits for the build like one
                    // for a starting instance.
                    self.shared
                        .set_route(&self.ns, name, Route::Starting { reason });
                } else {
                    self.unavailable(reason);
                }
            }
            match self
                .build(&raw, &key, &version, &root, &spec, url.clone())
                .await?
            {
                Ok(at) => built_at = Some(at),
                Err(message) => build_failure = Some(message),
            }
        } else if built_key.as_deref() != Some(key.as_str()) {
            self.mark_built(&raw, &key).await?;
        }
        if !dir.is_dir() {
            // The build failed: an older instance, if any, keeps serving its code.
            if self.running.is_empty() {
                let reason = build_failure
                    .or_else(|| status.message.clone())
                    .unwrap_or_default();
                self.unavailable(format!(
                    "{noun} {name:?} failed to build: {}",
                    self.shared.public_line(&reason, None)
                ));
            }
            self.update_triggers(|_| {
                (
                    false,
                    None,
                    Some(format!("{noun} {name:?} failed to build")),
                )
            })
            .await;
            return Ok(true);
        }

        if !demand.needed {
            self.stop_instances().await;
            self.shared.fill_standbys(spec.runtime);
            self.unavailable(
                demand
                    .exposed
                    .clone()
                    .err()
                    .unwrap_or_else(|| format!("{noun} {name:?} has no enabled trigger")),
            );
            self.write_ready(&version, url.clone(), built_at.clone())
                .await?;
            self.update_triggers(|_| (false, None, None)).await;
            return Ok(true);
        }

        let wanted = LaunchConfig::of(&spec, &version);
        let scaling = spec.scaling(self.kind);
        self.scaler.target_concurrency.store(
            scaling.target_concurrency,
            std::sync::atomic::Ordering::Relaxed,
        );
        if self.first_pass
            && status.phase == Phase::Ready
            && status.image_ref.as_deref() == Some(self.image(&version).as_str())
        {
            // Started before sless restarted: it comes back with the next call.
            self.proven = Some(wanted.clone());
        }
        let serves_wanted = self.running.iter().any(|r| r.config == wanted);
        let serves_older = self.running.iter().any(|r| r.config != wanted);
        let must_start = !serves_wanted
            && (serves_older || scaling.min_instances > 0 || self.proven.as_ref() != Some(&wanted));
        if must_start {
            if let Some((config, message)) = &self.failed_start
                && config == &wanted
            {
                let message = message.clone();
                self.write_failed(&message, None).await?;
                return Ok(true);
            }
            if self.running.is_empty() && demand.exposed.is_ok() {
                // Callers wait for this instance rather than fail while it starts.
                self.shared.set_route(
                    &self.ns,
                    name,
                    Route::Starting {
                        reason: format!("{noun} {name:?} is starting"),
                    },
                );
            }
        }
        self.serving = Some(Serving {
            dir: dir.clone(),
            spec: spec.clone(),
            config: wanted.clone(),
            demand: demand.clone(),
            scaling,
        });
        if must_start {
            if let Err(message) = self.start_one(&dir, &spec, wanted.clone()).await {
                self.write_failed(&message, built_at.as_deref()).await?;
                return Ok(true);
            }
            self.proven = Some(wanted.clone());
        }
        while self.running.len() < scaling.min_instances as usize && self.may_start_more() {
            match self.start_one(&dir, &spec, wanted.clone()).await {
                Ok(()) => {}
                Err(message) if self.failed_start.is_some() => {
                    self.write_failed(&message, built_at.as_deref()).await?;
                    return Ok(true);
                }
                // Others serve: tried again later, as for calls.
                Err(_) => self.scale_up_after = Some(Instant::now() + self.backoff()),
            }
        }
        self.publish();
        if self.running.is_empty() {
            self.shared.fill_standbys(spec.runtime);
        }
        self.write_ready(&version, url.clone(), built_at.clone())
            .await?;
        let function_url = self.shared.url(&self.ns, name);
        self.update_triggers(|t| {
            let url = (t.spec.trigger_type == TriggerType::Http).then(|| function_url.clone());
            (t.spec.enabled, url, None)
        })
        .await;
        Ok(true)
    }

    /// Builds the version of `key`: when it was built, or the message of its failure
    /// (written to the status too).
    async fn build(
        &mut self,
        raw: &RawObject,
        key: &str,
        version: &str,
        root: &Path,
        spec: &WorkloadSpec,
        url: Option<String>,
    ) -> Result<Result<String, String>, StoreError> {
        self.write_status(|s| {
            s.phase = Phase::Building;
            s.message = Some(format!("building version {version}"));
            s.url = url.clone();
        })
        .await?;
        let started = std::time::Instant::now();
        let result = self.shared.builder.build(root, key, spec.runtime).await;
        sless_core::metrics::metrics().build(
            &self.ns,
            &self.name,
            result.is_ok(),
            Some(started.elapsed()),
        );
        self.mark_built(raw, key).await?;
        match result {
            Ok(_) => {
                self.log(
                    version,
                    &format!(
                        "version {version} built in {} ms",
                        started.elapsed().as_millis()
                    ),
                );
                Ok(Ok(now()))
            }
            Err(e) => {
                self.log(version, &format!("build of version {version} failed"));
                // The cause (its first line) is shown to callers; the log tail after it
                // is the build log's own.
                let (cause, tail) = e.0.split_once('\n').unwrap_or((&e.0, ""));
                let message = format!("{}\n{tail}", self.shared.public_line(cause, None));
                self.write_failed(&message, None).await?;
                Ok(Err(message))
            }
        }
    }

    /// The status's `imageRef` of a version.
    fn image(&self, version: &str) -> String {
        format!("local/{}/{}:{version}", self.ns, self.name)
    }

    async fn write_ready(
        &self,
        version: &str,
        url: Option<String>,
        built_at: Option<String>,
    ) -> Result<(), StoreError> {
        let image = self.image(version);
        self.write_status(|s| {
            s.phase = Phase::Ready;
            s.message = None;
            s.url = url.clone();
            s.image_ref = Some(image.clone());
            if let Some(at) = &built_at {
                s.last_built_at = Some(at.clone());
            }
        })
        .await
    }

    /// Phase Failed with `message`, and when the version was just built, its time.
    async fn write_failed(&self, message: &str, built_at: Option<&str>) -> Result<(), StoreError> {
        self.write_status(|s| {
            s.phase = Phase::Failed;
            s.message = Some(message.to_string());
            if let Some(at) = built_at {
                s.last_built_at = Some(at.to_string());
            }
        })
        .await
    }

    /// Starts an instance serving `dir`: a standby of its runtime bound to it, else a
    /// process of its own.
    async fn spawn(
        &self,
        dir: &Path,
        runtime: Runtime,
        config: &LaunchConfig,
    ) -> Result<Instance, String> {
        let shared = &self.shared;
        let mut env = config.env.clone();
        env.insert("SLESS_ENTRYPOINT".into(), config.entrypoint.clone());
        let scratch = shared.scratch(self.kind, &self.ns, &self.name);
        let function = Function {
            dir,
            scratch: &scratch,
            disk_mb: config.disk_mb,
            memory_mb: config.memory_mb,
            cpu_millis: config.cpu_millis,
            egress: config.egress.clone(),
            env,
            namespace: &self.ns,
            name: &self.name,
            version: &config.version,
        };
        let sandbox = &shared.builder.sandbox;
        if let Some(mut standby) = shared.take_standby(runtime) {
            let binding = Instant::now();
            match standby.bind(&function, sandbox, &shared.logs).await {
                Ok(()) => {
                    tracing::debug!(ns = %self.ns, name = %self.name, bind_us = binding.elapsed().as_micros() as u64, "bound a standby");
                    return Ok(standby);
                }
                Err(e) => {
                    tracing::warn!(ns = %self.ns, name = %self.name, error = %e, "a standby could not be bound; starting a process");
                }
            }
        }
        let (program, args) =
            shared
                .builder
                .wrappers
                .command(&shared.config.toolchain, runtime, dir);
        let launch = Launch {
            program: &program,
            args: &args,
            sockets: &shared.sockets,
            target: Target::Serve(&function),
        };
        Instance::spawn(launch, &shared.logs, sandbox)
    }

    async fn start(
        &mut self,
        dir: &Path,
        spec: &WorkloadSpec,
        config: &LaunchConfig,
    ) -> Result<(Instance, MemoryReservation), String> {
        // The instance it replaces is not counted twice (the old one drains briefly).
        // A new version's first instance replaces an older one.
        let replaced = self
            .running
            .iter()
            .find(|r| r.config != *config)
            .map(|r| &r.memory);
        let memory = self
            .shared
            .memory
            .reserve(&self.ns, u64::from(config.memory_mb), replaced)
            .map_err(|e| e.to_string())?;
        let mut instance = self.spawn(dir, spec.runtime, config).await?;
        let shared = &self.shared;
        match instance.wait_healthy(shared.config.health_timeout).await {
            Ok(()) => Ok((instance, memory)),
            Err(reason) => {
                let seen_as = instance.bound_dir();
                instance.stop(Duration::from_secs(1)).await;
                tokio::time::sleep(OUTPUT_DRAIN).await;
                let cause = cause_line(&self.printed(&config.version)).unwrap_or(reason);
                // A bound standby sees the code under its slot: the cause names the
                // function's directory, as a process of its own would.
                Err(match seen_as {
                    Some(seen) => {
                        cause.replace(&seen.display().to_string(), &dir.display().to_string())
                    }
                    None => cause,
                })
            }
        }
    }

    /// The new instance is healthy: it takes calls; instances of older settings take
    /// no more, finish theirs and stop.
    fn switch_to(
        &mut self,
        instance: Instance,
        memory: MemoryReservation,
        config: LaunchConfig,
        took: Duration,
    ) {
        self.log(
            &config.version,
            &format!(
                "version {} is serving (healthy {} ms after the start)",
                config.version,
                took.as_millis()
            ),
        );
        self.failed_start = None;
        let (older, current): (Vec<Running>, Vec<Running>) = std::mem::take(&mut self.running)
            .into_iter()
            .partition(|r| r.config != config);
        self.running = current;
        self.running.push(Running::new(config, instance, memory));
        if older.is_empty() {
            return;
        }
        let retired: Vec<_> = older.into_iter().map(|old| old.retire(DRAIN)).collect();
        let shared = self.shared.clone();
        let root = shared.builds_root(self.kind, &self.ns, &self.name);
        let (ns, name) = (self.ns.clone(), self.name.clone());
        let serving: Vec<String> = self
            .running
            .iter()
            .map(|r| r.config.version.clone())
            .collect();
        tokio::spawn(async move {
            for old in retired {
                let _ = old.await;
            }
            // Once the old instances are gone, the builds of versions pruned from
            // object storage go too.
            let in_use: Vec<&str> = serving.iter().map(String::as_str).collect();
            shared.builder.prune(&root, &ns, &name, &in_use).await;
        });
    }

    async fn mark_built(&self, raw: &RawObject, key: &str) -> Result<(), StoreError> {
        for _ in 0..8 {
            let Some(mut current) = self
                .shared
                .store
                .get(raw.kind, &self.ns, &self.name)
                .await?
            else {
                return Ok(());
            };
            if current
                .meta
                .annotations
                .get(ANNOTATION_LAST_BUILT_S3KEY)
                .map(String::as_str)
                == Some(key)
            {
                return Ok(());
            }
            current
                .meta
                .annotations
                .insert(ANNOTATION_LAST_BUILT_S3KEY.into(), key.into());
            match self.shared.store.update(&current).await {
                Err(StoreError::Conflict { .. }) => continue,
                other => return other.map(|_| ()),
            }
        }
        Ok(())
    }

    /// Writes status only when `change` changes it; retries on conflicts.
    async fn write_status(&self, change: impl Fn(&mut WorkloadStatus)) -> Result<(), StoreError> {
        for _ in 0..8 {
            let Some(mut raw) = self
                .shared
                .store
                .get(self.kind, &self.ns, &self.name)
                .await?
            else {
                return Ok(());
            };
            let before: WorkloadStatus = decode(&raw, "status", &raw.status)?;
            let mut after = before.clone();
            change(&mut after);
            if after == before {
                return Ok(());
            }
            raw.status = serde_json::to_value(&after).map_err(|e| corrupt(&raw, "status", e))?;
            match self.shared.store.update_status(&raw).await {
                Err(StoreError::Conflict { .. }) => continue,
                other => return other.map(|_| ()),
            }
        }
        Ok(())
    }

    async fn triggers(&self) -> Result<Vec<Object<Trigger>>, StoreError> {
        if self.kind != Kind::Function {
            return Ok(Vec::new());
        }
        let raw = self.shared.store.triggers_of(&self.ns, &self.name).await?;
        raw.into_iter().map(Object::from_raw).collect()
    }

    /// Sets each trigger's (active, url, message) when it differs. Event triggers are
    /// the dispatcher's: it alone knows whether their consumer runs.
    async fn update_triggers(
        &self,
        state: impl Fn(&Object<Trigger>) -> (bool, Option<String>, Option<String>),
    ) {
        let Ok(triggers) = self.triggers().await else {
            return;
        };
        for trigger in triggers {
            if trigger.spec.trigger_type == TriggerType::Event {
                continue;
            }
            let (active, url, message) = state(&trigger);
            let wanted = TriggerStatus {
                active,
                url,
                message,
                ..trigger.status.clone()
            };
            if trigger.status == wanted {
                continue;
            }
            let result = sless_core::store::modify_status::<Trigger, _>(
                &*self.shared.store,
                &self.ns,
                &trigger.meta.name,
                |t| {
                    t.status.active = wanted.active;
                    t.status.url = wanted.url.clone();
                    t.status.message = wanted.message.clone();
                },
            )
            .await;
            if let Err(e) = result {
                tracing::debug!(trigger = %trigger.meta.name, error = %e, "trigger status not written");
            }
        }
    }
}

/// Why an instance did not start or crashed, from what it printed: the runtime's own
/// report (`sless-runtime: cannot load handler: <exception>`), else the last line naming
/// an error (a traceback's last), else its last line.
fn cause_line(output: &[String]) -> Option<String> {
    const RUNTIME: &str = "sless-runtime: ";
    let printed = || {
        output
            .iter()
            .rev()
            .map(|l| l.trim())
            .filter(|l| !l.is_empty())
    };
    printed()
        .find_map(|line| line.strip_prefix(RUNTIME))
        .or_else(|| printed().find(|l| names_an_error(l)))
        .or_else(|| printed().next())
        .map(str::to_string)
}

/// The status message of a workload whose instance is backing off before its next try.
fn restarting(delay: Duration, cause: &str) -> String {
    format!("restarting in {} s: {cause}", delay.as_secs())
}

fn decode<T: serde::de::DeserializeOwned>(
    raw: &RawObject,
    part: &'static str,
    value: &serde_json::Value,
) -> Result<T, StoreError> {
    serde_json::from_value(value.clone()).map_err(|e| corrupt(raw, part, e))
}

fn corrupt(raw: &RawObject, part: &'static str, e: serde_json::Error) -> StoreError {
    StoreError::corrupt(raw.kind, &raw.meta.name, part, e)
}

#[cfg(test)]
mod tests {
    use super::cause_line;

    #[test]
    fn the_cause_is_the_runtime_report_the_last_error_or_the_last_line() {
        let output = |lines: &[&str]| lines.iter().map(|l| l.to_string()).collect::<Vec<_>>();
        let traceback = output(&[
            "Traceback (most recent call last):",
            "ModuleNotFoundError: No module named 'flask'",
            "sless-runtime: cannot load handler: ModuleNotFoundError: No module named 'flask'",
        ]);
        assert_eq!(
            cause_line(&traceback).unwrap(),
            "cannot load handler: ModuleNotFoundError: No module named 'flask'"
        );
        assert_eq!(
            cause_line(&output(&["panic: boom", "  "])).unwrap(),
            "panic: boom"
        );
        let crash = output(&[
            "Traceback (most recent call last):",
            "ZeroDivisionError: division by zero",
            "  during handling, more output",
        ]);
        assert_eq!(
            cause_line(&crash).unwrap(),
            "ZeroDivisionError: division by zero"
        );
        assert_eq!(cause_line(&[]), None);
    }
}
