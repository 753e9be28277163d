//! Standbys: Python and Node processes started before any function needs them, a pool
//! per runtime that any function of that runtime takes from, so the first call to a
//! function scaled to zero skips the interpreter's start.
//!
//! A standby is confined like an instance, but for no function: Landlock lets it read
//! only its slot's `r/` and write only its `w/` (a 1 MB tmpfs of its own mount
//! namespace), it has its own network namespace with an egress proxy listener nobody
//! serves yet, a cgroup with the pids limit only, and sless's variables only. Bound to
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

/// The standbys waiting, oldest first, per runtime.
#[derive(Default)]
pub(crate) struct Pool {
    idle: std::sync::Mutex<HashMap<Runtime, VecDeque<Instance>>>,
    /// Numbers the slots.
    next: std::sync::atomic::AtomicU64,
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

    /// Starts standbys of `runtime` until its pool is full.
    pub(crate) fn fill_standbys(&self, runtime: Runtime) {
        if !self.has_standbys(runtime) {
            return;
        }
        let mut idle = self.standbys.idle.lock().unwrap_or_else(|e| e.into_inner());
        let pool = idle.entry(runtime).or_default();
        pool.retain_mut(|standby| !standby.has_exited());
        while pool.len() < self.config.standby_pool {
            match self.spawn_standby(runtime) {
                Ok(standby) => pool.push_back(standby),
                Err(e) => {
                    tracing::debug!(runtime = %runtime.as_str(), error = %e, "no standby process");
                    return;
                }
            }
        }
    }

    /// The oldest standby of `runtime` still alive (loaded, or the nearest to it),
    /// and another started in its place.
    pub(crate) fn take_standby(self: &Arc<Self>, runtime: Runtime) -> Option<Instance> {
        if !self.has_standbys(runtime) {
            return None;
        }
        let taken = {
            let mut idle = self.standbys.idle.lock().unwrap_or_else(|e| e.into_inner());
            let pool = idle.entry(runtime).or_default();
            std::iter::from_fn(|| pool.pop_front())
                .find_map(|mut standby| (!standby.has_exited()).then_some(standby))
        };
        let shared = self.clone();
        tokio::spawn(async move { shared.fill_standbys(runtime) });
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
