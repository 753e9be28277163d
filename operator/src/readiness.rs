//! `/readyz` for the Kubernetes mode: a component is ready once the first list of every
//! kind it watches has succeeded, so a pod gets traffic (and a new leader starts
//! reconciling) only with a complete view of the cluster.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

/// The parts still waiting for their first list; cheap to clone and share.
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    pending: Arc<Mutex<BTreeSet<String>>>,
}

impl Readiness {
    /// Not ready until [`Readiness::ready`] was called for each part.
    pub fn waiting_for(parts: impl IntoIterator<Item = impl Into<String>>) -> Self {
        let pending = parts.into_iter().map(Into::into).collect();
        Self {
            pending: Arc::new(Mutex::new(pending)),
        }
    }

    /// Adds parts to wait for (a component that starts later).
    pub fn expect(&self, parts: impl IntoIterator<Item = impl Into<String>>) {
        self.lock().extend(parts.into_iter().map(Into::into));
    }

    pub fn ready(&self, part: &str) {
        if self.lock().remove(part) {
            tracing::info!(part, "first list done");
        }
    }

    /// `Err` names what is still awaited.
    pub fn check(&self) -> Result<(), String> {
        let pending = self.lock();
        if pending.is_empty() {
            Ok(())
        } else {
            let names: Vec<&str> = pending.iter().map(String::as_str).collect();
            Err(format!(
                "waiting for the first list of {}",
                names.join(", ")
            ))
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        // The set stays consistent even if a holder panicked.
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_when_every_part_listed() {
        let readiness = Readiness::waiting_for(["functions", "deployments"]);
        assert_eq!(
            readiness.check(),
            Err("waiting for the first list of deployments, functions".into())
        );
        readiness.ready("functions");
        readiness.ready("functions");
        assert!(readiness.check().unwrap_err().contains("deployments"));
        readiness.expect(["jobs"]);
        readiness.ready("deployments");
        assert!(readiness.check().unwrap_err().contains("jobs"));
        readiness.ready("jobs");
        assert_eq!(readiness.check(), Ok(()));
    }
}
