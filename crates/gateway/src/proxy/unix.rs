//! The pooled client's way to instances on Unix sockets ([`Address::Unix`]): the socket's
//! path travels hex-encoded as the URI's host, so each socket is its own pool key.

use std::ffi::OsString;
use std::future::Future;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::http::Uri;
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;

use super::CONNECT_TIMEOUT;

const SCHEME: &str = "unix";

/// `unix://<hex of path><rest>?<query>`, for [`UnixConnector`].
pub(super) fn uri(path: &Path, rest: &str, query: Option<&str>) -> Result<Uri, String> {
    let host = hex::encode(path.as_os_str().as_bytes());
    let mut uri = format!("{SCHEME}://{host}{rest}");
    if let Some(query) = query {
        uri.push('?');
        uri.push_str(query);
    }
    Uri::try_from(uri).map_err(|e| e.to_string())
}

fn socket_path(uri: &Uri) -> io::Result<PathBuf> {
    let invalid = || io::Error::new(io::ErrorKind::InvalidInput, "not a Unix socket address");
    if uri.scheme_str() != Some(SCHEME) {
        return Err(invalid());
    }
    let bytes = hex::decode(uri.host().ok_or_else(invalid)?).map_err(|_| invalid())?;
    Ok(PathBuf::from(OsString::from_vec(bytes)))
}

/// Connects to the socket a [`uri`] names.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct UnixConnector;

impl tower::Service<Uri> for UnixConnector {
    type Response = TokioIo<UnixStream>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        Box::pin(async move {
            let path = socket_path(&uri)?;
            let stream = tokio::time::timeout(CONNECT_TIMEOUT, UnixStream::connect(path))
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connecting timed out"))??;
            Ok(TokioIo::new(stream))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_survives_the_uri() {
        let path = Path::new("/var/lib/sless/run/0a1b");
        let uri = uri(path, "/a/b%2F", Some("x=1")).unwrap();
        assert_eq!(uri.path(), "/a/b%2F");
        assert_eq!(uri.query(), Some("x=1"));
        assert_eq!(socket_path(&uri).unwrap(), path);
        let other = super::uri(Path::new("/var/lib/sless/run/0a1c"), "/", None).unwrap();
        assert_ne!(uri.authority(), other.authority(), "one pool per socket");
    }

    #[test]
    fn other_addresses_are_refused() {
        for bad in ["http://127.0.0.1:80/", "unix://zz/"] {
            let uri: Uri = bad.parse().unwrap();
            assert_eq!(
                socket_path(&uri).unwrap_err().kind(),
                io::ErrorKind::InvalidInput,
                "{bad}"
            );
        }
    }
}
