//! The size limit of an instance's scratch directory (`disk_mb`).
//!
//! An instance's scratch is a directory on the host's disk, kept across restarts (event
//! handlers keep state there), so no tmpfs can bound it. As the kubelet does for an
//! `emptyDir` with a `sizeLimit`, the usage is measured on a schedule and an instance
//! over its limit is stopped and restarted with an empty scratch. Two more bounds hold
//! between measures: no single file may grow past the limit (`RLIMIT_FSIZE`, a write
//! fails with "File too large"), and the memory cgroup throttles how fast it can write.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often usage is measured. At the write speed of a memory-limited instance this
/// bounds the excess to tens of megabytes.
const INTERVAL: Duration = Duration::from_millis(250);
/// The next measure waits this many times as long as the last walk took besides
/// [`INTERVAL`]: a tenant's many files cannot keep sless walking them.
const WALK_BACKOFF: u32 = 4;

/// What a watched directory may hold. Past `max_files` entries it counts as over
/// whatever their size: the walk stays short and the inodes bounded.
#[derive(Clone, Copy, Debug)]
pub struct Bound {
    pub mb: u32,
    /// How the size limit is named in the reason (`disk_mb`).
    pub name: &'static str,
    pub max_files: u64,
}

/// Measures a scratch directory while it lives; dropping it stops the measures.
pub struct Watch {
    verdict: Arc<Mutex<Option<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Watch {
    /// Measures `dir` every [`INTERVAL`] (or longer, [`WALK_BACKOFF`]); past `bound` it
    /// records why and calls `stop` once.
    pub fn start(dir: PathBuf, bound: Bound, stop: impl FnOnce() + Send + 'static) -> Self {
        let verdict = Arc::new(Mutex::new(None));
        let written = verdict.clone();
        let task = tokio::spawn(async move {
            let mut walk = std::time::Duration::ZERO;
            loop {
                tokio::time::sleep(INTERVAL + walk * WALK_BACKOFF).await;
                let dir = dir.clone();
                let started = tokio::time::Instant::now();
                let measured =
                    tokio::task::spawn_blocking(move || usage(&dir, bound.max_files)).await;
                walk = started.elapsed();
                let Ok(usage) = measured else {
                    continue;
                };
                if let Some(reason) = usage.over(&bound) {
                    *written.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason);
                    stop();
                    return;
                }
            }
        });
        Self { verdict, task }
    }

    /// Why the instance was stopped for its scratch, once it was.
    pub fn over(&self) -> Option<String> {
        self.verdict
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What a directory holds on disk.
#[derive(Debug, Default, PartialEq)]
pub struct Usage {
    pub bytes: u64,
    pub entries: u64,
}

impl Usage {
    fn over(&self, bound: &Bound) -> Option<String> {
        if self.entries > bound.max_files {
            Some(format!("scratch full: more than {} files", bound.max_files))
        } else if self.bytes > u64::from(bound.mb) << 20 {
            Some(format!(
                "scratch full: {} MB, over {} ({} MB)",
                self.bytes >> 20,
                bound.name,
                bound.mb
            ))
        } else {
            None
        }
    }
}

/// The blocks allocated under `dir` (sparse files count what they use), stopping the
/// walk past `max_files` entries. Entries that vanish meanwhile are skipped.
pub fn usage(dir: &Path, max_files: u64) -> Usage {
    use std::os::unix::fs::MetadataExt;
    let mut usage = Usage::default();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            usage.entries += 1;
            if usage.entries > max_files {
                return usage;
            }
            // Not followed: a link counts as itself.
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            usage.bytes += meta.blocks() * 512;
            if meta.is_dir() {
                pending.push(entry.path());
            }
        }
    }
    usage
}

/// Empties `dir` (keeping it): the next instance starts with a clean scratch.
pub fn clear(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.symlink_metadata()?.is_dir() {
            std::fs::remove_dir_all(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_counts_nested_files_by_their_blocks() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("a")).unwrap();
        std::fs::write(dir.path().join("a/one"), vec![1u8; 3 << 20]).unwrap();
        std::fs::write(dir.path().join("two"), vec![2u8; 1 << 20]).unwrap();
        let usage = usage(dir.path(), 10);
        assert_eq!(usage.entries, 3);
        assert!(usage.bytes >= 4 << 20, "{usage:?}");
        let bound = |mb| Bound {
            mb,
            name: "disk_mb",
            max_files: 10,
        };
        let over = usage.over(&bound(4)).unwrap();
        assert!(over.contains("over disk_mb (4 MB)"), "{over}");
        assert_eq!(usage.over(&bound(8)), None);
        let few = Bound {
            max_files: 2,
            ..bound(8)
        };
        assert!(usage.over(&few).unwrap().contains("more than 2 files"));
    }

    #[test]
    fn a_sparse_file_counts_what_it_uses() {
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::File::create(dir.path().join("sparse")).unwrap();
        file.set_len(1 << 30).unwrap();
        assert!(usage(dir.path(), 10).bytes < 1 << 20);
    }

    #[test]
    fn clear_keeps_the_directory_and_removes_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::write(dir.path().join("a/b/f"), b"x").unwrap();
        std::fs::write(dir.path().join("g"), b"y").unwrap();
        std::os::unix::fs::symlink("/etc", dir.path().join("link")).unwrap();
        clear(dir.path()).unwrap();
        assert!(dir.path().is_dir());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert!(Path::new("/etc").is_dir());
    }
}
