//! The versions of an upload name (docs/api.md "Versions"): every accepted upload is
//! one, its record an immutable object `versions/<ns>/<name>/<v>.json` beside its zip
//! and build context. Kept in object storage rather than in each mode's store so that
//! `sless up` and `sless operator` share this one implementation through
//! [`ObjectStore`]; and a record is written once and never changed, so two uploads at
//! once never race on an index. Which version is active is the store's: the workload's
//! `s3_key`.

use chrono::{DateTime, NaiveDateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;

use crate::s3::{ObjectStore, StorageError};
use sless_api::keys::{object_keys, upload_prefixes, version_of_listed, version_order};

/// The flag's default: versions kept per name.
pub const DEFAULT_KEEP_VERSIONS: usize = 20;

/// What is known of an upload when it is stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VersionRecord {
    /// RFC 3339.
    pub created_at: String,
    /// Hex sha256 of the zip.
    pub sha256: String,
    pub size: u64,
    /// The `sub` of the token that uploaded it.
    pub uploaded_by: String,
    /// Baked into its build context: the same zip under another runtime or entrypoint
    /// is another version.
    pub runtime: String,
    pub entrypoint: String,
}

/// One kept version: its stamp, and its record unless it was stored before sless kept
/// records (or the record cannot be read).
#[derive(Clone, Debug, PartialEq)]
pub struct StoredVersion {
    pub version: String,
    pub record: Option<VersionRecord>,
}

impl StoredVersion {
    /// The record's time, or the one the stamp says (UTC, to the second).
    pub fn created_at(&self) -> String {
        match &self.record {
            Some(record) => record.created_at.clone(),
            None => stamp_time(&self.version).unwrap_or_default(),
        }
    }

    /// Whether this version holds `sha256` built for `runtime` and `entrypoint`.
    pub fn holds(&self, sha256: &str, runtime: &str, entrypoint: &str) -> bool {
        self.record.as_ref().is_some_and(|r| {
            r.sha256 == sha256 && r.runtime == runtime && r.entrypoint == entrypoint
        })
    }
}

fn stamp_time(version: &str) -> Option<String> {
    let stamp = version.split('-').next()?;
    let time = NaiveDateTime::parse_from_str(stamp, "%Y%m%d%H%M%S").ok()?;
    Some(DateTime::<Utc>::from_naive_utc_and_offset(time, Utc).to_rfc3339())
}

/// Writes the record of `version`, once its zip and context are stored.
pub async fn record(
    objects: &ObjectStore,
    namespace: &str,
    name: &str,
    version: &str,
    record: &VersionRecord,
) -> Result<(), StorageError> {
    let key = object_keys(namespace, name, version).record;
    let body = serde_json::to_vec(record).expect("a record serializes");
    objects.put(&key, body.into(), "application/json").await
}

/// The versions of `name` whose zip is stored, newest first.
pub async fn list(
    objects: &ObjectStore,
    namespace: &str,
    name: &str,
) -> Result<Vec<StoredVersion>, StorageError> {
    let [zips, _, records] = upload_prefixes(namespace, name);
    let zipped = objects.list(&zips).await?;
    let recorded = objects.list(&records).await?;
    let mut reads = JoinSet::new();
    for key in recorded {
        let objects = objects.clone();
        reads.spawn(async move { (key.clone(), objects.get(&key).await) });
    }
    let mut records = std::collections::HashMap::new();
    while let Some(read) = reads.join_next().await {
        let Ok((key, read)) = read else { continue };
        let Some(version) = version_of_listed(&key).map(str::to_owned) else {
            continue;
        };
        if let Some(body) = read? {
            match serde_json::from_slice::<VersionRecord>(&body) {
                Ok(record) => {
                    records.insert(version, record);
                }
                Err(e) => tracing::warn!(%key, error = %e, "unreadable version record"),
            }
        }
    }
    let mut versions: Vec<StoredVersion> = zipped
        .iter()
        .filter_map(|key| version_of_listed(key))
        .map(|version| StoredVersion {
            version: version.to_string(),
            record: records.remove(version),
        })
        .collect();
    versions.sort_by(|a, b| version_order(&b.version, &a.version));
    Ok(versions)
}

/// Deletes the objects of every version past the newest `keep`, never `active`; returns
/// the versions it pruned. Best effort: an object left over is listed again and pruned
/// at the next upload.
pub async fn prune(
    objects: &ObjectStore,
    namespace: &str,
    name: &str,
    versions: &[StoredVersion],
    keep: usize,
    active: Option<&str>,
) -> Vec<String> {
    let mut pruned = Vec::new();
    for old in versions.iter().skip(keep) {
        if Some(old.version.as_str()) == active {
            continue;
        }
        let keys = object_keys(namespace, name, &old.version);
        // The zip goes last: a version is listed while its zip is there.
        for key in [keys.record, keys.context, keys.zip] {
            if let Err(e) = objects.delete(&key).await {
                tracing::warn!(%key, error = %e, "could not prune an old version");
            }
        }
        pruned.push(old.version.clone());
    }
    pruned
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_without_record_dates_from_its_stamp() {
        let old = StoredVersion {
            version: "20260102030405-2".into(),
            record: None,
        };
        assert_eq!(old.created_at(), "2026-01-02T03:04:05+00:00");
        assert!(!old.holds("ab", "python3.11", "handler.handle"));
    }
}
