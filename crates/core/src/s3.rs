//! Object storage (S3 protocol) through aws-sdk-s3.
//!
//! Production (AWS, MinIO, Ceph) and embedded mode share this client: embedded mode
//! just points it at an in-process s3s + s3s-fs server on loopback (`sless-embedded`).

use std::error::Error as StdError;
use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_config::timeout::TimeoutConfig;
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::config::{
    Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::operation::create_bucket::CreateBucketError;
use aws_sdk_s3::operation::get_object::GetObjectError;
use aws_sdk_s3::operation::head_bucket::HeadBucketError;
use aws_sdk_s3::operation::head_object::HeadObjectError;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{BucketLocationConstraint, CreateBucketConfiguration};
use aws_smithy_http_client::tls;
use bytes::Bytes;

use crate::error_text::BoxError;

/// Short enough that a dead endpoint fails fast, long enough for a slow network.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Bounds a whole operation (all retries) so nothing hangs forever.
const OPERATION_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Clone, Debug)]
pub struct S3Config {
    /// Custom endpoint URL (MinIO, Ceph, the embedded one); None = AWS default resolution.
    pub endpoint: Option<String>,
    pub region: String,
    pub bucket: String,
    /// None → the SDK's default credential chain (env AWS_ACCESS_KEY_ID etc.).
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    /// True for MinIO/Ceph/embedded.
    pub force_path_style: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("invalid S3 configuration: {0}")]
    Config(String),
    #[error(
        "cannot reach S3 endpoint {endpoint} ({op}): {}; check SLESS_S3_ENDPOINT and that the object store is running",
        crate::error_text::error_chain(.source.as_ref())
    )]
    Unreachable {
        endpoint: String,
        op: &'static str,
        #[source]
        source: BoxError,
    },
    #[error(
        "S3 endpoint {endpoint} refused access ({op}): {message}; check the S3 access key and secret"
    )]
    Denied {
        endpoint: String,
        op: &'static str,
        message: String,
        #[source]
        source: BoxError,
    },
    #[error(
        "S3 bucket {bucket:?} does not exist at {endpoint}; create it or let sless create it on startup"
    )]
    NoSuchBucket { endpoint: String, bucket: String },
    #[error("S3 {op} failed for {} at {endpoint}: {message}", target(.bucket, .key))]
    Request {
        op: &'static str,
        endpoint: String,
        bucket: String,
        /// Empty for bucket-level operations.
        key: String,
        message: String,
        #[source]
        source: Option<BoxError>,
    },
    #[error("embedded S3 endpoint could not start: {message}")]
    Embedded {
        message: String,
        #[source]
        source: BoxError,
    },
}

fn target(bucket: &str, key: &str) -> String {
    if key.is_empty() {
        format!("bucket {bucket:?}")
    } else {
        format!("{bucket}/{key}")
    }
}

#[derive(Clone)]
pub struct ObjectStore {
    client: aws_sdk_s3::Client,
    bucket: String,
    region: String,
    /// For error messages only.
    endpoint: String,
}

impl ObjectStore {
    /// Builds the client; makes no network call.
    pub async fn connect(config: &S3Config) -> Result<Self, StorageError> {
        if config.bucket.is_empty() {
            return Err(StorageError::Config("the bucket name is empty".into()));
        }
        let timeouts = TimeoutConfig::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .operation_timeout(OPERATION_TIMEOUT)
            .build();
        // ring, like every other TLS client in the process (see the workspace manifest).
        let http_client = aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(
                tls::rustls_provider::CryptoMode::Ring,
            ))
            .build_https();
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .http_client(http_client)
            .region(Region::new(config.region.clone()))
            .timeout_config(timeouts);
        match (&config.access_key_id, &config.secret_access_key) {
            (Some(id), Some(secret)) => {
                loader = loader.credentials_provider(Credentials::new(
                    id.clone(),
                    secret.clone(),
                    None,
                    None,
                    "sless",
                ));
            }
            (None, None) => {}
            _ => {
                return Err(StorageError::Config(
                    "set both the S3 access key id and secret access key, or neither".into(),
                ));
            }
        }
        if let Some(url) = &config.endpoint {
            loader = loader.endpoint_url(url.clone());
        }
        let sdk = loader.load().await;
        let mut s3 =
            aws_sdk_s3::config::Builder::from(&sdk).force_path_style(config.force_path_style);
        if config.endpoint.is_some() {
            // Many S3-compatible servers (older MinIO/Ceph) reject the SDK's default
            // streaming checksums; only send/verify them when an operation requires it.
            s3 = s3
                .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
                .response_checksum_validation(ResponseChecksumValidation::WhenRequired);
        }
        let endpoint = config
            .endpoint
            .clone()
            .unwrap_or_else(|| format!("AWS S3 ({})", config.region));
        Ok(Self {
            client: aws_sdk_s3::Client::from_conf(s3.build()),
            bucket: config.bucket.clone(),
            region: config.region.clone(),
            endpoint,
        })
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    pub fn client(&self) -> &aws_sdk_s3::Client {
        &self.client
    }

    /// Creates the bucket if missing; an existing bucket we can access is fine.
    pub async fn ensure_bucket(&self) -> Result<(), StorageError> {
        if self.bucket_accessible().await? {
            return Ok(());
        }
        let mut req = self.client.create_bucket().bucket(&self.bucket);
        // us-east-1 is the one region that rejects an explicit location constraint.
        if self.region != "us-east-1" {
            req = req.create_bucket_configuration(
                CreateBucketConfiguration::builder()
                    .location_constraint(BucketLocationConstraint::from(self.region.as_str()))
                    .build(),
            );
        }
        match req.send().await {
            Ok(_) => Ok(()),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), CreateBucketError::BucketAlreadyOwnedByYou(_)) =>
            {
                Ok(())
            }
            // Someone created it concurrently (s3s-fs answers this even for our own bucket);
            // it is ours if we can access it now.
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), CreateBucketError::BucketAlreadyExists(_)) =>
            {
                if self.bucket_accessible().await? {
                    Ok(())
                } else {
                    Err(self.request_error(
                        "create_bucket",
                        "",
                        "the bucket name is taken by another account".into(),
                        None,
                    ))
                }
            }
            Err(e) => Err(self.classify("create_bucket", "", e)),
        }
    }

    /// Ok(false) when the bucket does not exist.
    async fn bucket_accessible(&self) -> Result<bool, StorageError> {
        match self.client.head_bucket().bucket(&self.bucket).send().await {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), HeadBucketError::NotFound(_))
                    || e.raw().status().as_u16() == 404 =>
            {
                Ok(false)
            }
            Err(e) => Err(self.classify("head_bucket", "", e)),
        }
    }

    pub async fn put(
        &self,
        key: &str,
        body: Bytes,
        content_type: &str,
    ) -> Result<(), StorageError> {
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type(content_type)
            .body(ByteStream::from(body))
            .send()
            .await
            .map_err(|e| self.classify("put_object", key, e))?;
        Ok(())
    }

    /// Uploads a file, streamed from disk: its content is never held whole in memory.
    pub async fn put_file(
        &self,
        key: &str,
        path: &std::path::Path,
        content_type: &str,
    ) -> Result<(), StorageError> {
        let body = ByteStream::from_path(path).await.map_err(|e| {
            self.request_error(
                "put_object",
                key,
                format!("reading {}: {e}", path.display()),
                Some(Box::new(e)),
            )
        })?;
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type(content_type)
            .body(body)
            .send()
            .await
            .map_err(|e| self.classify("put_object", key, e))?;
        Ok(())
    }

    /// Streams an object into `out` chunk by chunk; false when the key does not exist.
    pub async fn get_into(
        &self,
        key: &str,
        out: &mut (dyn tokio::io::AsyncWrite + Send + Unpin),
    ) -> Result<bool, StorageError> {
        let Some(mut body) = self.get_body(key).await? else {
            return Ok(false);
        };
        let reading =
            |e: &dyn StdError| format!("reading the body: {}", crate::error_text::error_chain(e));
        while let Some(chunk) = body
            .try_next()
            .await
            .map_err(|e| self.request_error("get_object", key, reading(&e), Some(Box::new(e))))?
        {
            tokio::io::AsyncWriteExt::write_all(out, &chunk)
                .await
                .map_err(|e| {
                    self.request_error(
                        "get_object",
                        key,
                        format!("writing it out: {e}"),
                        Some(Box::new(e)),
                    )
                })?;
        }
        Ok(true)
    }

    /// None when the key does not exist.
    pub async fn get(&self, key: &str) -> Result<Option<Bytes>, StorageError> {
        let Some(body) = self.get_body(key).await? else {
            return Ok(None);
        };
        let data = body.collect().await.map_err(|e| {
            self.request_error(
                "get_object",
                key,
                format!("reading the body: {}", crate::error_text::error_chain(&e)),
                Some(Box::new(e)),
            )
        })?;
        Ok(Some(data.into_bytes()))
    }

    async fn get_body(&self, key: &str) -> Result<Option<ByteStream>, StorageError> {
        let out = match self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(out) => out,
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), GetObjectError::NoSuchKey(_))
                    || (e.raw().status().as_u16() == 404
                        && e.err().code() != Some("NoSuchBucket")) =>
            {
                return Ok(None);
            }
            Err(e) => return Err(self.classify("get_object", key, e)),
        };
        Ok(Some(out.body))
    }

    pub async fn exists(&self, key: &str) -> Result<bool, StorageError> {
        match self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(_) => Ok(true),
            // HEAD responses carry no body, so a missing bucket is also a plain 404 here.
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), HeadObjectError::NotFound(_))
                    || e.raw().status().as_u16() == 404 =>
            {
                Ok(false)
            }
            Err(e) => Err(self.classify("head_object", key, e)),
        }
    }

    /// Deleting a missing key is not an error (S3 semantics).
    pub async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| self.classify("delete_object", key, e))?;
        Ok(())
    }

    /// All keys under `prefix`, following pagination.
    pub async fn list(&self, prefix: &str) -> Result<Vec<String>, StorageError> {
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .into_paginator()
            .send();
        let mut keys = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| self.classify("list_objects_v2", prefix, e))?;
            keys.extend(
                page.contents()
                    .iter()
                    .filter_map(|o| o.key().map(str::to_owned)),
            );
        }
        Ok(keys)
    }

    fn request_error(
        &self,
        op: &'static str,
        key: &str,
        message: String,
        source: Option<BoxError>,
    ) -> StorageError {
        StorageError::Request {
            op,
            endpoint: self.endpoint.clone(),
            bucket: self.bucket.clone(),
            key: key.to_owned(),
            message,
            source,
        }
    }

    /// Maps SDK errors to something a person can act on.
    fn classify<E>(
        &self,
        op: &'static str,
        key: &str,
        err: SdkError<E, HttpResponse>,
    ) -> StorageError
    where
        E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
    {
        let unreachable = match &err {
            SdkError::TimeoutError(_) => true,
            SdkError::DispatchFailure(d) => d.is_io() || d.is_timeout(),
            _ => false,
        };
        if unreachable {
            return StorageError::Unreachable {
                endpoint: self.endpoint.clone(),
                op,
                source: Box::new(err),
            };
        }
        let SdkError::ServiceError(ctx) = &err else {
            let message = crate::error_text::error_chain(&err);
            return self.request_error(op, key, message, Some(Box::new(err)));
        };
        // HEAD responses have no body, hence no error code: fall back to the status.
        let status = ctx.raw().status().as_u16();
        let code = ctx.err().code().unwrap_or("").to_owned();
        let message = match (code.as_str(), ctx.err().message()) {
            ("", Some(m)) => m.to_owned(),
            ("", None) => format!("HTTP {status}"),
            (c, Some(m)) => format!("{c}: {m}"),
            (c, None) => c.to_owned(),
        };
        let denied = matches!(
            code.as_str(),
            "AccessDenied" | "InvalidAccessKeyId" | "SignatureDoesNotMatch" | "NotSignedUp"
        ) || status == 401
            || status == 403;
        if code == "NoSuchBucket" {
            StorageError::NoSuchBucket {
                endpoint: self.endpoint.clone(),
                bucket: self.bucket.clone(),
            }
        } else if denied {
            StorageError::Denied {
                endpoint: self.endpoint.clone(),
                op,
                message,
                source: Box::new(err),
            }
        } else {
            self.request_error(op, key, message, Some(Box::new(err)))
        }
    }
}
