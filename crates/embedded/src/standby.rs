//! Standbys: Python and Node processes started before any function needs them, a pool
//! per runtime that any function of that runtime takes from, so the first call to a
//! function scaled to zero skips the interpreter's start. The pool refills off the
//! async workers and outside its lock, so a take never waits for a spawn; it grows by
//! one per take within [`DEMAND_WINDOW`] (first calls in a burst outrun the refills)
//! and shrinks back to its idle size once the takes stop. A take prefers a standby that
//! has loaded (its runtime's ready byte) over an older one still loading.
//!
//! A standby is confined like an instance, but for no function: Landlock lets it read
//! only its slot's `r/` and write only its `w/` (a 1 MB tmpfs of its own mount
//! namespace), it has its own network namespace with an egress proxy listener nobody
//! serves yet, a cgroup with the pids limit and the least CPU weight only (it loads
//! when the CPU is free), and sless's variables only. Bound to
//! a function ([`Instance::bind`]), a helper bind-mounts the function's build directory
//! onto `r/code` and its scratch onto `w/home` inside the standby's mount namespace
//! (Landlock ignores rules on a mount point but honours its parent's), writes the
//! function's memory and CPU limits into the cgroup, lowers its file size limit, serves
//! its egress proxy with the function's policy, and sends the function's env with the
//! directory on stdin. It can read and write after what its slot let it before: the
//! function's code, the function's scratch.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::Shared;
use crate::process::{Instance, Launch, Target};
use sless_core::data_dir::create_private_dir;
use sless_core::model::Runtime;

/// The directories one standby is confined to, removed with it.
#[derive(Debug)]
pub struct Slot {
    root: PathBuf,
}

impl Slot {
    fn create(root: PathBuf) -> io::Result<Self> {
        let slot = Self { root };
        create_private_dir(&slot.code())?;
        create_private_dir(&slot.writable())?;
        Ok(slot)
    }

    /// Readable: holds `code`.
    pub fn readable(&self) -> PathBuf {
        self.root.join("r")
    }

    /// Where the function's build directory is mounted.
    pub fn code(&self) -> PathBuf {
        self.root.join("r").join("code")
    }

    /// Writable: a tmpfs in the standby's namespace, holding `home`.
    pub fn writable(&self) -> PathBuf {
        self.root.join("w")
    }

    /// Where the function's scratch is mounted: its HOME and TMPDIR once bound.
    pub fn home(&self) -> PathBuf {
        self.root.join("w").join("home")
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// How long a take counts as demand: the pool holds one more standby per take in this
/// window, and shrinks back once takes stop for that long.
const DEMAND_WINDOW: Duration = Duration::from_secs(10);

/// The most standbys of a runtime under demand, in multiples of the idle pool: a burst
/// of first calls finds loaded standbys; an idle sless keeps the idle pool only.
const MAX_POOL_FACTOR: usize = 4;

/// The standbys of each runtime.
#[derive(Default)]
pub(crate) struct Pool {
    runtimes: std::sync::Mutex<HashMap<Runtime, Standbys>>,
    /// Numbers the slots.
    next: std::sync::atomic::AtomicU64,
}

/// One runtime's standbys.
#[derive(Default)]
struct Standbys {
    /// Waiting, oldest (the nearest to loaded) first.
    idle: VecDeque<Instance>,
    /// Being spawned, outside the lock: a take never waits for a refill.
    spawning: usize,
    /// When standbys were taken within [`DEMAND_WINDOW`].
    taken: VecDeque<Instant>,
    /// Whether a task shrinks the pool back once demand ends.
    trimming: bool,
}

impl Standbys {
    /// How many to keep: the idle pool plus the takes of the window, bounded.
    fn wanted(&mut self, base: usize, now: Instant) -> usize {
        while self
            .taken
            .front()
            .is_some_and(|t| now.duration_since(*t) >= DEMAND_WINDOW)
        {
            self.taken.pop_front();
        }
        (base + self.taken.len()).min(base * MAX_POOL_FACTOR)
    }
}

impl Shared {
    fn standby_root(&self) -> PathBuf {
        self.config.data_dir.join("standby")
    }

    /// Empties what standbys of an earlier run left.
    pub(crate) fn clear_standbys(&self) -> io::Result<()> {
        match std::fs::remove_dir_all(self.standby_root()) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        sless_core::data_dir::own_private_dir(&self.standby_root())
    }

    /// Whether this runtime and machine have standbys: a runtime that loads before
    /// its code is known, and the full sandbox.
    fn has_standbys(&self, runtime: Runtime) -> bool {
        self.config.standby_pool > 0
            && runtime.descriptor().standby
            && self.builder.sandbox.takes_standbys()
    }

    fn standby_pools(&self) -> std::sync::MutexGuard<'_, HashMap<Runtime, Standbys>> {
        self.standbys
            .runtimes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Starts the standbys `runtime`'s pool lacks, in the background; under demand
    /// also the task that shrinks it back.
    pub(crate) fn fill_standbys(self: &Arc<Self>, runtime: Runtime) {
        if !self.has_standbys(runtime) {
            return;
        }
        let base = self.config.standby_pool;
        let (missing, trim) = {
            let mut runtimes = self.standby_pools();
            let pool = runtimes.entry(runtime).or_default();
            pool.idle.retain_mut(|standby| !standby.has_exited());
            let wanted = pool.wanted(base, Instant::now());
            let missing = wanted.saturating_sub(pool.idle.len() + pool.spawning);
            pool.spawning += missing;
            let trim = wanted > base && !pool.trimming;
            pool.trimming |= trim;
            (missing, trim)
        };
        if trim {
            tokio::spawn(self.clone().trim_standbys(runtime));
        }
        if missing == 0 {
            return;
        }
        let shared = self.clone();
        // Outside the lock, one fork and exec at a time. Not on a blocking thread: those
        // exit when idle, and the parent-death signal follows the spawning thread.
        tokio::spawn(async move {
            for left in (0..missing).rev() {
                tokio::task::yield_now().await;
                let spawned = shared.spawn_standby(runtime);
                let mut runtimes = shared.standby_pools();
                let pool = runtimes.entry(runtime).or_default();
                match spawned {
                    Ok(standby) => {
                        pool.spawning -= 1;
                        pool.idle.push_back(standby);
                    }
                    Err(e) => {
                        pool.spawning -= left + 1;
                        tracing::debug!(runtime = %runtime.as_str(), error = %e, "no standby process");
                        return;
                    }
                }
            }
        });
    }

    /// Once takes stop for [`DEMAND_WINDOW`], stops the standbys past the idle pool
    /// (the newest, the least loaded).
    async fn trim_standbys(self: Arc<Self>, runtime: Runtime) {
        let base = self.config.standby_pool;
        loop {
            tokio::time::sleep(DEMAND_WINDOW).await;
            let (extra, done) = {
                let mut runtimes = self.standby_pools();
                let pool = runtimes.entry(runtime).or_default();
                let wanted = pool.wanted(base, Instant::now());
                let keep = wanted.saturating_sub(pool.spawning);
                let extra: Vec<Instance> = (keep..pool.idle.len())
                    .filter_map(|_| pool.idle.pop_back())
                    .collect();
                let done = wanted == base;
                pool.trimming = !done;
                (extra, done)
            };
            for standby in extra {
                tokio::spawn(standby.stop(STOP_GRACE));
            }
            if done {
                return;
            }
        }
    }

    /// The oldest standby of `runtime` that has loaded, else the oldest still alive
    /// (the nearest to loaded); the pool refills (and grows with the takes) in the
    /// background.
    pub(crate) fn take_standby(self: &Arc<Self>, runtime: Runtime) -> Option<Instance> {
        if !self.has_standbys(runtime) {
            return None;
        }
        let taken = {
            let mut runtimes = self.standby_pools();
            let pool = runtimes.entry(runtime).or_default();
            pool.taken.push_back(Instant::now());
            pool.idle.retain_mut(|standby| !standby.has_exited());
            let loaded = pool.idle.iter().position(Instance::is_loaded);
            let taken = pool.idle.remove(loaded.unwrap_or(0));
            tracing::debug!(
                runtime = %runtime.as_str(),
                loaded = loaded.is_some(),
                left = pool.idle.len(),
                spawning = pool.spawning,
                "took a standby"
            );
            taken
        };
        self.fill_standbys(runtime);
        taken
    }

    fn spawn_standby(&self, runtime: Runtime) -> Result<Instance, String> {
        let number = self.standbys.next.fetch_add(1, Ordering::Relaxed);
        let slot = Slot::create(self.standby_root().join(number.to_string()))
            .map_err(|e| format!("cannot create the standby's directories: {e}"))?;
        let (program, args) =
            self.builder
                .wrappers
                .command(&self.config.toolchain, runtime, &slot.code());
        let launch = Launch {
            program: &program,
            args: &args,
            sockets: &self.sockets,
            target: Target::Standby(slot),
        };
        Instance::spawn(launch, &self.logs, &self.builder.sandbox)
    }
}

/// A standby let go waits on stdin and has nothing to finish.
const STOP_GRACE: Duration = Duration::from_secs(1);
