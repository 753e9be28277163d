//! Reading uploaded zips safely, and unpacking the validated files.

use std::collections::HashSet;
use std::fs;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

use zip::{CompressionMethod, ZipArchive};

use super::error::{UploadError, UploadLimits};

/// One validated regular file of an upload. `size` is what the header declares; reading
/// through [`CheckedZip::visit`] holds the entry to exactly that many bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchiveEntry {
    /// Relative and '/'-separated; "." and empty components are dropped.
    pub path: String,
    /// 0o755 when the zip set any executable bit, else 0o644.
    pub mode: u32,
    pub size: u64,
}

/// Entries at or below this size are never ratio-checked: tiny repetitive text
/// files compress far beyond any sane ratio. The archive-wide ratio applies past the
/// same total.
const RATIO_MIN_BYTES: u64 = 1024 * 1024;

const MAX_COMPONENT_BYTES: usize = 255;
/// Linux's PATH_MAX is 4 KiB; tools and tar headers choke long before that.
const MAX_PATH_BYTES: usize = 1024;

const S_IFMT: u32 = 0o170_000;
const S_IFSOCK: u32 = 0o140_000;
const S_IFLNK: u32 = 0o120_000;
const S_IFBLK: u32 = 0o060_000;
const S_IFDIR: u32 = 0o040_000;
const S_IFCHR: u32 = 0o020_000;
const S_IFIFO: u32 = 0o010_000;

const FIX_RELATIVE: &str = "zip the folder's contents with relative paths, e.g. \
                            `cd my-function && zip -r ../function.zip .`";

/// A zip whose every entry passed the checks (names, types, declared sizes, ratios)
/// before anything was inflated. Its files are read one at a time, so memory stays
/// bounded whatever the archive expands to; the zip itself is read where it lies (a
/// spooled upload's `File`, or bytes in a `Cursor`).
pub struct CheckedZip<R: Read + Seek> {
    archive: ZipArchive<R>,
    /// Central directory index of each file.
    indices: Vec<usize>,
    files: Vec<ArchiveEntry>,
}

/// Validates every entry of a zip under the limits without inflating anything.
///
/// Directories are skipped; a single common top-level folder is NOT stripped.
pub fn check_zip<R: Read + Seek>(
    mut zip: R,
    limits: &UploadLimits,
) -> Result<CheckedZip<R>, UploadError> {
    let zip_len = zip
        .seek(SeekFrom::End(0))
        .map_err(|e| UploadError::io("reading the zip", e))?;
    if zip_len > limits.max_zip_bytes {
        return Err(UploadError::TooLarge {
            limit: limits.max_zip_bytes,
        });
    }
    if zip_len == 0 {
        return Err(UploadError::NotAZip("the upload is empty (0 bytes)".into()));
    }
    // The zip crate parses the whole central directory up front: refuse a huge
    // declared entry count before it allocates for every entry.
    if let Some(count) = declared_entry_count(&mut zip, zip_len)
        && count > limits.max_entries as u64
    {
        return Err(UploadError::TooManyEntries {
            count: usize::try_from(count).unwrap_or(usize::MAX),
            limit: limits.max_entries,
        });
    }
    zip.seek(SeekFrom::Start(0))
        .map_err(|e| UploadError::io("reading the zip", e))?;
    let mut archive = ZipArchive::new(zip).map_err(|e| UploadError::NotAZip(e.to_string()))?;
    if archive.len() > limits.max_entries {
        return Err(UploadError::TooManyEntries {
            count: archive.len(),
            limit: limits.max_entries,
        });
    }
    let (indices, files) = plan_entries(&mut archive, zip_len, limits)?;
    if files.is_empty() {
        return Err(UploadError::Empty);
    }
    Ok(CheckedZip {
        archive,
        indices,
        files,
    })
}

impl<R: Read + Seek> CheckedZip<R> {
    /// The files in archive order.
    pub fn files(&self) -> &[ArchiveEntry] {
        &self.files
    }

    /// Calls `read` for each file in archive order with a reader of its bytes. A reader
    /// read to the end is checked to yield exactly the declared size (and the CRC), so a
    /// header that understates a bomb stops one byte past its claim; a caller may also
    /// stop early.
    pub fn visit(
        &mut self,
        mut read: impl FnMut(&ArchiveEntry, &mut dyn Read) -> Result<(), UploadError>,
    ) -> Result<(), UploadError> {
        for (&index, file) in self.indices.iter().zip(&self.files) {
            let entry = self
                .archive
                .by_index(index)
                .map_err(|e| corrupt(&file.path, e))?;
            let mut reader = EntryReader {
                inner: entry,
                left: file.size,
                failure: None,
            };
            let result = read(file, &mut reader);
            if let Some(reason) = reader.failure.take() {
                return Err(corrupt(&file.path, reason));
            }
            result?;
            if reader.left == 0 {
                reader
                    .expect_end()
                    .map_err(|reason| corrupt(&file.path, reason))?;
            }
        }
        Ok(())
    }
}

fn corrupt(path: &str, reason: impl std::fmt::Display) -> UploadError {
    UploadError::NotAZip(format!("entry {path:?} is corrupt: {reason}"))
}

/// An entry's inflated bytes, held to its declared size.
struct EntryReader<'a, R: Read> {
    inner: zip::read::ZipFile<'a, R>,
    left: u64,
    /// Why reading failed, kept so the caller's own I/O error does not hide it.
    failure: Option<String>,
}

impl<R: Read> EntryReader<'_, R> {
    /// One more read must hit the end; that read also makes the zip crate check the CRC.
    fn expect_end(&mut self) -> Result<(), String> {
        match self.inner.read(&mut [0u8; 1]) {
            Ok(0) => Ok(()),
            Ok(_) => Err("it inflates to more than its header declares".into()),
            Err(e) => Err(e.to_string()),
        }
    }
}

impl<R: Read> Read for EntryReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 || buf.is_empty() {
            return Ok(0);
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        match self.inner.read(&mut buf[..want]) {
            Ok(0) => {
                let reason = "it ends before the size its header declares";
                self.failure = Some(reason.into());
                Err(io::Error::new(io::ErrorKind::UnexpectedEof, reason))
            }
            Ok(n) => {
                self.left -= n as u64;
                Ok(n)
            }
            Err(e) => {
                self.failure = Some(e.to_string());
                Err(e)
            }
        }
    }
}

/// Names, types and declared sizes of every entry, so a bad entry at the end costs no
/// decompression. Returns the central directory index and the entry of every file.
fn plan_entries<R: Read + Seek>(
    archive: &mut ZipArchive<R>,
    zip_len: u64,
    limits: &UploadLimits,
) -> Result<(Vec<usize>, Vec<ArchiveEntry>), UploadError> {
    let mut indices = Vec::new();
    let mut files = Vec::new();
    let mut paths = PathSet::default();
    let mut declared_total: u64 = 0;
    for index in 0..archive.len() {
        let listed_name = archive.name_for_index(index).unwrap_or("?").to_string();
        let entry = archive.by_index_raw(index).map_err(|e| {
            UploadError::NotAZip(format!("entry {listed_name:?} cannot be read: {e}"))
        })?;

        // The raw bytes are the truth: without the UTF-8 flag the crate decodes
        // CP437, which would silently turn UTF-8 names into mojibake.
        let Ok(name) = std::str::from_utf8(entry.name_raw()) else {
            return Err(UploadError::unsafe_entry(
                String::from_utf8_lossy(entry.name_raw()),
                "the file name is not valid UTF-8; re-create the zip with a tool that \
                 stores UTF-8 names (e.g. `zip -r` or 7-Zip)",
            ));
        };
        let name = name.to_string();
        let path =
            normalize_path(&name).map_err(|reason| UploadError::unsafe_entry(&name, reason))?;
        // Belt and braces: the crate's own containment check must agree.
        if entry.enclosed_name().is_none() {
            return Err(UploadError::unsafe_entry(
                &name,
                format!("the path is not inside the archive; {FIX_RELATIVE}"),
            ));
        }

        let unix_mode = entry.unix_mode().unwrap_or(0);
        match unix_mode & S_IFMT {
            S_IFLNK => {
                return Err(UploadError::unsafe_entry(
                    &name,
                    "symbolic links are not allowed; zip the file the link points to \
                     instead (`zip -r` stores targets unless given --symlinks/-y)",
                ));
            }
            kind @ (S_IFCHR | S_IFBLK | S_IFIFO | S_IFSOCK) => {
                let what = match kind {
                    S_IFCHR => "a character device",
                    S_IFBLK => "a block device",
                    S_IFIFO => "a named pipe (fifo)",
                    _ => "a socket",
                };
                return Err(UploadError::unsafe_entry(
                    &name,
                    format!(
                        "the entry is {what}; only regular files and folders are allowed, \
                         leave it out of the zip"
                    ),
                ));
            }
            _ => {}
        }
        if entry.is_dir() || unix_mode & S_IFMT == S_IFDIR || path.is_empty() {
            if entry.size() > 0 {
                return Err(UploadError::unsafe_entry(
                    &name,
                    "a folder entry carries data; re-create the zip",
                ));
            }
            if !path.is_empty() {
                paths
                    .add_dir(&path)
                    .map_err(|reason| UploadError::unsafe_entry(&name, reason))?;
            }
            continue;
        }

        if entry.encrypted() {
            return Err(UploadError::unsafe_entry(
                &name,
                "the entry is encrypted; password-protected zips are not supported, \
                 zip without a password",
            ));
        }
        let compression = entry.compression();
        if !matches!(
            compression,
            CompressionMethod::Stored | CompressionMethod::Deflated
        ) {
            return Err(UploadError::unsafe_entry(
                &name,
                format!(
                    "compression method {compression} is not supported; use deflate or \
                     store (the defaults of zip tools)"
                ),
            ));
        }

        let declared_size = entry.size();
        // A compressed size past the end of the zip is a lie; cap it for the ratio.
        let compressed_size = entry.compressed_size().min(zip_len);
        // The hard cap first: past it, the ratio does not matter.
        declared_total = declared_total.saturating_add(declared_size);
        if declared_total > limits.max_uncompressed_bytes {
            return Err(UploadError::Expands {
                limit: limits.max_uncompressed_bytes,
            });
        }
        check_ratio(&name, declared_size, compressed_size, limits)?;
        paths
            .add_file(&path)
            .map_err(|reason| UploadError::unsafe_entry(&name, reason))?;
        indices.push(index);
        files.push(ArchiveEntry {
            path,
            mode: if unix_mode & 0o111 != 0 { 0o755 } else { 0o644 },
            size: declared_size,
        });
    }
    // Many entries, each too small for the per-entry check, can still make a bomb.
    if declared_total > RATIO_MIN_BYTES {
        let ratio = declared_total / zip_len.max(1);
        if ratio > limits.max_archive_ratio {
            return Err(UploadError::ArchiveRatio {
                ratio,
                limit: limits.max_archive_ratio,
            });
        }
    }
    Ok((indices, files))
}

fn check_ratio(
    entry: &str,
    uncompressed: u64,
    compressed: u64,
    limits: &UploadLimits,
) -> Result<(), UploadError> {
    if uncompressed <= RATIO_MIN_BYTES {
        return Ok(());
    }
    let ratio = uncompressed / compressed.max(1);
    if ratio > limits.max_compression_ratio {
        return Err(UploadError::SuspiciousRatio {
            entry: entry.to_string(),
            ratio,
            limit: limits.max_compression_ratio,
        });
    }
    Ok(())
}

/// Checks an entry name and returns it normalized ("." and empty components
/// dropped); an empty result is the archive root. The error is the reason.
fn normalize_path(name: &str) -> Result<String, String> {
    if name.contains('\0') {
        return Err("the name contains a NUL byte; rename the file".into());
    }
    if name.chars().any(char::is_control) {
        return Err(
            "the name contains a control character (e.g. a newline); rename the file".into(),
        );
    }
    if name.contains('\\') {
        return Err(
            "the name contains a backslash ('\\' is not a folder separator in a \
                    zip); create the zip with forward slashes, e.g. with `zip -r` or 7-Zip"
                .into(),
        );
    }
    if name.starts_with('/') || has_drive_prefix(name) {
        return Err(format!("absolute paths are not allowed; {FIX_RELATIVE}"));
    }
    let mut parts = Vec::new();
    for part in name.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                return Err(format!(
                    "path escapes the archive ('..' is not allowed); {FIX_RELATIVE}"
                ));
            }
            p if p.len() > MAX_COMPONENT_BYTES => {
                return Err(format!(
                    "a path component is longer than {MAX_COMPONENT_BYTES} bytes; shorten it"
                ));
            }
            p => parts.push(p),
        }
    }
    let path = parts.join("/");
    if path.len() > MAX_PATH_BYTES {
        return Err(format!(
            "the path is {} bytes long, more than the limit of {MAX_PATH_BYTES}; shorten it",
            path.len()
        ));
    }
    Ok(path)
}

/// "C:" or "C:/...": a Windows absolute path.
fn has_drive_prefix(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':' && (b.len() == 2 || b[2] == b'/')
}

/// Files and folders seen so far, so that no path is both, or twice a file.
#[derive(Default)]
struct PathSet {
    files: HashSet<String>,
    dirs: HashSet<String>,
}

impl PathSet {
    fn add_file(&mut self, path: &str) -> Result<(), String> {
        if self.files.contains(path) {
            return Err("the path appears twice in the zip; remove the duplicate".into());
        }
        if self.dirs.contains(path) {
            return Err("the path is both a file and a folder; rename one of them".into());
        }
        self.add_ancestors(path)?;
        self.files.insert(path.to_string());
        Ok(())
    }

    fn add_dir(&mut self, path: &str) -> Result<(), String> {
        if self.files.contains(path) {
            return Err("the path is both a file and a folder; rename one of them".into());
        }
        self.add_ancestors(path)?;
        self.dirs.insert(path.to_string());
        Ok(())
    }

    fn add_ancestors(&mut self, path: &str) -> Result<(), String> {
        for (i, _) in path.match_indices('/') {
            let ancestor = &path[..i];
            if self.files.contains(ancestor) {
                return Err(format!(
                    "{ancestor:?} is both a file and a folder; rename one of them"
                ));
            }
            self.dirs.insert(ancestor.to_string());
        }
        Ok(())
    }
}

/// The entry count the end-of-central-directory record declares (zip64 aware),
/// or None when it cannot be found; the zip crate then reports the problem. Reads only
/// the tail of the zip (and the zip64 record), never the whole file.
fn declared_entry_count<R: Read + Seek>(zip: &mut R, zip_len: u64) -> Option<u64> {
    const EOCD_SIG: &[u8] = b"PK\x05\x06";
    const EOCD_LEN: usize = 22;
    const LOCATOR_SIG: &[u8] = b"PK\x06\x07";
    const LOCATOR_LEN: usize = 20;
    const EOCD64_SIG: &[u8] = b"PK\x06\x06";

    // The record sits at most a 64 KiB comment before the end; the zip64 locator
    // just before it.
    let tail_len = zip_len.min((EOCD_LEN + u16::MAX as usize + LOCATOR_LEN) as u64);
    let tail = read_at(zip, zip_len - tail_len, usize::try_from(tail_len).ok()?)?;
    let last = tail.len().checked_sub(EOCD_LEN)?;
    let pos = (0..=last)
        .rev()
        .find(|&i| tail.get(i..i + 4) == Some(EOCD_SIG))?;
    let total = u16::from_le_bytes(tail.get(pos + 10..pos + 12)?.try_into().ok()?);
    if total != u16::MAX {
        return Some(u64::from(total));
    }
    let locator = tail.get(pos.checked_sub(LOCATOR_LEN)?..pos)?;
    if locator.get(..4)? != LOCATOR_SIG {
        return Some(u64::from(total));
    }
    let offset = u64::from_le_bytes(locator.get(8..16)?.try_into().ok()?);
    if offset.checked_add(56)? > zip_len {
        return None;
    }
    let record = read_at(zip, offset, 56)?;
    if record.get(..4)? != EOCD64_SIG {
        return None;
    }
    Some(u64::from_le_bytes(record.get(32..40)?.try_into().ok()?))
}

fn read_at<R: Read + Seek>(zip: &mut R, offset: u64, len: usize) -> Option<Vec<u8>> {
    zip.seek(SeekFrom::Start(offset)).ok()?;
    let mut buf = vec![0; len];
    zip.read_exact(&mut buf).ok()?;
    Some(buf)
}

/// Unpacks a checked zip under `dest` (used by the embedded runner), streaming each
/// file to disk. The paths were validated by [`check_zip`]; anything that would still
/// land outside `dest`, or go through a symlink already in it, is refused.
pub fn unpack<R: Read + Seek>(zip: &mut CheckedZip<R>, dest: &Path) -> Result<(), UploadError> {
    fs::create_dir_all(dest).map_err(|e| io_error("creating", dest, e))?;
    zip.visit(|file, data| {
        let relative = contained_path(&file.path).ok_or_else(|| {
            UploadError::unsafe_entry(
                &file.path,
                format!("the path would land outside the target folder; {FIX_RELATIVE}"),
            )
        })?;
        let target = dest.join(&relative);
        if let Some(parent) = relative.parent() {
            create_parents(dest, parent, &file.path)?;
        }
        match fs::symlink_metadata(&target) {
            Ok(meta) if meta.file_type().is_file() => {
                fs::remove_file(&target).map_err(|e| io_error("replacing", &target, e))?;
            }
            Ok(_) => {
                return Err(UploadError::unsafe_entry(
                    &file.path,
                    "the target exists and is not a regular file; unpack into an empty folder",
                ));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error("inspecting", &target, e)),
        }
        // create_new never follows a symlink planted at the last component.
        let mut out = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&target)
            .map_err(|e| io_error("creating", &target, e))?;
        io::copy(data, &mut out).map_err(|e| io_error("writing", &target, e))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&target, fs::Permissions::from_mode(file.mode & 0o777))
                .map_err(|e| io_error("setting the mode of", &target, e))?;
        }
        Ok(())
    })
}

/// The path as relative normal components only, or None.
fn contained_path(path: &str) -> Option<PathBuf> {
    if normalize_path(path).ok()?.is_empty() {
        return None;
    }
    let relative = PathBuf::from(path);
    relative
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
        .then_some(relative)
}

/// Creates the folders of `parent` under `dest` one by one, refusing symlinks.
fn create_parents(dest: &Path, parent: &Path, entry: &str) -> Result<(), UploadError> {
    let mut dir = dest.to_path_buf();
    for component in parent.components() {
        dir.push(component);
        match fs::symlink_metadata(&dir) {
            Ok(meta) if meta.file_type().is_dir() => {}
            Ok(_) => {
                return Err(UploadError::unsafe_entry(
                    entry,
                    format!(
                        "{} exists and is not a folder (or is a symlink); unpack into an \
                         empty folder",
                        dir.display()
                    ),
                ));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => match fs::create_dir(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io_error("creating", &dir, e)),
            },
            Err(e) => return Err(io_error("inspecting", &dir, e)),
        }
    }
    Ok(())
}

fn io_error(action: &str, path: &Path, e: io::Error) -> UploadError {
    UploadError::io(
        format!("unpacking the upload: {action} {}", path.display()),
        e,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_drops_dots_and_empty_components() {
        assert_eq!(normalize_path("./a//b/./c.py").as_deref(), Ok("a/b/c.py"));
        assert_eq!(normalize_path("./").as_deref(), Ok(""));
        assert_eq!(normalize_path("dir/").as_deref(), Ok("dir"));
    }

    #[test]
    fn normalize_refuses_hostile_names() {
        for name in [
            "../x",
            "a/../../b",
            "a/../b",
            "/etc/passwd",
            "C:/x",
            "C:",
            "a\\b",
            "a\0b",
            "a\nb",
        ] {
            assert!(normalize_path(name).is_err(), "{name:?} must be refused");
        }
        assert!(normalize_path(&"x".repeat(256)).is_err());
        assert!(
            normalize_path("c:d").is_ok(),
            "a colon alone is a valid unix name"
        );
    }

    #[test]
    fn contained_path_refuses_escapes() {
        for path in ["../evil.py", "/etc/evil", "a/../../evil", ""] {
            assert_eq!(contained_path(path), None, "{path:?}");
        }
        assert_eq!(contained_path("a/b.py"), Some(PathBuf::from("a/b.py")));
    }

    #[test]
    fn path_set_detects_file_folder_clashes() {
        let mut set = PathSet::default();
        set.add_file("a").unwrap();
        assert!(set.add_file("a/b").unwrap_err().contains("\"a\" is both"));
        let mut set = PathSet::default();
        set.add_file("a/b").unwrap();
        assert!(set.add_file("a").is_err());
        assert!(set.add_file("a/b").unwrap_err().contains("twice"));
        assert!(set.add_dir("a/b").is_err());
        set.add_dir("a").unwrap();
    }

    #[test]
    fn declared_count_reads_the_end_record() {
        let count = |bytes: &[u8]| {
            declared_entry_count(&mut std::io::Cursor::new(bytes), bytes.len() as u64)
        };
        let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        for i in 0..3 {
            zip.start_file(format!("f{i}"), zip::write::SimpleFileOptions::default())
                .unwrap();
        }
        let bytes = zip.finish().unwrap().into_inner();
        assert_eq!(count(&bytes), Some(3));
        assert_eq!(count(b"not a zip at all, clearly"), None);
        assert_eq!(count(b""), None);
    }
}
