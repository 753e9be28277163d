//! The JWT verification matrix of docs/spec.md §6, against real keys and a real JWKS server.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use sless_core::auth::{
    AuthConfig, AuthError, Authenticator, JwksPolicy, KeySource, Principal, issue_hs256,
    load_or_create_signing_key,
};
use sless_core::model::namespace_for_sub;

const SECRET: &[u8] = b"test-secret-test-secret-test-sec";
const RSA_PRIVATE: &[u8] = include_bytes!("fixtures/rsa_private.pem");
const RSA_PUBLIC: &[u8] = include_bytes!("fixtures/rsa_public.pem");
const RSA_JWK: &str = include_str!("fixtures/rsa_public.jwk.json");
const EC_PRIVATE: &[u8] = include_bytes!("fixtures/ec_private.pem");
const EC_PUBLIC: &[u8] = include_bytes!("fixtures/ec_public.pem");
const EC_JWK: &str = include_str!("fixtures/ec_public.jwk.json");
const EC384_PUBLIC: &[u8] = include_bytes!("fixtures/ec384_public.pem");

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

fn claims_for(sub: &str) -> Value {
    json!({"sub": sub, "iat": now(), "exp": now() + 600})
}

fn sign(alg: Algorithm, key: &EncodingKey, kid: Option<&str>, claims: &Value) -> String {
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_string);
    jsonwebtoken::encode(&header, claims, key).expect("sign test token")
}

fn hs256(secret: &[u8], claims: &Value) -> String {
    sign(
        Algorithm::HS256,
        &EncodingKey::from_secret(secret),
        None,
        claims,
    )
}

fn rs256(kid: Option<&str>, claims: &Value) -> String {
    let key = EncodingKey::from_rsa_pem(RSA_PRIVATE).expect("rsa fixture");
    sign(Algorithm::RS256, &key, kid, claims)
}

fn es256(kid: Option<&str>, claims: &Value) -> String {
    let key = EncodingKey::from_ec_pem(EC_PRIVATE).expect("ec fixture");
    sign(Algorithm::ES256, &key, kid, claims)
}

fn b64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, b)| acc | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

/// `{"alg":"none"}` + claims + empty signature, as an attacker would send it.
fn unsigned_token(claims: &Value) -> String {
    let header = b64url(br#"{"alg":"none","typ":"JWT"}"#);
    let payload = b64url(claims.to_string().as_bytes());
    format!("{header}.{payload}.")
}

fn authenticator(key: KeySource) -> Authenticator {
    Authenticator::new(AuthConfig::new(key)).expect("valid auth config")
}

fn invalid_reason(result: Result<Principal, AuthError>) -> String {
    match result {
        Err(e @ AuthError::InvalidToken(_)) => {
            assert_eq!(e.status(), 401);
            e.to_string()
        }
        other => panic!("expected InvalidToken, got {other:?}"),
    }
}

#[tokio::test]
async fn valid_hs256_token_maps_sub_to_its_namespace() {
    let auth = authenticator(KeySource::Hs256Secret(SECRET.to_vec()));
    let principal = auth
        .authenticate(&hs256(SECRET, &claims_for("alice")))
        .await
        .unwrap();
    assert_eq!(
        principal,
        Principal {
            sub: "alice".into(),
            namespace: namespace_for_sub("alice"),
            admin: false,
        }
    );
    assert_eq!(principal.namespace, "sless-2bd806c97f0e00af");
}

#[tokio::test]
async fn issued_tokens_verify_and_extra_claims_are_tolerated() {
    let auth = authenticator(KeySource::Hs256Secret(SECRET.to_vec()));
    let issued = issue_hs256(SECRET, "bob", 60).unwrap();
    assert_eq!(auth.authenticate(&issued).await.unwrap().sub, "bob");

    let mut claims = claims_for("carol");
    claims["email"] = json!("carol@example.com");
    claims["groups"] = json!(["a", "b"]);
    claims["aud"] = json!("some-cloud");
    assert_eq!(
        auth.authenticate(&hs256(SECRET, &claims))
            .await
            .unwrap()
            .sub,
        "carol"
    );

    assert!(matches!(
        issue_hs256(b"", "bob", 60),
        Err(AuthError::Config(_))
    ));
    assert!(matches!(
        issue_hs256(SECRET, "", 60),
        Err(AuthError::Config(_))
    ));
}

#[test]
fn missing_or_non_bearer_header_is_missing_token() {
    for header in [
        None,
        Some(""),
        Some("Basic dXNlcjpwYXNz"),
        Some("Bearer "),
        Some("jwt"),
    ] {
        let err = Authenticator::bearer(header).unwrap_err();
        assert!(matches!(err, AuthError::MissingToken), "{header:?}");
        assert_eq!(err.status(), 401);
        assert!(err.to_string().contains("Authorization: Bearer"));
    }
    assert_eq!(
        Authenticator::bearer(Some("bearer a.b.c")).unwrap(),
        "a.b.c"
    );
}

#[tokio::test]
async fn alg_none_is_rejected_in_every_mode() {
    let token = unsigned_token(&claims_for("mallory"));
    for key in [
        KeySource::Hs256Secret(SECRET.to_vec()),
        KeySource::PublicKeyPem(RSA_PUBLIC.to_vec()),
        KeySource::PublicKeyPem(EC_PUBLIC.to_vec()),
        KeySource::InsecureSkipVerify,
        // Never contacted: the algorithm is refused before any key lookup.
        KeySource::JwksUrl("http://127.0.0.1:9/jwks".into()),
    ] {
        let reason = invalid_reason(authenticator(key).authenticate(&token).await);
        assert!(reason.contains("algorithm none not allowed"), "{reason}");
    }
}

#[tokio::test]
async fn wrong_secret_is_a_bad_signature() {
    let auth = authenticator(KeySource::Hs256Secret(SECRET.to_vec()));
    let token = hs256(b"another-secret", &claims_for("alice"));
    let reason = invalid_reason(auth.authenticate(&token).await);
    assert!(reason.contains("bad signature"), "{reason}");
}

#[tokio::test]
async fn garbage_tokens_are_malformed() {
    let auth = authenticator(KeySource::Hs256Secret(SECRET.to_vec()));
    for token in ["", "abc", "a.b", "a.b.c.d", "!!!.e30.", &"a".repeat(20_000)] {
        let reason = invalid_reason(auth.authenticate(token).await);
        assert!(reason.contains("malformed"), "{token:.20}: {reason}");
    }
}

#[tokio::test]
async fn rs256_public_key_pins_rs256() {
    let auth = authenticator(KeySource::PublicKeyPem(RSA_PUBLIC.to_vec()));
    let ok = auth
        .authenticate(&rs256(None, &claims_for("alice")))
        .await
        .unwrap();
    assert_eq!(ok.namespace, namespace_for_sub("alice"));

    // Algorithm confusion: HMAC keyed with the public PEM must not pass as RS256.
    let confused = hs256(RSA_PUBLIC, &claims_for("mallory"));
    let reason = invalid_reason(auth.authenticate(&confused).await);
    assert!(
        reason.contains("algorithm HS256 not allowed (expected RS256)"),
        "{reason}"
    );

    // Same family, other hash: still pinned to RS256.
    let key = EncodingKey::from_rsa_pem(RSA_PRIVATE).unwrap();
    let rs512 = sign(Algorithm::RS512, &key, None, &claims_for("alice"));
    assert!(invalid_reason(auth.authenticate(&rs512).await).contains("RS512"));

    let es = es256(None, &claims_for("alice"));
    assert!(invalid_reason(auth.authenticate(&es).await).contains("ES256 not allowed"));
}

#[tokio::test]
async fn es256_public_key_pins_es256() {
    let auth = authenticator(KeySource::PublicKeyPem(EC_PUBLIC.to_vec()));
    let ok = auth
        .authenticate(&es256(None, &claims_for("dave")))
        .await
        .unwrap();
    assert_eq!(ok.sub, "dave");

    let confused = hs256(EC_PUBLIC, &claims_for("mallory"));
    assert!(invalid_reason(auth.authenticate(&confused).await).contains("expected ES256"));
    let rs = rs256(None, &claims_for("alice"));
    assert!(invalid_reason(auth.authenticate(&rs).await).contains("expected ES256"));
}

#[test]
fn bad_key_configuration_fails_up_front() {
    let config_error = |key: KeySource| match Authenticator::new(AuthConfig::new(key)) {
        Err(e @ AuthError::Config(_)) => {
            assert_eq!(e.status(), 500);
            e.to_string()
        }
        other => panic!("expected a Config error, got {other:?}"),
    };
    config_error(KeySource::Hs256Secret(Vec::new()));
    config_error(KeySource::PublicKeyPem(b"not a pem".to_vec()));
    config_error(KeySource::PublicKeyPem(
        b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n".to_vec(),
    ));
    assert!(config_error(KeySource::PublicKeyPem(RSA_PRIVATE.to_vec())).contains("private"));
    assert!(config_error(KeySource::PublicKeyPem(EC384_PUBLIC.to_vec())).contains("P-256"));
    config_error(KeySource::JwksUrl("ftp://idp.example/jwks".into()));

    let mut config = AuthConfig::new(KeySource::Hs256Secret(SECRET.to_vec()));
    config.issuer = Some(String::new());
    assert!(matches!(
        Authenticator::new(config),
        Err(AuthError::Config(_))
    ));
}

#[tokio::test]
async fn expired_token_is_rejected_with_leeway() {
    let auth = authenticator(KeySource::Hs256Secret(SECRET.to_vec()));
    let expired = json!({"sub": "alice", "iat": now() - 600, "exp": now() - 120});
    let reason = invalid_reason(auth.authenticate(&hs256(SECRET, &expired)).await);
    assert!(reason.contains("expired"), "{reason}");

    // Within the default 30 s leeway.
    let just_expired = json!({"sub": "alice", "exp": now() - 5});
    assert!(
        auth.authenticate(&hs256(SECRET, &just_expired))
            .await
            .is_ok()
    );

    let no_exp = json!({"sub": "alice"});
    let reason = invalid_reason(auth.authenticate(&hs256(SECRET, &no_exp)).await);
    assert!(reason.contains("exp"), "{reason}");
}

#[tokio::test]
async fn future_nbf_is_rejected() {
    let auth = authenticator(KeySource::Hs256Secret(SECRET.to_vec()));
    let early = json!({"sub": "alice", "nbf": now() + 300, "exp": now() + 600});
    let reason = invalid_reason(auth.authenticate(&hs256(SECRET, &early)).await);
    assert!(reason.contains("not yet valid"), "{reason}");
}

#[tokio::test]
async fn sub_is_required_and_non_empty() {
    let auth = authenticator(KeySource::Hs256Secret(SECRET.to_vec()));
    for claims in [
        json!({"exp": now() + 600}),
        json!({"sub": "", "exp": now() + 600}),
        json!({"sub": 42, "exp": now() + 600}),
    ] {
        let reason = invalid_reason(auth.authenticate(&hs256(SECRET, &claims)).await);
        assert!(reason.contains("sub"), "{reason}");
    }
}

#[tokio::test]
async fn issuer_and_audience_are_checked_when_configured() {
    let mut config = AuthConfig::new(KeySource::Hs256Secret(SECRET.to_vec()));
    config.issuer = Some("https://idp.example".into());
    config.audience = Some("sless".into());
    let auth = Authenticator::new(config).unwrap();

    let mut good = claims_for("alice");
    good["iss"] = json!("https://idp.example");
    good["aud"] = json!(["other", "sless"]);
    assert!(auth.authenticate(&hs256(SECRET, &good)).await.is_ok());

    let mut wrong_iss = good.clone();
    wrong_iss["iss"] = json!("https://evil.example");
    assert!(invalid_reason(auth.authenticate(&hs256(SECRET, &wrong_iss)).await).contains("issuer"));

    let mut no_aud = good.clone();
    no_aud.as_object_mut().unwrap().remove("aud");
    assert!(invalid_reason(auth.authenticate(&hs256(SECRET, &no_aud)).await).contains("audience"));
}

#[tokio::test]
async fn authorize_own_namespace_or_admin() {
    let mut config = AuthConfig::new(KeySource::Hs256Secret(SECRET.to_vec()));
    config.admin_subjects = vec!["ops-robot".into()];
    let auth = Authenticator::new(config).unwrap();

    let alice = auth
        .authenticate(&hs256(SECRET, &claims_for("alice")))
        .await
        .unwrap();
    let bob_ns = namespace_for_sub("bob");
    assert!(alice.authorize(&namespace_for_sub("alice")).is_ok());
    let err = alice.authorize(&bob_ns).unwrap_err();
    assert!(matches!(&err, AuthError::Forbidden { namespace, .. } if *namespace == bob_ns));
    assert_eq!(err.status(), 403);
    let message = err.to_string();
    assert!(message.contains(&bob_ns), "{message}");
    assert!(message.contains(&alice.namespace), "{message}");
    assert!(!message.contains("alice"), "must not reveal sub: {message}");

    let admin = auth
        .authenticate(&hs256(SECRET, &claims_for("ops-robot")))
        .await
        .unwrap();
    assert!(admin.admin);
    assert!(admin.authorize(&bob_ns).is_ok());
    assert!(admin.authorize(&alice.namespace).is_ok());
}

#[tokio::test]
async fn insecure_mode_skips_the_signature_but_not_the_claims() {
    let auth = authenticator(KeySource::InsecureSkipVerify);
    let forged = hs256(b"whatever", &claims_for("alice"));
    assert_eq!(
        auth.authenticate(&forged).await.unwrap().namespace,
        namespace_for_sub("alice")
    );
    let rs = rs256(Some("unknown"), &claims_for("bob"));
    assert_eq!(auth.authenticate(&rs).await.unwrap().sub, "bob");

    let expired = json!({"sub": "alice", "exp": now() - 3600});
    let reason = invalid_reason(auth.authenticate(&hs256(b"whatever", &expired)).await);
    assert!(reason.contains("expired"), "{reason}");
    let no_sub = json!({"exp": now() + 60});
    assert!(invalid_reason(auth.authenticate(&hs256(b"x", &no_sub)).await).contains("sub"));
}

#[test]
fn signing_key_is_created_private_and_reused() {
    let dir = tempfile::tempdir().unwrap();
    let first = load_or_create_signing_key(dir.path()).unwrap();
    assert_eq!(first.len(), 32);
    let path = dir.path().join("jwt-hs256.key");
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.trim(), hex::encode(&first));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "mode {mode:o}");
    }
    let second = load_or_create_signing_key(dir.path()).unwrap();
    assert_eq!(first, second);
}

/// A JWKS endpoint whose document can be swapped and whose fetches are counted.
struct JwksServer {
    url: String,
    fetches: Arc<AtomicUsize>,
    document: Arc<Mutex<Value>>,
}

impl JwksServer {
    async fn start(document: Value) -> Self {
        let fetches = Arc::new(AtomicUsize::new(0));
        let document = Arc::new(Mutex::new(document));
        let (count, doc) = (fetches.clone(), document.clone());
        let app = axum::Router::new().route(
            "/.well-known/jwks.json",
            axum::routing::get(move || {
                let (count, doc) = (count.clone(), doc.clone());
                async move {
                    count.fetch_add(1, Ordering::SeqCst);
                    let body = doc.lock().unwrap().clone();
                    axum::Json(body)
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        JwksServer {
            url: format!("http://{addr}/.well-known/jwks.json"),
            fetches,
            document,
        }
    }

    fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }

    fn set(&self, document: Value) {
        *self.document.lock().unwrap() = document;
    }
}

fn jwk(fixture: &str, kid: &str) -> Value {
    let mut jwk: Value = serde_json::from_str(fixture).unwrap();
    jwk["kid"] = json!(kid);
    jwk
}

fn jwks_auth(url: &str, policy: JwksPolicy) -> Authenticator {
    authenticator(KeySource::JwksUrl(url.to_string()))
        .with_jwks_policy(policy)
        .unwrap()
}

#[tokio::test]
async fn jwks_verifies_by_kid_and_refreshes_once_on_unknown_kid() {
    let server = JwksServer::start(json!({"keys": [jwk(RSA_JWK, "rsa-1")]})).await;
    let interval = Duration::from_millis(300);
    let auth = jwks_auth(
        &server.url,
        JwksPolicy {
            min_refresh_interval: interval,
            ..JwksPolicy::default()
        },
    );

    let ok = auth
        .authenticate(&rs256(Some("rsa-1"), &claims_for("alice")))
        .await
        .unwrap();
    assert_eq!(ok.namespace, namespace_for_sub("alice"));
    assert_eq!(server.fetches(), 1);
    // Cached: no second fetch.
    auth.authenticate(&rs256(Some("rsa-1"), &claims_for("bob")))
        .await
        .unwrap();
    assert_eq!(server.fetches(), 1);

    tokio::time::sleep(interval + Duration::from_millis(50)).await;
    let unknown = rs256(Some("rsa-2"), &claims_for("alice"));
    let reason = invalid_reason(auth.authenticate(&unknown).await);
    assert!(reason.contains("unknown key id"), "{reason}");
    assert_eq!(server.fetches(), 2, "one refresh for the unknown kid");
    // Rate-limited: another unknown kid right away does not fetch again.
    invalid_reason(auth.authenticate(&unknown).await);
    assert_eq!(server.fetches(), 2);

    // Key rotation: the new kid appears and is picked up after the interval.
    server.set(json!({"keys": [jwk(RSA_JWK, "rsa-1"), jwk(RSA_JWK, "rsa-2")]}));
    tokio::time::sleep(interval + Duration::from_millis(50)).await;
    assert_eq!(auth.authenticate(&unknown).await.unwrap().sub, "alice");
    assert_eq!(server.fetches(), 3);
}

#[tokio::test]
async fn jwks_unknown_kid_within_the_default_interval_does_not_refetch() {
    let server = JwksServer::start(json!({"keys": [jwk(RSA_JWK, "rsa-1")]})).await;
    let auth = authenticator(KeySource::JwksUrl(server.url.clone()));
    for kid in ["a", "b", "c"] {
        invalid_reason(auth.authenticate(&rs256(Some(kid), &claims_for("x"))).await);
    }
    assert_eq!(server.fetches(), 1);
}

#[tokio::test]
async fn jwks_pins_algorithms_per_key_and_never_uses_hmac() {
    let server = JwksServer::start(json!({"keys": [
        jwk(RSA_JWK, "rsa"),
        jwk(EC_JWK, "ec"),
        {"kty": "oct", "kid": "hmac", "k": b64url(SECRET)},
    ]}))
    .await;
    let auth = authenticator(KeySource::JwksUrl(server.url.clone()));

    assert!(
        auth.authenticate(&es256(Some("ec"), &claims_for("erin")))
            .await
            .is_ok()
    );
    // The RSA key's PEM as an HMAC secret, with the RSA kid.
    let confused = sign(
        Algorithm::HS256,
        &EncodingKey::from_secret(RSA_PUBLIC),
        Some("rsa"),
        &claims_for("mallory"),
    );
    assert!(invalid_reason(auth.authenticate(&confused).await).contains("HS256 not allowed"));
    // A symmetric key published in the set is ignored.
    let hmac = sign(
        Algorithm::HS256,
        &EncodingKey::from_secret(SECRET),
        Some("hmac"),
        &claims_for("mallory"),
    );
    invalid_reason(auth.authenticate(&hmac).await);
    // An ES256 token under the RSA kid.
    let mismatched = es256(Some("rsa"), &claims_for("mallory"));
    assert!(invalid_reason(auth.authenticate(&mismatched).await).contains("expected RS256"));
    assert_eq!(server.fetches(), 1);
}

#[tokio::test]
async fn jwks_server_down_is_key_unavailable() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let auth = authenticator(KeySource::JwksUrl(format!(
        "http://127.0.0.1:{port}/jwks.json"
    )));
    let err = auth
        .authenticate(&rs256(Some("rsa-1"), &claims_for("alice")))
        .await
        .unwrap_err();
    assert!(matches!(err, AuthError::KeyUnavailable(_)), "{err:?}");
    assert_eq!(err.status(), 503);
    assert!(err.to_string().contains("could not be fetched"), "{err}");
}

#[tokio::test]
async fn jwks_bad_document_is_key_unavailable_but_stale_keys_survive() {
    let server = JwksServer::start(json!({"keys": [jwk(RSA_JWK, "rsa-1")]})).await;
    let auth = jwks_auth(
        &server.url,
        JwksPolicy {
            max_age: Duration::from_millis(200),
            retry_after_failure: Duration::ZERO,
            ..JwksPolicy::default()
        },
    );
    let token = rs256(Some("rsa-1"), &claims_for("alice"));
    auth.authenticate(&token).await.unwrap();

    // The set stops being a JWK set: the stale keys keep verifying meanwhile.
    server.set(json!("not a key set"));
    tokio::time::sleep(Duration::from_millis(250)).await;
    auth.authenticate(&token).await.unwrap();
    assert_eq!(server.fetches(), 2);

    let fresh = jwks_auth(&server.url, JwksPolicy::default());
    let err = fresh.authenticate(&token).await.unwrap_err();
    assert!(matches!(err, AuthError::KeyUnavailable(_)), "{err:?}");
}
