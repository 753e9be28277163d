//! Upload limits and the one error type of the upload pipeline.

const MIB: u64 = 1024 * 1024;

/// Caps applied to every uploaded zip.
#[derive(Clone, Debug)]
pub struct UploadLimits {
    /// Size of the zip itself (the HTTP layer enforces it on the body too).
    pub max_zip_bytes: u64,
    /// Entries in the central directory, folders included.
    pub max_entries: usize,
    /// Total over all entries, by their declared sizes (reading holds each entry to its own).
    pub max_uncompressed_bytes: u64,
    /// Per entry, uncompressed/compressed; only entries over 1 MiB uncompressed are
    /// checked, so small, very repetitive text files never trip it.
    pub max_compression_ratio: u64,
    /// Over the whole zip, inflated total/zip size, once the total passes 1 MiB: many
    /// entries each too small for the per-entry check still cannot make a bomb.
    pub max_archive_ratio: u64,
}

impl Default for UploadLimits {
    fn default() -> Self {
        UploadLimits {
            max_zip_bytes: 50 * MIB,
            max_entries: 10_000,
            max_uncompressed_bytes: 250 * MIB,
            max_compression_ratio: 200,
            max_archive_ratio: 100,
        }
    }
}

/// Why an upload was refused. Messages name the entry and the rule and say what to do.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error(
        "the upload is not a valid zip archive: {0}; upload a .zip file, e.g. made with \
         `cd my-function && zip -r ../function.zip .`"
    )]
    NotAZip(String),
    #[error(
        "the zip is larger than the limit of {}; leave dependencies and build outputs \
         out of it (they are installed at build time)",
        sless_api::human_bytes(*limit)
    )]
    TooLarge { limit: u64 },
    #[error(
        "the zip has {count} entries, more than the limit of {limit}; leave dependencies \
         (node_modules, venv, vendor) and build outputs out of it (they are installed at \
         build time)"
    )]
    TooManyEntries { count: usize, limit: usize },
    #[error("entry {entry:?}: {reason}")]
    UnsafeEntry { entry: String, reason: String },
    #[error(
        "the zip expands to more than the limit of {} when unpacked; leave dependencies, \
         data sets and build outputs out of it",
        sless_api::human_bytes(*limit)
    )]
    Expands { limit: u64 },
    #[error(
        "entry {entry:?}: compresses {ratio}:1, more than the allowed ratio of {limit}:1 \
         (this looks like a zip bomb); leave large padded or generated files out of the zip"
    )]
    SuspiciousRatio {
        entry: String,
        ratio: u64,
        limit: u64,
    },
    #[error(
        "the zip expands {ratio}:1 as a whole, more than the allowed ratio of {limit}:1 \
         (this looks like a zip bomb); leave large padded or generated files out of the zip"
    )]
    ArchiveRatio { ratio: u64, limit: u64 },
    #[error(
        "the zip contains no files; zip the folder's contents, e.g. \
         `cd my-function && zip -r ../function.zip .`"
    )]
    Empty,
    /// `context` says what was being read or written.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl UploadError {
    /// True for the errors that map to HTTP 413; the others are 400.
    pub fn is_too_large(&self) -> bool {
        matches!(
            self,
            UploadError::TooLarge { .. } | UploadError::Expands { .. }
        )
    }

    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        UploadError::Io {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn unsafe_entry(entry: impl Into<String>, reason: impl Into<String>) -> Self {
        UploadError::UnsafeEntry {
            entry: entry.into(),
            reason: reason.into(),
        }
    }
}
