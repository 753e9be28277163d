//! The console over HTTP against a real `sless up`: listings, auth rules, session
//! cookies and CSRF.

mod common;

use reqwest::header::{ACCEPT, AUTHORIZATION, COOKIE, LOCATION, SET_COOKIE};
use reqwest::{Client, StatusCode, redirect};
use serde_json::{Value, json};

struct Fixture {
    _dir: tempfile::TempDir,
    server: common::Sless,
    alice: String,
    bob: String,
    namespace: String,
    client: Client,
}

fn namespace_of(dir: &std::path::Path, sub: &str) -> String {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_sless"))
        .args(["token", "--sub", sub, "--data-dir"])
        .arg(dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    stderr
        .strip_prefix("token for namespace ")
        .and_then(|rest| rest.split(',').next())
        .expect("namespace on stderr")
        .to_string()
}

/// Alice owns one function `hello` with an http trigger `hello-http`.
async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(dir.path());
    let alice = common::token(dir.path(), "alice");
    let bob = common::token(dir.path(), "bob");
    let namespace = namespace_of(dir.path(), "alice");
    let client = Client::builder()
        .redirect(redirect::Policy::none())
        .build()
        .unwrap();
    let api = format!("{}/v1/namespaces/{namespace}", server.base);
    for (path, body) in [
        (
            "functions",
            json!({"name": "hello", "runtime": "python3.11"}),
        ),
        (
            "triggers",
            json!({"name": "hello-http", "type": "http", "function_ref": "hello"}),
        ),
    ] {
        let response = client
            .post(format!("{api}/{path}"))
            .bearer_auth(&alice)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(
            response.status().is_success(),
            "{path}: {}",
            response.status()
        );
    }
    Fixture {
        _dir: dir,
        server,
        alice,
        bob,
        namespace,
        client,
    }
}

impl Fixture {
    fn list_url(&self, namespace: &str) -> String {
        format!("{}/funcs/{namespace}", self.server.base)
    }

    /// A session cookie from `/login?token=`, which must redirect the token out of the URL.
    async fn session_cookie(&self) -> String {
        let response = self
            .client
            .get(format!("{}/login", self.server.base))
            .query(&[("token", &self.alice)])
            .send()
            .await
            .unwrap();
        assert!(response.status().is_redirection(), "{}", response.status());
        let location = response.headers()[LOCATION].to_str().unwrap();
        assert!(!location.contains("token"), "{location}");
        let cookie = response.headers()[SET_COOKIE].to_str().unwrap().to_string();
        assert!(cookie.contains("HttpOnly"), "{cookie}");
        assert!(cookie.contains("SameSite=Lax"), "{cookie}");
        cookie.split(';').next().unwrap().to_string()
    }

    async fn trigger_enabled(&self) -> bool {
        let trigger: Value = self
            .client
            .get(format!(
                "{}/v1/namespaces/{}/triggers/hello-http",
                self.server.base, self.namespace
            ))
            .bearer_auth(&self.alice)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        trigger["enabled"].as_bool().expect("enabled")
    }
}

#[tokio::test]
async fn curl_gets_an_aligned_text_listing_and_json_on_request() {
    let f = fixture().await;
    let text = f
        .client
        .get(f.list_url(&f.namespace))
        .bearer_auth(&f.alice)
        .send()
        .await
        .unwrap();
    assert_eq!(text.status(), StatusCode::OK);
    assert!(
        text.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let body = text.text().await.unwrap();
    let mut lines = body.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "KIND", "RUNTIME", "PHASE", "TRIGGERS", "URL"]
    );
    let entry = lines.next().expect("one entry");
    assert!(entry.starts_with("hello "), "{entry}");
    assert!(entry.contains("python3.11"), "{entry}");

    for request in [
        f.client
            .get(f.list_url(&f.namespace))
            .header(ACCEPT, "application/json"),
        f.client
            .get(format!("{}?format=json", f.list_url(&f.namespace))),
    ] {
        let response = request.bearer_auth(&f.alice).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let json = response.text().await.unwrap();
        let value: Value = serde_json::from_str(&json).unwrap();
        assert!(json.contains("\"hello\""), "{value}");
        assert!(json.contains("hello-http"), "{value}");
    }
}

#[tokio::test]
async fn no_session_means_401_for_curl_and_a_login_redirect_for_browsers() {
    let f = fixture().await;
    let plain = f.client.get(f.list_url(&f.namespace)).send().await.unwrap();
    assert_eq!(plain.status(), StatusCode::UNAUTHORIZED);

    let browser = f
        .client
        .get(f.list_url(&f.namespace))
        .header(ACCEPT, "text/html")
        .send()
        .await
        .unwrap();
    assert!(browser.status().is_redirection(), "{}", browser.status());
    let location = browser.headers()[LOCATION].to_str().unwrap();
    assert!(location.starts_with("/login"), "{location}");

    let forged = f
        .client
        .get(f.list_url(&f.namespace))
        .header(AUTHORIZATION, format!("Bearer {}x", f.alice))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn another_users_namespace_is_forbidden() {
    let f = fixture().await;
    let response = f
        .client
        .get(f.list_url(&f.namespace))
        .bearer_auth(&f.bob)
        .header(ACCEPT, "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert!(!response.text().await.unwrap().contains("hello-http"));
}

#[tokio::test]
async fn a_session_sees_the_page_and_toggles_only_with_its_csrf_token() {
    let f = fixture().await;
    let cookie = f.session_cookie().await;
    let page = f
        .client
        .get(f.list_url(&f.namespace))
        .header(ACCEPT, "text/html")
        .header(COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let html = page.text().await.unwrap();
    assert!(html.contains("hello-http"));
    let csrf = html
        .split("name=\"csrf_token\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a csrf_token field")
        .to_string();

    let toggle = |csrf: Option<&str>| {
        let mut form = vec![("trigger", "hello-http"), ("enabled", "false")];
        if let Some(csrf) = csrf {
            form.push(("csrf_token", csrf));
        }
        f.client
            .post(format!("{}/triggers", f.list_url(&f.namespace)))
            .header(COOKIE, &cookie)
            .form(&form)
            .send()
    };
    assert_eq!(toggle(None).await.unwrap().status(), StatusCode::FORBIDDEN);
    assert_eq!(
        toggle(Some("forged")).await.unwrap().status(),
        StatusCode::FORBIDDEN
    );
    assert!(
        f.trigger_enabled().await,
        "a rejected form changed the trigger"
    );

    let accepted = toggle(Some(&csrf)).await.unwrap();
    assert!(accepted.status().is_redirection(), "{}", accepted.status());
    assert!(
        !f.trigger_enabled().await,
        "the Stop form did not stop the trigger"
    );
}
