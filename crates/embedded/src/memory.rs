//! `memory_mb` for local processes: a memory cgroup per process where sless may create
//! one (cgroup v2 with the memory controller delegated, or v1 as root), else an
//! `RLIMIT_DATA` set in the child. Only a cgroup lets the kernel's OOM killer end the
//! process and lets sless tell afterwards that this is why it died.

use std::fs;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

const MB: u64 = 1024 * 1024;

/// Where this runner makes its per-process cgroups.
#[derive(Clone, Debug)]
pub enum MemoryControl {
    /// `<own memory cgroup>/sless-<pid>` in the v1 memory hierarchy.
    V1(PathBuf),
    /// `<own cgroup>/sless-<pid>` in the unified hierarchy, memory delegated to it.
    V2(PathBuf),
    /// No cgroup could be made: `RLIMIT_DATA` instead.
    Rlimit,
}

static NEXT_GROUP: AtomicU64 = AtomicU64::new(0);

impl MemoryControl {
    /// Makes this runner's parent cgroup, preferring v2; `Rlimit` when neither works.
    pub fn detect() -> Self {
        let own = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let leaf = format!("sless-{}", std::process::id());
        let v2 = unified_path(&own).and_then(|path| {
            let mine = Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
            remove_stale(&mine);
            let parent = mine.join(&leaf);
            // The controller must be on in our cgroup's subtree (fails while our own
            // cgroup holds processes, unless it is the root) and in the new one's.
            write(&mine.join("cgroup.subtree_control"), "+memory").ok()?;
            make_dir(&parent).ok()?;
            write(&parent.join("cgroup.subtree_control"), "+memory").ok()?;
            Some(MemoryControl::V2(parent))
        });
        let v1 = || {
            let path = v1_memory_path(&own)?;
            let mine = Path::new("/sys/fs/cgroup/memory").join(path.trim_start_matches('/'));
            remove_stale(&mine);
            let parent = mine.join(&leaf);
            make_dir(&parent).ok()?;
            parent
                .join("memory.limit_in_bytes")
                .is_file()
                .then_some(MemoryControl::V1(parent))
        };
        v2.or_else(v1).unwrap_or(MemoryControl::Rlimit)
    }

    pub fn describe(&self) -> String {
        match self {
            MemoryControl::V1(dir) => format!("cgroup v1 under {}", dir.display()),
            MemoryControl::V2(dir) => format!("cgroup v2 under {}", dir.display()),
            MemoryControl::Rlimit => "RLIMIT_DATA (no writable memory cgroup)".into(),
        }
    }

    /// A fresh cgroup limited to `limit_mb`, or `None` on the rlimit fallback.
    pub fn limit(&self, limit_mb: u32) -> io::Result<Option<MemoryCgroup>> {
        let (parent, v2) = match self {
            MemoryControl::V1(parent) => (parent, false),
            MemoryControl::V2(parent) => (parent, true),
            MemoryControl::Rlimit => return Ok(None),
        };
        let dir = parent.join(NEXT_GROUP.fetch_add(1, Ordering::Relaxed).to_string());
        make_dir(&dir)?;
        let bytes = (u64::from(limit_mb) * MB).to_string();
        let limited = if v2 {
            write(&dir.join("memory.max"), &bytes).and_then(|()| {
                // Swap would let a process run past its limit instead of being killed.
                match write(&dir.join("memory.swap.max"), "0") {
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                    other => other,
                }
            })
        } else {
            write(&dir.join("memory.limit_in_bytes"), &bytes).and_then(|()| {
                let memsw = dir.join("memory.memsw.limit_in_bytes");
                if memsw.is_file() {
                    write(&memsw, &bytes)
                } else {
                    Ok(())
                }
            })
        };
        let procs = limited.and_then(|()| {
            fs::OpenOptions::new()
                .write(true)
                .open(dir.join("cgroup.procs"))
                .map(OwnedFd::from)
        });
        match procs {
            Ok(procs) => Ok(Some(MemoryCgroup {
                dir,
                v2,
                limit_mb,
                procs,
            })),
            Err(e) => {
                let _ = fs::remove_dir(&dir);
                Err(e)
            }
        }
    }
}

/// One process's cgroup; removed (with any process left in it) when dropped.
#[derive(Debug)]
pub struct MemoryCgroup {
    dir: PathBuf,
    v2: bool,
    limit_mb: u32,
    /// Opened by the parent: the child joins by writing "0" to it before exec.
    procs: OwnedFd,
}

impl MemoryCgroup {
    /// A closure that moves the calling process into the cgroup, for `pre_exec`:
    /// one write(2) on a descriptor opened before the fork (async-signal-safe). The
    /// cgroup must outlive the spawn.
    pub fn joiner(&self) -> impl Fn() -> io::Result<()> + Send + Sync + 'static {
        let fd = self.procs.as_raw_fd();
        move || {
            // SAFETY: writes one byte from a static buffer to an open descriptor.
            let written = unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) };
            if written == 1 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        }
    }

    /// Why the process died, if the kernel's OOM killer ended something in it.
    pub fn oom_reason(&self) -> Option<String> {
        let (file, key) = if self.v2 {
            ("memory.events", "oom_kill")
        } else {
            ("memory.oom_control", "oom_kill")
        };
        let text = fs::read_to_string(self.dir.join(file)).ok()?;
        let kills: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())?;
        (kills > 0).then(|| oom_message(self.limit_mb))
    }
}

fn oom_message(limit_mb: u32) -> String {
    format!("out of memory: it used more than its memory_mb limit of {limit_mb} MB and was killed")
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        let dir = std::mem::take(&mut self.dir);
        // A cgroup goes only once empty: whatever the process forked is killed, and
        // the directory is removed off the async threads as soon as they are gone.
        std::thread::spawn(move || {
            for _ in 0..50 {
                let procs = fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
                for pid in procs.lines().filter_map(|p| p.trim().parse::<i32>().ok()) {
                    // SAFETY: kill(2) touches no memory of ours.
                    unsafe {
                        libc::kill(pid, libc::SIGKILL);
                    }
                }
                match fs::remove_dir(&dir) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => {
                        std::thread::sleep(std::time::Duration::from_millis(100))
                    }
                    _ => return,
                }
            }
            tracing::warn!(path = %dir.display(), "cannot remove a function's cgroup");
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

/// The path in the v1 memory hierarchy (`4:memory:/path`).
fn v1_memory_path(own: &str) -> Option<&str> {
    own.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        controllers
            .split(',')
            .any(|c| c == "memory")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_memory_cgroup_of_each_hierarchy() {
        let own = "9:name=systemd:/\n4:cpu,memory:/a/b\n0::/\n";
        assert_eq!(v1_memory_path(own), Some("/a/b"));
        assert_eq!(v1_memory_path("0::/x\n"), None);
    }
}
