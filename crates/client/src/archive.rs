//! Zips a folder for upload: `.slessignore` (gitignore syntax) is respected, and
//! version-control and dependency folders are never packed (the build installs them).

use std::io::Write;
use std::path::Path;

use anyhow::{Context, bail};
use sha2::{Digest, Sha256};
use sless_api::Runtime;

/// Folders skipped at any depth: version control, and what the runtimes' tools make
/// beside the code.
pub fn skipped_dirs() -> Vec<&'static str> {
    let runtimes = Runtime::ALL
        .iter()
        .flat_map(|r| r.descriptor().skipped_dirs);
    [".git"].into_iter().chain(runtimes.copied()).collect()
}
pub const IGNORE_FILE: &str = ".slessignore";

pub struct Archive {
    pub zip: Vec<u8>,
    pub files: Vec<String>,
    /// [`content_digest`] of the packed files: what changes when the code does.
    pub digest: String,
}

/// Hex SHA-256 over each file's path and content, by path. Zip bytes carry timestamps
/// and compression details; this does not, so the same code always gives the same
/// digest, packed here or listed by the server.
pub fn content_digest<'a>(files: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> String {
    let mut files: Vec<_> = files.into_iter().collect();
    files.sort_by_key(|(path, _)| *path);
    let mut hasher = Sha256::new();
    for (path, content) in files {
        hasher.update((path.len() as u64).to_be_bytes());
        hasher.update(path.as_bytes());
        hasher.update((content.len() as u64).to_be_bytes());
        hasher.update(content);
    }
    hex::encode(hasher.finalize())
}

pub fn zip_folder(dir: &Path) -> anyhow::Result<Archive> {
    if !dir.exists() {
        bail!("the folder {} does not exist", dir.display());
    }
    if !dir.is_dir() {
        bail!(
            "{} is not a folder; pass the folder that holds the function's code",
            dir.display()
        );
    }
    let skipped = skipped_dirs();
    let mut walk = ignore::WalkBuilder::new(dir);
    walk.standard_filters(false)
        .add_custom_ignore_filename(IGNORE_FILE)
        .follow_links(true)
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(move |entry| {
            let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
            let name = entry.file_name().to_string_lossy();
            entry.depth() == 0 || !(is_dir && skipped.contains(&name.as_ref()))
        });

    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let mut files = Vec::new();
    let mut contents = Vec::new();
    for entry in walk.build() {
        let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let relative = entry
            .path()
            .strip_prefix(dir)
            .context("a walked path is outside the folder")?;
        let name = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        if name == IGNORE_FILE {
            continue;
        }
        let content = std::fs::read(entry.path())
            .with_context(|| format!("reading {}", entry.path().display()))?;
        let mut options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            if let Ok(meta) = entry.metadata() {
                options = options.unix_permissions(meta.permissions().mode() & 0o777);
            }
        }
        writer.start_file(name.as_str(), options)?;
        writer.write_all(&content)?;
        files.push(name);
        contents.push(content);
    }
    if files.is_empty() {
        bail!(
            "the folder {} has no files to deploy (after {IGNORE_FILE})",
            dir.display()
        );
    }
    let zip = writer.finish()?.into_inner();
    let digest = content_digest(
        files
            .iter()
            .map(String::as_str)
            .zip(contents.iter().map(Vec::as_slice)),
    );
    Ok(Archive { zip, files, digest })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(zip: &[u8]) -> Vec<String> {
        let archive = zip::ZipArchive::new(std::io::Cursor::new(zip)).unwrap();
        let mut names: Vec<String> = archive.file_names().map(String::from).collect();
        names.sort();
        names
    }

    #[test]
    fn skips_ignored_and_dependency_folders() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for path in [
            "handler.py",
            "lib/util.py",
            "lib/__pycache__/util.pyc",
            "node_modules/x/index.js",
            ".git/config",
            ".deps/pkg/mod.py",
            "secret.env",
            "data/big.bin",
            "data/keep.txt",
        ] {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "x").unwrap();
        }
        std::fs::write(root.join(IGNORE_FILE), "*.env\ndata/*\n!data/keep.txt\n").unwrap();
        let archive = zip_folder(root).unwrap();
        assert_eq!(
            archive.files,
            ["data/keep.txt", "handler.py", "lib/util.py"]
        );
        assert_eq!(names(&archive.zip), archive.files);

        // Same files, same digest; one changed byte, another.
        assert_eq!(zip_folder(root).unwrap().digest, archive.digest);
        std::fs::write(root.join("lib/util.py"), "y").unwrap();
        assert_ne!(zip_folder(root).unwrap().digest, archive.digest);
        std::fs::write(root.join("secret.env"), "changed").unwrap();
        std::fs::write(root.join("lib/util.py"), "x").unwrap();
        assert_eq!(zip_folder(root).unwrap().digest, archive.digest);
    }

    #[test]
    fn a_missing_or_empty_folder_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = zip_folder(&dir.path().join("nope")).err().unwrap();
        assert!(missing.to_string().contains("does not exist"), "{missing}");
        let empty = zip_folder(dir.path()).err().unwrap();
        assert!(empty.to_string().contains("no files"), "{empty}");
    }
}
