//! The JWKS cache: keys fetched from the identity provider, looked up by `kid`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::{Mutex, RwLock};

use super::{AuthError, invalid, printable};

/// A key set larger than this is refused (a JWKS is a few KiB).
const MAX_JWKS_BYTES: usize = 1024 * 1024;

/// Why the key set could not be fetched.
#[derive(Debug, thiserror::Error)]
pub enum JwksFetchError {
    #[error("GET {url}: {}", crate::error_text::error_chain(.source))]
    Request {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("GET {url}: HTTP {status}")]
    Status {
        url: String,
        status: reqwest::StatusCode,
    },
    #[error("GET {url}: the key set exceeds {MAX_JWKS_BYTES} bytes")]
    TooLarge { url: String },
    #[error("GET {url}: the response is not a JWK set: {source}")]
    NotAKeySet {
        url: String,
        #[source]
        source: serde_json::Error,
    },
}

/// Timings of the JWKS cache.
#[derive(Clone, Debug)]
pub struct JwksPolicy {
    /// Keys older than this are fetched again before use.
    pub max_age: Duration,
    /// A token with an unknown `kid` triggers a refresh at most this often, so random
    /// kids cannot make sless hammer the identity provider.
    pub min_refresh_interval: Duration,
    /// After a failed fetch, requests wait this long before the next attempt.
    pub retry_after_failure: Duration,
    /// While the URL fails, keys up to `max_age + stale_grace` old are still used.
    pub stale_grace: Duration,
    /// Connect + response timeout of one fetch.
    pub fetch_timeout: Duration,
}

impl Default for JwksPolicy {
    fn default() -> Self {
        JwksPolicy {
            max_age: Duration::from_secs(10 * 60),
            min_refresh_interval: Duration::from_secs(30),
            retry_after_failure: Duration::from_secs(2),
            stale_grace: Duration::from_secs(60 * 60),
            fetch_timeout: Duration::from_secs(5),
        }
    }
}

/// One usable key with the algorithm pinned from its JWK.
#[derive(Clone)]
pub(super) struct JwksKey {
    pub kid: Option<String>,
    pub alg: Algorithm,
    pub key: DecodingKey,
}

#[derive(Default)]
struct State {
    keys: Vec<JwksKey>,
    fetched_at: Option<Instant>,
    last_attempt: Option<Instant>,
    last_error: Option<Arc<JwksFetchError>>,
}

enum Lookup {
    Found(JwksKey),
    Unknown(AuthError),
}

impl State {
    fn age(&self, now: Instant) -> Option<Duration> {
        self.fetched_at.map(|t| now.saturating_duration_since(t))
    }

    fn is_fresh(&self, now: Instant, policy: &JwksPolicy) -> bool {
        self.age(now).is_some_and(|age| age <= policy.max_age)
    }

    fn is_usable_stale(&self, now: Instant, policy: &JwksPolicy) -> bool {
        self.age(now)
            .is_some_and(|age| age <= policy.max_age + policy.stale_grace)
    }

    fn attempted_within(&self, now: Instant, window: Duration) -> bool {
        self.last_attempt
            .is_some_and(|t| now.saturating_duration_since(t) < window)
    }

    /// Prefers the key whose pinned algorithm matches the token, so the caller can
    /// report an algorithm mismatch rather than an unknown kid.
    fn find(&self, kid: Option<&str>, alg: Algorithm) -> Lookup {
        match kid {
            Some(kid) => {
                let mut same_kid = self.keys.iter().filter(|k| k.kid.as_deref() == Some(kid));
                let first = same_kid.clone().next();
                match same_kid.find(|k| k.alg == alg).or(first) {
                    Some(key) => Lookup::Found(key.clone()),
                    None => Lookup::Unknown(invalid(format!(
                        "unknown key id {} (not in the key set)",
                        printable(kid)
                    ))),
                }
            }
            // Without a kid only an unambiguous, single-key set can be used.
            None => match self.keys.as_slice() {
                [only] => Lookup::Found(only.clone()),
                keys => Lookup::Unknown(invalid(format!(
                    "the token has no kid and the key set holds {} keys",
                    keys.len()
                ))),
            },
        }
    }
}

pub(super) struct JwksCache {
    url: String,
    client: reqwest::Client,
    policy: JwksPolicy,
    state: RwLock<State>,
    // One fetch at a time; waiters then read what it brought.
    refresh: Mutex<()>,
}

impl JwksCache {
    pub fn new(url: &str, policy: JwksPolicy) -> Result<Self, AuthError> {
        let parsed = reqwest::Url::parse(url)
            .map_err(|e| AuthError::setup(format!("the JWKS URL {url:?} is invalid"), e))?;
        match parsed.scheme() {
            "https" => {}
            "http" => {
                let host = parsed.host_str().unwrap_or_default();
                let loopback = host == "localhost"
                    || host
                        .trim_matches(['[', ']'])
                        .parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_loopback());
                if !loopback {
                    tracing::warn!(
                        url,
                        "the JWKS URL is plain http: keys can be tampered with in transit"
                    );
                }
            }
            other => {
                return Err(AuthError::Config(format!(
                    "the JWKS URL must be http(s), not {other}"
                )));
            }
        }
        let client = reqwest::Client::builder()
            .connect_timeout(policy.fetch_timeout)
            .timeout(policy.fetch_timeout)
            .build()
            .map_err(|e| AuthError::setup("cannot build the JWKS HTTP client", e))?;
        Ok(JwksCache {
            url: url.to_string(),
            client,
            policy,
            state: RwLock::new(State::default()),
            refresh: Mutex::new(()),
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// What a fresh cached set answers without a fetch: the key, or an unknown kid whose
    /// set was fetched too recently to fetch again. `None`: fetch.
    fn cached_answer(
        &self,
        state: &State,
        now: Instant,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Option<Result<JwksKey, AuthError>> {
        if !state.is_fresh(now, &self.policy) {
            return None;
        }
        match state.find(kid, alg) {
            Lookup::Found(key) => Some(Ok(key)),
            Lookup::Unknown(e) if state.attempted_within(now, self.policy.min_refresh_interval) => {
                Some(Err(e))
            }
            Lookup::Unknown(_) => None,
        }
    }

    /// The key for a token's `kid`, fetching the set when it is missing, too old, or
    /// lacks the kid (rate-limited).
    pub async fn key_for(&self, kid: Option<&str>, alg: Algorithm) -> Result<JwksKey, AuthError> {
        {
            let state = self.state.read().await;
            if let Some(answer) = self.cached_answer(&state, Instant::now(), kid, alg) {
                return answer;
            }
        }

        let _one_fetch = self.refresh.lock().await;
        let now = Instant::now();
        {
            // Another request may have refreshed while this one waited.
            let state = self.state.read().await;
            if let Some(answer) = self.cached_answer(&state, now, kid, alg) {
                return answer;
            }
            if let Some(failure) = &state.last_error
                && !state.is_fresh(now, &self.policy)
                && state.attempted_within(now, self.policy.retry_after_failure)
            {
                return self.fall_back_to_stale(&state, failure, now, kid, alg);
            }
        }

        let fetched = self.fetch().await;
        let mut state = self.state.write().await;
        state.last_attempt = Some(Instant::now());
        match fetched {
            Ok(keys) => {
                tracing::debug!(url = %self.url, keys = keys.len(), "fetched the JWKS");
                state.keys = keys;
                state.fetched_at = state.last_attempt;
                state.last_error = None;
                match state.find(kid, alg) {
                    Lookup::Found(key) => Ok(key),
                    Lookup::Unknown(e) => Err(e),
                }
            }
            Err(failure) => {
                tracing::warn!(url = %self.url, error = %failure, "fetching the JWKS failed");
                let failure = Arc::new(failure);
                state.last_error = Some(failure.clone());
                self.fall_back_to_stale(&state, &failure, now, kid, alg)
            }
        }
    }

    /// After a failed fetch: keys not too stale still verify, else the set is unavailable.
    fn fall_back_to_stale(
        &self,
        state: &State,
        failure: &Arc<JwksFetchError>,
        now: Instant,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Result<JwksKey, AuthError> {
        if state.is_usable_stale(now, &self.policy)
            && let Lookup::Found(key) = state.find(kid, alg)
        {
            return Ok(key);
        }
        Err(AuthError::KeyUnavailable(failure.clone()))
    }

    async fn fetch(&self) -> Result<Vec<JwksKey>, JwksFetchError> {
        let url = || self.url.clone();
        let request_error = |e: reqwest::Error| JwksFetchError::Request {
            url: url(),
            source: e.without_url(),
        };
        let mut response = self
            .client
            .get(&self.url)
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(request_error)?;
        let status = response.status();
        if !status.is_success() {
            return Err(JwksFetchError::Status { url: url(), status });
        }
        if response
            .content_length()
            .is_some_and(|n| n > MAX_JWKS_BYTES as u64)
        {
            return Err(JwksFetchError::TooLarge { url: url() });
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(request_error)? {
            if body.len() + chunk.len() > MAX_JWKS_BYTES {
                return Err(JwksFetchError::TooLarge { url: url() });
            }
            body.extend_from_slice(&chunk);
        }
        let keys = parse_jwks(&body)
            .map_err(|source| JwksFetchError::NotAKeySet { url: url(), source })?;
        if keys.is_empty() {
            tracing::warn!(url = %self.url, "the JWKS holds no RS256 or ES256 signing keys");
        }
        Ok(keys)
    }
}

#[derive(Deserialize)]
struct RawJwkSet {
    keys: Vec<Value>,
}

/// Parses key by key so one exotic entry (an encryption key, an unknown kty) does not
/// make the whole set unusable.
pub(super) fn parse_jwks(body: &[u8]) -> Result<Vec<JwksKey>, serde_json::Error> {
    let set: RawJwkSet = serde_json::from_slice(body)?;
    let mut keys = Vec::new();
    for raw in set.keys {
        let jwk: Jwk = match serde_json::from_value(raw) {
            Ok(jwk) => jwk,
            Err(e) => {
                tracing::debug!(error = %e, "skipping an unsupported JWK");
                continue;
            }
        };
        match usable_key(&jwk) {
            Ok(key) => keys.push(key),
            Err(why) => {
                tracing::debug!(kid = ?jwk.common.key_id, why, "skipping a JWK");
            }
        }
    }
    Ok(keys)
}

/// Pins the algorithm from the key type: RSA → RS256, EC P-256 → ES256, nothing else.
fn usable_key(jwk: &Jwk) -> Result<JwksKey, &'static str> {
    let alg = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Algorithm::RS256,
        AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P256 => Algorithm::ES256,
        AlgorithmParameters::OctetKey(_) => {
            return Err("symmetric keys are never taken from a JWKS");
        }
        _ => return Err("only RSA and EC P-256 keys are supported"),
    };
    if matches!(&jwk.common.public_key_use, Some(u) if *u != PublicKeyUse::Signature) {
        return Err("not a signature key");
    }
    let declared_ok = match jwk.common.key_algorithm {
        None => true,
        Some(KeyAlgorithm::RS256) => alg == Algorithm::RS256,
        Some(KeyAlgorithm::ES256) => alg == Algorithm::ES256,
        Some(_) => false,
    };
    if !declared_ok {
        return Err("declares an algorithm other than RS256/ES256");
    }
    let key = DecodingKey::from_jwk(jwk).map_err(|_| "malformed key material")?;
    if alg == Algorithm::ES256 && key.as_bytes().len() != 65 {
        return Err("EC coordinates are not 32 bytes each");
    }
    Ok(JwksKey {
        kid: jwk.common.key_id.clone(),
        alg,
        key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_skips_unusable_keys() {
        let body = serde_json::json!({"keys": [
            {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},
            {"kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo", "kid": "ed"},
            {"kty": "RSA", "n": "AQAB", "e": "AQAB", "kid": "enc", "use": "enc"},
            {"kty": "RSA", "n": "AQAB", "e": "AQAB", "kid": "ps", "alg": "PS256"},
            {"kty": "weird", "kid": "w"},
            {"kty": "RSA", "n": "AQAB", "e": "AQAB", "kid": "good", "alg": "RS256", "use": "sig"}
        ]});
        let keys = parse_jwks(body.to_string().as_bytes()).unwrap();
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].kid.as_deref(), Some("good"));
        assert_eq!(keys[0].alg, Algorithm::RS256);
        assert!(parse_jwks(b"[]").is_err());
    }

    #[test]
    fn rejects_non_http_urls() {
        assert!(JwksCache::new("file:///etc/passwd", JwksPolicy::default()).is_err());
        assert!(JwksCache::new("not a url", JwksPolicy::default()).is_err());
        assert!(JwksCache::new("https://idp.example/jwks", JwksPolicy::default()).is_ok());
    }
}
