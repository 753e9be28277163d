//! The REST API and `/fn` as one user sees them, for tests of the embedded platform.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{TestServer, User, code_form, user, zip_of};

pub struct Api<'a> {
    pub server: &'a TestServer,
    pub user: User,
}

impl<'a> Api<'a> {
    pub fn new(server: &'a TestServer, sub: &str) -> Self {
        Self {
            server,
            user: user(sub),
        }
    }

    pub fn v1(&self, path: &str) -> String {
        self.server
            .url(&format!("/v1/namespaces/{}/{path}", self.user.ns))
    }

    pub fn fn_url(&self, path: &str) -> String {
        self.server.url(&format!("/fn/{}/{path}", self.user.ns))
    }

    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = self
            .server
            .client
            .request(method, self.v1(path))
            .bearer_auth(&self.user.token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    pub async fn post(&self, path: &str, body: Value) -> Value {
        let (status, value) = self.send(reqwest::Method::POST, path, Some(body)).await;
        assert_eq!(status, StatusCode::CREATED, "POST {path}: {value}");
        value
    }

    pub async fn get(&self, path: &str) -> Value {
        let (status, value) = self.send(reqwest::Method::GET, path, None).await;
        assert_eq!(status, StatusCode::OK, "GET {path}: {value}");
        value
    }

    pub async fn upload(&self, path: &str, files: &[(&str, &[u8])]) -> Value {
        let response = self
            .server
            .client
            .post(self.v1(&format!("{path}/upload")))
            .bearer_auth(&self.user.token)
            .multipart(code_form(zip_of(files)))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        response.json().await.unwrap()
    }

    /// Polls until the resource satisfies `done`; panics with the last state.
    pub async fn wait_until(
        &self,
        path: &str,
        within: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let value = self.get(path).await;
            if done(&value) {
                return value;
            }
            assert!(
                Instant::now() < deadline,
                "{path}: never reached the wanted state: {value}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn wait_for(
        &self,
        path: &str,
        field: &str,
        wanted: &[&str],
        within: Duration,
    ) -> Value {
        self.wait_until(path, within, |v| wanted.iter().any(|w| v[field] == *w))
            .await
    }

    /// A function with an http trigger, uploaded and Ready.
    pub async fn deploy(&self, name: &str, runtime: &str, files: &[(&str, &[u8])]) -> Value {
        let spec = json!({"name": name, "runtime": runtime, "timeout_sec": 5});
        self.deploy_spec(spec, files).await
    }

    /// Like [`Api::deploy`], with the function's whole request body (`name` included).
    pub async fn deploy_spec(&self, spec: Value, files: &[(&str, &[u8])]) -> Value {
        let name = spec["name"].as_str().expect("spec has a name").to_owned();
        self.create_and_upload(spec, files).await;
        let ready = self
            .wait_for(
                &format!("functions/{name}"),
                "phase",
                &["Ready", "Failed"],
                Duration::from_secs(180),
            )
            .await;
        assert_eq!(ready["phase"], "Ready", "{ready}");
        ready
    }

    /// A function with an http trigger and uploaded code, not waited for.
    pub async fn create_and_upload(&self, spec: Value, files: &[(&str, &[u8])]) {
        let name = spec["name"].as_str().expect("spec has a name").to_owned();
        self.post("functions", spec).await;
        self.post(
            "triggers",
            json!({"name": format!("{name}-http"), "type": "http", "function_ref": name}),
        )
        .await;
        self.upload(&format!("functions/{name}"), files).await;
    }

    /// One POST of `body` to `/fn/<name>` as the call `request_id`; its status.
    pub async fn call_as(&self, name: &str, request_id: &str, body: &Value) -> StatusCode {
        self.server
            .client
            .post(self.fn_url(name))
            .header("x-request-id", request_id)
            .json(body)
            .send()
            .await
            .unwrap()
            .status()
    }

    /// Calls `/fn/<name>` until its error says `words` (the route changes as the runner
    /// gets on); the last answer after 60 s.
    pub async fn answer_saying(&self, name: &str, words: &str) -> (StatusCode, Value) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (status, body) = self
                .call_until(name, &json!({}), Duration::ZERO, |_| true)
                .await;
            let error = body["error"].as_str().unwrap_or_default();
            if error.contains(words) || Instant::now() > deadline {
                return (status, body);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Calls `/fn/...` until it stops answering 503 (the instance is starting or
    /// restarting after an out-of-memory kill); gives up after 60 s.
    pub async fn invoke(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call_until(path, &body, Duration::from_secs(60), |s| {
            s != StatusCode::SERVICE_UNAVAILABLE
        })
        .await
    }

    /// Calls `/fn/...` until it answers `want`; fails after 10 s.
    pub async fn invoke_until(&self, path: &str, want: StatusCode) -> Value {
        let (status, body) = self
            .call_until(path, &json!({}), Duration::from_secs(10), |s| s == want)
            .await;
        assert_eq!(status, want, "/fn/{path} still answers {body}");
        body
    }

    /// POSTs `body` to `/fn/...` until `done(status)` or `within` has passed; the last
    /// answer.
    pub async fn call_until(
        &self,
        path: &str,
        body: &Value,
        within: Duration,
        done: impl Fn(StatusCode) -> bool,
    ) -> (StatusCode, Value) {
        let deadline = Instant::now() + within;
        loop {
            let response = self
                .server
                .client
                .post(self.fn_url(path))
                .json(body)
                .send()
                .await
                .unwrap();
            let status = response.status();
            let value: Value = response.json().await.unwrap_or(Value::Null);
            if done(status) || Instant::now() > deadline {
                return (status, value);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
