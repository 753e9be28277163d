//! JWT verification, namespace authorization and token issuing (docs/spec.md §6).
//!
//! The algorithm is always taken from the configured key (HS256 secret, RSA → RS256,
//! EC P-256 → ES256, or per JWK); the token header's `alg` is only compared against it,
//! which rules out `alg=none` and algorithm-confusion tokens.

mod jwks;
mod signing_key;
mod trigger_token;

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error_text::BoxError;
use crate::model::namespace_for_sub;

pub use jwks::{JwksFetchError, JwksPolicy};
pub use signing_key::{SIGNING_KEY_FILE, load_or_create_signing_key, load_signing_key};
pub use trigger_token::{TRIGGER_TOKEN_HEADER, TriggerKey, TriggerKeyError};

/// Clock skew accepted on `exp` and `nbf` unless configured otherwise.
pub const DEFAULT_LEEWAY_SEC: u64 = 30;

/// Longer tokens are rejected before any parsing (cheap guard against huge headers).
const MAX_TOKEN_LEN: usize = 16 * 1024;

/// How often the insecure mode repeats its warning while tokens keep coming.
const INSECURE_WARN_EVERY: Duration = Duration::from_secs(60);

/// Where verification keys come from.
#[derive(Clone)]
pub enum KeySource {
    /// A shared secret; accepts HS256 only.
    Hs256Secret(Vec<u8>),
    /// A PEM public key: RSA → RS256 only, EC P-256 → ES256 only (detected from the PEM).
    PublicKeyPem(Vec<u8>),
    /// A JWKS URL, cached by `kid`; RSA keys → RS256, EC P-256 keys → ES256, never HS.
    JwksUrl(String),
    /// Decodes without checking the signature (for clouds that publish no keys).
    /// `exp`, `nbf`, `sub`, issuer and audience are still checked.
    InsecureSkipVerify,
}

// Hand-written so that logging a config never prints the HMAC secret.
impl fmt::Debug for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeySource::Hs256Secret(secret) => {
                write!(f, "Hs256Secret(<{} bytes redacted>)", secret.len())
            }
            KeySource::PublicKeyPem(pem) => write!(f, "PublicKeyPem(<{} bytes>)", pem.len()),
            KeySource::JwksUrl(url) => f.debug_tuple("JwksUrl").field(url).finish(),
            KeySource::InsecureSkipVerify => f.write_str("InsecureSkipVerify"),
        }
    }
}

#[derive(Clone, Debug)]
pub struct AuthConfig {
    pub key: KeySource,
    /// A verified token whose `sub` is listed acts on any namespace.
    pub admin_subjects: Vec<String>,
    /// Required and compared with `iss` when set.
    pub issuer: Option<String>,
    /// Required and compared with `aud` when set; `aud` is ignored when unset.
    pub audience: Option<String>,
    pub leeway_sec: u64,
}

impl AuthConfig {
    /// No admins, no issuer/audience check, the default leeway.
    pub fn new(key: KeySource) -> Self {
        AuthConfig {
            key,
            admin_subjects: Vec::new(),
            issuer: None,
            audience: None,
            leeway_sec: DEFAULT_LEEWAY_SEC,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("missing bearer token: send Authorization: Bearer <jwt>")]
    MissingToken,
    #[error("invalid token: {0}")]
    InvalidToken(String),
    #[error("token may not act on namespace {namespace} (your namespace is {own_namespace})")]
    Forbidden {
        namespace: String,
        own_namespace: String,
    },
    #[error("only admin tokens may read {0} (sless token --admin)")]
    AdminOnly(&'static str),
    /// Shared: one failed fetch answers every request until the next attempt.
    #[error("the signing key set could not be fetched, try again later: {0}")]
    KeyUnavailable(#[source] Arc<JwksFetchError>),
    #[error("auth configuration: {0}")]
    Config(String),
    /// A part of the set-up failed (the JWKS client, signing a token): `what` it was.
    #[error("auth configuration: {what}: {source}")]
    Setup {
        what: String,
        #[source]
        source: BoxError,
    },
}

impl AuthError {
    /// The HTTP status this error maps to.
    pub fn status(&self) -> u16 {
        match self {
            AuthError::MissingToken | AuthError::InvalidToken(_) => 401,
            AuthError::Forbidden { .. } | AuthError::AdminOnly(_) => 403,
            AuthError::KeyUnavailable(_) => 503,
            AuthError::Config(_) | AuthError::Setup { .. } => 500,
        }
    }

    fn setup(what: impl Into<String>, source: impl Into<BoxError>) -> Self {
        AuthError::Setup {
            what: what.into(),
            source: source.into(),
        }
    }
}

fn invalid(reason: impl Into<String>) -> AuthError {
    AuthError::InvalidToken(reason.into())
}

/// A verified caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    pub sub: String,
    /// `namespace_for_sub(sub)`.
    pub namespace: String,
    pub admin: bool,
}

impl Principal {
    /// A caller may act on its own namespace; an admin on any.
    pub fn authorize(&self, namespace: &str) -> Result<(), AuthError> {
        if self.admin || self.namespace == namespace {
            Ok(())
        } else {
            Err(AuthError::Forbidden {
                namespace: namespace.to_string(),
                own_namespace: self.namespace.clone(),
            })
        }
    }

    /// What spans every tenant (metrics) is for admins only.
    pub fn require_admin(&self, what: &'static str) -> Result<(), AuthError> {
        if self.admin {
            Ok(())
        } else {
            Err(AuthError::AdminOnly(what))
        }
    }
}

enum Verifier {
    Static { key: DecodingKey, alg: Algorithm },
    // Boxed: the cache is much larger than the other variants.
    Jwks(Box<jwks::JwksCache>),
    Insecure { last_warn: Mutex<Option<Instant>> },
}

/// Verifies tokens; share it in an `Arc`.
pub struct Authenticator {
    verifier: Verifier,
    admin_subjects: Vec<String>,
    issuer: Option<String>,
    audience: Option<String>,
    leeway_sec: u64,
}

impl fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mode = match &self.verifier {
            Verifier::Static { alg, .. } => format!("{alg:?}"),
            Verifier::Jwks(cache) => format!("JWKS {}", cache.url()),
            Verifier::Insecure { .. } => "INSECURE (no signature check)".into(),
        };
        f.debug_struct("Authenticator")
            .field("mode", &mode)
            .field("admin_subjects", &self.admin_subjects)
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .field("leeway_sec", &self.leeway_sec)
            .finish()
    }
}

impl Authenticator {
    /// Checks the configuration and parses keys up front, so a bad PEM fails at start.
    pub fn new(config: AuthConfig) -> Result<Self, AuthError> {
        let verifier = match &config.key {
            KeySource::Hs256Secret(secret) => {
                if secret.is_empty() {
                    return Err(AuthError::Config("the HS256 secret is empty".into()));
                }
                Verifier::Static {
                    key: DecodingKey::from_secret(secret),
                    alg: Algorithm::HS256,
                }
            }
            KeySource::PublicKeyPem(pem) => {
                let (key, alg) = parse_public_pem(pem)?;
                Verifier::Static { key, alg }
            }
            KeySource::JwksUrl(url) => {
                Verifier::Jwks(Box::new(jwks::JwksCache::new(url, JwksPolicy::default())?))
            }
            KeySource::InsecureSkipVerify => {
                tracing::warn!(
                    "JWT SIGNATURE VERIFICATION IS DISABLED: anyone can forge a token for any \
                     user. Configure an HS256 secret, a PEM public key or a JWKS URL instead."
                );
                Verifier::Insecure {
                    last_warn: Mutex::new(Some(Instant::now())),
                }
            }
        };
        for (what, value) in [("issuer", &config.issuer), ("audience", &config.audience)] {
            if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
                return Err(AuthError::Config(format!(
                    "the expected {what} is empty; leave it unset to skip the check"
                )));
            }
        }
        Ok(Authenticator {
            verifier,
            admin_subjects: config
                .admin_subjects
                .into_iter()
                .filter(|s| !s.is_empty())
                .collect(),
            issuer: config.issuer,
            audience: config.audience,
            leeway_sec: config.leeway_sec,
        })
    }

    /// Replaces the JWKS cache timings (tests, unusual identity providers).
    /// Has no effect unless the key source is a JWKS URL.
    pub fn with_jwks_policy(mut self, policy: JwksPolicy) -> Result<Self, AuthError> {
        if let Verifier::Jwks(cache) = &self.verifier {
            self.verifier = Verifier::Jwks(Box::new(jwks::JwksCache::new(cache.url(), policy)?));
        }
        Ok(self)
    }

    /// Parses an Authorization header value: `Bearer <jwt>` (scheme case-insensitive).
    pub fn bearer(header_value: Option<&str>) -> Result<&str, AuthError> {
        let value = header_value.map(str::trim).unwrap_or_default();
        let (scheme, token) = value
            .split_once(char::is_whitespace)
            .ok_or(AuthError::MissingToken)?;
        let token = token.trim();
        if !scheme.eq_ignore_ascii_case("bearer")
            || token.is_empty()
            || token.contains(char::is_whitespace)
        {
            return Err(AuthError::MissingToken);
        }
        Ok(token)
    }

    /// Verifies the token and returns who it speaks for.
    pub async fn authenticate(&self, token: &str) -> Result<Principal, AuthError> {
        let header = RawHeader::parse(token)?;
        let claims = match &self.verifier {
            Verifier::Static { key, alg } => {
                header.expect_alg(*alg)?;
                verify(token, key, *alg)?
            }
            Verifier::Jwks(cache) => {
                let alg = match header.alg.as_str() {
                    "RS256" => Algorithm::RS256,
                    "ES256" => Algorithm::ES256,
                    // Checked before the key lookup so junk never triggers a JWKS refresh.
                    other => {
                        return Err(invalid(format!(
                            "algorithm {} not allowed (expected RS256 or ES256 from the key set)",
                            printable(other)
                        )));
                    }
                };
                let entry = cache.key_for(header.kid.as_deref(), alg).await?;
                header.expect_alg(entry.alg)?;
                verify(token, &entry.key, entry.alg)?
            }
            Verifier::Insecure { last_warn } => {
                warn_insecure_use(last_warn);
                if header.alg == "none" {
                    return Err(invalid(
                        "algorithm none not allowed (tokens must be signed)",
                    ));
                }
                jsonwebtoken::dangerous::insecure_decode::<Claims>(token)
                    .map_err(map_jwt_error)?
                    .claims
            }
        };
        let sub = self.check_claims(&claims, now_secs())?;
        Ok(Principal {
            namespace: namespace_for_sub(&sub),
            admin: self.admin_subjects.contains(&sub),
            sub,
        })
    }

    /// The claim checks shared by every mode: exp (required), nbf, iss, aud, sub.
    fn check_claims(&self, claims: &Claims, now: f64) -> Result<String, AuthError> {
        let leeway = self.leeway_sec as f64;
        let exp = numeric_date(&claims.exp, "exp")?
            .ok_or_else(|| invalid("missing exp claim (tokens must expire)"))?;
        if exp + leeway < now {
            return Err(invalid(format!("token expired at {}", rfc3339(exp))));
        }
        if let Some(nbf) = numeric_date(&claims.nbf, "nbf")?
            && nbf > now + leeway
        {
            return Err(invalid(format!(
                "token not yet valid (nbf is {})",
                rfc3339(nbf)
            )));
        }
        if let Some(expected) = &self.issuer {
            match &claims.iss {
                Some(Value::String(iss)) if iss == expected => {}
                Some(_) => {
                    return Err(invalid(format!(
                        "issuer does not match (expected {expected})"
                    )));
                }
                None => return Err(invalid(format!("missing iss claim (expected {expected})"))),
            }
        }
        if let Some(expected) = &self.audience {
            let ok = match &claims.aud {
                Some(Value::String(aud)) => aud == expected,
                Some(Value::Array(auds)) => auds.iter().any(|a| a.as_str() == Some(expected)),
                _ => false,
            };
            if !ok {
                return Err(invalid(format!("audience does not include {expected}")));
            }
        }
        match &claims.sub {
            Some(Value::String(sub)) if !sub.is_empty() => Ok(sub.clone()),
            Some(Value::String(_)) => Err(invalid("sub claim is empty")),
            Some(_) => Err(invalid("sub claim is not a string")),
            None => Err(invalid("missing sub claim")),
        }
    }
}

/// Detects the key family from the PEM and pins the one algorithm it may verify.
fn parse_public_pem(pem: &[u8]) -> Result<(DecodingKey, Algorithm), AuthError> {
    let text = String::from_utf8_lossy(pem);
    if text.contains("PRIVATE KEY-----") {
        return Err(AuthError::Config(
            "the PEM holds a private key; configure its public half (openssl pkey -pubout)".into(),
        ));
    }
    if !text.contains("-----BEGIN PUBLIC KEY-----")
        && !text.contains("-----BEGIN RSA PUBLIC KEY-----")
    {
        return Err(AuthError::Config(
            "expected a PEM public key (-----BEGIN PUBLIC KEY-----)".into(),
        ));
    }
    if let Ok(key) = DecodingKey::from_ec_pem(pem) {
        // An uncompressed P-256 point is 0x04 || X(32) || Y(32); other curves are longer.
        let point = key.as_bytes();
        if point.len() == 65 && point[0] == 0x04 {
            return Ok((key, Algorithm::ES256));
        }
        return Err(AuthError::Config(
            "the EC public key is not on curve P-256; only ES256 is supported".into(),
        ));
    }
    if let Ok(key) = DecodingKey::from_rsa_pem(pem) {
        return Ok((key, Algorithm::RS256));
    }
    Err(AuthError::Config(
        "the PEM is neither an RSA nor an EC P-256 public key".into(),
    ))
}

/// Signature check only: the claims are checked by `check_claims` for every mode alike.
fn verify(token: &str, key: &DecodingKey, alg: Algorithm) -> Result<Claims, AuthError> {
    let mut validation = Validation::new(alg);
    validation.required_spec_claims.clear();
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    jsonwebtoken::decode::<Claims>(token, key, &validation)
        .map(|data| data.claims)
        .map_err(map_jwt_error)
}

fn map_jwt_error(e: jsonwebtoken::errors::Error) -> AuthError {
    use jsonwebtoken::errors::ErrorKind;
    match e.kind() {
        ErrorKind::InvalidSignature => invalid("bad signature"),
        ErrorKind::InvalidAlgorithm => invalid("algorithm not allowed"),
        ErrorKind::InvalidEcdsaKey | ErrorKind::InvalidRsaKey(_) | ErrorKind::InvalidKeyFormat => {
            invalid("the token cannot be verified with the configured key")
        }
        ErrorKind::Json(err) => invalid(format!("malformed: {err}")),
        _ => invalid("malformed: not a valid JWT"),
    }
}

/// The claims sless reads; everything else in the token is ignored.
#[derive(Deserialize)]
struct Claims {
    #[serde(default)]
    sub: Option<Value>,
    #[serde(default)]
    exp: Option<Value>,
    #[serde(default)]
    nbf: Option<Value>,
    #[serde(default)]
    iss: Option<Value>,
    #[serde(default)]
    aud: Option<Value>,
}

/// A NumericDate (seconds since the epoch, possibly fractional).
fn numeric_date(value: &Option<Value>, claim: &str) -> Result<Option<f64>, AuthError> {
    match value {
        None => Ok(None),
        Some(v) => match v.as_f64() {
            Some(n) if n.is_finite() => Ok(Some(n)),
            _ => Err(invalid(format!("{claim} claim is not a number"))),
        },
    }
}

fn rfc3339(secs: f64) -> String {
    chrono::DateTime::from_timestamp(secs as i64, 0)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| format!("{secs}"))
}

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn warn_insecure_use(last_warn: &Mutex<Option<Instant>>) {
    let mut last = last_warn
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if last.is_none_or(|t| t.elapsed() >= INSECURE_WARN_EVERY) {
        *last = Some(Instant::now());
        tracing::warn!("accepting JWTs WITHOUT verifying their signatures (insecure auth mode)");
    }
}

/// Token header fields read before verification, to pick the key and explain rejections.
struct RawHeader {
    alg: String,
    kid: Option<String>,
}

impl RawHeader {
    fn parse(token: &str) -> Result<Self, AuthError> {
        if token.len() > MAX_TOKEN_LEN {
            return Err(invalid(format!(
                "malformed: longer than {MAX_TOKEN_LEN} bytes"
            )));
        }
        let mut parts = token.split('.');
        let (Some(header), Some(_), Some(_), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(invalid("malformed: expected header.payload.signature"));
        };
        // Decoded before the library sees it, so that unknown algorithms such as `none`
        // get a precise message.
        let bytes = URL_SAFE_NO_PAD
            .decode(header)
            .map_err(|_| invalid("malformed: header is not base64url"))?;
        let fields: serde_json::Map<String, Value> = serde_json::from_slice(&bytes)
            .map_err(|_| invalid("malformed: header is not a JSON object"))?;
        let alg = match fields.get("alg") {
            Some(Value::String(alg)) => alg.clone(),
            _ => return Err(invalid("malformed: header has no alg")),
        };
        let kid = match fields.get("kid") {
            None | Some(Value::Null) => None,
            Some(Value::String(kid)) => Some(kid.clone()),
            Some(_) => return Err(invalid("malformed: kid is not a string")),
        };
        // RFC 7515 §4.1.11: extensions we do not understand must not be ignored.
        if fields.contains_key("crit") {
            return Err(invalid("unsupported critical header extensions (crit)"));
        }
        Ok(RawHeader { alg, kid })
    }

    fn expect_alg(&self, expected: Algorithm) -> Result<(), AuthError> {
        if self.alg.parse::<Algorithm>().ok() == Some(expected) {
            Ok(())
        } else {
            Err(invalid(format!(
                "algorithm {} not allowed (expected {expected:?})",
                printable(&self.alg),
            )))
        }
    }
}

/// Token-supplied text echoed in an error: bounded and escaped.
fn printable(s: &str) -> String {
    let short: String = s.chars().take(40).collect();
    let quoted = format!("{short:?}");
    // Plain names read better unquoted: `algorithm none not allowed`.
    if short
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && !short.is_empty()
    {
        short
    } else {
        quoted
    }
}

#[derive(Serialize)]
struct IssuedClaims<'a> {
    sub: &'a str,
    iat: u64,
    nbf: u64,
    exp: u64,
}

/// For `sless token` and tests: an HS256 token with sub, iat, nbf=iat, exp = now + ttl.
pub fn issue_hs256(secret: &[u8], sub: &str, ttl_sec: u64) -> Result<String, AuthError> {
    if secret.is_empty() {
        return Err(AuthError::Config("the HS256 secret is empty".into()));
    }
    if sub.is_empty() {
        return Err(AuthError::Config("a token needs a non-empty sub".into()));
    }
    let now = jsonwebtoken::get_current_timestamp();
    let claims = IssuedClaims {
        sub,
        iat: now,
        nbf: now,
        exp: now.saturating_add(ttl_sec),
    };
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(secret),
    )
    .map_err(|e| AuthError::setup("signing the token failed", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hs(secret: &[u8]) -> Authenticator {
        Authenticator::new(AuthConfig::new(KeySource::Hs256Secret(secret.to_vec()))).unwrap()
    }

    fn claims(v: Value) -> Claims {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn bearer_parsing() {
        assert_eq!(Authenticator::bearer(Some("Bearer abc")).unwrap(), "abc");
        assert_eq!(Authenticator::bearer(Some("bEaReR   abc ")).unwrap(), "abc");
        assert_eq!(Authenticator::bearer(Some("Bearer\tabc")).unwrap(), "abc");
        for bad in [
            None,
            Some(""),
            Some("Bearer"),
            Some("Bearer "),
            Some("Basic abc"),
        ] {
            assert!(matches!(
                Authenticator::bearer(bad),
                Err(AuthError::MissingToken)
            ));
        }
        assert!(Authenticator::bearer(Some("Bearer a b")).is_err());
    }

    #[test]
    fn statuses() {
        assert_eq!(AuthError::MissingToken.status(), 401);
        assert_eq!(invalid("x").status(), 401);
        let forbidden = AuthError::Forbidden {
            namespace: "a".into(),
            own_namespace: "b".into(),
        };
        assert_eq!(forbidden.status(), 403);
        assert_eq!(
            forbidden.to_string(),
            "token may not act on namespace a (your namespace is b)"
        );
        let unavailable = AuthError::KeyUnavailable(Arc::new(JwksFetchError::TooLarge {
            url: "https://idp.example/jwks".into(),
        }));
        assert_eq!(unavailable.status(), 503);
        assert_eq!(AuthError::Config("x".into()).status(), 500);
    }

    #[test]
    fn claim_checks_apply_leeway() {
        let auth = hs(b"secret");
        let now = 1_000_000.0;
        let ok = claims(serde_json::json!({"sub": "a", "exp": now - 10.0}));
        assert_eq!(auth.check_claims(&ok, now).unwrap(), "a");
        let expired = claims(serde_json::json!({"sub": "a", "exp": now - 31.0}));
        let err = auth.check_claims(&expired, now).unwrap_err().to_string();
        assert!(err.contains("expired"), "{err}");
        let early = claims(serde_json::json!({"sub": "a", "exp": now + 99.0, "nbf": now + 31.0}));
        assert!(auth.check_claims(&early, now).is_err());
        let no_exp = claims(serde_json::json!({"sub": "a"}));
        assert!(auth.check_claims(&no_exp, now).is_err());
        let text_exp = claims(serde_json::json!({"sub": "a", "exp": "soon"}));
        assert!(auth.check_claims(&text_exp, now).is_err());
    }

    #[test]
    fn issuer_and_audience_checked_only_when_set() {
        let now = 1_000_000.0;
        let token = claims(serde_json::json!({
            "sub": "a", "exp": now + 60.0, "iss": "https://idp", "aud": ["x", "sless"]
        }));
        assert!(hs(b"k").check_claims(&token, now).is_ok());

        let mut config = AuthConfig::new(KeySource::Hs256Secret(b"k".to_vec()));
        config.issuer = Some("https://idp".into());
        config.audience = Some("sless".into());
        let strict = Authenticator::new(config.clone()).unwrap();
        assert!(strict.check_claims(&token, now).is_ok());

        config.audience = Some("other".into());
        let wrong_aud = Authenticator::new(config.clone()).unwrap();
        assert!(wrong_aud.check_claims(&token, now).is_err());

        config.audience = None;
        config.issuer = Some("https://elsewhere".into());
        let wrong_iss = Authenticator::new(config).unwrap();
        assert!(wrong_iss.check_claims(&token, now).is_err());
    }

    #[test]
    fn debug_redacts_the_secret() {
        let shown = format!("{:?}", KeySource::Hs256Secret(b"hunter2".to_vec()));
        assert!(!shown.contains("104"), "{shown}"); // no raw bytes
        assert!(shown.contains("redacted"));
    }

    #[test]
    fn printable_bounds_and_escapes() {
        assert_eq!(printable("none"), "none");
        assert_eq!(printable("a\"b"), "\"a\\\"b\"");
        assert_eq!(printable(&"x".repeat(100)).len(), 40);
    }
}
