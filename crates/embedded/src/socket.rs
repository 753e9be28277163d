//! Instances serve on Unix sockets that sless binds in `<data_dir>/run/` and hands to
//! the runtime as a listening descriptor: an instance needs no TCP port, so nothing
//! of it is reachable but through sless. The names are random: a confined process
//! cannot list the directory (Landlock) nor guess another instance's socket.

use std::io;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sless_core::data_dir::own_private_dir;

/// `sun_path` holds 108 bytes with the terminating NUL.
const MAX_PATH_BYTES: usize = 107;
/// Random bytes of a socket's name (hex-encoded): not guessable.
const NAME_BYTES: usize = 12;

/// The directory of the instances' sockets.
#[derive(Debug)]
pub struct SocketDir {
    dir: PathBuf,
}

impl SocketDir {
    /// Creates `dir` (0700) and removes the sockets a previous `sless` left there.
    /// Fails when a socket's path in it would be too long for a Unix socket.
    pub fn prepare(dir: PathBuf) -> io::Result<Self> {
        let longest = dir.as_os_str().len() + 1 + 2 * NAME_BYTES;
        if longest > MAX_PATH_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "the data dir is too deep for instance sockets: {} would make paths of \
                     {longest} bytes, Unix sockets allow {MAX_PATH_BYTES}; use a --data-dir \
                     path of at most {} bytes",
                    dir.display(),
                    MAX_PATH_BYTES - (longest - dir.as_os_str().len()) - "/run".len()
                ),
            ));
        }
        own_private_dir(&dir)?;
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if let Err(e) = std::fs::remove_file(&path) {
                tracing::warn!(path = %path.display(), error = %e, "cannot remove an old socket");
            }
        }
        Ok(Self { dir })
    }

    /// A new listening socket under a fresh name.
    pub fn listen(&self) -> io::Result<(UnixListener, SocketFile)> {
        let name = hex::encode(rand::random::<[u8; NAME_BYTES]>());
        let path: Arc<Path> = self.dir.join(name).into();
        let listener = UnixListener::bind(&path)?;
        Ok((listener, SocketFile { path }))
    }
}

/// A socket's file, removed when the instance it belongs to is dropped.
#[derive(Debug)]
pub struct SocketFile {
    path: Arc<Path>,
}

impl SocketFile {
    pub fn path(&self) -> &Arc<Path> {
        &self.path
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn sockets_live_in_a_private_dir_and_go_with_their_instance() {
        let data = tempfile::tempdir().unwrap();
        let run = data.path().join("run");
        std::fs::create_dir(&run).unwrap();
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
        let stale = run.join("0123");
        UnixListener::bind(&stale).unwrap();

        let sockets = SocketDir::prepare(run.clone()).unwrap();
        let mode = std::fs::metadata(&run).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "run/ is sless's alone");
        assert!(!stale.exists(), "a socket of an earlier sless is removed");

        let (_listener, file) = sockets.listen().unwrap();
        let (_other, other) = sockets.listen().unwrap();
        assert_ne!(file.path(), other.path());
        assert_eq!(file.path().file_name().unwrap().len(), 2 * NAME_BYTES);
        let path = file.path().clone();
        std::os::unix::net::UnixStream::connect(&path).unwrap();
        drop(file);
        assert!(!path.exists());
        assert!(other.path().exists());
    }

    #[test]
    fn a_data_dir_too_deep_is_refused_with_what_to_do() {
        let deep = PathBuf::from(format!("/tmp/{}/run", "d".repeat(90)));
        let error = SocketDir::prepare(deep.clone()).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        let message = error.to_string();
        assert!(message.contains("--data-dir"), "{message}");
        assert!(message.contains("at most 78 bytes"), "{message}");
        assert!(!deep.exists(), "nothing is created");
    }
}
