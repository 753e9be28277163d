//! The auth matrix of docs/spec.md §6 at the HTTP level.

mod common;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use common::*;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sless_core::auth::issue_hs256;

fn b64(value: &Value) -> String {
    URL_SAFE_NO_PAD.encode(value.to_string())
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

fn hs256(claims: &Value, secret: &[u8]) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        claims,
        &jsonwebtoken::EncodingKey::from_secret(secret),
    )
    .unwrap()
}

async fn status_with(server: &TestServer, ns: &str, auth: Option<&str>) -> (StatusCode, String) {
    let mut request = server
        .client
        .get(server.url(&format!("/v1/namespaces/{ns}/functions")));
    if let Some(value) = auth {
        request = request.header("authorization", value);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    (
        status,
        body["error"].as_str().unwrap_or_default().to_string(),
    )
}

#[tokio::test]
async fn token_matrix() {
    let server = TestServer::start().await;
    let alice = user("alice");
    let ns = &alice.ns;
    let bearer = |t: &str| format!("Bearer {t}");

    let (status, _) = status_with(&server, ns, Some(&bearer(&alice.token))).await;
    assert_eq!(status, StatusCode::OK);

    let (status, message) = status_with(&server, ns, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(message.contains("Bearer"), "{message}");

    let unsigned = format!(
        "{}.{}.",
        b64(&json!({"alg": "none", "typ": "JWT"})),
        b64(&json!({"sub": "alice", "exp": now() + 600}))
    );
    let (status, _) = status_with(&server, ns, Some(&bearer(&unsigned))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let forged = hs256(&json!({"sub": "alice", "exp": now() + 600}), b"not-the-key");
    let (status, _) = status_with(&server, ns, Some(&bearer(&forged))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let expired = hs256(&json!({"sub": "alice", "exp": now() - 600}), SECRET);
    let (status, message) = status_with(&server, ns, Some(&bearer(&expired))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(message.to_lowercase().contains("expired"), "{message}");

    let no_sub = hs256(&json!({"exp": now() + 600}), SECRET);
    let (status, message) = status_with(&server, ns, Some(&bearer(&no_sub))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(message.contains("sub"), "{message}");

    let bob = user("bob");
    let (status, message) = status_with(&server, &bob.ns, Some(&bearer(&alice.token))).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(
        message.contains(&bob.ns) && message.contains(ns),
        "{message}"
    );

    let admin = admin();
    for target in [ns, &bob.ns] {
        let (status, _) = status_with(&server, target, Some(&bearer(&admin.token))).await;
        assert_eq!(status, StatusCode::OK);
    }
}

#[tokio::test]
async fn rs256_server_refuses_hs256_signed_with_its_public_key() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../core/tests/fixtures");
    let public_pem = std::fs::read(format!("{fixtures}/rsa_public.pem")).unwrap();
    let private_pem = std::fs::read(format!("{fixtures}/rsa_private.pem")).unwrap();
    let server = TestServer::start_with(
        gateway::api::ApiConfig::default(),
        sless_core::auth::KeySource::PublicKeyPem(public_pem.clone()),
    )
    .await;
    let ns = sless_core::model::namespace_for_sub("carol");
    let claims = json!({"sub": "carol", "exp": now() + 600});

    let valid = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_rsa_pem(&private_pem).unwrap(),
    )
    .unwrap();
    let (status, _) = status_with(&server, &ns, Some(&format!("Bearer {valid}"))).await;
    assert_eq!(status, StatusCode::OK);

    let confused = hs256(&claims, &public_pem);
    let (status, _) = status_with(&server, &ns, Some(&format!("Bearer {confused}"))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let hs_token = issue_hs256(SECRET, "carol", 600).unwrap();
    let (status, _) = status_with(&server, &ns, Some(&format!("Bearer {hs_token}"))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}
