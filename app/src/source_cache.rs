//! Highlighted files, cached by (build-context key, file name). An upload's key names a
//! new object every time (the version is in it), so an entry never goes stale: a repeat
//! view costs neither the source fetch nor the highlighting.

use std::sync::Arc;

use quick_cache::Weighter;
use quick_cache::sync::Cache;

use crate::highlight::RenderedFile;

/// The files of one upload, in the order the source listing gave them.
pub type RenderedSource = Vec<Arc<RenderedFile>>;

type FileKey = (String, String);

#[derive(Clone)]
struct FileWeight;

impl Weighter<FileKey, Arc<RenderedFile>> for FileWeight {
    fn weight(&self, _key: &FileKey, file: &Arc<RenderedFile>) -> u64 {
        // Zero-weight entries would never be evicted.
        file.weight().max(1) as u64
    }
}

/// Whole files are large: this many per shard keeps shards big enough for them.
const TYPICAL_FILE_BYTES: usize = 16 * 1024;
/// Upload manifests (s3 key → file names) are small; their count is bounded instead.
const MAX_MANIFESTS: usize = 4096;

/// A size-capped cache of highlighted files, plus each upload's file list so that a hit
/// needs no source fetch.
pub struct SourceCache {
    files: Cache<FileKey, Arc<RenderedFile>, FileWeight>,
    manifests: Cache<String, Arc<[String]>>,
    max_bytes: usize,
}

impl SourceCache {
    pub fn new(max_bytes: usize) -> Self {
        SourceCache {
            files: Cache::with_weighter(
                (max_bytes / TYPICAL_FILE_BYTES).max(1),
                max_bytes as u64,
                FileWeight,
            ),
            manifests: Cache::new(MAX_MANIFESTS),
            max_bytes,
        }
    }

    /// Every file of the upload behind `s3_key`, when all are cached.
    pub fn get_upload(&self, s3_key: &str) -> Option<RenderedSource> {
        let names = self.manifests.get(s3_key)?;
        names.iter().map(|name| self.get(s3_key, name)).collect()
    }

    pub fn get(&self, s3_key: &str, name: &str) -> Option<Arc<RenderedFile>> {
        self.files.get(&(s3_key.to_string(), name.to_string()))
    }

    /// Remembers an upload's files. A single file larger than the cap is not kept.
    pub fn put_upload(&self, s3_key: &str, files: &RenderedSource) {
        for file in files {
            if file.weight() <= self.max_bytes {
                self.files
                    .insert((s3_key.to_string(), file.name.clone()), file.clone());
            }
        }
        let names: Arc<[String]> = files.iter().map(|f| f.name.clone()).collect();
        self.manifests.insert(s3_key.to_string(), names);
    }

    /// Cached bytes (for tests and metrics).
    pub fn bytes(&self) -> usize {
        self.files.weight() as usize
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
    fn hits_and_stays_under_its_size() {
        let cache = SourceCache::new(3_000);
        cache.put_upload("a", &vec![file("one", 1_000), file("two", 100)]);
        assert_eq!(cache.get_upload("a").unwrap().len(), 2);
        cache.put_upload("b", &vec![file("one", 1_000)]);
        cache.put_upload("c", &vec![file("big", 1_500)]);
        assert!(cache.bytes() <= 3_000, "{} bytes kept", cache.bytes());
        let kept = ["a", "b", "c"]
            .iter()
            .filter(|key| cache.get_upload(key).is_some())
            .count();
        assert!(kept < 3, "3,600 bytes of files cannot all stay under 3,000");
        cache.put_upload("huge", &vec![file("h", 10_000)]);
        assert!(cache.get("huge", "h").is_none());
        assert!(cache.get_upload("huge").is_none());
    }
}
