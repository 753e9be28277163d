//! The changes between two versions of an upload: per file added, removed, changed or
//! unchanged, and a line diff (the `similar` crate) of changed text files within
//! [`DiffLimits`]; binary, cut or larger files are summarised, not diffed.

use std::collections::BTreeMap;
use std::time::Duration;

use similar::{ChangeTag, TextDiff};
use sless_api::SourceFileResponse;

/// What is diffed line by line; past these a file is summarised.
#[derive(Clone, Copy, Debug)]
pub struct DiffLimits {
    /// Bytes of one side of a file.
    pub max_file_bytes: u64,
    /// Lines of one side of a file.
    pub max_lines: usize,
    /// Unchanged lines shown around each change.
    pub context: usize,
    /// A diff taking longer gives a less minimal (still correct) answer.
    pub timeout: Duration,
}

impl Default for DiffLimits {
    fn default() -> Self {
        DiffLimits {
            max_file_bytes: 256 * 1024,
            max_lines: 5_000,
            context: 3,
            timeout: Duration::from_millis(500),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileChange {
    Added,
    Removed,
    Changed,
    Unchanged,
    /// Binary or cut by the API on both sides with nothing telling them apart.
    NotCompared,
}

impl FileChange {
    pub fn as_str(self) -> &'static str {
        match self {
            FileChange::Added => "added",
            FileChange::Removed => "removed",
            FileChange::Changed => "changed",
            FileChange::Unchanged => "unchanged",
            FileChange::NotCompared => "not compared",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineTag {
    Context,
    Added,
    Removed,
}

/// One line of a hunk, with its 1-based numbers in the old and new file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiffLine {
    pub tag: LineTag,
    pub old: Option<usize>,
    pub new: Option<usize>,
    /// Without its line ending.
    pub text: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hunk {
    /// `@@ -a,b +c,d @@`
    pub header: String,
    pub lines: Vec<DiffLine>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DiffBody {
    /// Nothing to show line by line (added, removed, unchanged).
    None,
    Lines(Vec<Hunk>),
    /// Not diffed line by line, and why.
    Summary(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileDiff {
    pub name: String,
    pub change: FileChange,
    pub from_size: Option<u64>,
    pub to_size: Option<u64>,
    /// Lines added and removed, when diffed.
    pub added: usize,
    pub removed: usize,
    pub body: DiffBody,
}

/// Both versions' files, by name (the order the page lists them in).
pub fn diff_files(
    from: &[SourceFileResponse],
    to: &[SourceFileResponse],
    limits: DiffLimits,
) -> Vec<FileDiff> {
    let mut names: BTreeMap<&str, (Option<&SourceFileResponse>, Option<&SourceFileResponse>)> =
        BTreeMap::new();
    for file in from {
        names.entry(&file.name).or_default().0 = Some(file);
    }
    for file in to {
        names.entry(&file.name).or_default().1 = Some(file);
    }
    names
        .into_iter()
        .map(|(name, sides)| match sides {
            (Some(old), Some(new)) => compare(name, old, new, limits),
            (old, new) => FileDiff {
                name: name.to_string(),
                change: if old.is_some() {
                    FileChange::Removed
                } else {
                    FileChange::Added
                },
                from_size: old.map(|f| f.size),
                to_size: new.map(|f| f.size),
                added: 0,
                removed: 0,
                body: DiffBody::None,
            },
        })
        .collect()
}

fn compare(
    name: &str,
    old: &SourceFileResponse,
    new: &SourceFileResponse,
    limits: DiffLimits,
) -> FileDiff {
    let mut diff = FileDiff {
        name: name.to_string(),
        change: FileChange::Changed,
        from_size: Some(old.size),
        to_size: Some(new.size),
        added: 0,
        removed: 0,
        body: DiffBody::None,
    };
    let sizes = format!(
        "{} → {}",
        sless_api::human_bytes(old.size),
        sless_api::human_bytes(new.size)
    );
    let texts = match (&old.content, &new.content) {
        (Some(a), Some(b)) if !old.binary && !new.binary => Some((a.as_str(), b.as_str())),
        _ => None,
    };
    let Some((a, b)) = texts else {
        // Binary content is not in the listing: only its size can tell.
        let differs = old.size != new.size || old.binary != new.binary;
        diff.change = if differs {
            FileChange::Changed
        } else {
            FileChange::NotCompared
        };
        diff.body = DiffBody::Summary(format!("Binary file ({sizes}), not diffed."));
        return diff;
    };
    if old.truncated || new.truncated {
        let differs = old.size != new.size || a != b;
        diff.change = if differs {
            FileChange::Changed
        } else {
            FileChange::NotCompared
        };
        diff.body = DiffBody::Summary(format!(
            "Too large to diff ({sizes}): the source listing shows only its beginning."
        ));
        return diff;
    }
    if a == b {
        diff.change = FileChange::Unchanged;
        return diff;
    }
    let lines = a.lines().count().max(b.lines().count());
    if old.size.max(new.size) > limits.max_file_bytes || lines > limits.max_lines {
        diff.body = DiffBody::Summary(format!(
            "Too large to diff ({sizes}, {lines} lines): the console diffs files up to {} \
             and {} lines.",
            sless_api::human_bytes(limits.max_file_bytes),
            limits.max_lines
        ));
        return diff;
    }
    let text = TextDiff::configure()
        .timeout(limits.timeout)
        .diff_lines(a, b);
    let mut hunks = Vec::new();
    for hunk in text
        .unified_diff()
        .context_radius(limits.context)
        .iter_hunks()
    {
        let lines = hunk
            .iter_changes()
            .map(|change| {
                let tag = match change.tag() {
                    ChangeTag::Equal => LineTag::Context,
                    ChangeTag::Insert => LineTag::Added,
                    ChangeTag::Delete => LineTag::Removed,
                };
                match tag {
                    LineTag::Added => diff.added += 1,
                    LineTag::Removed => diff.removed += 1,
                    LineTag::Context => {}
                }
                DiffLine {
                    tag,
                    old: change.old_index().map(|i| i + 1),
                    new: change.new_index().map(|i| i + 1),
                    text: change.value().trim_end_matches(['\n', '\r']).to_string(),
                }
            })
            .collect();
        hunks.push(Hunk {
            header: hunk.header().to_string(),
            lines,
        });
    }
    diff.body = DiffBody::Lines(hunks);
    diff
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(name: &str, content: &str) -> SourceFileResponse {
        SourceFileResponse {
            name: name.into(),
            content: Some(content.into()),
            binary: false,
            truncated: false,
            size: content.len() as u64,
        }
    }

    fn binary(name: &str, size: u64) -> SourceFileResponse {
        SourceFileResponse {
            name: name.into(),
            content: None,
            binary: true,
            truncated: false,
            size,
        }
    }

    #[test]
    fn files_are_added_removed_changed_or_unchanged() {
        let from = [
            text("a.py", "x = 1\ny = 2\nz = 3\n"),
            text("gone.py", "old\n"),
            text("same.py", "same\n"),
        ];
        let to = [
            text("a.py", "x = 1\ny = 20\nz = 3\n"),
            text("new.py", "new\n"),
            text("same.py", "same\n"),
        ];
        let diff = diff_files(&from, &to, DiffLimits::default());
        let changes: Vec<_> = diff.iter().map(|d| (d.name.as_str(), d.change)).collect();
        assert_eq!(
            changes,
            [
                ("a.py", FileChange::Changed),
                ("gone.py", FileChange::Removed),
                ("new.py", FileChange::Added),
                ("same.py", FileChange::Unchanged),
            ]
        );
        let a = &diff[0];
        assert_eq!((a.added, a.removed), (1, 1));
        let DiffBody::Lines(hunks) = &a.body else {
            panic!("{a:?}")
        };
        assert_eq!(hunks.len(), 1);
        assert_eq!(hunks[0].header, "@@ -1,3 +1,3 @@");
        let tagged: Vec<_> = hunks[0]
            .lines
            .iter()
            .map(|l| (l.tag, l.old, l.new, l.text.as_str()))
            .collect();
        assert_eq!(
            tagged,
            [
                (LineTag::Context, Some(1), Some(1), "x = 1"),
                (LineTag::Removed, Some(2), None, "y = 2"),
                (LineTag::Added, None, Some(2), "y = 20"),
                (LineTag::Context, Some(3), Some(3), "z = 3"),
            ]
        );
    }

    #[test]
    fn only_changes_and_their_context_are_shown() {
        let old: String = (1..=100).map(|i| format!("line {i}\n")).collect();
        let new = old.replace("line 50\n", "line fifty\n");
        let diff = diff_files(
            &[text("f", &old)],
            &[text("f", &new)],
            DiffLimits::default(),
        );
        let DiffBody::Lines(hunks) = &diff[0].body else {
            panic!()
        };
        assert_eq!(hunks[0].lines.len(), 3 + 2 + 3, "{hunks:?}");
        assert_eq!(hunks[0].header, "@@ -47,7 +47,7 @@");
    }

    #[test]
    fn binary_cut_and_large_files_are_summarised() {
        let limits = DiffLimits {
            max_lines: 10,
            ..DiffLimits::default()
        };
        let many: String = (0..20).map(|i| format!("{i}\n")).collect();
        let mut cut = text("cut.txt", "the beginning");
        cut.truncated = true;
        cut.size = 10_000_000;
        let mut cut_longer = cut.clone();
        cut_longer.size += 1;
        let from = [
            binary("b.bin", 10),
            binary("same.bin", 10),
            cut,
            text("long.txt", &many),
        ];
        let to = [
            binary("b.bin", 11),
            binary("same.bin", 10),
            cut_longer,
            text("long.txt", &format!("{many}more\n")),
        ];
        let diff = diff_files(&from, &to, limits);
        let summary = |i: usize| match &diff[i].body {
            DiffBody::Summary(s) => s.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(diff[0].change, FileChange::Changed);
        assert!(summary(0).starts_with("Binary file"), "{}", summary(0));
        assert_eq!(diff[1].name, "cut.txt");
        assert_eq!(diff[1].change, FileChange::Changed);
        assert!(summary(1).contains("Too large"), "{}", summary(1));
        assert_eq!(diff[2].name, "long.txt");
        assert!(summary(2).contains("21 lines"), "{}", summary(2));
        assert_eq!(diff[3].change, FileChange::NotCompared);
    }
}
