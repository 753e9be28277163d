//! The embedded S3 endpoint: an in-process s3s + s3s-fs server on loopback, so embedded
//! mode uses exactly the same aws-sdk-s3 client code ([`ObjectStore`]) as production.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use rand::Rng;
use rand::distr::Alphanumeric;
use sless_core::error_text::BoxError;
use sless_core::s3::{S3Config, StorageError};
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

#[cfg(doc)]
use sless_core::s3::ObjectStore;

/// An in-process S3-compatible endpoint on loopback, storing under a directory (s3s + s3s-fs),
/// so embedded mode uses exactly the same aws-sdk-s3 client code as production.
pub struct EmbeddedS3 {
    addr: SocketAddr,
    access_key: String,
    secret_key: String,
    task: JoinHandle<()>,
}

impl EmbeddedS3 {
    /// Serves `root` (created if missing) on `listen` (port 0 → a free port), with random
    /// credentials generated per start, path-style. One server per root at a time: s3s-fs
    /// deletes leftover temp files of the root when it opens it.
    pub async fn start(root: &Path, listen: SocketAddr) -> Result<Self, StorageError> {
        // Every tenant's uploads: 0700, whatever modes s3s-fs gives what it writes inside.
        sless_core::data_dir::own_private_dir(root)
            .map_err(|e| embedded_error(format!("creating {}", root.display()), e.into()))?;
        // s3s_fs::Error is not a std Error (only Debug), so keep its text.
        let fs = s3s_fs::FileSystem::new(root).map_err(|e| {
            embedded_error(
                format!("opening {}", root.display()),
                format!("{e:?}").into(),
            )
        })?;

        let access_key = random_token(20);
        let secret_key = random_token(40);
        let service = {
            let mut b = s3s::service::S3ServiceBuilder::new(fs);
            // With auth set, s3s also rejects unsigned requests (its default access check).
            b.set_auth(s3s::auth::SimpleAuth::from_single(
                access_key.clone(),
                secret_key.clone(),
            ));
            // No host configured → s3s parses path-style requests only.
            b.build()
        };

        let listener = TcpListener::bind(listen)
            .await
            .map_err(|e| embedded_error(format!("binding {listen}"), e.into()))?;
        let mut addr = listener
            .local_addr()
            .map_err(|e| embedded_error("reading the bound address".into(), e.into()))?;
        if addr.ip().is_unspecified() {
            // Clients cannot connect to 0.0.0.0; loopback reaches a wildcard bind.
            addr.set_ip(if addr.is_ipv4() {
                Ipv4Addr::LOCALHOST.into()
            } else {
                Ipv6Addr::LOCALHOST.into()
            });
        }

        let task = tokio::spawn(async move {
            // Connections live in this set so aborting the task closes them too.
            let mut conns = JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((socket, _)) => {
                            // Headers and body go out in separate writes: with Nagle on,
                            // the body waits for the client's delayed ACK (~40 ms per GET).
                            if let Err(e) = socket.set_nodelay(true) {
                                tracing::debug!(error = %e, "embedded S3: cannot set TCP_NODELAY");
                            }
                            let service = service.clone();
                            conns.spawn(async move {
                                let conn = ConnBuilder::new(TokioExecutor::new());
                                if let Err(e) = conn.serve_connection(TokioIo::new(socket), service).await {
                                    tracing::debug!(error = %e, "embedded S3 connection ended");
                                }
                            });
                        }
                        Err(e) => {
                            // E.g. out of file descriptors: back off instead of spinning.
                            tracing::warn!(error = %e, "embedded S3 accept failed");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    },
                    Some(_) = conns.join_next(), if !conns.is_empty() => {}
                }
            }
        });
        tracing::info!(%addr, root = %root.display(), "embedded S3 endpoint started");
        Ok(Self {
            addr,
            access_key,
            secret_key,
            task,
        })
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A config ready to pass to [`ObjectStore::connect`].
    pub fn config(&self, bucket: &str) -> S3Config {
        S3Config {
            endpoint: Some(self.endpoint()),
            region: "us-east-1".into(),
            bucket: bucket.into(),
            access_key_id: Some(self.access_key.clone()),
            secret_access_key: Some(self.secret_key.clone()),
            force_path_style: true,
        }
    }
}

impl Drop for EmbeddedS3 {
    fn drop(&mut self) {
        // s3s-fs writes to a temp file and renames, so cutting requests short loses no data.
        self.task.abort();
    }
}

fn embedded_error(message: String, source: BoxError) -> StorageError {
    StorageError::Embedded { message, source }
}

fn random_token(len: usize) -> String {
    rand::rng()
        .sample_iter(Alphanumeric)
        .take(len)
        .map(char::from)
        .collect()
}
