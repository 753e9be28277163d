//! Configuration shared by the server's commands: flags with `SLESS_*` environment
//! fallbacks, turned into the operator's config types.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use gateway::serve::Limits;
use sless_core::auth::{AuthConfig, KeySource};
use sless_core::s3::S3Config;

pub const DEFAULT_DATA_DIR: &str = "sless-data";
/// The `sub` of `sless token --admin`; listed as an admin subject in embedded mode.
pub const EMBEDDED_ADMIN_SUBJECT: &str = "sless:admin";

#[derive(Args, Clone, Debug)]
pub struct AuthArgs {
    /// HS256 secret; default in embedded mode: the key in the data dir.
    #[arg(long, env = "SLESS_JWT_HS256_SECRET", hide_env_values = true)]
    pub jwt_hs256_secret: Option<String>,
    /// PEM public key (RSA → RS256, EC P-256 → ES256).
    #[arg(long, env = "SLESS_JWT_PUBLIC_KEY_FILE")]
    pub jwt_public_key_file: Option<PathBuf>,
    /// JWKS URL, fetched and cached.
    #[arg(long, env = "SLESS_JWKS_URL")]
    pub jwks_url: Option<String>,
    #[arg(long, env = "SLESS_JWT_ISSUER")]
    pub jwt_issuer: Option<String>,
    #[arg(long, env = "SLESS_JWT_AUDIENCE")]
    pub jwt_audience: Option<String>,
    /// Comma-separated `sub`s that may act on every namespace.
    #[arg(long, env = "SLESS_ADMIN_SUBJECTS", value_delimiter = ',')]
    pub admin_subjects: Vec<String>,
    /// Accept tokens without checking signatures. Only for clouds that publish no keys.
    #[arg(long, env = "SLESS_INSECURE_SKIP_JWT_VERIFY", default_value_t = false)]
    pub insecure_skip_jwt_verify: bool,
}

impl AuthArgs {
    /// Embedded mode falls back to the data dir's key and its admin subject.
    pub fn config(&self, data_dir: &Path) -> anyhow::Result<AuthConfig> {
        let configured = [
            self.jwt_hs256_secret.is_some(),
            self.jwt_public_key_file.is_some(),
            self.jwks_url.is_some(),
            self.insecure_skip_jwt_verify,
        ]
        .iter()
        .filter(|set| **set)
        .count();
        anyhow::ensure!(
            configured <= 1,
            "configure one token key: SLESS_JWT_HS256_SECRET, SLESS_JWT_PUBLIC_KEY_FILE, \
             SLESS_JWKS_URL or SLESS_INSECURE_SKIP_JWT_VERIFY"
        );
        let key = if let Some(secret) = &self.jwt_hs256_secret {
            KeySource::Hs256Secret(secret.as_bytes().to_vec())
        } else if let Some(path) = &self.jwt_public_key_file {
            let pem = std::fs::read(path)
                .with_context(|| format!("reading SLESS_JWT_PUBLIC_KEY_FILE {}", path.display()))?;
            KeySource::PublicKeyPem(pem)
        } else if let Some(url) = &self.jwks_url {
            KeySource::JwksUrl(url.clone())
        } else if self.insecure_skip_jwt_verify {
            KeySource::InsecureSkipVerify
        } else {
            let key = sless_core::auth::load_or_create_signing_key(data_dir)
                .with_context(|| format!("creating the signing key in {}", data_dir.display()))?;
            KeySource::Hs256Secret(key)
        };
        let mut admin_subjects = self.admin_subjects.clone();
        if matches!(key, KeySource::Hs256Secret(_)) && self.jwt_hs256_secret.is_none() {
            admin_subjects.push(EMBEDDED_ADMIN_SUBJECT.to_string());
        }
        Ok(AuthConfig {
            key,
            admin_subjects,
            issuer: self.jwt_issuer.clone(),
            audience: self.jwt_audience.clone(),
            leeway_sec: 30,
        })
    }
}

#[derive(Args, Clone, Debug)]
pub struct S3Args {
    /// External S3 endpoint (MinIO, Ceph, AWS); unset → an embedded endpoint on loopback
    /// storing under the data dir.
    #[arg(long, env = "SLESS_S3_ENDPOINT")]
    pub s3_endpoint: Option<String>,
    #[arg(long, env = "SLESS_S3_BUCKET", default_value = "sless")]
    pub s3_bucket: String,
    #[arg(long, env = "SLESS_S3_REGION", default_value = "us-east-1")]
    pub s3_region: String,
    /// Falls back to the AWS default chain (AWS_ACCESS_KEY_ID, ...).
    #[arg(long, env = "SLESS_S3_ACCESS_KEY_ID")]
    pub s3_access_key_id: Option<String>,
    #[arg(long, env = "SLESS_S3_SECRET_ACCESS_KEY", hide_env_values = true)]
    pub s3_secret_access_key: Option<String>,
    /// Path-style addressing (MinIO, Ceph); set false for virtual-hosted AWS buckets.
    #[arg(long, env = "SLESS_S3_PATH_STYLE", default_value_t = true, action = clap::ArgAction::Set)]
    pub s3_path_style: bool,
}

impl S3Args {
    /// The external endpoint's config, if one is configured.
    pub fn external(&self) -> Option<S3Config> {
        self.s3_endpoint.as_ref().map(|endpoint| S3Config {
            endpoint: Some(endpoint.clone()),
            region: self.s3_region.clone(),
            bucket: self.s3_bucket.clone(),
            access_key_id: self.s3_access_key_id.clone(),
            secret_access_key: self.s3_secret_access_key.clone(),
            force_path_style: self.s3_path_style,
        })
    }
}

#[derive(Args, Clone, Debug)]
pub struct EventArgs {
    /// RabbitMQ (AMQP 0-9-1) that event triggers consume from, e.g.
    /// `amqp://user:password@host:5672/%2f`; unset → event triggers report "no broker
    /// configured".
    #[arg(long, env = "SLESS_AMQP_URL", hide_env_values = true)]
    pub amqp_url: Option<String>,
}

impl EventArgs {
    pub fn config(&self) -> gateway::dispatch::DispatchConfig {
        gateway::dispatch::DispatchConfig::new(self.amqp_url.clone().filter(|u| !u.is_empty()))
    }
}

/// Connection limits of the HTTP listener (see `gateway::serve`).
#[derive(Args, Clone, Debug)]
pub struct ServeArgs {
    /// Seconds a client has to send a request's headers, from connecting or from the
    /// first byte of a later request; then the connection is closed.
    #[arg(long, env = "SLESS_HEADER_TIMEOUT_SECS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub header_timeout_secs: u64,
    /// Seconds a keep-alive connection may wait for its next request.
    #[arg(long, env = "SLESS_IDLE_TIMEOUT_SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout_secs: u64,
    /// Connections served at once (more are closed at once); lowered to fit the
    /// open-files limit, which is raised to its hard limit at start.
    #[arg(long, env = "SLESS_MAX_CONNECTIONS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_connections: u64,
    /// Also serve `GET /metrics` here without a token, for a Prometheus scraper (on the
    /// main address it needs an admin token). Off by default.
    #[arg(long, env = "SLESS_METRICS_LISTEN")]
    pub metrics_listen: Option<std::net::SocketAddr>,
}

impl ServeArgs {
    pub fn limits(&self) -> Limits {
        Limits {
            header_timeout: Duration::from_secs(self.header_timeout_secs),
            idle_timeout: Duration::from_secs(self.idle_timeout_secs),
            max_connections: usize::try_from(self.max_connections).unwrap_or(usize::MAX),
        }
    }
}

/// Per-namespace quotas the API applies in both modes (see `sless_core::quota`); the
/// running-memory quota is the embedded runner's (`sless up --max-running-memory-mb`).
#[derive(Args, Clone, Debug)]
pub struct QuotaArgs {
    /// Functions and services one namespace may hold, together.
    #[arg(long, env = "SLESS_MAX_WORKLOADS", default_value_t = 100)]
    pub max_workloads: u64,
    /// Triggers one namespace may hold.
    #[arg(long, env = "SLESS_MAX_TRIGGERS", default_value_t = 500)]
    pub max_triggers: u64,
    /// Jobs one namespace may hold.
    #[arg(long, env = "SLESS_MAX_JOBS", default_value_t = 100)]
    pub max_jobs: u64,
    /// Uploads one namespace may have in flight; more are answered 429 with Retry-After.
    #[arg(long, env = "SLESS_MAX_UPLOADS_IN_FLIGHT", default_value_t = 2,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_uploads_in_flight: u64,
}

impl QuotaArgs {
    pub fn quotas(&self) -> sless_core::quota::Quotas {
        sless_core::quota::Quotas {
            max_workloads: self.max_workloads,
            max_triggers: self.max_triggers,
            max_jobs: self.max_jobs,
            max_uploads_in_flight: self.max_uploads_in_flight,
        }
    }
}
