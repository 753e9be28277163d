//! Where the proxy keeps its call records across restarts: the seam between the proxy
//! (`sless-gateway`), which makes the records, and a mode's storage. Embedded mode keeps
//! them in its SQLite file; Kubernetes mode has no archive (in memory only).

use async_trait::async_trait;

use crate::store::Result;

/// One function's records as the proxy saved them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedCalls {
    pub namespace: String,
    pub name: String,
    /// The proxy's own document (its totals and recent calls); opaque to the archive.
    pub document: Vec<u8>,
}

/// Written from the proxy's background flusher, never on the invoke path.
#[async_trait]
pub trait CallArchive: Send + Sync + 'static {
    /// Replaces each function's document, all of them or none (one write to disk).
    async fn save(&self, documents: &[SavedCalls]) -> Result<()>;
    /// Every function's document, read once at start.
    async fn load_all(&self) -> Result<Vec<SavedCalls>>;
    /// Drops the function's document (it was deleted); nothing saved is fine.
    async fn forget(&self, namespace: &str, name: &str) -> Result<()>;
}
