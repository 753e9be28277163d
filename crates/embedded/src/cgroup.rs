//! Per-process limits for local processes: a cgroup per process holding its memory
//! (`memory_mb`), CPU (`cpu_millis`) and pids limits, where sless may create one
//! (cgroup v2 with the controllers delegated, or v1 as root). Only a cgroup lets the
//! kernel's OOM killer end the process and lets sless tell afterwards that this is why
//! it died, and only a cgroup counts processes per instance (RLIMIT_NPROC counts every
//! process of the uid). Without a memory controller, an `RLIMIT_DATA` set in the child
//! stands in; without cpu or pids, those limits are not enforced (logged at start).

use std::fs;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

const MB: u64 = 1024 * 1024;
/// The CFS period; a quota of `cpu_millis * 100` µs per period is `cpu_millis` / 1000
/// of a core.
const CPU_PERIOD_US: u64 = 100_000;

/// The controllers sless uses, in the order they are probed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Controller {
    Memory,
    Cpu,
    Pids,
}

impl Controller {
    const ALL: [Controller; 3] = [Controller::Memory, Controller::Cpu, Controller::Pids];

    fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Cpu => "cpu",
            Controller::Pids => "pids",
        }
    }

    /// A file every cgroup of this v1 controller has: proof that it is the real one.
    fn v1_marker(self) -> &'static str {
        match self {
            Controller::Memory => "memory.limit_in_bytes",
            Controller::Cpu => "cpu.cfs_quota_us",
            Controller::Pids => "pids.max",
        }
    }

    /// What is lost without it, for the start log.
    fn missing(self) -> &'static str {
        match self {
            Controller::Memory => {
                "memory: RLIMIT_DATA instead (allocations fail, no OOM kill is recorded)"
            }
            Controller::Cpu => "cpu: cpu_millis is not enforced",
            Controller::Pids => {
                "pids: the number of processes is not limited (RLIMIT_NPROC counts every process of sless's uid, so it cannot stand in)"
            }
        }
    }
}

/// The limits of one process; `None` leaves that resource unlimited.
#[derive(Clone, Copy, Debug, Default)]
pub struct Limits {
    pub memory_mb: Option<u32>,
    /// `None`: no quota, and the least weight (a standby loading in the background
    /// yields the CPU to what serves calls; bound, it gets its function's).
    pub cpu_millis: Option<u32>,
    pub max_pids: Option<u32>,
}

/// Where this runner makes its per-process cgroups: for each controller it may use,
/// its parent directory (`<own cgroup>/sless-<pid>`; the same one for every controller
/// on v2, one per hierarchy on v1).
#[derive(Clone, Debug)]
pub struct CgroupControl {
    v2: bool,
    parents: Vec<(Controller, PathBuf)>,
}

static NEXT_GROUP: AtomicU64 = AtomicU64::new(0);

impl CgroupControl {
    /// Makes this runner's parent cgroups, preferring v2; each controller that cannot
    /// be used is left out.
    pub fn detect() -> Self {
        let own = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let leaf = format!("sless-{}", std::process::id());
        if let Some(path) = unified_path(&own) {
            let mine = Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
            remove_stale(&mine);
            let parent = mine.join(&leaf);
            // A controller must be on in our cgroup's subtree (fails while our own
            // cgroup holds processes, unless it is the root) and in the new one's.
            let enabled: Vec<Controller> = Controller::ALL
                .into_iter()
                .filter(|c| {
                    write(
                        &mine.join("cgroup.subtree_control"),
                        &format!("+{}", c.name()),
                    )
                    .is_ok()
                })
                .collect();
            if !enabled.is_empty() && make_dir(&parent).is_ok() {
                let parents = enabled
                    .into_iter()
                    .filter(|c| {
                        write(
                            &parent.join("cgroup.subtree_control"),
                            &format!("+{}", c.name()),
                        )
                        .is_ok()
                    })
                    .map(|c| (c, parent.clone()))
                    .collect::<Vec<_>>();
                if !parents.is_empty() {
                    return Self { v2: true, parents };
                }
            }
        }
        let parents = Controller::ALL
            .into_iter()
            .filter_map(|c| {
                let path = v1_path(&own, c.name())?;
                let mine = Path::new("/sys/fs/cgroup")
                    .join(c.name())
                    .join(path.trim_start_matches('/'));
                remove_stale(&mine);
                let parent = mine.join(&leaf);
                make_dir(&parent).ok()?;
                parent.join(c.v1_marker()).is_file().then_some((c, parent))
            })
            .collect();
        Self { v2: false, parents }
    }

    pub fn has(&self, controller: Controller) -> bool {
        self.parents.iter().any(|(c, _)| *c == controller)
    }

    /// For the start log: what is enforced where, and what is not.
    pub fn describe(&self) -> String {
        let version = if self.v2 { "cgroup v2" } else { "cgroup v1" };
        let used: Vec<String> = self
            .parents
            .iter()
            .map(|(c, dir)| format!("{} under {}", c.name(), dir.display()))
            .collect();
        let missing: Vec<&str> = Controller::ALL
            .into_iter()
            .filter(|c| !self.has(*c))
            .map(Controller::missing)
            .collect();
        match (used.is_empty(), missing.is_empty()) {
            (true, _) => format!("no writable cgroup; {}", missing.join("; ")),
            (false, true) => format!("{version}: {}", used.join(", ")),
            (false, false) => format!(
                "{version}: {}; missing {}",
                used.join(", "),
                missing.join("; ")
            ),
        }
    }

    /// A fresh cgroup with `limits` for the controllers this machine has; `None` when
    /// it has none of them.
    pub fn create(&self, limits: &Limits) -> io::Result<Option<Cgroup>> {
        if self.parents.is_empty() {
            return Ok(None);
        }
        let name = NEXT_GROUP.fetch_add(1, Ordering::Relaxed).to_string();
        let mut cgroup = Cgroup {
            dirs: Vec::new(),
            v2: self.v2,
            limits: Mutex::new(*limits),
            procs: Vec::new(),
        };
        // On failure the half-made cgroup is dropped, which removes its directories.
        for (controller, parent) in &self.parents {
            let dir = parent.join(&name);
            let new = !cgroup.dirs.iter().any(|(_, d)| *d == dir);
            if new {
                make_dir(&dir)?;
            }
            cgroup.dirs.push((*controller, dir.clone()));
            if new {
                cgroup.procs.push(
                    fs::OpenOptions::new()
                        .write(true)
                        .open(dir.join("cgroup.procs"))
                        .map(OwnedFd::from)?,
                );
            }
            set_limit(&dir, *controller, self.v2, limits)?;
        }
        Ok(Some(cgroup))
    }
}

/// Writes one controller's limit into a new cgroup.
fn set_limit(dir: &Path, controller: Controller, v2: bool, limits: &Limits) -> io::Result<()> {
    match (controller, v2) {
        (Controller::Memory, _) => {
            let Some(mb) = limits.memory_mb else {
                return Ok(());
            };
            let bytes = (u64::from(mb) * MB).to_string();
            if v2 {
                write(&dir.join("memory.max"), &bytes)?;
                // Swap would let a process run past its limit instead of being killed.
                write_if_present(&dir.join("memory.swap.max"), "0")
            } else {
                write(&dir.join("memory.limit_in_bytes"), &bytes)?;
                write_if_present(&dir.join("memory.memsw.limit_in_bytes"), &bytes)
            }
        }
        (Controller::Cpu, _) => {
            let Some(millis) = limits.cpu_millis else {
                return if v2 {
                    write(&dir.join("cpu.weight"), "1")
                } else {
                    write(&dir.join("cpu.shares"), "2")
                };
            };
            let (quota, weight) = cpu_settings(millis);
            if v2 {
                write(&dir.join("cpu.max"), &format!("{quota} {CPU_PERIOD_US}"))?;
                write(&dir.join("cpu.weight"), &weight.v2.to_string())
            } else {
                write(&dir.join("cpu.cfs_period_us"), &CPU_PERIOD_US.to_string())?;
                write(&dir.join("cpu.cfs_quota_us"), &quota.to_string())?;
                write(&dir.join("cpu.shares"), &weight.v1.to_string())
            }
        }
        (Controller::Pids, _) => match limits.max_pids {
            Some(max) => write(&dir.join("pids.max"), &max.to_string()),
            None => Ok(()),
        },
    }
}

/// The relative weight under contention, proportional to `cpu_millis`: one core has
/// the kernel's default weight (v1 shares 1024, v2 weight 100).
struct CpuWeight {
    v1: u64,
    v2: u64,
}

/// The CFS quota per [`CPU_PERIOD_US`] and the weight for `millis` thousandths of a
/// core.
fn cpu_settings(millis: u32) -> (u64, CpuWeight) {
    let millis = u64::from(millis);
    let quota = millis * CPU_PERIOD_US / 1000;
    let weight = CpuWeight {
        v1: (millis * 1024 / 1000).clamp(2, 262_144),
        v2: (millis * 100 / 1000).clamp(1, 10_000),
    };
    (quota, weight)
}

/// One process's cgroup (a directory per v1 hierarchy); removed, with any process
/// left in it, when dropped.
#[derive(Debug)]
pub struct Cgroup {
    dirs: Vec<(Controller, PathBuf)>,
    v2: bool,
    /// As last written (a standby's are set when it is bound).
    limits: Mutex<Limits>,
    /// `cgroup.procs` of each directory, opened by the parent: the child joins by
    /// writing "0" to each before exec.
    procs: Vec<OwnedFd>,
}

impl Cgroup {
    pub fn has(&self, controller: Controller) -> bool {
        self.dirs.iter().any(|(c, _)| *c == controller)
    }

    /// A closure that moves the calling process into the cgroup, for `pre_exec`:
    /// write(2) on descriptors opened before the fork (async-signal-safe). The cgroup
    /// must outlive the spawn.
    pub fn joiner(&self) -> impl Fn() -> io::Result<()> + Send + Sync + 'static {
        let fds: Vec<RawFd> = self.procs.iter().map(AsRawFd::as_raw_fd).collect();
        move || {
            for fd in &fds {
                // SAFETY: writes one byte from a static buffer to an open descriptor.
                let written = unsafe { libc::write(*fd, b"0".as_ptr().cast(), 1) };
                if written != 1 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        }
    }

    fn dir(&self, controller: Controller) -> Option<&Path> {
        self.dirs
            .iter()
            .find(|(c, _)| *c == controller)
            .map(|(_, d)| d.as_path())
    }

    /// Why the process died, if the kernel's OOM killer ended something in it.
    pub fn oom_reason(&self) -> Option<String> {
        let file = if self.v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        let text = fs::read_to_string(self.dir(Controller::Memory)?.join(file)).ok()?;
        let kills = counter(&text, "oom_kill")?;
        let limit_mb = self.limits().memory_mb?;
        (kills > 0).then(|| oom_message(limit_mb))
    }

    fn limits(&self) -> Limits {
        *self.limits.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the memory and CPU limits of a running process (a standby bound to a
    /// function); the pids limit stays. Memory below what it uses makes the kernel
    /// reclaim, then kill.
    pub fn set_limits(&self, memory_mb: Option<u32>, cpu_millis: Option<u32>) -> io::Result<()> {
        let limits = Limits {
            memory_mb,
            cpu_millis,
            max_pids: self.limits().max_pids,
        };
        for (controller, dir) in &self.dirs {
            if *controller != Controller::Pids {
                set_limit(dir, *controller, self.v2, &limits)?;
            }
        }
        *self.limits.lock().unwrap_or_else(|e| e.into_inner()) = limits;
        Ok(())
    }

    /// SIGKILL to every process in it (one directory holds them all).
    pub fn kill_all(&self) {
        if let Some((_, dir)) = self.dirs.first() {
            kill_members(dir);
        }
    }

    /// How many forks and clones the pids limit refused so far (`pids.events`, the
    /// same file and key on v1 and v2).
    pub fn pids_refused(&self) -> u64 {
        self.dir(Controller::Pids)
            .and_then(|dir| fs::read_to_string(dir.join("pids.events")).ok())
            .and_then(|text| counter(&text, "max"))
            .unwrap_or(0)
    }

    /// The line for the log and the status once the pids limit refused a fork.
    pub fn pids_reason(&self) -> Option<String> {
        let max = self.limits().max_pids?;
        (self.pids_refused() > 0).then(|| pids_message(max))
    }
}

/// `key value` from a cgroup's flat keyed file.
fn counter(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

fn oom_message(limit_mb: u32) -> String {
    format!("out of memory: it used more than its memory_mb limit of {limit_mb} MB and was killed")
}

pub fn pids_message(max: u32) -> String {
    format!("pids limit {max} reached: fork/thread creation failed")
}

/// SIGKILL to every process in the cgroup directory `dir`.
fn kill_members(dir: &Path) {
    let procs = fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    for pid in procs.lines().filter_map(|p| p.trim().parse::<i32>().ok()) {
        // SAFETY: kill(2) touches no memory of ours.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let dirs: Vec<PathBuf> = std::mem::take(&mut self.dirs)
            .into_iter()
            .map(|(_, dir)| dir)
            .collect();
        // A cgroup goes only once empty: whatever the process forked is killed, and
        // the directories are removed off the async threads as soon as they are gone.
        std::thread::spawn(move || {
            let mut left = dirs;
            left.dedup();
            for _ in 0..50 {
                left.retain(|dir| {
                    kill_members(dir);
                    matches!(fs::remove_dir(dir), Err(e) if e.kind() != io::ErrorKind::NotFound)
                });
                if left.is_empty() {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            for dir in left {
                tracing::warn!(path = %dir.display(), "cannot remove a function's cgroup");
            }
        });
    }
}

/// The fallback limit: private writable memory (heap, mmap'd arenas, stacks), which
/// leaves out the large address-space reservations V8 and Go make without using them.
/// It only makes allocations fail: the handler sees MemoryError (Python) or the
/// runtime aborts (Node, Go); no kill is recorded as out of memory.
pub fn rlimit_data(limit_mb: u32) -> libc::rlimit {
    let bytes = u64::from(limit_mb) * MB;
    libc::rlimit {
        rlim_cur: bytes,
        rlim_max: bytes,
    }
}

/// `0::/path` of a pure cgroup v2 machine (the unified hierarchy mounted at
/// /sys/fs/cgroup, not beside v1 controllers).
fn unified_path(own: &str) -> Option<&str> {
    if !Path::new("/sys/fs/cgroup/cgroup.controllers").is_file() {
        return None;
    }
    own.lines().find_map(|l| l.strip_prefix("0::"))
}

/// The path in a v1 controller's hierarchy (`4:memory:/path`, `3:cpu,cpuacct:/path`).
fn v1_path<'a>(own: &'a str, controller: &str) -> Option<&'a str> {
    own.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        controllers
            .split(',')
            .any(|c| c == controller)
            .then_some(path)
    })
}

/// Removes the empty cgroups of runners that are gone (`sless-<pid>`, no such pid).
fn remove_stale(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("sless-")) else {
            continue;
        };
        if Path::new("/proc").join(pid).exists() {
            continue;
        }
        if let Ok(children) = fs::read_dir(entry.path()) {
            for child in children.flatten().filter(|c| c.path().is_dir()) {
                let _ = fs::remove_dir(child.path());
            }
        }
        let _ = fs::remove_dir(entry.path());
    }
}

fn make_dir(dir: &Path) -> io::Result<()> {
    match fs::create_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        other => other,
    }
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    fs::OpenOptions::new()
        .write(true)
        .open(path)?
        .write_all(value.as_bytes())
}

/// For files only some kernels have (swap accounting).
fn write_if_present(path: &Path, value: &str) -> io::Result<()> {
    match write(path, value) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_each_controller_in_the_v1_hierarchies() {
        let own = "9:name=systemd:/\n8:pids:/p\n4:cpu,cpuacct:/a/b\n3:memory:/m\n0::/\n";
        assert_eq!(v1_path(own, "memory"), Some("/m"));
        assert_eq!(v1_path(own, "cpu"), Some("/a/b"));
        assert_eq!(v1_path(own, "pids"), Some("/p"));
        assert_eq!(v1_path("0::/x\n", "memory"), None);
    }

    #[test]
    fn cpu_quota_and_weight_follow_cpu_millis() {
        let (quota, weight) = cpu_settings(1000);
        assert_eq!((quota, weight.v1, weight.v2), (100_000, 1024, 100));
        let (quota, weight) = cpu_settings(200);
        assert_eq!((quota, weight.v1, weight.v2), (20_000, 204, 20));
        let (quota, weight) = cpu_settings(16_000);
        assert_eq!((quota, weight.v1, weight.v2), (1_600_000, 16_384, 1_600));
    }

    #[test]
    fn the_start_log_names_each_missing_controller() {
        let memory_only = CgroupControl {
            v2: false,
            parents: vec![(Controller::Memory, PathBuf::from("/m/sless-1"))],
        };
        let text = memory_only.describe();
        assert!(
            text.starts_with("cgroup v1: memory under /m/sless-1; missing "),
            "{text}"
        );
        assert!(text.contains("cpu: cpu_millis is not enforced"), "{text}");
        assert!(
            text.contains("pids: the number of processes is not limited"),
            "{text}"
        );
        let none = CgroupControl {
            v2: true,
            parents: Vec::new(),
        };
        assert!(none.describe().contains("memory: RLIMIT_DATA instead"));
        assert!(none.create(&Limits::default()).unwrap().is_none());
    }

    #[test]
    fn reads_counters_by_exact_key() {
        let events = "max 3\n";
        assert_eq!(counter(events, "max"), Some(3));
        let oom = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n";
        assert_eq!(counter(oom, "oom_kill"), Some(2));
        assert_eq!(counter(oom, "oom"), None);
    }
}
