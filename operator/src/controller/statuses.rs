//! What one run of the controllers knows of the statuses it writes, so a status write
//! needs no read first: the typed watch caches drop `status.conditions`, whose
//! transition times a write keeps.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::Resource;
use serde_json::Value;

/// Per object (by uid): the conditions its watch last delivered, and the status this
/// run last wrote.
#[derive(Default)]
pub(crate) struct Statuses {
    known: Mutex<HashMap<String, Known>>,
}

#[derive(Default)]
struct Known {
    /// `status.conditions` as the watch last delivered the object.
    seen: Option<Value>,
    /// The status last written (conditions included), and the resourceVersion of the
    /// object it replaced.
    written: Option<(String, Value)>,
}

impl Statuses {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, Known>) -> T) -> T {
        f(&mut self.known.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The watch delivered object `uid` with these conditions.
    pub fn seen(&self, uid: &str, conditions: Option<&Value>) {
        self.with(|known| known.entry(uid.to_string()).or_default().seen = conditions.cloned());
    }

    /// The watch delivered the deletion of object `uid`.
    pub fn gone(&self, uid: &str) {
        self.with(|known| known.remove(uid));
    }

    /// The conditions the next status of `object` starts from: the ones this run last
    /// wrote (the watch may not have delivered that write yet), else the ones the watch
    /// delivered; `None` when the object was never seen (read it then).
    pub fn previous<K: Resource>(&self, object: &K) -> Option<Option<Value>> {
        let uid = object.meta().uid.as_deref()?;
        self.with(|known| {
            let known = known.get(uid)?;
            Some(match &known.written {
                Some((_, status)) => status.get("conditions").cloned(),
                None => known.seen.clone(),
            })
        })
    }

    /// True when `status` is what this run last wrote over this very version of
    /// `object`: the reconcile holds the object from before that write, which stands.
    pub fn unchanged<K: Resource>(&self, object: &K, status: &Value) -> bool {
        let (Some(uid), Some(version)) = (
            object.meta().uid.as_deref(),
            object.meta().resource_version.as_deref(),
        ) else {
            return false;
        };
        self.with(|known| {
            known
                .get(uid)
                .and_then(|k| k.written.as_ref())
                .is_some_and(|(replaced, written)| replaced == version && written == status)
        })
    }

    /// This run wrote `status` over `object` as the reconcile held it.
    pub fn wrote<K: Resource>(&self, object: &K, status: Value) {
        let (Some(uid), Some(version)) = (
            object.meta().uid.clone(),
            object.meta().resource_version.clone(),
        ) else {
            return;
        };
        self.with(|known| known.entry(uid).or_default().written = Some((version, status)));
    }
}
