//! Object keys of one upload version (docs/spec.md §4).

use chrono::{DateTime, Utc};

/// The two objects every upload stores.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectKeys {
    /// `functions/<ns>/<name>/<v>.zip`: the user's zip as uploaded.
    pub zip: String,
    /// `contexts/<ns>/<name>/<v>.tar.gz`: the build context (the new `s3Key`).
    pub context: String,
}

const ZIP_PREFIX: &str = "functions/";
const ZIP_SUFFIX: &str = ".zip";
const CONTEXT_PREFIX: &str = "contexts/";
const CONTEXT_SUFFIX: &str = ".tar.gz";

pub fn object_keys(namespace: &str, name: &str, version: &str) -> ObjectKeys {
    let middle = format!("{namespace}/{name}/{version}");
    ObjectKeys {
        zip: format!("{ZIP_PREFIX}{middle}{ZIP_SUFFIX}"),
        context: format!("{CONTEXT_PREFIX}{middle}{CONTEXT_SUFFIX}"),
    }
}

/// UTC `YYYYMMDDhhmmss`; a `disambiguator` > 0 appends `-<n>` (two uploads in one second).
/// The stamps of one name sort in upload order.
pub fn version_stamp(now: DateTime<Utc>, disambiguator: u32) -> String {
    let stamp = now.format("%Y%m%d%H%M%S").to_string();
    if disambiguator == 0 {
        stamp
    } else {
        format!("{stamp}-{disambiguator}")
    }
}

/// The source zip key of a context key (`contexts/…/v.tar.gz` → `functions/…/v.zip`);
/// None if the key has another shape. The name part may hold a '/' (job uploads).
pub fn zip_key_for_context(context_key: &str) -> Option<String> {
    let middle = context_key
        .strip_prefix(CONTEXT_PREFIX)?
        .strip_suffix(CONTEXT_SUFFIX)?;
    let segments: Vec<&str> = middle.split('/').collect();
    let well_formed = segments.len() >= 3
        && segments
            .iter()
            .all(|s| !s.is_empty() && *s != "." && *s != "..");
    well_formed.then(|| format!("{ZIP_PREFIX}{middle}{ZIP_SUFFIX}"))
}
