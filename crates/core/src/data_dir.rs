//! The data directory holds the signing key, every tenant's env vars (sless.db), their
//! uploads and builds: what sless creates in it is for sless's user alone.

use std::io;
use std::path::Path;

/// Creates `dir` and any missing parent with mode 0700 (an existing one is left as
/// it is: it may be the operator's).
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// [`create_private_dir`], then 0700 even if it existed with a wider mode: for the
/// directories only sless puts there (objects/, builds/, runtimes/).
pub fn own_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    create_private_dir(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Creates `file` empty with mode 0600 unless it exists, and tightens it to 0600 if
/// it does: for files another library then opens (SQLite keeps the mode for its
/// -wal and -shm files).
pub fn own_private_file(file: &Path) -> io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(file)?;
    std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn private_dirs_and_files_are_for_the_owner_alone() {
        let root = tempfile::tempdir().unwrap();
        let nested = root.path().join("a/b");
        create_private_dir(&nested).unwrap();
        assert_eq!(mode(&root.path().join("a")), 0o700);
        assert_eq!(mode(&nested), 0o700);

        let wide = root.path().join("wide");
        std::fs::create_dir(&wide).unwrap();
        std::fs::set_permissions(&wide, std::fs::Permissions::from_mode(0o755)).unwrap();
        own_private_dir(&wide).unwrap();
        assert_eq!(mode(&wide), 0o700);

        let file = wide.join("f.db");
        std::fs::write(&file, "kept").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        own_private_file(&file).unwrap();
        assert_eq!(mode(&file), 0o600);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "kept");
    }
}
