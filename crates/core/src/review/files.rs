//! Which files of an upload a review sends: text sources only, bounded in total.

use std::io::{Read, Seek};

use serde::Serialize;
use zip::ZipArchive;

use crate::upload::UploadError;

/// Extensions (lowercase) of the files a review sends; everything else stays out.
pub const REVIEWED_EXTENSIONS: &[&str] = &[
    "py", "js", "ts", "json", "yaml", "yml", "txt", "sh", "sql", "go", "mod", "toml",
];

/// Past this many bytes of text in one upload the review is skipped, not truncated: a
/// cut upload could hide its payload in the part left out.
pub const MAX_REVIEW_BYTES: u64 = 100 * 1024;

/// One text file as the model sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReviewFile {
    pub path: String,
    pub content: String,
}

/// What [`select_files`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Selection {
    Files(Vec<ReviewFile>),
    /// The text files total more than [`MAX_REVIEW_BYTES`] (declared sizes).
    TooLarge {
        bytes: u64,
    },
}

/// True for a path a review sends: a reviewed extension, outside `node_modules/`.
pub fn is_reviewed(path: &str) -> bool {
    if path.split('/').any(|part| part == "node_modules") {
        return false;
    }
    let file = path.rsplit('/').next().unwrap_or(path);
    file.rsplit_once('.').is_some_and(|(stem, ext)| {
        !stem.is_empty() && REVIEWED_EXTENSIONS.contains(&ext.to_ascii_lowercase().as_str())
    })
}

/// The text files of a zip that passed `check_zip` (in memory or a spooled file alike).
/// Sizes are summed from the headers before anything is inflated, and each read is held
/// to the budget; a file that is not UTF-8 text (a binary under a text name) is left out.
pub fn select_files<R: Read + Seek>(zip: R) -> Result<Selection, UploadError> {
    let mut archive = ZipArchive::new(zip).map_err(|e| UploadError::NotAZip(e.to_string()))?;
    let mut chosen = Vec::new();
    let mut bytes = 0u64;
    for index in 0..archive.len() {
        let entry = archive
            .by_index_raw(index)
            .map_err(|e| UploadError::NotAZip(e.to_string()))?;
        if entry.is_dir() || !is_reviewed(entry.name()) {
            continue;
        }
        bytes = bytes.saturating_add(entry.size());
        chosen.push(index);
    }
    if bytes > MAX_REVIEW_BYTES {
        return Ok(Selection::TooLarge { bytes });
    }
    let mut files = Vec::with_capacity(chosen.len());
    for index in chosen {
        let entry = archive
            .by_index(index)
            .map_err(|e| UploadError::NotAZip(e.to_string()))?;
        let path = entry.name().to_string();
        let mut raw = Vec::new();
        entry
            .take(MAX_REVIEW_BYTES)
            .read_to_end(&mut raw)
            .map_err(|e| UploadError::io(format!("reading {path:?} for the code review"), e))?;
        match String::from_utf8(raw) {
            Ok(content) if !content.contains('\0') => files.push(ReviewFile { path, content }),
            _ => {}
        }
    }
    Ok(Selection::Files(files))
}

#[cfg(test)]
mod tests {
    use std::io::{Cursor, Write};

    use zip::write::SimpleFileOptions;

    use super::*;

    fn zip_of(files: &[(&str, &[u8])]) -> Cursor<Vec<u8>> {
        let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
        for (name, data) in files {
            zip.start_file(*name, SimpleFileOptions::default()).unwrap();
            zip.write_all(data).unwrap();
        }
        zip.finish().unwrap()
    }

    #[test]
    fn only_text_sources_outside_node_modules() {
        for path in [
            "main.py",
            "a/b.JS",
            "go.mod",
            "conf.yml",
            "x/requirements.txt",
        ] {
            assert!(is_reviewed(path), "{path}");
        }
        for path in [
            "node_modules/x/index.js",
            "a/node_modules/b.js",
            "main.pyc",
            "lib.so",
            "image.png",
            "Makefile",
            ".py",
            "dir/.json",
        ] {
            assert!(!is_reviewed(path), "{path}");
        }
    }

    #[test]
    fn binaries_under_text_names_stay_out() {
        let archive = zip_of(&[
            ("main.py", b"print(1)\n"),
            ("blob.txt", &[0xff, 0xfe, 0x00, 0x01]),
            ("nul.json", b"{}\0"),
            ("lib.so", b"ELF"),
        ]);
        let Selection::Files(files) = select_files(archive).unwrap() else {
            panic!("expected files");
        };
        assert_eq!(
            files,
            [ReviewFile {
                path: "main.py".into(),
                content: "print(1)\n".into()
            }]
        );
    }

    #[test]
    fn more_than_the_budget_is_too_large() {
        let big = vec![b'a'; MAX_REVIEW_BYTES as usize];
        let archive = zip_of(&[("a.py", &big), ("b.py", b"x")]);
        assert_eq!(
            select_files(archive).unwrap(),
            Selection::TooLarge {
                bytes: MAX_REVIEW_BYTES + 1
            }
        );
        // Binaries do not count against the budget.
        let archive = zip_of(&[("a.py", b"x"), ("big.bin", &big), ("c.bin", &big)]);
        assert!(matches!(
            select_files(archive).unwrap(),
            Selection::Files(files) if files.len() == 1
        ));
    }
}
