//! Configuration shared by the server's commands: flags with `SLESS_*` environment
//! fallbacks, turned into the operator's config types.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use gateway::serve::Limits;
use sless_core::auth::{AuthConfig, KeySource};
use sless_core::review::{self, ReviewConfig, Reviewer};
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

/// Per-namespace quotas the API applies in both modes (see `sless_core::quota`), and how
/// many runs each job keeps; the running-memory quota is the embedded runner's
/// (`sless up --max-running-memory-mb`).
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
    /// Log streams (`sless logs --follow`, the console's live tail) one namespace may
    /// have open; more are answered 429.
    #[arg(long, env = "SLESS_MAX_LOG_FOLLOWERS", default_value_t = 8,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_log_followers: u64,
    /// Runs each job keeps in its history (`GET .../jobs/{name}/runs`); older ones are
    /// dropped.
    #[arg(long, env = "SLESS_JOB_RUNS_KEPT",
          default_value_t = sless_core::model::DEFAULT_JOB_RUNS_KEPT as u64,
          value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub job_runs_kept: u64,
    /// Versions (uploads) each function or service keeps for rollback; older ones are
    /// pruned with their objects, never the active one.
    #[arg(long, env = "SLESS_KEEP_VERSIONS",
          default_value_t = sless_core::versions::DEFAULT_KEEP_VERSIONS as u64,
          value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub keep_versions: u64,
}

impl QuotaArgs {
    pub fn quotas(&self) -> sless_core::quota::Quotas {
        sless_core::quota::Quotas {
            max_workloads: self.max_workloads,
            max_triggers: self.max_triggers,
            max_jobs: self.max_jobs,
            max_uploads_in_flight: self.max_uploads_in_flight,
            max_log_followers: self.max_log_followers,
        }
    }

    /// For the runners, which keep the history (`sless up`'s and the operator's).
    pub fn job_runs_kept(&self) -> usize {
        usize::try_from(self.job_runs_kept).unwrap_or(usize::MAX)
    }

    pub fn keep_versions(&self) -> usize {
        usize::try_from(self.keep_versions).unwrap_or(usize::MAX)
    }
}

/// The pre-build code review (docs/spec.md §4). Each setting also reads the original
/// system's name (`LLM_ENABLED`, `LLM_ENDPOINT`, ...); when both are set, ours wins.
#[derive(Args, Clone, Debug)]
pub struct ReviewArgs {
    /// Have a model review uploaded code before it is built; off by default.
    #[arg(long, env = "SLESS_LLM_ENABLED", num_args = 0..=1, default_missing_value = "true",
          value_parser = clap::builder::BoolishValueParser::new())]
    pub llm_enabled: Option<bool>,
    /// OpenAI-compatible chat-completions URL, e.g.
    /// https://api.openai.com/v1/chat/completions.
    #[arg(long, env = "SLESS_LLM_ENDPOINT")]
    pub llm_endpoint: Option<String>,
    /// Sent as a bearer token.
    #[arg(long, env = "SLESS_LLM_API_KEY", hide_env_values = true)]
    pub llm_api_key: Option<String>,
    /// Seconds to wait for a verdict ("15" or "15s"); then the upload goes on unreviewed.
    #[arg(long, env = "SLESS_LLM_TIMEOUT", value_parser = parse_seconds)]
    pub llm_timeout: Option<Duration>,
    #[arg(long, env = "SLESS_LLM_MODEL")]
    pub llm_model: Option<String>,
    /// A file whose text replaces the reviewer's system prompt.
    #[arg(long, env = "SLESS_LLM_PROMPT_FILE")]
    pub llm_prompt_file: Option<PathBuf>,
}

/// An age as "7d", "12h", "30m" or "90s"; more than zero.
pub fn parse_age(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    let unit = match trimmed.as_bytes().last() {
        Some(b'd') => 24 * 3600,
        Some(b'h') => 3600,
        Some(b'm') => 60,
        Some(b's') => 1,
        _ => 0,
    };
    trimmed
        .get(..trimmed.len().saturating_sub(1))
        .and_then(|number| number.trim().parse::<u64>().ok())
        .filter(|n| unit > 0 && *n > 0)
        .and_then(|n| n.checked_mul(unit))
        .map(Duration::from_secs)
        .ok_or_else(|| {
            format!("{text:?} is not an age; give a number and a unit: 7d, 12h, 30m or 90s")
        })
}

/// The original system's names, read when ours are unset.
const LEGACY_ENABLED: &str = "LLM_ENABLED";
const LEGACY_ENDPOINT: &str = "LLM_ENDPOINT";
const LEGACY_API_KEY: &str = "LLM_API_KEY";
const LEGACY_TIMEOUT: &str = "LLM_TIMEOUT";
const LEGACY_MODEL: &str = "LLM_MODEL";
const LEGACY_PROMPT_FILE: &str = "LLM_PROMPT_FILE";

/// Seconds as "15", "15s" or "2.5s"; more than zero.
fn parse_seconds(text: &str) -> Result<Duration, String> {
    let number = text.trim();
    let number = number.strip_suffix('s').unwrap_or(number).trim();
    number
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0 && *s <= 3600.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("{text:?} is not a timeout; give seconds, e.g. 15 or 15s"))
}

impl ReviewArgs {
    /// The reviewer, when enabled.
    pub fn reviewer(&self) -> anyhow::Result<Option<Arc<Reviewer>>> {
        self.reviewer_with(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
    }

    /// `legacy` looks up the original system's variables.
    fn reviewer_with(
        &self,
        legacy: impl Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Option<Arc<Reviewer>>> {
        let enabled = match (self.llm_enabled, legacy(LEGACY_ENABLED)) {
            (Some(enabled), _) => enabled,
            (None, Some(text)) => clap::builder::TypedValueParser::parse_ref(
                &clap::builder::BoolishValueParser::new(),
                &clap::Command::new("sless"),
                None,
                std::ffi::OsStr::new(&text),
            )
            .map_err(|_| anyhow::anyhow!("{LEGACY_ENABLED}={text:?}: give true or false"))?,
            (None, None) => false,
        };
        if !enabled {
            return Ok(None);
        }
        let endpoint = self
            .llm_endpoint
            .clone()
            .or_else(|| legacy(LEGACY_ENDPOINT))
            .context(
                "the code review is enabled but has no endpoint: set SLESS_LLM_ENDPOINT \
                 (or LLM_ENDPOINT) to a chat-completions URL, e.g. \
                 https://api.openai.com/v1/chat/completions",
            )?;
        let endpoint: reqwest::Url = endpoint
            .parse()
            .ok()
            .filter(|u: &reqwest::Url| matches!(u.scheme(), "http" | "https"))
            .with_context(|| {
                format!(
                    "SLESS_LLM_ENDPOINT {endpoint:?} is not an http(s) URL; give the \
                     chat-completions URL, e.g. https://api.openai.com/v1/chat/completions"
                )
            })?;
        let timeout = match (self.llm_timeout, legacy(LEGACY_TIMEOUT)) {
            (Some(timeout), _) => timeout,
            (None, Some(text)) => {
                parse_seconds(&text).map_err(|e| anyhow::anyhow!("{LEGACY_TIMEOUT}: {e}"))?
            }
            (None, None) => review::DEFAULT_TIMEOUT,
        };
        let prompt = match self
            .llm_prompt_file
            .clone()
            .or_else(|| legacy(LEGACY_PROMPT_FILE).map(PathBuf::from))
        {
            Some(path) => {
                let prompt = std::fs::read_to_string(&path).with_context(|| {
                    format!("reading the code review prompt {}", path.display())
                })?;
                anyhow::ensure!(
                    !prompt.trim().is_empty(),
                    "the code review prompt {} is empty; write the reviewer's instructions \
                     in it or unset SLESS_LLM_PROMPT_FILE",
                    path.display()
                );
                prompt
            }
            None => review::DEFAULT_PROMPT.to_string(),
        };
        let config = ReviewConfig {
            endpoint,
            api_key: self.llm_api_key.clone().or_else(|| legacy(LEGACY_API_KEY)),
            model: self
                .llm_model
                .clone()
                .or_else(|| legacy(LEGACY_MODEL))
                .unwrap_or_else(|| review::DEFAULT_MODEL.to_string()),
            timeout,
            prompt,
        };
        tracing::info!(?config, "code review enabled");
        Ok(Some(Arc::new(Reviewer::new(config)?)))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        review: ReviewArgs,
    }

    fn args(flags: &[&str]) -> ReviewArgs {
        Cli::try_parse_from(std::iter::once("sless").chain(flags.iter().copied()))
            .unwrap()
            .review
    }

    fn legacy(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    #[test]
    fn off_by_default_even_with_an_endpoint() {
        let review = args(&["--llm-endpoint", "http://127.0.0.1:9/v1/chat/completions"]);
        assert!(review.reviewer_with(legacy(&[])).unwrap().is_none());
    }

    #[test]
    fn the_original_names_work_and_ours_win() {
        let original = legacy(&[
            ("LLM_ENABLED", "true"),
            ("LLM_ENDPOINT", "http://legacy.invalid/v1/chat/completions"),
            ("LLM_API_KEY", "sk-legacy"),
            ("LLM_TIMEOUT", "7s"),
        ]);
        let reviewer = args(&[]).reviewer_with(&original).unwrap().unwrap();
        let config = reviewer.config();
        assert_eq!(config.endpoint.host_str(), Some("legacy.invalid"));
        assert_eq!(config.api_key.as_deref(), Some("sk-legacy"));
        assert_eq!(config.timeout, Duration::from_secs(7));
        assert_eq!(config.model, review::DEFAULT_MODEL);

        let ours = args(&[
            "--llm-endpoint",
            "http://ours.invalid/v1/chat/completions",
            "--llm-timeout",
            "15",
            "--llm-model",
            "local-model",
        ]);
        let reviewer = ours.reviewer_with(&original).unwrap().unwrap();
        assert_eq!(reviewer.config().endpoint.host_str(), Some("ours.invalid"));
        assert_eq!(reviewer.config().timeout, Duration::from_secs(15));
        assert_eq!(reviewer.config().model, "local-model");
        // Ours off wins over the original on.
        let off = args(&["--llm-enabled", "false"]);
        assert!(off.reviewer_with(&original).unwrap().is_none());
    }

    #[test]
    fn bad_settings_say_what_to_set() {
        let enabled = args(&["--llm-enabled"]);
        let error = enabled.reviewer_with(legacy(&[])).unwrap_err().to_string();
        assert!(error.contains("SLESS_LLM_ENDPOINT"), "{error}");
        let error = args(&["--llm-enabled", "--llm-endpoint", "ftp://x/y"])
            .reviewer_with(legacy(&[]))
            .unwrap_err()
            .to_string();
        assert!(error.contains("not an http(s) URL"), "{error}");
        let error = args(&[])
            .reviewer_with(legacy(&[("LLM_ENABLED", "maybe")]))
            .unwrap_err()
            .to_string();
        assert!(error.contains("LLM_ENABLED"), "{error}");
        assert!(parse_seconds("15s").is_ok() && parse_seconds("2.5").is_ok());
        for bad in ["0", "-1", "soon", "", "1e9"] {
            assert!(parse_seconds(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn ages_take_a_unit() {
        assert_eq!(parse_age("7d"), Ok(Duration::from_secs(7 * 24 * 3600)));
        assert_eq!(parse_age(" 12h "), Ok(Duration::from_secs(12 * 3600)));
        assert_eq!(parse_age("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_age("90s"), Ok(Duration::from_secs(90)));
        for bad in [
            "7",
            "0d",
            "-1h",
            "d",
            "",
            "1.5h",
            "7é",
            "99999999999999999d",
        ] {
            assert!(parse_age(bad).is_err(), "{bad:?}");
        }
    }
}
