//! The console router in-process (no `sless up`, no port): what it answers before any
//! API call, and when the API it reads through is down.

use std::sync::Arc;

use axum::body::{Body, to_bytes};
use axum::http::{Request, StatusCode, header};
use axum::response::Response;
use sless::console::{ConsoleConfig, router};
use sless_core::auth::{AuthConfig, Authenticator, KeySource, issue_hs256};
use tower::ServiceExt;

const SECRET: &[u8] = b"console-router-test-secret-of-32-bytes";

struct Console {
    router: axum::Router,
    _data_dir: tempfile::TempDir,
}

impl Console {
    /// A console whose API endpoint refuses connections (a closed loopback port).
    async fn new() -> Self {
        let data_dir = tempfile::tempdir().unwrap();
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let api_endpoint = format!("http://{}", closed.local_addr().unwrap());
        drop(closed);
        let config = ConsoleConfig::embedded(
            data_dir.path(),
            "127.0.0.1:8080".parse().unwrap(),
            &api_endpoint,
            None,
            50 * 1024 * 1024,
        );
        let config = ConsoleConfig {
            api_endpoint,
            ..config
        };
        let auth =
            Authenticator::new(AuthConfig::new(KeySource::Hs256Secret(SECRET.to_vec()))).unwrap();
        Console {
            router: router(config, Arc::new(auth), None).await.unwrap(),
            _data_dir: data_dir,
        }
    }

    async fn get(&self, path: &str, headers: &[(header::HeaderName, &str)]) -> Response {
        let mut request = Request::get(path);
        for (name, value) in headers {
            request = request.header(name, *value);
        }
        self.router
            .clone()
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap()
    }
}

async fn text(response: Response) -> String {
    String::from_utf8(
        to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap()
            .to_vec(),
    )
    .unwrap()
}

#[tokio::test]
async fn a_listing_needs_a_login() {
    let console = Console::new().await;
    let browser = console
        .get(
            "/funcs/sless-0000000000000000",
            &[(header::ACCEPT, "text/html")],
        )
        .await;
    assert_eq!(browser.status(), StatusCode::SEE_OTHER);
    let to = browser.headers()[header::LOCATION].to_str().unwrap();
    assert!(to.starts_with("/login"), "{to}");

    let curl = console.get("/funcs/sless-0000000000000000", &[]).await;
    assert_eq!(curl.status(), StatusCode::UNAUTHORIZED);
    assert!(text(curl).await.contains("log in first"));
}

#[tokio::test]
async fn the_login_page_has_a_form_and_safe_headers() {
    let console = Console::new().await;
    let page = console
        .get("/login", &[(header::ACCEPT, "text/html")])
        .await;
    assert_eq!(page.status(), StatusCode::OK);
    let csp = page.headers()[header::CONTENT_SECURITY_POLICY]
        .to_str()
        .unwrap()
        .to_string();
    assert!(csp.starts_with("default-src 'none'"), "{csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(text(page).await.contains("name=\"token\""));
}

#[tokio::test]
async fn another_namespace_is_forbidden_before_the_api_is_asked() {
    let console = Console::new().await;
    let token = issue_hs256(SECRET, "alice", 60).unwrap();
    let bearer = format!("Bearer {token}");
    let answer = console
        .get(
            "/funcs/sless-0000000000000000",
            &[(header::AUTHORIZATION, &bearer)],
        )
        .await;
    assert_eq!(answer.status(), StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn a_dead_api_is_a_502_that_says_so() {
    let console = Console::new().await;
    let token = issue_hs256(SECRET, "alice", 60).unwrap();
    let ns = sless_core::model::namespace_for_sub("alice");
    let bearer = format!("Bearer {token}");
    let answer = console
        .get(&format!("/funcs/{ns}"), &[(header::AUTHORIZATION, &bearer)])
        .await;
    assert_eq!(answer.status(), StatusCode::BAD_GATEWAY);
    assert!(text(answer).await.contains("cannot reach sless"));
}
