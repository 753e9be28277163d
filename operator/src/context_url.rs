//! How a build Job reaches its context: a presigned S3 GET URL, so build pods need no
//! S3 credentials of their own.

use std::time::Duration;

use aws_sdk_s3::presigning::PresigningConfig;

use sless_core::error_text::BoxError;
use sless_core::s3::ObjectStore;

#[async_trait::async_trait]
pub trait ContextUrls: Send + Sync + 'static {
    /// A URL that downloads `key` for `ttl`.
    async fn presigned_get(&self, key: &str, ttl: Duration) -> Result<String, PresignError>;
}

#[derive(Debug, thiserror::Error)]
#[error("presigning s3://{bucket}/{key}: {source}")]
pub struct PresignError {
    pub bucket: String,
    pub key: String,
    #[source]
    pub source: BoxError,
}

/// Presigns against the operator's own S3 endpoint; build pods must reach the same
/// endpoint (an in-cluster MinIO/Ceph Service, or a public S3 endpoint).
pub struct S3ContextUrls {
    objects: ObjectStore,
}

impl S3ContextUrls {
    pub fn new(objects: ObjectStore) -> Self {
        Self { objects }
    }
}

#[async_trait::async_trait]
impl ContextUrls for S3ContextUrls {
    async fn presigned_get(&self, key: &str, ttl: Duration) -> Result<String, PresignError> {
        let failed = |source: BoxError| PresignError {
            bucket: self.objects.bucket().to_owned(),
            key: key.to_owned(),
            source,
        };
        let config = PresigningConfig::expires_in(ttl).map_err(|e| failed(e.into()))?;
        let request = self
            .objects
            .client()
            .get_object()
            .bucket(self.objects.bucket())
            .key(key)
            .presigned(config)
            .await
            .map_err(|e| failed(e.into()))?;
        Ok(request.uri().to_string())
    }
}
