//! The embedded S3 endpoint: an in-process s3s + s3s-fs server on loopback, so embedded
//! mode uses exactly the same aws-sdk-s3 client code ([`ObjectStore`]) as production.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use rand::Rng;
use rand::distr::Alphanumeric;
use s3s::dto::{ListObjectsV2Input, ListObjectsV2Output, Object};
use s3s::{S3, S3Request, S3Response, S3Result, s3_error};
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
        let fs = Listing {
            fs,
            root: root.to_path_buf(),
        };
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

/// s3s-fs, but a listing without delimiter walks only the directory its prefix names:
/// s3s-fs walks the whole bucket, so each upload's listing of its function's versions
/// cost O(every function's uploads).
struct Listing {
    fs: s3s_fs::FileSystem,
    root: PathBuf,
}

/// The ops of s3s-fs other than the listing, as they are (written as `async_trait`
/// writes an `async fn`: it does not see into a macro).
macro_rules! delegate {
    ($($op:ident: $input:ident => $output:ident,)*) => {
        $(
            fn $op<'life0, 'async_trait>(
                &'life0 self,
                req: S3Request<s3s::dto::$input>,
            ) -> std::pin::Pin<Box<
                dyn std::future::Future<Output = S3Result<S3Response<s3s::dto::$output>>>
                    + Send
                    + 'async_trait,
            >>
            where
                'life0: 'async_trait,
                Self: 'async_trait,
            {
                self.fs.$op(req)
            }
        )*
    };
}

#[async_trait::async_trait]
impl S3 for Listing {
    delegate! {
        create_bucket: CreateBucketInput => CreateBucketOutput,
        copy_object: CopyObjectInput => CopyObjectOutput,
        delete_bucket: DeleteBucketInput => DeleteBucketOutput,
        delete_object: DeleteObjectInput => DeleteObjectOutput,
        delete_objects: DeleteObjectsInput => DeleteObjectsOutput,
        get_bucket_location: GetBucketLocationInput => GetBucketLocationOutput,
        get_object: GetObjectInput => GetObjectOutput,
        head_bucket: HeadBucketInput => HeadBucketOutput,
        head_object: HeadObjectInput => HeadObjectOutput,
        list_buckets: ListBucketsInput => ListBucketsOutput,
        list_objects: ListObjectsInput => ListObjectsOutput,
        put_object: PutObjectInput => PutObjectOutput,
        create_multipart_upload: CreateMultipartUploadInput => CreateMultipartUploadOutput,
        upload_part: UploadPartInput => UploadPartOutput,
        upload_part_copy: UploadPartCopyInput => UploadPartCopyOutput,
        list_parts: ListPartsInput => ListPartsOutput,
        complete_multipart_upload: CompleteMultipartUploadInput => CompleteMultipartUploadOutput,
        abort_multipart_upload: AbortMultipartUploadInput => AbortMultipartUploadOutput,
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let input = &req.input;
        let prefix = input
            .prefix
            .as_deref()
            .unwrap_or("")
            .trim_start_matches('/');
        let dir = prefix.rfind('/').map_or("", |end| &prefix[..end]);
        let bucket = self.root.join(&input.bucket);
        // A delimiter's grouping and any path that is not plain names stay s3s-fs's.
        let plain = |path: &str| {
            Path::new(path)
                .components()
                .all(|c| matches!(c, Component::Normal(_)))
        };
        if input.delimiter.is_some() || !plain(&input.bucket) || !plain(dir) || !bucket.is_dir() {
            return self.fs.list_objects_v2(req).await;
        }
        let (start, prefix_owned) = (bucket.join(dir), prefix.to_string());
        let mut found = tokio::task::spawn_blocking(move || {
            let mut found = Vec::new();
            walk(&start, &bucket, &prefix_owned, &mut found).map(|()| found)
        })
        .await
        .map_err(|e| s3_error!(e, InternalError))?
        .map_err(|e| s3_error!(e, InternalError))?;
        found.sort_by(|a, b| a.key.cmp(&b.key));
        let input = req.input;
        let after = match (&input.continuation_token, &input.start_after) {
            (Some(token), Some(after)) => Some(token.max(after)),
            (token, after) => token.as_ref().or(after.as_ref()),
        };
        if let Some(after) = after {
            found.retain(|o| o.key.as_ref().is_some_and(|k| k > after));
        }
        let max_keys = input.max_keys.unwrap_or(1000);
        let page = usize::try_from(max_keys).unwrap_or(0).min(found.len());
        let is_truncated = max_keys > 0 && page < found.len();
        found.truncate(page);
        let next_continuation_token = if is_truncated {
            found.last().and_then(|o| o.key.clone())
        } else {
            None
        };
        let output = ListObjectsV2Output {
            key_count: Some(i32::try_from(found.len()).unwrap_or(i32::MAX)),
            max_keys: Some(max_keys),
            is_truncated: Some(is_truncated),
            contents: (!found.is_empty()).then_some(found),
            continuation_token: input.continuation_token,
            next_continuation_token,
            encoding_type: input.encoding_type,
            name: Some(input.bucket),
            prefix: input.prefix,
            start_after: input.start_after,
            ..Default::default()
        };
        Ok(S3Response::new(output))
    }
}

/// The files under `dir` (absent: none) whose key, their path under `bucket`, starts
/// with `prefix`.
fn walk(dir: &Path, bucket: &Path, prefix: &str, found: &mut Vec<Object>) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        entries => entries?,
    };
    for entry in entries {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            walk(&path, bucket, prefix, found)?;
            continue;
        }
        let Some(key) = path
            .strip_prefix(bucket)
            .ok()
            .and_then(|key| key.to_str())
            .filter(|key| key.starts_with(prefix))
        else {
            continue;
        };
        let meta = entry.metadata()?;
        found.push(Object {
            key: Some(key.to_string()),
            last_modified: Some(meta.modified()?.into()),
            size: Some(i64::try_from(meta.len()).unwrap_or(i64::MAX)),
            ..Default::default()
        });
    }
    Ok(())
}
