//! The embedded mode's HS256 signing key, kept in the data directory.

use std::fs;
use std::io::{self, Write};
use std::path::Path;

/// File name of the key inside the data directory.
pub const SIGNING_KEY_FILE: &str = "jwt-hs256.key";

const KEY_LEN: usize = 32;

/// Returns `<data_dir>/jwt-hs256.key` (32 random bytes as hex), creating it with mode
/// 0600 on first use. Two processes starting at once end up with the same key: the
/// file only appears complete, and the loser of the race reads the winner's key.
pub fn load_or_create_signing_key(data_dir: &Path) -> io::Result<Vec<u8>> {
    let path = data_dir.join(SIGNING_KEY_FILE);
    match read_key(&path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        other => return other,
    }

    crate::data_dir::create_private_dir(data_dir)?;
    let key: [u8; KEY_LEN] = rand::random();
    let tmp = data_dir.join(format!(
        ".{SIGNING_KEY_FILE}.{}.{:016x}.tmp",
        std::process::id(),
        rand::random::<u64>()
    ));
    let published = write_private(&tmp, hex::encode(key).as_bytes()).and_then(|()| {
        // hard_link never replaces an existing file, unlike rename: whoever links
        // first wins and everyone else reads that key.
        match fs::hard_link(&tmp, &path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            // File systems without hard links: rename is still atomic, only not exclusive.
            Err(_) => fs::rename(&tmp, &path).map(|()| true),
        }
    });
    let _ = fs::remove_file(&tmp);
    published?;
    sync_dir(data_dir);
    // Read back rather than return `key`: after a lost race the file holds the winner's.
    read_key(&path)
}

/// Reads `<data_dir>/jwt-hs256.key` and never creates it: a new key would sign tokens
/// that the running server (with its own key) refuses.
pub fn load_signing_key(data_dir: &Path) -> io::Result<Vec<u8>> {
    let path = data_dir.join(SIGNING_KEY_FILE);
    read_key(&path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "no signing key at {}: pass the --data-dir of the running `sless up` (or set \
                 SLESS_DATA_DIR), or start `sless up` there first",
                path.display()
            ),
        ),
        _ => e,
    })
}

fn read_key(path: &Path) -> io::Result<Vec<u8>> {
    let text = fs::read_to_string(path)?;
    warn_if_readable_by_others(path);
    let key = hex::decode(text.trim()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} is not hex; delete it to generate a new key",
                path.display()
            ),
        )
    })?;
    if key.len() < KEY_LEN {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} holds {} bytes, at least {KEY_LEN} are needed",
                path.display(),
                key.len()
            ),
        ));
    }
    Ok(key)
}

fn write_private(path: &Path, contents: &[u8]) -> io::Result<()> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(contents)?;
    file.sync_all()
}

#[cfg(unix)]
fn sync_dir(dir: &Path) {
    // Makes the new directory entry durable; failing here loses nothing already returned.
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) {}

#[cfg(unix)]
fn warn_if_readable_by_others(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(
            path = %path.display(),
            "the JWT signing key is readable by other users; chmod 600 it"
        );
    }
}

#[cfg(not(unix))]
fn warn_if_readable_by_others(_path: &Path) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_a_corrupt_key_file() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(SIGNING_KEY_FILE), "not hex").unwrap();
        let err = load_or_create_signing_key(dir.path()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        fs::write(dir.path().join(SIGNING_KEY_FILE), "abcd").unwrap();
        assert!(load_or_create_signing_key(dir.path()).is_err());
    }

    #[test]
    fn creates_the_data_dir_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("nested/data");
        let key = load_or_create_signing_key(&data).unwrap();
        assert_eq!(key.len(), KEY_LEN);
        let names: Vec<_> = fs::read_dir(&data)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [SIGNING_KEY_FILE]);
    }

    #[test]
    fn racing_creators_agree() {
        let dir = tempfile::tempdir().unwrap();
        let keys: Vec<Vec<u8>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| s.spawn(|| load_or_create_signing_key(dir.path()).unwrap()))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(keys.windows(2).all(|w| w[0] == w[1]));
    }
}
