//! A typed HTTP client of the REST API, for the CLI and the console. It speaks only the
//! JSON types of [`sless_api`] and acts with the caller's own token.

use std::time::Duration;

use base64::Engine;
use serde::Serialize;
use serde::de::DeserializeOwned;

use sless_api::*;
pub use sless_api::{Kind, LogFilter};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(
        "cannot reach sless at {endpoint}: {message}; is it running (sless up) and is SLESS_ENDPOINT right?"
    )]
    Unreachable { endpoint: String, message: String },
    #[error("{message} (HTTP {status})")]
    Api { status: u16, message: String },
    #[error("unexpected answer from {url}: {message}")]
    Decode { url: String, message: String },
    #[error("{0}")]
    Config(String),
}

impl ClientError {
    /// The HTTP status of an API error.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }
}

pub type Result<T, E = ClientError> = std::result::Result<T, E>;

/// The query of a logs request.
fn log_query(filter: &LogFilter, follow: bool) -> Vec<(&'static str, String)> {
    let mut query = vec![("tail", filter.tail.to_string())];
    if let Some(id) = &filter.request_id {
        query.push(("request_id", id.clone()));
    }
    if let Some(text) = &filter.search {
        query.push(("q", text.clone()));
    }
    if follow {
        query.push(("follow", "true".into()));
    }
    query
}

/// What a log stream brings.
#[derive(Clone, Debug, PartialEq)]
pub enum Followed {
    Line(LogLineResponse),
    /// The reader fell behind and this many lines went by unseen.
    Missed(u64),
}

/// How long an upload waits for a free place among its namespace's uploads in flight.
pub const UPLOAD_WAIT: std::time::Duration = std::time::Duration::from_secs(300);

/// The wait a 429 asks for (`Retry-After` in seconds, at least 1 s); `None` for any other
/// answer.
fn retry_after(response: &reqwest::Response) -> Option<std::time::Duration> {
    if response.status() != reqwest::StatusCode::TOO_MANY_REQUESTS {
        return None;
    }
    let seconds = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(1);
    Some(std::time::Duration::from_secs(seconds.clamp(1, 60)))
}

/// How waiting for a job's run ended.
#[derive(Clone, Debug)]
pub enum RunWait {
    /// The run is over: `Succeeded` or `Failed`.
    Finished(JobResponse),
    /// Someone started another run meanwhile.
    Superseded(JobResponse),
    /// The run was still going when the time was up.
    TimedOut(JobResponse),
}

/// How waiting for a trigger's start or stop ended.
#[derive(Clone, Debug)]
pub enum TriggerWait {
    /// The platform has acted: `active` is `enabled`.
    Settled(TriggerResponse),
    /// Enabled, but what it calls is not built (its phase, or "missing"): nothing to wait for.
    NotBuilt(TriggerResponse, String),
    /// Not settled when the time was up.
    TimedOut(TriggerResponse),
}

/// The answer of a call through `/fn`.
#[derive(Clone, Debug)]
pub struct Invocation {
    pub status: u16,
    pub content_type: Option<String>,
    /// Every response header, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: bytes::Bytes,
}

impl Invocation {
    /// The call's id, under which its record and log lines are kept.
    pub fn request_id(&self) -> Option<&str> {
        self.headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("x-request-id"))
            .map(|(_, value)| value.as_str())
    }
}

#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    endpoint: String,
    token: String,
    namespace: String,
}

/// The `sub` claim of a JWT, read without verifying it: the server verifies; the client
/// only needs to know which namespace the token is for.
pub fn token_subject(token: &str) -> Result<String> {
    let bad = || ClientError::Config("the token is not a JWT (three base64url parts)".into());
    let payload = token.split('.').nth(1).ok_or_else(bad)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .map_err(|_| bad())?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    claims["sub"]
        .as_str()
        .map(String::from)
        .ok_or_else(|| ClientError::Config("the token has no sub claim".into()))
}

impl Client {
    /// A client for the namespace of the token's `sub`.
    pub fn new(endpoint: &str, token: &str) -> Result<Self> {
        let namespace = sless_api::namespace_for_sub(&token_subject(token)?);
        Self::for_namespace(endpoint, token, &namespace)
    }

    /// A client for an explicit namespace (an admin acting on another user's).
    pub fn for_namespace(endpoint: &str, token: &str, namespace: &str) -> Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| ClientError::Config(e.to_string()))?;
        Ok(Self {
            http,
            endpoint: endpoint.trim_end_matches('/').to_string(),
            token: token.to_string(),
            namespace: namespace.to_string(),
        })
    }

    /// The same connection pool acting with another token on another namespace: a
    /// server acting for many users (the console) keeps one pool for all of them.
    pub fn acting_as(&self, token: &str, namespace: &str) -> Self {
        Self {
            http: self.http.clone(),
            endpoint: self.endpoint.clone(),
            token: token.to_string(),
            namespace: namespace.to_string(),
        }
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn url(&self, path: &str) -> String {
        format!("{}/v1/namespaces/{}/{path}", self.endpoint, self.namespace)
    }

    async fn send(&self, request: reqwest::RequestBuilder, url: &str) -> Result<reqwest::Response> {
        let response = self.answer(request).await?;
        Self::checked(response, url).await
    }

    /// The answer, whatever its status.
    async fn answer(&self, request: reqwest::RequestBuilder) -> Result<reqwest::Response> {
        request
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| ClientError::Unreachable {
                endpoint: self.endpoint.clone(),
                message: e.to_string(),
            })
    }

    /// A success answer, or the API's error message.
    async fn checked(response: reqwest::Response, url: &str) -> Result<reqwest::Response> {
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        let message = serde_json::from_str::<ErrorBody>(&text)
            .map(|e| e.error)
            .unwrap_or_else(|_| {
                if text.is_empty() {
                    format!("{url} failed")
                } else {
                    text
                }
            });
        Err(ClientError::Api { status, message })
    }

    async fn json<T: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
        url: &str,
    ) -> Result<T> {
        Self::decode(self.send(request, url).await?, url).await
    }

    async fn decode<T: DeserializeOwned>(response: reqwest::Response, url: &str) -> Result<T> {
        response.json().await.map_err(|e| ClientError::Decode {
            url: url.to_string(),
            message: e.to_string(),
        })
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        let url = self.url(path);
        self.json(self.http.get(&url), &url).await
    }

    async fn with_body<B: Serialize, T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: &B,
    ) -> Result<T> {
        let url = self.url(path);
        self.json(self.http.request(method, &url).json(body), &url)
            .await
    }

    /// Every namespace holding an object (admins only: 403 otherwise).
    pub async fn list_namespaces(&self) -> Result<Vec<String>> {
        let url = format!("{}/v1/namespaces", self.endpoint);
        let list: NamespaceListResponse = self.json(self.http.get(&url), &url).await?;
        Ok(list.namespaces)
    }

    pub async fn ensure_namespace(&self) -> Result<NamespaceResponse> {
        let url = self.url("ensure");
        self.json(self.http.post(&url), &url).await
    }

    pub async fn list_workloads(&self, kind: Kind) -> Result<Vec<WorkloadResponse>> {
        self.get(kind.path()).await
    }

    pub async fn get_workload(&self, kind: Kind, name: &str) -> Result<WorkloadResponse> {
        self.get(&format!("{}/{name}", kind.path())).await
    }

    pub async fn create_workload(
        &self,
        kind: Kind,
        request: &WorkloadRequest,
    ) -> Result<WorkloadResponse> {
        self.with_body(reqwest::Method::POST, kind.path(), request)
            .await
    }

    pub async fn replace_workload(
        &self,
        kind: Kind,
        name: &str,
        request: &WorkloadRequest,
    ) -> Result<WorkloadResponse> {
        self.with_body(
            reqwest::Method::PUT,
            &format!("{}/{name}", kind.path()),
            request,
        )
        .await
    }

    pub async fn delete(&self, kind: Kind, name: &str) -> Result<()> {
        let url = self.url(&format!("{}/{name}", kind.path()));
        self.send(self.http.delete(&url), &url).await.map(|_| ())
    }

    /// Uploads a zip (functions, services, self-contained jobs); answers the resource's JSON.
    /// Uploads a zip. A namespace's uploads in flight are limited (429 + Retry-After):
    /// parallel uploads (Terraform applies resources concurrently) wait their turn, up to
    /// [`UPLOAD_WAIT`].
    pub async fn upload(&self, kind: Kind, name: &str, zip: Vec<u8>) -> Result<serde_json::Value> {
        let url = self.url(&format!("{}/{name}/upload", kind.path()));
        let zip = bytes::Bytes::from(zip);
        let deadline = tokio::time::Instant::now() + UPLOAD_WAIT;
        loop {
            let form = reqwest::multipart::Form::new().part(
                "code",
                reqwest::multipart::Part::stream(zip.clone()).file_name(format!("{name}.zip")),
            );
            let response = self.answer(self.http.post(&url).multipart(form)).await?;
            match retry_after(&response) {
                Some(wait) if tokio::time::Instant::now() + wait < deadline => {
                    tokio::time::sleep(wait).await;
                }
                _ => return Self::decode(Self::checked(response, &url).await?, &url).await,
            }
        }
    }

    pub async fn source(&self, kind: Kind, name: &str) -> Result<Vec<SourceFileResponse>> {
        self.get(&format!("{}/{name}/source", kind.path())).await
    }

    /// The versions a function or service keeps, newest first (`active` marks its code).
    pub async fn versions(&self, kind: Kind, name: &str) -> Result<Vec<VersionResponse>> {
        self.get(&format!("{}/{name}/versions", kind.path())).await
    }

    /// The files of one kept version.
    pub async fn version_source(
        &self,
        kind: Kind,
        name: &str,
        version: &str,
    ) -> Result<Vec<SourceFileResponse>> {
        self.get(&format!("{}/{name}/versions/{version}/source", kind.path()))
            .await
    }

    /// Makes a kept version the workload's code again; answers the workload.
    pub async fn rollback(
        &self,
        kind: Kind,
        name: &str,
        version: &str,
    ) -> Result<WorkloadResponse> {
        let request = RollbackRequest {
            version: version.to_string(),
        };
        self.with_body(
            reqwest::Method::POST,
            &format!("{}/{name}/rollback", kind.path()),
            &request,
        )
        .await
    }

    pub async fn logs(&self, kind: Kind, name: &str, tail: usize) -> Result<Vec<LogLineResponse>> {
        self.find_logs(kind, name, &LogFilter::tail(tail)).await
    }

    /// The last `filter.tail` lines `filter` keeps, oldest first.
    pub async fn find_logs(
        &self,
        kind: Kind,
        name: &str,
        filter: &LogFilter,
    ) -> Result<Vec<LogLineResponse>> {
        let url = self.url(&format!("{}/{name}/logs", kind.path()));
        self.json(self.http.get(&url).query(&log_query(filter, false)), &url)
            .await
    }

    /// The lines `filter` keeps, then each new one as it is printed, until the server
    /// ends the stream (the workload deleted, sless stopping, or an hour passed).
    pub async fn follow_logs(
        &self,
        kind: Kind,
        name: &str,
        filter: &LogFilter,
    ) -> Result<impl futures::Stream<Item = Result<Followed>> + use<>> {
        use eventsource_stream::Eventsource;
        use futures::StreamExt;
        let url = self.url(&format!("{}/{name}/logs", kind.path()));
        let response = self
            .send(self.http.get(&url).query(&log_query(filter, true)), &url)
            .await?;
        Ok(response.bytes_stream().eventsource().map(move |event| {
            let decode = |message: String| ClientError::Decode {
                url: url.clone(),
                message,
            };
            let event = event.map_err(|e| decode(e.to_string()))?;
            match event.event.as_str() {
                "lagged" => {
                    let lag: serde_json::Value =
                        serde_json::from_str(&event.data).map_err(|e| decode(e.to_string()))?;
                    Ok(Followed::Missed(lag["missed"].as_u64().unwrap_or(0)))
                }
                _ => serde_json::from_str(&event.data)
                    .map(Followed::Line)
                    .map_err(|e| decode(e.to_string())),
            }
        }))
    }

    pub async fn build_log(&self, kind: Kind, name: &str) -> Result<String> {
        let url = self.url(&format!("{}/{name}/build-log", kind.path()));
        self.send(self.http.get(&url), &url)
            .await?
            .text()
            .await
            .map_err(|e| ClientError::Decode {
                url,
                message: e.to_string(),
            })
    }

    /// Recent calls and their totals: `{"stats": {...}, "invocations": [{"request_id",
    /// "trigger", "time", "method", "path", "status", "duration_ms", "version", "cold"}]}`
    /// (docs/api.md).
    pub async fn invocations(
        &self,
        kind: Kind,
        name: &str,
        tail: usize,
    ) -> Result<serde_json::Value> {
        self.get(&format!("{}/{name}/invocations?tail={tail}", kind.path()))
            .await
    }

    pub async fn list_triggers(&self) -> Result<Vec<TriggerResponse>> {
        self.get("triggers").await
    }

    pub async fn get_trigger(&self, name: &str) -> Result<TriggerResponse> {
        self.get(&format!("triggers/{name}")).await
    }

    pub async fn replace_trigger(
        &self,
        name: &str,
        request: &TriggerRequest,
    ) -> Result<TriggerResponse> {
        self.with_body(reqwest::Method::PUT, &format!("triggers/{name}"), request)
            .await
    }

    pub async fn create_trigger(&self, request: &TriggerRequest) -> Result<TriggerResponse> {
        self.with_body(reqwest::Method::POST, "triggers", request)
            .await
    }

    /// Starts or stops a trigger in place.
    pub async fn set_trigger_enabled(&self, name: &str, enabled: bool) -> Result<TriggerResponse> {
        self.with_body(
            reqwest::Method::PATCH,
            &format!("triggers/{name}"),
            &TriggerPatch { enabled },
        )
        .await
    }

    pub async fn list_jobs(&self) -> Result<Vec<JobResponse>> {
        self.get("jobs").await
    }

    pub async fn get_job(&self, name: &str) -> Result<JobResponse> {
        self.get(&format!("jobs/{name}")).await
    }

    pub async fn create_job(&self, request: &JobRequest) -> Result<JobResponse> {
        self.with_body(reqwest::Method::POST, "jobs", request).await
    }

    pub async fn replace_job(&self, name: &str, request: &JobRequest) -> Result<JobResponse> {
        self.with_body(reqwest::Method::PUT, &format!("jobs/{name}"), request)
            .await
    }

    pub async fn patch_job(&self, name: &str, patch: &JobPatch) -> Result<JobResponse> {
        self.with_body(reqwest::Method::PATCH, &format!("jobs/{name}"), patch)
            .await
    }

    /// The job's kept runs, newest first (at most `tail`), without log tails.
    pub async fn job_runs(&self, name: &str, tail: Option<usize>) -> Result<Vec<JobRunResponse>> {
        let query = tail.map(|t| format!("?tail={t}")).unwrap_or_default();
        self.get(&format!("jobs/{name}/runs{query}")).await
    }

    /// One run with its log tail.
    pub async fn job_run(&self, name: &str, run_id: i64) -> Result<JobRunResponse> {
        self.get(&format!("jobs/{name}/runs/{run_id}")).await
    }

    /// Polls until the platform has acted on a trigger's `enabled` (its function started
    /// or stopped), so the next call sees the new state.
    pub async fn wait_for_trigger(
        &self,
        name: &str,
        limit: Duration,
        interval: Duration,
    ) -> Result<TriggerWait> {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let trigger = self.get_trigger(name).await?;
            if trigger.active == trigger.enabled {
                return Ok(TriggerWait::Settled(trigger));
            }
            // A function that is not built cannot start: there is nothing to wait for.
            if trigger.enabled {
                let phase = self.workload_phase(&trigger.function_ref).await?;
                if phase != Some(Phase::Ready) {
                    let phase = phase.map_or_else(|| "missing".into(), |p| p.to_string());
                    return Ok(TriggerWait::NotBuilt(trigger, phase));
                }
            }
            if std::time::Instant::now() >= deadline {
                return Ok(TriggerWait::TimedOut(trigger));
            }
            tokio::time::sleep(interval).await;
        }
    }

    /// The phase of the function or service of that name; `None` when there is neither.
    async fn workload_phase(&self, name: &str) -> Result<Option<Phase>> {
        for kind in [Kind::Function, Kind::Service] {
            match self.get_workload(kind, name).await {
                Ok(workload) => return Ok(Some(workload.phase)),
                Err(e) if e.status() == Some(404) => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// Polls until the run that `started` began is over. The previous run's status stays
    /// until the runner reacts; any status written after `started` belongs to this run.
    /// `on_status` sees each status of this run.
    pub async fn wait_for_run(
        &self,
        started: &JobResponse,
        limit: Duration,
        interval: Duration,
        mut on_status: impl FnMut(&JobResponse),
    ) -> Result<RunWait> {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let job = self.get_job(&started.name).await?;
            if job.run_id != started.run_id {
                return Ok(RunWait::Superseded(job));
            }
            if job.resource_version != started.resource_version {
                on_status(&job);
                if job.phase.is_finished() {
                    return Ok(RunWait::Finished(job));
                }
            }
            if std::time::Instant::now() >= deadline {
                return Ok(RunWait::TimedOut(job));
            }
            tokio::time::sleep(interval).await;
        }
    }

    /// Calls `/fn/{ns}/{name}{path}` (no token: the proxy is public), as the call
    /// `request_id` when one is given.
    pub async fn invoke(
        &self,
        name: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<Vec<u8>>,
        request_id: Option<&str>,
    ) -> Result<Invocation> {
        let path = if path.is_empty() || path.starts_with('/') {
            path.to_string()
        } else {
            format!("/{path}")
        };
        let url = format!("{}/fn/{}/{name}{path}", self.endpoint, self.namespace);
        let mut request = self.http.request(method, &url);
        if let Some(id) = request_id {
            request = request.header("x-request-id", id);
        }
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body);
        }
        let response = request.send().await.map_err(|e| ClientError::Unreachable {
            endpoint: self.endpoint.clone(),
            message: e.to_string(),
        })?;
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(String::from);
        let headers = response
            .headers()
            .iter()
            .map(|(name, value)| {
                let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
                (name.to_string(), value)
            })
            .collect();
        let body = response.bytes().await.map_err(|e| ClientError::Decode {
            url,
            message: e.to_string(),
        })?;
        Ok(Invocation {
            status,
            content_type,
            headers,
            body,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subject_of_a_token() {
        // Unsigned: the client only reads the subject, the server verifies.
        let token = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2ln";
        assert_eq!(token_subject(token).unwrap(), "alice");
        assert!(token_subject("nope").is_err());
        let client = Client::new("http://127.0.0.1:1/", token).unwrap();
        assert_eq!(client.namespace(), sless_api::namespace_for_sub("alice"));
        assert_eq!(client.endpoint(), "http://127.0.0.1:1");
    }
}
