//! Object keys of uploads (docs/spec.md §4): their format and its parsing, in one place.
//! Here rather than in the server's upload module because the CLI reads the version of
//! a workload's `s3_key` too (the API reports the key, not the version).

use chrono::{DateTime, Utc};

/// The objects every upload stores.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectKeys {
    /// `functions/<ns>/<name>/<v>.zip`: the user's zip as uploaded.
    pub zip: String,
    /// `contexts/<ns>/<name>/<v>.tar.gz`: the build context (the new `s3Key`).
    pub context: String,
    /// `versions/<ns>/<name>/<v>.json`: the version's record (who, when, sha256), written
    /// once, after the other two.
    pub record: String,
}

const ZIP_PREFIX: &str = "functions/";
const ZIP_SUFFIX: &str = ".zip";
const CONTEXT_PREFIX: &str = "contexts/";
const CONTEXT_SUFFIX: &str = ".tar.gz";
const RECORD_PREFIX: &str = "versions/";
const RECORD_SUFFIX: &str = ".json";

pub fn object_keys(namespace: &str, name: &str, version: &str) -> ObjectKeys {
    let middle = format!("{namespace}/{name}/{version}");
    ObjectKeys {
        zip: format!("{ZIP_PREFIX}{middle}{ZIP_SUFFIX}"),
        context: format!("{CONTEXT_PREFIX}{middle}{CONTEXT_SUFFIX}"),
        record: format!("{RECORD_PREFIX}{middle}{RECORD_SUFFIX}"),
    }
}

/// The prefixes under which every upload of a name lives (zips, contexts, records).
pub fn upload_prefixes(namespace: &str, name: &str) -> [String; 3] {
    [ZIP_PREFIX, CONTEXT_PREFIX, RECORD_PREFIX].map(|prefix| format!("{prefix}{namespace}/{name}/"))
}

/// The version of a key listed under one of [`upload_prefixes`] (a zip or a record);
/// None for another shape.
pub fn version_of_listed(key: &str) -> Option<&str> {
    let file = key.rsplit('/').next()?;
    file.strip_suffix(ZIP_SUFFIX)
        .or_else(|| file.strip_suffix(RECORD_SUFFIX))
        .filter(|v| is_version(v))
}

/// The longest version a request may name: a stamp with a large disambiguator.
const MAX_VERSION_LEN: usize = 32;

/// Whether `text` has the shape of a [`version_stamp`]: 14 digits, then `-<n>` or not.
pub fn is_version(text: &str) -> bool {
    let (stamp, disambiguator) = text.split_once('-').unwrap_or((text, "1"));
    text.len() <= MAX_VERSION_LEN
        && stamp.len() == 14
        && stamp.bytes().all(|b| b.is_ascii_digit())
        && !disambiguator.is_empty()
        && disambiguator.bytes().all(|b| b.is_ascii_digit())
}

/// Upload order of two versions of one name (`…05-2` before `…05-10`): newest last.
pub fn version_order(a: &str, b: &str) -> std::cmp::Ordering {
    let parts = |v: &str| {
        let (stamp, n) = v.split_once('-').unwrap_or((v, "0"));
        (stamp.to_string(), n.parse::<u64>().unwrap_or(0))
    };
    parts(a).cmp(&parts(b))
}

/// `reviews/<ns>/<name>.log`: the code review's line about the latest upload of a name,
/// shown at the top of its build log (kept apart from the uploads: a refused upload
/// stores no zip but still has its line).
pub fn review_note_key(namespace: &str, name: &str) -> String {
    format!("reviews/{namespace}/{name}.log")
}

/// The name part of a self-contained job's keys: apart from functions of the same name,
/// as `_` cannot start a resource name.
pub fn job_key_name(name: &str) -> String {
    format!("_jobs/{name}")
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

/// The version of an upload stored at `now` after `newest` (the latest stored version of
/// the name): later than it even when the second or the clock has not moved on, so a
/// version pruned in the same second is never taken again.
pub fn next_version(now: DateTime<Utc>, newest: Option<&str>) -> String {
    let candidate = version_stamp(now, 0);
    match newest {
        Some(newest) if version_order(newest, &candidate).is_ge() => {
            let (stamp, n) = newest.split_once('-').unwrap_or((newest, "0"));
            format!("{stamp}-{}", n.parse::<u64>().unwrap_or(0) + 1)
        }
        _ => candidate,
    }
}

/// The version stamp of a context key: `contexts/<ns>/<name>/<v>.tar.gz` → `<v>`.
pub fn version_of(context_key: &str) -> &str {
    let file = context_key.rsplit('/').next().unwrap_or(context_key);
    file.strip_suffix(CONTEXT_SUFFIX).unwrap_or(file)
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

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn object_keys_follow_the_spec_layout() {
        assert_eq!(
            object_keys("team-a", "resize", "20250102030405"),
            ObjectKeys {
                zip: "functions/team-a/resize/20250102030405.zip".into(),
                context: "contexts/team-a/resize/20250102030405.tar.gz".into(),
                record: "versions/team-a/resize/20250102030405.json".into(),
            }
        );
        let keys = object_keys("team-a", "resize", "1");
        let [zips, contexts, records] = upload_prefixes("team-a", "resize");
        assert!(keys.zip.starts_with(&zips) && keys.context.starts_with(&contexts));
        assert!(keys.record.starts_with(&records));
    }

    #[test]
    fn listed_versions_and_their_order() {
        let keys = object_keys("ns", "f", "20250102030405-3");
        assert_eq!(version_of_listed(&keys.zip), Some("20250102030405-3"));
        assert_eq!(version_of_listed(&keys.record), Some("20250102030405-3"));
        assert_eq!(version_of_listed(&keys.context), None);
        for bad in [
            "",
            "2025",
            "20250102030405-",
            "2025010203040x",
            "20250102030405-1-2",
            "../20250102030405",
        ] {
            assert!(!is_version(bad), "{bad}");
        }
        let mut versions = vec![
            "20250102030405-10",
            "20250102030406",
            "20250102030405",
            "20250102030405-2",
        ];
        versions.sort_by(|a, b| version_order(a, b));
        assert_eq!(
            versions,
            [
                "20250102030405",
                "20250102030405-2",
                "20250102030405-10",
                "20250102030406"
            ]
        );
    }

    #[test]
    fn version_stamps() {
        let now = Utc
            .with_ymd_and_hms(2025, 1, 2, 3, 4, 5)
            .unwrap()
            .checked_add_signed(chrono::Duration::milliseconds(999))
            .unwrap();
        assert_eq!(version_stamp(now, 0), "20250102030405");
        assert_eq!(version_stamp(now, 1), "20250102030405-1");
        assert_eq!(version_stamp(now, 12), "20250102030405-12");
    }

    #[test]
    fn next_versions_only_go_forward() {
        let now = Utc.with_ymd_and_hms(2025, 1, 2, 3, 4, 5).unwrap();
        assert_eq!(next_version(now, None), "20250102030405");
        assert_eq!(
            next_version(now, Some("20250102030404-7")),
            "20250102030405"
        );
        assert_eq!(
            next_version(now, Some("20250102030405")),
            "20250102030405-1"
        );
        assert_eq!(
            next_version(now, Some("20250102030405-9")),
            "20250102030405-10"
        );
        // A clock set back still gives a later version.
        assert_eq!(
            next_version(now, Some("20250102030406")),
            "20250102030406-1"
        );
    }

    #[test]
    fn versions_read_back() {
        for version in ["20260101120000", "20260101120000-1"] {
            let keys = object_keys("ns", &job_key_name("nightly"), version);
            assert_eq!(version_of(&keys.context), version);
        }
    }

    #[test]
    fn zip_key_round_trip() {
        for name in ["resize", "_jobs/nightly"] {
            let keys = object_keys("team-a", name, "20250102030405-2");
            assert_eq!(zip_key_for_context(&keys.context), Some(keys.zip));
        }
        for bad in [
            "functions/team-a/resize/1.zip",
            "contexts/team-a/resize/1.zip",
            "contexts/team-a/1.tar.gz",
            "contexts//resize/1.tar.gz",
            "contexts/team-a/../1.tar.gz",
            "other/contexts/a/b/1.tar.gz",
            "",
        ] {
            assert_eq!(zip_key_for_context(bad), None, "{bad}");
        }
    }
}
