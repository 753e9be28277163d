//! Highlighted files, cached by (build-context key, file name). An upload's key names a
//! new object every time (the version is in it), so an entry never goes stale: a repeat
//! view costs neither the source fetch nor the highlighting.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::highlight::RenderedFile;

/// The files of one upload, in the order the source listing gave them.
pub type RenderedSource = Vec<Arc<RenderedFile>>;

struct Slot {
    file: Arc<RenderedFile>,
    weight: usize,
    last_used: u64,
}

#[derive(Default)]
struct Inner {
    files: HashMap<(String, String), Slot>,
    /// s3 key → the file names of that upload, so a hit needs no source fetch.
    manifests: HashMap<String, Arc<[String]>>,
    bytes: usize,
    clock: u64,
}

/// A size-capped, least-recently-used-evicting map. Evicting scans all entries, which
/// stays cheap because entries are whole files (few of them for a given cap).
pub struct SourceCache {
    inner: Mutex<Inner>,
    max_bytes: usize,
}

impl SourceCache {
    pub fn new(max_bytes: usize) -> Self {
        SourceCache {
            inner: Mutex::new(Inner::default()),
            max_bytes,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent data (only whole inserts).
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Every file of the upload behind `s3_key`, when all are cached.
    pub fn get_upload(&self, s3_key: &str) -> Option<RenderedSource> {
        let mut inner = self.lock();
        let names = inner.manifests.get(s3_key)?.clone();
        inner.clock += 1;
        let now = inner.clock;
        let mut files = Vec::with_capacity(names.len());
        for name in names.iter() {
            let slot = inner.files.get_mut(&(s3_key.to_string(), name.clone()))?;
            slot.last_used = now;
            files.push(slot.file.clone());
        }
        Some(files)
    }

    pub fn get(&self, s3_key: &str, name: &str) -> Option<Arc<RenderedFile>> {
        let mut inner = self.lock();
        inner.clock += 1;
        let now = inner.clock;
        let slot = inner
            .files
            .get_mut(&(s3_key.to_string(), name.to_string()))?;
        slot.last_used = now;
        Some(slot.file.clone())
    }

    /// Remembers an upload's files. A single file larger than the cap is not kept.
    pub fn put_upload(&self, s3_key: &str, files: &RenderedSource) {
        let mut inner = self.lock();
        for file in files {
            let weight = file.weight();
            if weight > self.max_bytes {
                continue;
            }
            inner.clock += 1;
            let now = inner.clock;
            let key = (s3_key.to_string(), file.name.clone());
            if let Some(old) = inner.files.insert(
                key,
                Slot {
                    file: file.clone(),
                    weight,
                    last_used: now,
                },
            ) {
                inner.bytes -= old.weight;
            }
            inner.bytes += weight;
        }
        let names: Arc<[String]> = files.iter().map(|f| f.name.clone()).collect();
        inner.manifests.insert(s3_key.to_string(), names);
        while inner.bytes > self.max_bytes {
            let Some(oldest) = inner
                .files
                .iter()
                .min_by_key(|(_, slot)| slot.last_used)
                .map(|(key, _)| key.clone())
            else {
                break;
            };
            if let Some(slot) = inner.files.remove(&oldest) {
                inner.bytes -= slot.weight;
            }
        }
        // Manifests whose files were evicted simply miss in get_upload; drop them when
        // their upload has nothing cached any more so the map stays bounded.
        if inner.manifests.len() > inner.files.len() + 64 {
            let Inner {
                files, manifests, ..
            } = &mut *inner;
            manifests.retain(|key, names| {
                names
                    .iter()
                    .any(|n| files.contains_key(&(key.clone(), n.clone())))
            });
        }
    }

    /// Cached bytes (for tests and metrics).
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::highlight::FileBody;

    fn file(name: &str, size: usize) -> Arc<RenderedFile> {
        Arc::new(RenderedFile {
            name: name.into(),
            size: size as u64,
            body: FileBody::Code {
                html: "x".repeat(size).into(),
                gutter: String::new(),
                lines: 1,
                syntax: "Plain Text".into(),
            },
            notices: vec![],
        })
    }

    #[test]
    fn hits_and_evicts_the_least_recently_used() {
        let cache = SourceCache::new(3_000);
        cache.put_upload("a", &vec![file("one", 1_000), file("two", 100)]);
        assert_eq!(cache.get_upload("a").unwrap().len(), 2);
        cache.put_upload("b", &vec![file("one", 1_000)]);
        // "a" was used more recently than... nothing else yet: touch b, then overflow.
        assert!(cache.get("b", "one").is_some());
        cache.put_upload("c", &vec![file("big", 1_500)]);
        assert!(cache.bytes() <= 3_000);
        assert!(cache.get_upload("c").is_some());
        assert!(
            cache.get_upload("a").is_none(),
            "the oldest entry is evicted"
        );
        cache.put_upload("huge", &vec![file("h", 10_000)]);
        assert!(cache.get("huge", "h").is_none());
        assert!(cache.get_upload("huge").is_none());
    }
}
