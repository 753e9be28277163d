//! One call through the proxy: resolve the route, rewrite the request, stream it to
//! the function and its answer back. A trigger's call, whose body is in memory, goes
//! whole on a kept connection instead of hyper's client ([`in_hand`]).

use std::error::Error as StdError;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, Version, response};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use chrono::Utc;
use http_body_util::BodyExt;
use hyper::body::{Body as _, Frame, Incoming};
use tokio::time::Sleep;

use sless_core::auth::TRIGGER_TOKEN_HEADER;
use sless_core::metrics::InFlight;

use super::body::{RequestBody, RequestBodyError, ResponseBody};
use super::fast::in_hand;
use super::headers::call_id::{CallIds, X_REQUEST_ID};
use super::headers::map;
use super::log::{CallError, Calls, Via};
use super::{Caller, Invocation, InvokeError, Proxy, TRIGGER_NAME_HEADER, unix};
use sless_core::routes::{
    Address, JobOutcome, JobRun, Lease, Route, TriggerAnswer, TriggerCall, TriggerCalls,
};

/// How often a call waiting for a starting function looks at its route again.
const START_POLL: Duration = Duration::from_millis(10);
/// How often a call waiting for an instance of a scaled-to-zero function looks again:
/// often, as the wait is the first call's latency.
const WAKE_POLL: Duration = Duration::from_millis(1);
/// How long a call whose function went away waits to learn why: the runner gives the
/// route the reason (a crash, an out-of-memory kill) once it sees the process exit.
const EXIT_WAIT: Duration = Duration::from_millis(500);

/// The parts of `/fn/{ns}/{name}{rest}?{query}`, borrowed from the request URI as
/// received (no percent-decoding).
#[derive(Debug, PartialEq)]
pub(super) struct Target<'a> {
    pub(super) namespace: &'a str,
    pub(super) name: &'a str,
    /// Starts with `/`.
    pub(super) rest: &'a str,
    pub(super) query: Option<&'a str>,
}

impl<'a> Target<'a> {
    fn parse(uri: &'a Uri) -> Option<Self> {
        Self::from_path(uri.path(), uri.query())
    }

    /// From the path and query of a request target as received.
    pub(super) fn from_path(path: &'a str, query: Option<&'a str>) -> Option<Self> {
        let after = path.strip_prefix("/fn/")?;
        let (namespace, after) = after.split_once('/')?;
        let (name, rest) = match after.find('/') {
            Some(i) => after.split_at(i),
            None => (after, "/"),
        };
        if namespace.is_empty() || name.is_empty() {
            return None;
        }
        Some(Self {
            namespace,
            name,
            rest,
            query,
        })
    }
}

pub(crate) async fn invoke(State(proxy): State<Arc<Proxy>>, request: Request) -> Response {
    let caller = proxy.network_caller(&request);
    let mut response = proxy.call(request, caller).await;
    map::sandbox(response.headers_mut());
    response
}

impl Proxy {
    /// Who made a call that came over the network: a cron fire when it carries its
    /// tenant's trigger token, else the public.
    fn network_caller(&self, request: &Request) -> Caller {
        let (Some(key), Some(token)) = (
            &self.config.trigger_key,
            request.headers().get(TRIGGER_TOKEN_HEADER),
        ) else {
            return Caller::Public;
        };
        match Target::parse(request.uri()) {
            Some(target) if key.verifies(target.namespace, token.as_bytes()) => Caller::Cron,
            _ => Caller::Public,
        }
    }

    /// One call to `/fn/{ns}/{name}{rest}`, with the same routing, timeout, metrics and
    /// invocation record whoever makes it.
    pub async fn call(self: &Arc<Self>, request: Request, caller: Caller) -> Response {
        call(self, request, caller).await
    }
}

/// What of a trigger call's answer is read (to its end: the proxy records a streamed
/// answer when its body ends).
pub(crate) const MAX_TRIGGER_ANSWER_READ: usize = 64 * 1024;

impl Proxy {
    /// What a runner's scheduler makes its calls through.
    pub fn trigger_calls(self: &Arc<Self>) -> Arc<dyn TriggerCalls> {
        Arc::new(TriggerCaller(Arc::downgrade(self)))
    }
}

/// Held weakly: the proxy holds the runner that holds this.
struct TriggerCaller(Weak<Proxy>);

#[async_trait::async_trait]
impl TriggerCalls for TriggerCaller {
    async fn call_for_trigger(&self, call: TriggerCall) -> Result<TriggerAnswer, String> {
        let proxy = self.0.upgrade().ok_or("sless is stopping")?;
        let request = Request::builder()
            .method(Method::POST)
            .uri(format!("/fn/{}/{}/", call.namespace, call.function))
            .header(CONTENT_TYPE, "application/json")
            .header(TRIGGER_NAME_HEADER, call.trigger.as_str())
            .body(Body::from(call.body))
            .map_err(|e| format!("cannot build the call: {e}"))?;
        let response = proxy.call(request, Caller::Cron).await;
        let request_id = response
            .headers()
            .get(X_REQUEST_ID)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let status = response.status().as_u16();
        let _ = axum::body::to_bytes(response.into_body(), MAX_TRIGGER_ANSWER_READ).await;
        Ok(TriggerAnswer { status, request_id })
    }

    fn record_job_run(&self, run: JobRun) {
        let Some(proxy) = self.0.upgrade() else {
            return;
        };
        let (status, error) = match run.outcome {
            JobOutcome::Succeeded => (StatusCode::OK, None),
            JobOutcome::Failed => (StatusCode::INTERNAL_SERVER_ERROR, None),
            JobOutcome::TimedOut => (StatusCode::GATEWAY_TIMEOUT, Some(CallError::Timeout)),
        };
        let record = Invocation {
            request_id: run.request_id.into(),
            trigger: Via::Job,
            trigger_name: Some(run.job.into()),
            refused: false,
            version: run.version.map(Into::into),
            // A process of its own, started for the run.
            cold: true,
            start_wait: Duration::ZERO,
            time: run.started,
            method: Method::POST,
            path: "/".into(),
            status: status.as_u16(),
            duration: run.duration,
            error,
            trace: None,
        };
        proxy
            .invocations()
            .calls(&run.namespace, &run.function)
            .record(record);
    }
}

/// Every answer, the function's or the proxy's, carries the call's request id.
async fn call(proxy: &Arc<Proxy>, request: Request, caller: Caller) -> Response {
    let ids = map::call_ids(request.headers());
    let mut response = route_and_forward(proxy, request, caller, &ids).await;
    map::add_request_id(response.headers_mut(), &ids);
    response
}

async fn route_and_forward(
    proxy: &Arc<Proxy>,
    request: Request,
    caller: Caller,
    ids: &CallIds,
) -> Response {
    let started = Instant::now();
    let (mut parts, body) = request.into_parts();
    // The router only sends `/fn/{ns}/{name}...` here, so the URI can leave `parts`
    // (which travels on upstream) and the target borrow from it.
    let uri = std::mem::take(&mut parts.uri);
    let trigger_name = trigger_name(&parts.headers, caller);
    let Some(target) = Target::parse(&uri) else {
        return InvokeError::Unknown {
            namespace: String::new(),
            name: String::new(),
        }
        .into_response();
    };

    let mut route = proxy.routes.route(target.namespace, target.name);
    // An upload not seen yet, a build or a start: what comes ready is a cold start.
    let mut cold = false;
    if matches!(route, Route::NoCode { .. }) {
        cold = true;
        route = proxy
            .wait_while(&target, proxy.config.upload_wait, |r| {
                matches!(r, Route::NoCode { .. })
            })
            .await;
    }
    if matches!(route, Route::Starting { .. }) {
        cold = true;
        route = proxy
            .wait_while(&target, proxy.config.start_wait, |r| {
                matches!(r, Route::Starting { .. })
            })
            .await;
    }
    let route = match route {
        Route::Hidden { reason, .. } if !caller.is_trigger() => Route::Unavailable { reason },
        route => route,
    };
    let refuse = |reason: String| {
        let response = InvokeError::Unavailable(reason).into_response();
        let calls = proxy.invocations.calls(target.namespace, target.name);
        let mut record = invocation(
            parts.method.clone(),
            target.rest.to_owned(),
            response.status(),
            started,
            None,
            ids,
            caller.into(),
        );
        record.refused = true;
        record.trigger_name = trigger_name.clone();
        calls.record(record);
        response
    };
    let (instances, timeout, mut version) = match route {
        // Not recorded: random names must not grow the log.
        Route::Unknown => {
            return InvokeError::Unknown {
                namespace: target.namespace.to_owned(),
                name: target.name.to_owned(),
            }
            .into_response();
        }
        Route::Unavailable { reason } | Route::Starting { reason } | Route::NoCode { reason } => {
            return refuse(reason);
        }
        Route::Ready {
            instances,
            timeout,
            version,
            ..
        }
        | Route::Hidden {
            instances,
            timeout,
            version,
            ..
        } => (instances, timeout, version),
    };
    // None ready (scaled to zero): the runner was asked for one, the call waits for it.
    let lease = match instances.lease() {
        Some(lease) => lease,
        None => match proxy.wait_for_instance(&target, caller).await {
            Ok((lease, started_version)) => {
                cold = true;
                version = started_version;
                lease
            }
            Err(reason) => return refuse(reason),
        },
    };
    let start_wait = cold.then(|| started.elapsed());
    let address = lease.address().clone();
    let calls = proxy.invocations.calls(target.namespace, target.name);
    let in_flight = calls.in_flight();

    let method = parts.method.clone();
    let response = match proxy
        .forward(
            parts,
            body,
            caller,
            &target,
            uri.authority().map(|a| a.as_str()),
            Instance {
                address: &address,
                timeout,
                ids,
            },
        )
        .await
    {
        Ok(Answer::Whole(response)) => response,
        Ok(Answer::Streaming {
            parts,
            first,
            rest,
            deadline,
        }) => {
            let record = record_later(
                calls,
                &target,
                method,
                parts.status,
                started,
                (in_flight, lease),
                (
                    ids,
                    caller,
                    trigger_name,
                    Served {
                        version,
                        start_wait,
                    },
                ),
            );
            let body = ResponseBody::new(first, rest, deadline, record);
            return Response::from_parts(parts, Body::new(body));
        }
        Err(InvokeError::Unreachable { name, detail }) => proxy
            .why_unreachable(&target, &address, name, detail)
            .await
            .into_response(),
        Err(e) => e.into_response(),
    };
    let mut record = invocation(
        method,
        target.rest.to_owned(),
        response.status(),
        started,
        None,
        ids,
        caller.into(),
    );
    record.trigger_name = trigger_name;
    record.served_by(version, start_wait);
    calls.record(record);
    response
}

/// The trigger a call of sless's own names in `x-sless-trigger`; a public caller's
/// header is not believed.
fn trigger_name(headers: &HeaderMap, caller: Caller) -> Option<Box<str>> {
    match caller {
        Caller::Public | Caller::Console => None,
        Caller::Event | Caller::Cron => headers
            .get(TRIGGER_NAME_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(Into::into),
    }
}

/// Where a ready route sends a call, for how long it may take, and the call's ids.
struct Instance<'a> {
    address: &'a Address,
    timeout: Option<Duration>,
    ids: &'a CallIds,
}

/// A function's answer as far as the proxy waited for it.
enum Answer {
    /// Complete: the head and the whole (small) body.
    Whole(Response),
    /// The head and first frame; the rest streams and the call is recorded when it ends.
    Streaming {
        parts: response::Parts,
        first: Frame<Bytes>,
        rest: Incoming,
        deadline: Option<Pin<Box<Sleep>>>,
    },
}

/// `future`'s output, or None when `deadline` passed first.
async fn within<F: Future>(deadline: Option<tokio::time::Instant>, future: F) -> Option<F::Output> {
    match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline, future).await.ok(),
        None => Some(future.await),
    }
}

impl Proxy {
    /// The route once `waiting` no longer holds, or the last one seen after `limit`.
    /// Polled: the route table is memory, the wait rare.
    async fn wait_while(
        &self,
        target: &Target<'_>,
        limit: Duration,
        waiting: impl Fn(&Route) -> bool,
    ) -> Route {
        let deadline = Instant::now() + limit;
        loop {
            tokio::time::sleep(START_POLL).await;
            let route = self.routes.route(target.namespace, target.name);
            if !waiting(&route) || Instant::now() >= deadline {
                return route;
            }
        }
    }

    /// A place on an instance of a workload that has none ready (scaled to zero, or
    /// its instances closing): the runner was asked for one; the call waits for it up
    /// to the start wait, and gets the version it runs. Err is why not, for the caller's
    /// 503 (the start's failure).
    async fn wait_for_instance(
        &self,
        target: &Target<'_>,
        caller: Caller,
    ) -> Result<(Lease, Option<Arc<str>>), String> {
        let deadline = Instant::now() + self.config.start_wait;
        loop {
            tokio::time::sleep(WAKE_POLL).await;
            match self.routes.route(target.namespace, target.name) {
                Route::Hidden { reason, .. } if !caller.is_trigger() => return Err(reason),
                Route::Ready {
                    instances, version, ..
                }
                | Route::Hidden {
                    instances, version, ..
                } => {
                    if let Some(lease) = instances.lease() {
                        return Ok((lease, version));
                    }
                }
                Route::Starting { .. } | Route::NoCode { .. } => {}
                Route::Unavailable { reason } => return Err(reason),
                Route::Unknown => return Err(format!("{:?} was deleted", target.name)),
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "{:?} has no instance ready after {} s",
                    target.name,
                    self.config.start_wait.as_secs()
                ));
            }
        }
    }

    /// An unreachable function whose instance has just exited: the reason the runner
    /// gives its route joins the error. A live instance's route stays as it was.
    pub(super) async fn why_unreachable(
        &self,
        target: &Target<'_>,
        address: &Address,
        name: String,
        detail: String,
    ) -> InvokeError {
        let deadline = Instant::now() + EXIT_WAIT;
        loop {
            match self.routes.route(target.namespace, target.name) {
                Route::Unavailable { reason }
                | Route::Starting { reason }
                | Route::NoCode { reason } => {
                    return InvokeError::Unreachable {
                        name,
                        detail: format!("{detail}; {reason}"),
                    };
                }
                Route::Ready { instances, .. } | Route::Hidden { instances, .. }
                    if instances.contains(address) && Instant::now() < deadline =>
                {
                    tokio::time::sleep(START_POLL).await;
                }
                _ => return InvokeError::Unreachable { name, detail },
            }
        }
    }

    async fn forward(
        &self,
        mut parts: Parts,
        body: Body,
        caller: Caller,
        target: &Target<'_>,
        incoming_authority: Option<&str>,
        Instance {
            address,
            timeout,
            ids,
        }: Instance<'_>,
    ) -> Result<Answer, InvokeError> {
        // The whole call, body included, must end by then.
        let deadline = timeout.map(|timeout| {
            tokio::time::Instant::now() + timeout.saturating_add(self.config.timeout_margin)
        });
        let timed_out = || InvokeError::Timeout {
            name: target.name.to_owned(),
            timeout: timeout.unwrap_or_default(),
        };
        let limit = self.config.max_body_bytes;
        if content_length(&parts.headers).is_some_and(|len| len > limit) {
            return Err(InvokeError::BodyTooLarge { limit });
        }
        let unreachable = |detail: String| InvokeError::Unreachable {
            name: target.name.to_owned(),
            detail,
        };
        let bad_address = |e: String| unreachable(format!("bad address {address}: {e}"));
        let upstream_uri = match address {
            Address::Unix(path) => unix::uri(path, target.rest, target.query),
            Address::Tcp(authority) => upstream_uri(authority, target.rest, target.query),
        }
        .map_err(bad_address)?;
        let host = HeaderValue::from_str(address.host()).map_err(|e| bad_address(e.to_string()))?;

        let client_ip = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|info| info.0.ip());
        map::request(
            &mut parts.headers,
            caller,
            self.config.console_cookie.as_deref(),
            host,
            client_ip,
            incoming_authority,
            ids,
        );
        if caller.is_trigger()
            && let Some(len) = body.size_hint().exact()
        {
            return self
                .forward_in_hand(parts, body, len, target, address, (deadline, timed_out))
                .await;
        }
        parts.uri = upstream_uri;
        // The upstream client speaks HTTP/1.1 whatever the caller used.
        parts.version = Version::HTTP_11;
        parts.extensions.clear();
        let request = hyper::Request::from_parts(parts, RequestBody::new(body, limit));

        let call = match address {
            Address::Unix(_) => self.clients().unix.request(request),
            Address::Tcp(_) => self.clients().tcp.request(request),
        };
        let answer = within(deadline, call)
            .await
            .ok_or_else(timed_out)?
            .map_err(|e| classify(&e, target.name))?;

        let (mut parts, mut rest) = answer.into_parts();
        map::answer(&mut parts.headers, self.config.console_cookie.as_deref());
        // The head waits for the first frame: an answer that breaks off before any byte
        // of its body is still a 502 the caller can read, not an empty reply.
        let first = match within(deadline, rest.frame()).await.ok_or_else(timed_out)? {
            None => return Ok(Answer::Whole(Response::from_parts(parts, Body::empty()))),
            Some(Err(e)) => {
                return Err(InvokeError::BadAnswer {
                    name: target.name.to_owned(),
                    detail: sless_core::error_text::error_chain(&e),
                });
            }
            Some(Ok(frame)) => frame,
        };
        let first = match first.into_data() {
            Ok(data) if rest.is_end_stream() => {
                return Ok(Answer::Whole(Response::from_parts(parts, Body::from(data))));
            }
            Ok(data) => Frame::data(data),
            Err(trailers) => trailers,
        };
        Ok(Answer::Streaming {
            parts,
            first,
            rest,
            deadline: deadline.map(|d| Box::pin(tokio::time::sleep_until(d))),
        })
    }
}

impl Proxy {
    /// A trigger's call, whose body sless holds in memory: sent whole on a kept
    /// connection ([`in_hand`]), its answer read to the end (what a trigger reads of it
    /// kept). `parts` has its headers rewritten already.
    async fn forward_in_hand(
        &self,
        parts: Parts,
        body: Body,
        len: u64,
        target: &Target<'_>,
        address: &Address,
        (deadline, timed_out): (Option<tokio::time::Instant>, impl FnOnce() -> InvokeError),
    ) -> Result<Answer, InvokeError> {
        let limit = self.config.max_body_bytes;
        if len > limit {
            return Err(InvokeError::BodyTooLarge { limit });
        }
        let body = body
            .collect()
            .await
            .map_err(|e| InvokeError::BadRequestBody(e.to_string()))?
            .to_bytes();
        let request = in_hand::request(
            &parts.method,
            target.rest,
            target.query,
            &parts.headers,
            &body,
        );
        let exchange = in_hand::exchange(
            &self.trigger_upstreams,
            address,
            &request,
            self.config.console_cookie.as_deref(),
            MAX_TRIGGER_ANSWER_READ,
        );
        let name = || target.name.to_owned();
        let answered = within(deadline, exchange)
            .await
            .ok_or_else(timed_out)?
            .map_err(|failed| match failed {
                in_hand::Failed::Unreachable(detail) => InvokeError::Unreachable {
                    name: name(),
                    detail,
                },
                in_hand::Failed::BadAnswer(detail) => InvokeError::BadAnswer {
                    name: name(),
                    detail,
                },
            })?;
        let mut response = Response::new(Body::from(answered.body));
        *response.status_mut() = answered.status;
        *response.headers_mut() = answered.headers;
        Ok(Answer::Whole(response))
    }
}

/// What served a streaming call, for its record.
struct Served {
    version: Option<Arc<str>>,
    /// How long it waited for an instance to start; None when one was ready.
    start_wait: Option<Duration>,
}

/// Records the call once its streaming body ends, as cut when it was.
fn record_later(
    calls: Arc<Calls>,
    target: &Target<'_>,
    method: Method,
    status: StatusCode,
    started: Instant,
    // Held until the answer ends: the call counts as in flight on its instance.
    held: (InFlight, Lease),
    (ids, caller, trigger_name, served): (&CallIds, Caller, Option<Box<str>>, Served),
) -> impl FnOnce(Option<CallError>) + Send + 'static {
    let path = target.rest.to_owned();
    let ids = *ids;
    move |error| {
        drop(held);
        let mut record = invocation(method, path, status, started, error, &ids, caller.into());
        record.trigger_name = trigger_name;
        record.served_by(served.version, served.start_wait);
        calls.record(record);
    }
}

pub(super) fn invocation(
    method: Method,
    path: String,
    status: StatusCode,
    started: Instant,
    error: Option<CallError>,
    ids: &CallIds,
    trigger: Via,
) -> Invocation {
    let duration = started.elapsed();
    // An answer cut after its head went out is recorded as what the caller got.
    let status = match error {
        Some(CallError::Timeout) => StatusCode::GATEWAY_TIMEOUT,
        Some(CallError::BadAnswer) => StatusCode::BAD_GATEWAY,
        None => status,
    };
    Invocation {
        request_id: String::from_utf8_lossy(ids.request_id()).into(),
        trigger,
        trigger_name: None,
        refused: false,
        version: None,
        cold: false,
        start_wait: Duration::ZERO,
        time: Utc::now() - duration,
        method,
        path,
        status: status.as_u16(),
        duration,
        error,
        trace: Some(ids.trace()),
    }
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

pub(super) fn upstream_uri(
    authority: &str,
    rest: &str,
    query: Option<&str>,
) -> Result<Uri, String> {
    let query_len = query.map_or(0, |q| q.len() + 1);
    let mut uri = String::with_capacity("http://".len() + authority.len() + rest.len() + query_len);
    uri.push_str("http://");
    uri.push_str(authority);
    uri.push_str(rest);
    if let Some(query) = query {
        uri.push('?');
        uri.push_str(query);
    }
    let uri = Uri::try_from(uri).map_err(|e| e.to_string())?;
    match uri.authority() {
        Some(a) if a.as_str() == authority && !authority.contains('@') => Ok(uri),
        _ => Err("not a host:port".into()),
    }
}

/// Tells the caller's own faults (a body over the limit, a body that broke off) from
/// the function's, by looking for [`RequestBodyError`] among the error's causes.
fn classify(error: &(dyn StdError + 'static), name: &str) -> InvokeError {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if let Some(body_error) = e.downcast_ref::<RequestBodyError>() {
            return match body_error {
                RequestBodyError::TooLarge { limit } => InvokeError::BodyTooLarge { limit: *limit },
                RequestBodyError::Caller(e) => InvokeError::BadRequestBody(e.to_string()),
            };
        }
        cause = e.source();
    }
    InvokeError::Unreachable {
        name: name.to_owned(),
        detail: sless_core::error_text::error_chain(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(uri: &Uri) -> Option<Target<'_>> {
        Target::parse(uri)
    }

    #[test]
    fn parses_targets_without_decoding() {
        let uri: Uri = "/fn/ns/f/a/b%2F?x=1&y=%20".parse().unwrap();
        assert_eq!(
            target(&uri),
            Some(Target {
                namespace: "ns",
                name: "f",
                rest: "/a/b%2F",
                query: Some("x=1&y=%20"),
            })
        );
        let uri: Uri = "/fn/ns/f".parse().unwrap();
        assert_eq!(target(&uri).unwrap().rest, "/");
        let uri: Uri = "/fn/ns/f/".parse().unwrap();
        assert_eq!(target(&uri).unwrap().rest, "/");
        for bad in ["/fn/ns", "/fn//f", "/fn/ns/", "/other/ns/f"] {
            let uri: Uri = bad.parse().unwrap();
            assert_eq!(target(&uri), None, "{bad}");
        }
    }

    #[test]
    fn builds_upstream_uris() {
        let uri = upstream_uri("127.0.0.1:8080", "/a/b", Some("x=1&y=%20")).unwrap();
        assert_eq!(uri.to_string(), "http://127.0.0.1:8080/a/b?x=1&y=%20");
        let uri = upstream_uri("f.sless-fn-ns.svc.cluster.local:8080", "/", None).unwrap();
        assert_eq!(uri.path(), "/");
        assert!(upstream_uri("a b", "/", None).is_err());
        assert!(upstream_uri("host/evil", "/", None).is_err());
        assert!(upstream_uri("user@host:1", "/", None).is_err());
    }
}
