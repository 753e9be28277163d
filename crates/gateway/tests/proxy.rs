//! The invoke proxy against a real upstream on a loopback port, called with reqwest.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt;
use gateway::proxy::{self, CallError, Proxy, ProxyConfig};
use serde_json::{Value, json};
use sless_core::model::Kind;
use sless_core::routes::{Address, Route, RouteTable};

const MIB: usize = 1024 * 1024;

#[derive(Default)]
struct TestRoutes {
    routes: Mutex<HashMap<(String, String), Route>>,
}

impl TestRoutes {
    fn set(&self, namespace: &str, name: &str, route: Route) {
        self.routes
            .lock()
            .unwrap()
            .insert((namespace.to_owned(), name.to_owned()), route);
    }
}

impl RouteTable for TestRoutes {
    fn route(&self, namespace: &str, name: &str) -> Route {
        self.routes
            .lock()
            .unwrap()
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
            .unwrap_or(Route::Unknown)
    }
}

fn ready(authority: &str, timeout: Option<Duration>) -> Route {
    Route::Ready {
        kind: Kind::Function,
        instances: Address::Tcp(authority.into()).into(),
        timeout,
        version: None,
    }
}

/// `/sleep` answers after 5 s, `/big` streams 50 MiB, `/hop` answers with hop-by-hop
/// headers, `/stall` sends its head and a first chunk then nothing for 5 s, `/cookies`
/// sets cookies; anything else echoes the request (the body only counted).
async fn upstream(request: Request) -> Response {
    let path = request.uri().path().to_owned();
    match path.as_str() {
        "/sleep" => {
            tokio::time::sleep(Duration::from_secs(5)).await;
            "late".into_response()
        }
        "/big" => {
            let chunks = futures::stream::iter(0..50)
                .map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![b'x'; MIB])));
            Body::from_stream(chunks).into_response()
        }
        "/stall" => {
            let first = futures::stream::once(async { Ok(Bytes::from_static(b"start ")) });
            let late = futures::stream::once(async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                Ok::<_, std::io::Error>(Bytes::from_static(b"late"))
            });
            Body::from_stream(first.chain(late)).into_response()
        }
        "/cookies" => (
            [
                ("set-cookie", "sless_session=planted; Path=/; HttpOnly"),
                ("set-cookie", "theme=dark; Path=/"),
            ],
            "cookies",
        )
            .into_response(),
        "/own-id" => ([("x-request-id", "the function's own")], "own").into_response(),
        "/hop" => (
            [
                ("keep-alive", "timeout=5"),
                ("connection", "x-upstream-hop"),
                ("x-upstream-hop", "secret"),
                ("x-upstream-ordinary", "visible"),
            ],
            "hop",
        )
            .into_response(),
        _ => echo(request).await,
    }
}

async fn echo(request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let mut headers: HashMap<String, String> = HashMap::new();
    for (name, value) in &parts.headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        headers
            .entry(name.as_str().to_owned())
            .and_modify(|v| {
                v.push_str(", ");
                v.push_str(&value);
            })
            .or_insert(value);
    }
    let mut body_len = 0usize;
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(chunk) => body_len += chunk.len(),
            Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
        }
    }
    axum::Json(json!({
        "method": parts.method.as_str(),
        "path": parts.uri.path(),
        "query": parts.uri.query(),
        "headers": headers,
        "body_len": body_len,
        "peer": parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.to_string()),
    }))
    .into_response()
}

async fn serve(router: Router) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        axum::serve(
            listener,
            router.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    (addr, task)
}

/// The proxy served as `sless` serves it: its fast path first, hyper and the router for
/// the rest.
async fn serve_proxy(
    proxy: Arc<Proxy>,
    limits: gateway::serve::Limits,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = gateway::serve::App::with_proxy(proxy::router(proxy.clone()), proxy);
    let task = tokio::spawn(async move {
        gateway::serve::serve(
            listener,
            app,
            std::num::NonZeroUsize::new(2).unwrap(),
            limits,
            std::future::pending(),
        )
        .await
        .unwrap();
    });
    (addr, task)
}

struct Harness {
    base: String,
    proxy_addr: SocketAddr,
    upstream: String,
    routes: Arc<TestRoutes>,
    proxy: Arc<Proxy>,
    client: reqwest::Client,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Harness {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Harness {
    async fn start() -> Self {
        Self::start_with(ProxyConfig::default()).await
    }

    async fn start_with(config: ProxyConfig) -> Self {
        Self::start_with_limits(config, gateway::serve::Limits::default()).await
    }

    /// Upstream `ns/f` ready with a 30 s timeout.
    async fn start_with_limits(config: ProxyConfig, limits: gateway::serve::Limits) -> Self {
        let (upstream_addr, upstream_task) = serve(Router::new().fallback(upstream)).await;
        let upstream = upstream_addr.to_string();
        let routes = Arc::new(TestRoutes::default());
        routes.set("ns", "f", ready(&upstream, Some(Duration::from_secs(30))));
        let proxy = Arc::new(Proxy::new(routes.clone(), config));
        let (proxy_addr, proxy_task) = serve_proxy(proxy.clone(), limits).await;
        Self {
            base: format!("http://{proxy_addr}"),
            proxy_addr,
            upstream,
            routes,
            proxy,
            client: reqwest::Client::builder().no_proxy().build().unwrap(),
            tasks: vec![upstream_task, proxy_task],
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn echo(&self, request: reqwest::RequestBuilder) -> Value {
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200);
        response.json().await.unwrap()
    }
}

async fn error_of(response: reqwest::Response) -> (u16, String) {
    let status = response.status().as_u16();
    assert_eq!(
        response.headers()["content-type"],
        "application/json",
        "status {status}"
    );
    let body: Value = response.json().await.unwrap();
    (status, body["error"].as_str().unwrap().to_owned())
}

#[tokio::test]
async fn sub_path_and_raw_query_pass_through() {
    let h = Harness::start().await;
    let seen = h.echo(h.client.get(h.url("/fn/ns/f/a/b?x=1&y=%20"))).await;
    assert_eq!(seen["path"], "/a/b");
    assert_eq!(seen["query"], "x=1&y=%20");

    let seen = h.echo(h.client.get(h.url("/fn/ns/f/a%2Fb/"))).await;
    assert_eq!(seen["path"], "/a%2Fb/");
    assert_eq!(seen["query"], Value::Null);

    for root in ["/fn/ns/f", "/fn/ns/f/"] {
        let seen = h.echo(h.client.get(h.url(root))).await;
        assert_eq!(seen["path"], "/", "{root}");
    }
    let seen = h.echo(h.client.get(h.url("/fn/ns/f?only=query"))).await;
    assert_eq!(seen["path"], "/");
    assert_eq!(seen["query"], "only=query");
}

#[tokio::test]
async fn all_methods_and_bodies_are_forwarded() {
    let h = Harness::start().await;
    for method in ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"] {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let seen = h
            .echo(
                h.client
                    .request(method.clone(), h.url("/fn/ns/f/m"))
                    .body("twelve bytes"),
            )
            .await;
        assert_eq!(seen["method"], method.as_str());
        assert_eq!(seen["body_len"], 12, "{method}");
    }
    let response = h.client.head(h.url("/fn/ns/f/m")).send().await.unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn hop_by_hop_headers_stay_on_their_hop() {
    let h = Harness::start().await;
    let seen = h
        .echo(
            h.client
                .get(h.url("/fn/ns/f/h"))
                .header("connection", "keep-alive, X-Custom-Hop")
                .header("x-custom-hop", "drop me")
                .header("te", "trailers")
                .header("upgrade", "websocket")
                .header("proxy-authorization", "Basic dXNlcjpwYXNz")
                .header("keep-alive", "timeout=5")
                .header("x-ordinary", "keep me"),
        )
        .await;
    let headers = seen["headers"].as_object().unwrap();
    for hop in [
        "connection",
        "x-custom-hop",
        "te",
        "upgrade",
        "proxy-authorization",
        "keep-alive",
    ] {
        assert!(!headers.contains_key(hop), "{hop} reached the upstream");
    }
    assert_eq!(headers["x-ordinary"], "keep me");
    assert_eq!(headers["host"], h.upstream.as_str());

    let response = h.client.get(h.url("/fn/ns/f/hop")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let headers = response.headers();
    assert!(!headers.contains_key("keep-alive"));
    assert!(!headers.contains_key("x-upstream-hop"));
    assert_ne!(
        headers.get("connection").map(|v| v.to_str().unwrap()),
        Some("x-upstream-hop")
    );
    assert_eq!(headers["x-upstream-ordinary"], "visible");
    assert_eq!(response.text().await.unwrap(), "hop");
}

#[tokio::test]
async fn forwarding_headers_are_added() {
    let h = Harness::start().await;
    let seen = h.echo(h.client.get(h.url("/fn/ns/f/"))).await;
    let headers = &seen["headers"];
    assert_eq!(headers["x-forwarded-for"], "127.0.0.1");
    assert_eq!(headers["x-forwarded-proto"], "http");
    assert_eq!(headers["x-forwarded-host"], h.proxy_addr.to_string());
    assert_eq!(headers["host"], h.upstream.as_str());

    let seen = h
        .echo(
            h.client
                .get(h.url("/fn/ns/f/"))
                .header("x-forwarded-for", "10.0.0.1")
                .header("x-forwarded-proto", "https")
                .header("x-real-ip", "203.0.113.66")
                .header("forwarded", "for=203.0.113.66;proto=https"),
        )
        .await;
    let headers = &seen["headers"];
    assert_eq!(headers["x-forwarded-for"], "10.0.0.1, 127.0.0.1");
    // The caller cannot claim a scheme or an address: sless says how it was reached.
    assert_eq!(headers["x-forwarded-proto"], "http");
    assert!(headers.get("x-real-ip").is_none(), "{headers}");
    assert!(headers.get("forwarded").is_none(), "{headers}");
}

const CALLER_TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// The `X-Request-Id` of an answer.
fn request_id(response: &reqwest::Response) -> String {
    response.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn every_call_has_a_request_id_and_a_trace() {
    let h = Harness::start().await;
    // A plain GET takes the fast path, a chunked POST the full one: both alike.
    let fast = || h.client.get(h.url("/fn/ns/f/"));
    let full = || {
        let chunks = futures::stream::once(async {
            Ok::<_, std::io::Error>(Bytes::from_static(b"chunked"))
        });
        h.client
            .post(h.url("/fn/ns/f/"))
            .body(reqwest::Body::wrap_stream(chunks))
    };
    let paths: [&dyn Fn() -> reqwest::RequestBuilder; 2] = [&fast, &full];
    for call in paths {
        let response = call()
            .header("x-request-id", "order-7")
            .header("traceparent", CALLER_TRACE)
            .send()
            .await
            .unwrap();
        assert_eq!(request_id(&response), "order-7");
        let seen: Value = response.json().await.unwrap();
        assert_eq!(seen["headers"]["x-request-id"], "order-7", "{seen}");
        let traceparent = seen["headers"]["traceparent"].as_str().unwrap();
        assert!(
            traceparent.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-")
                && traceparent.ends_with("-01")
                && !traceparent.contains("00f067aa0ba902b7"),
            "the caller's trace, continued with a span of ours: {traceparent}"
        );

        for sent in [None, Some("not a valid id!")] {
            let mut request = call();
            if let Some(sent) = sent {
                request = request.header("x-request-id", sent);
            }
            let response = request.send().await.unwrap();
            let made = request_id(&response);
            assert!(
                made.len() == 32 && made.bytes().all(|b| b.is_ascii_hexdigit()),
                "{sent:?}: {made}"
            );
            let seen: Value = response.json().await.unwrap();
            assert_eq!(seen["headers"]["x-request-id"], made.as_str());
            let traceparent = seen["headers"]["traceparent"].as_str().unwrap();
            assert_eq!(traceparent.len(), 55, "a new trace: {traceparent}");
        }
    }
    let first = request_id(&h.client.get(h.url("/fn/ns/f/")).send().await.unwrap());
    let second = request_id(&h.client.get(h.url("/fn/ns/f/")).send().await.unwrap());
    assert_ne!(first, second);

    // The function cannot answer with another id; the proxy's own errors carry one.
    let response = h.client.get(h.url("/fn/ns/f/own-id")).send().await.unwrap();
    assert_eq!(response.headers().get_all("x-request-id").iter().count(), 1);
    assert_ne!(request_id(&response), "the function's own");
    let response = h
        .client
        .get(h.url("/fn/ns/nope/"))
        .header("x-request-id", "lost-1")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    assert_eq!(request_id(&response), "lost-1");
}

#[tokio::test]
async fn errors_are_distinct_json() {
    let h = Harness::start().await;

    let response = h.client.get(h.url("/fn/ns/nope/x")).send().await.unwrap();
    let (status, error) = error_of(response).await;
    assert_eq!(status, 404);
    assert_eq!(error, "no function or service \"nope\" in namespace ns");

    h.routes.set(
        "ns",
        "off",
        Route::Unavailable {
            reason: "function \"off\" is disabled".into(),
        },
    );
    let response = h.client.post(h.url("/fn/ns/off")).send().await.unwrap();
    assert_eq!(
        error_of(response).await,
        (503, "function \"off\" is disabled".into())
    );

    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    h.routes.set("ns", "gone", ready(&closed.to_string(), None));
    let response = h.client.get(h.url("/fn/ns/gone/")).send().await.unwrap();
    let (status, error) = error_of(response).await;
    assert_eq!(status, 502);
    assert!(
        error.starts_with("function \"gone\" is unreachable: "),
        "{error}"
    );
    assert!(error.to_lowercase().contains("refused"), "{error}");
}

#[tokio::test]
async fn calls_wait_for_a_starting_function_then_give_up() {
    let h = Harness::start_with(ProxyConfig {
        start_wait: Duration::from_millis(500),
        ..ProxyConfig::default()
    })
    .await;
    let starting = || Route::Starting {
        reason: "function \"f\" is starting".into(),
    };

    // Ready while the call waits: it is forwarded.
    h.routes.set("ns", "f", starting());
    let (routes, upstream) = (h.routes.clone(), h.upstream.clone());
    let flip = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(150)).await;
        routes.set("ns", "f", ready(&upstream, None));
    });
    let started = std::time::Instant::now();
    let answer = h.echo(h.client.get(h.url("/fn/ns/f/after-start"))).await;
    assert_eq!(answer["path"], "/after-start");
    assert!(started.elapsed() >= Duration::from_millis(150));
    flip.await.unwrap();

    // Still starting when the wait is over: 503 with the reason.
    h.routes.set("ns", "f", starting());
    let started = std::time::Instant::now();
    let response = h.client.get(h.url("/fn/ns/f/")).send().await.unwrap();
    assert_eq!(
        error_of(response).await,
        (503, "function \"f\" is starting".into())
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_secs(3),
        "{took:?}"
    );
}

#[tokio::test]
async fn slow_functions_time_out() {
    // The default margin: a caller waits the function's timeout_sec, not much more.
    let h = Harness::start_with(ProxyConfig::default()).await;
    h.routes.set(
        "ns",
        "slow",
        ready(&h.upstream, Some(Duration::from_secs(1))),
    );
    let started = std::time::Instant::now();
    let response = h
        .client
        .get(h.url("/fn/ns/slow/sleep"))
        .send()
        .await
        .unwrap();
    let (status, error) = error_of(response).await;
    assert_eq!(status, 504);
    assert_eq!(
        error,
        "function \"slow\" did not answer within 1 s (its timeout_sec)"
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_millis(1750),
        "the 504 came {took:?} after the call, its timeout_sec being 1 s"
    );

    // Still answers fast calls within the limit.
    let response = h
        .client
        .get(h.url("/fn/ns/slow/quick"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn bodies_over_the_limit_are_refused() {
    let h = Harness::start_with(ProxyConfig {
        max_body_bytes: 1024,
        ..ProxyConfig::default()
    })
    .await;

    let response = h
        .client
        .post(h.url("/fn/ns/f/up"))
        .body(vec![0u8; 2048])
        .send()
        .await
        .unwrap();
    let (status, error) = error_of(response).await;
    assert_eq!(status, 413);
    assert!(error.contains("1024"), "{error}");

    let at_limit = h
        .echo(h.client.post(h.url("/fn/ns/f/up")).body(vec![0u8; 1024]))
        .await;
    assert_eq!(at_limit["body_len"], 1024);

    let chunks =
        futures::stream::iter((0..4).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![1u8; 512]))));
    let response = h
        .client
        .post(h.url("/fn/ns/f/up"))
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    assert_eq!(error_of(response).await.0, 413);

    let small =
        futures::stream::iter((0..2).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![1u8; 512]))));
    let seen = h
        .echo(
            h.client
                .post(h.url("/fn/ns/f/up"))
                .body(reqwest::Body::wrap_stream(small)),
        )
        .await;
    assert_eq!(seen["body_len"], 1024);

    let stats = h.proxy.invocations().stats("ns", "f");
    assert_eq!(stats.count, 4);
    assert_eq!(stats.errors, 0);
}

fn rss_bytes() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kib: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// The large-body tests share one process-wide RSS figure, so they take turns.
static LARGE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn large_request_bodies_stream() {
    let _turn = LARGE.lock().await;
    let h = Harness::start().await;
    // Warm up allocator and connection pools before the baseline.
    h.echo(h.client.post(h.url("/fn/ns/f/warm")).body(vec![0u8; MIB]))
        .await;
    let before = rss_bytes();

    let chunks = futures::stream::iter(0..100)
        .map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![b'y'; MIB])));
    let seen = h
        .echo(
            h.client
                .post(h.url("/fn/ns/f/upload"))
                .body(reqwest::Body::wrap_stream(chunks)),
        )
        .await;
    assert_eq!(seen["body_len"], 100 * MIB);

    let grown = rss_bytes().saturating_sub(before);
    eprintln!("RSS grew by {} KiB streaming 100 MiB", grown / 1024);
    assert!(grown < 30 * MIB, "RSS grew by {} MiB", grown / MIB);
}

#[tokio::test]
async fn large_responses_stream() {
    let _turn = LARGE.lock().await;
    let h = Harness::start().await;
    let response = h.client.get(h.url("/fn/ns/f/big")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let mut received = 0usize;
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        received += chunk.unwrap().len();
    }
    assert_eq!(received, 50 * MIB);
}

#[tokio::test]
async fn invocations_are_logged() {
    let h = Harness::start().await;
    h.client
        .get(h.url("/fn/ns/f/first?q=1"))
        .send()
        .await
        .unwrap();
    h.client.delete(h.url("/fn/ns/f")).send().await.unwrap();
    h.client.get(h.url("/fn/ns/nope")).send().await.unwrap();
    h.routes.set(
        "ns",
        "off",
        Route::Unavailable {
            reason: "disabled".into(),
        },
    );
    h.client.get(h.url("/fn/ns/off/x")).send().await.unwrap();

    let log = h.proxy.invocations();
    let recent = log.recent("ns", "f", &gateway::proxy::Filter::default(), 10);
    assert_eq!(recent.len(), 2);
    assert_eq!(
        (
            recent[0].method.as_str(),
            recent[0].path.as_str(),
            recent[0].status
        ),
        ("DELETE", "/", 200)
    );
    assert_eq!(
        (
            recent[1].method.as_str(),
            recent[1].path.as_str(),
            recent[1].status
        ),
        ("GET", "/first", 200)
    );
    let shown = serde_json::to_value(&recent[0]).unwrap();
    assert!(shown["duration_ms"].as_f64().unwrap() > 0.0);
    assert!(chrono::DateTime::parse_from_rfc3339(shown["time"].as_str().unwrap()).is_ok());
    let stats = log.stats("ns", "f");
    assert_eq!((stats.count, stats.errors), (2, 0));
    let total = (recent[0].duration + recent[1].duration).as_secs_f64() * 1000.0;
    assert!(stats.total_duration_ms >= total - 1e-6);

    // A disabled function's 503 is sless's refusal, not the function's error.
    let off = log.stats("ns", "off");
    assert_eq!((off.count, off.errors, off.refused), (1, 0, 1));
    assert_eq!(
        log.recent("ns", "off", &gateway::proxy::Filter::default(), 10)[0].status,
        503
    );
    assert!(
        log.recent("ns", "nope", &gateway::proxy::Filter::default(), 10)
            .is_empty()
    );
    assert_eq!(log.stats("ns", "nope").count, 0);

    log.forget("ns", "f").await.unwrap();
    assert!(
        log.recent("ns", "f", &gateway::proxy::Filter::default(), 10)
            .is_empty()
    );
}

#[tokio::test]
async fn headers_pass_both_ways_on_reused_connections() {
    let h = Harness::start().await;
    for i in 0..20 {
        let response = h
            .client
            .put(h.url(&format!("/fn/ns/f/n/{i}")))
            .header("x-call", i.to_string())
            .body(format!("{i}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.headers()["content-type"], "application/json");
        let seen: Value = response.json().await.unwrap();
        assert_eq!(seen["headers"]["x-call"], i.to_string());
        assert_eq!(seen["path"], format!("/n/{i}"));
    }
}

/// The proxy with the console's cookie configured, as `sless up` runs it.
async fn console_harness() -> Harness {
    Harness::start_with(ProxyConfig {
        console_cookie: Some("sless_session".into()),
        ..ProxyConfig::default()
    })
    .await
}

#[tokio::test]
async fn the_console_cookie_never_reaches_a_function() {
    let h = console_harness().await;
    let seen = h
        .echo(
            h.client
                .get(h.url("/fn/ns/f/"))
                .header("cookie", "a=1; sless_session=secret; b=2"),
        )
        .await;
    assert_eq!(seen["headers"]["cookie"], "a=1; b=2");

    let seen = h
        .echo(
            h.client
                .get(h.url("/fn/ns/f/"))
                .header("cookie", "sless_session=secret"),
        )
        .await;
    assert!(seen["headers"].get("cookie").is_none(), "{seen}");

    let seen = h
        .echo(
            h.client
                .get(h.url("/fn/ns/f/"))
                .header("cookie", "theme=dark; sless_session_x=kept"),
        )
        .await;
    assert_eq!(
        seen["headers"]["cookie"],
        "theme=dark; sless_session_x=kept"
    );

    // Nor can a function set it.
    let response = h
        .client
        .get(h.url("/fn/ns/f/cookies"))
        .send()
        .await
        .unwrap();
    let set: Vec<&str> = response
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(set, ["theme=dark; Path=/"]);
}

#[tokio::test]
async fn function_answers_are_sandboxed() {
    let h = console_harness().await;
    let sandbox = "sandbox allow-scripts allow-forms allow-popups allow-downloads";
    for path in ["/fn/ns/f/page", "/fn/ns/f/cookies", "/fn/ns/nope/"] {
        let response = h.client.get(h.url(path)).send().await.unwrap();
        let policies: Vec<&str> = response
            .headers()
            .get_all("content-security-policy")
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        assert_eq!(policies, [sandbox], "{path}");
    }
}

/// The newest recorded call of `ns/name`, waiting briefly for a body still ending.
async fn last_call(h: &Harness, name: &str) -> gateway::proxy::Invocation {
    for _ in 0..50 {
        if let Some(call) = h
            .proxy
            .invocations()
            .recent("ns", name, &gateway::proxy::Filter::default(), 1)
            .pop()
        {
            return call;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no call of {name} recorded");
}

#[tokio::test]
async fn timeout_sec_bounds_the_body_too() {
    let h = Harness::start_with(ProxyConfig {
        timeout_margin: Duration::from_millis(100),
        ..ProxyConfig::default()
    })
    .await;
    h.routes.set(
        "ns",
        "stall",
        ready(&h.upstream, Some(Duration::from_secs(1))),
    );
    let started = std::time::Instant::now();
    let response = h
        .client
        .get(h.url("/fn/ns/stall/stall"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "the head went out before the stall");
    let body = response.bytes().await;
    let took = started.elapsed();
    assert!(body.is_err(), "a cut body must not look complete: {body:?}");
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_millis(1750),
        "the 504 came {took:?} after the call, its timeout_sec being 1 s"
    );
    let call = last_call(&h, "stall").await;
    assert_eq!((call.status, call.error), (504, Some(CallError::Timeout)));
    assert!(
        call.duration >= Duration::from_millis(1100),
        "{:?}",
        call.duration
    );
}

/// A trigger's call through the proxy, as the dispatcher makes it: its body in hand.
async fn trigger_call(h: &Harness, function: &str, path: &str) -> (u16, Bytes) {
    let request = axum::http::Request::builder()
        .method("POST")
        .uri(format!("/fn/ns/{function}{path}"))
        .header(proxy::TRIGGER_HEADER, "e30=")
        .header(proxy::TRIGGER_NAME_HEADER, "orders")
        .header("content-type", "application/json")
        .body(Body::from("{}"))
        .unwrap();
    let response = h.proxy.call(request, proxy::Caller::Event).await;
    let status = response.status().as_u16();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, body)
}

#[tokio::test]
async fn trigger_calls_go_whole_on_kept_connections_and_read_answers_whole() {
    let h = Harness::start().await;
    let (status, body) = trigger_call(&h, "f", "/a?x=1").await;
    assert_eq!(status, 200);
    let first: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (&first["method"], &first["path"], &first["query"]),
        (&json!("POST"), &json!("/a"), &json!("x=1"))
    );
    assert_eq!(first["body_len"], 2);
    let headers = &first["headers"];
    for (name, value) in [
        ("x-sless-amqp", "e30="),
        ("x-sless-trigger", "orders"),
        ("host", h.upstream.as_str()),
        ("content-type", "application/json"),
        ("content-length", "2"),
        ("x-forwarded-proto", "http"),
    ] {
        assert_eq!(headers[name], value, "{name}: {headers}");
    }
    assert!(
        headers["x-request-id"].is_string() && headers["traceparent"].is_string(),
        "{headers}"
    );
    let (_, body) = trigger_call(&h, "f", "/").await;
    let second: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(second["peer"], first["peer"], "a connection per call");
    let call = last_call(&h, "f").await;
    assert_eq!(
        (call.status, call.trigger_name.as_deref()),
        (200, Some("orders"))
    );

    // What a trigger reads of an answer is kept, the rest read to its end.
    let (status, body) = trigger_call(&h, "f", "/big").await;
    assert_eq!((status, body.len()), (200, 64 * 1024));
    // The whole answer within the function's timeout, or a 504.
    h.routes.set(
        "ns",
        "slow",
        ready(&h.upstream, Some(Duration::from_secs(1))),
    );
    assert_eq!(trigger_call(&h, "slow", "/stall").await.0, 504);
    assert_eq!(last_call(&h, "slow").await.status, 504);

    // Broken in its body: a 502, not a 200 with half a body.
    let bad =
        raw_upstream(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n")
            .await;
    h.routes.set("ns", "bad", ready(&bad, None));
    assert_eq!(trigger_call(&h, "bad", "/").await.0, 502);
    assert_eq!(last_call(&h, "bad").await.status, 502);

    // Chunked answers arrive decoded; kept connections the function closed are replaced.
    let closing =
        raw_upstream(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n")
            .await;
    h.routes.set("ns", "closing", ready(&closing, None));
    for i in 0..10 {
        let (status, body) = trigger_call(&h, "closing", "/").await;
        assert_eq!((status, &body[..]), (200, &b"ok"[..]), "call {i}");
        if i % 2 == 0 {
            // Time for the close to arrive before the next call.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// An upstream that answers every request with `answer` and closes.
async fn raw_upstream(answer: &'static [u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = stream.write_all(answer).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    address
}

#[tokio::test]
async fn malformed_answers_are_502_and_recorded_so() {
    let h = Harness::start().await;
    let bad_chunks =
        raw_upstream(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nnot a chunk\r\n")
            .await;
    h.routes.set(
        "ns",
        "bad",
        ready(&bad_chunks, Some(Duration::from_secs(5))),
    );
    let response = h.client.get(h.url("/fn/ns/bad/")).send().await.unwrap();
    let (status, error) = error_of(response).await;
    assert_eq!(status, 502);
    assert!(
        error.starts_with("function \"bad\" sent a malformed answer: "),
        "{error}"
    );
    let call = last_call(&h, "bad").await;
    assert_eq!(call.status, 502);

    // Broken off after its first bytes: the caller sees the connection close, the
    // log a 502.
    let short = raw_upstream(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this").await;
    h.routes.set("ns", "short", ready(&short, None));
    let response = h.client.get(h.url("/fn/ns/short/")).send().await.unwrap();
    if response.status() == 200 {
        assert!(
            response.bytes().await.is_err(),
            "a short body passed for whole"
        );
    } else {
        assert_eq!(error_of(response).await.0, 502);
    }
    let call = last_call(&h, "short").await;
    assert_eq!(call.status, 502);

    // A head without end: read up to a bound, then a 502.
    let endless: &'static [u8] = Box::leak(
        format!(
            "HTTP/1.1 200 OK\r\n{}\r\n",
            "X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n".repeat(10_000)
        )
        .into_bytes()
        .into_boxed_slice(),
    );
    let endless = raw_upstream(endless).await;
    h.routes.set("ns", "endless", ready(&endless, None));
    let response = h.client.get(h.url("/fn/ns/endless/")).send().await.unwrap();
    let (status, error) = error_of(response).await;
    assert_eq!(status, 502, "{error}");
}

/// Reads answers from `stream` until it closes: (status, lowercased headers, body) each.
/// `heads[i]`: the i-th request was HEAD (its answer has no body).
async fn read_answers(
    stream: &mut tokio::net::TcpStream,
    heads: &[bool],
) -> Vec<(u16, HashMap<String, String>, Vec<u8>)> {
    use tokio::io::AsyncReadExt;
    let mut bytes = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut bytes))
        .await
        .expect("the connection stays open")
        .unwrap();
    let mut answers = Vec::new();
    let mut at = 0;
    for head_request in heads {
        let mut parsed = [httparse::EMPTY_HEADER; 32];
        let mut response = httparse::Response::new(&mut parsed);
        let httparse::Status::Complete(len) = response.parse(&bytes[at..]).unwrap() else {
            panic!(
                "incomplete answer: {:?}",
                String::from_utf8_lossy(&bytes[at..])
            );
        };
        let headers: HashMap<String, String> = response
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_ascii_lowercase(),
                    String::from_utf8_lossy(h.value).into_owned(),
                )
            })
            .collect();
        let status = response.code.unwrap();
        at += len;
        let mut body = Vec::new();
        if *head_request || status == 204 {
        } else if let Some(length) = headers.get("content-length") {
            let length: usize = length.parse().unwrap();
            body.extend_from_slice(&bytes[at..at + length]);
            at += length;
        } else {
            assert_eq!(headers["transfer-encoding"], "chunked");
            loop {
                let httparse::Status::Complete((line, size)) =
                    httparse::parse_chunk_size(&bytes[at..]).unwrap()
                else {
                    panic!("broken chunk");
                };
                at += line;
                let size = size as usize;
                body.extend_from_slice(&bytes[at..at + size]);
                at += size + 2;
                if size == 0 {
                    break;
                }
            }
        }
        answers.push((status, headers, body));
    }
    assert_eq!(at, bytes.len(), "more answers than requests");
    answers
}

async fn connect(h: &Harness) -> tokio::net::TcpStream {
    tokio::net::TcpStream::connect(h.proxy_addr).await.unwrap()
}

#[tokio::test]
async fn pipelined_calls_of_both_paths_share_a_connection() {
    use tokio::io::AsyncWriteExt;
    let h = Harness::start().await;
    let mut stream = connect(&h).await;
    // Fast, fast with a body, HEAD (the HTTP stack from there on), then the rest.
    stream
        .write_all(
            b"GET /fn/ns/f/one HTTP/1.1\r\nHost: x\r\n\r\n\
              POST /fn/ns/f/two HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello\
              HEAD /fn/ns/f/three HTTP/1.1\r\nHost: x\r\n\r\n\
              GET /fn/ns/f/four HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await
        .unwrap();
    let answers = read_answers(&mut stream, &[false, false, true, false]).await;
    let statuses: Vec<u16> = answers.iter().map(|a| a.0).collect();
    assert_eq!(statuses, [200, 200, 200, 200]);
    let seen = |i: usize| -> Value { serde_json::from_slice(&answers[i].2).unwrap() };
    assert_eq!(seen(0)["path"], "/one");
    assert_eq!(
        (seen(1)["path"].clone(), seen(1)["body_len"].clone()),
        ("/two".into(), 5.into())
    );
    assert_eq!(seen(3)["path"], "/four");
    for (_, headers, _) in &answers {
        assert!(headers["content-security-policy"].starts_with("sandbox"));
    }
    let paths: Vec<String> = h
        .proxy
        .invocations()
        .recent("ns", "f", &gateway::proxy::Filter::default(), 10)
        .into_iter()
        .map(|call| call.path)
        .collect();
    assert_eq!(paths, ["/four", "/three", "/two", "/one"]);
}

#[tokio::test]
async fn ambiguous_request_framing_never_reaches_a_function() {
    use tokio::io::AsyncWriteExt;
    let h = Harness::start().await;
    for framing in [
        "Content-Length: 5\r\nContent-Length: 40",
        "Content-Length: +5",
        "Content-Length: 5, 6",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity",
    ] {
        let mut stream = connect(&h).await;
        let request = format!(
            "POST /fn/ns/f/a HTTP/1.1\r\nHost: x\r\n{framing}\r\n\r\nhelloGET /fn/ns/f/smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let answers = read_answers(&mut stream, &[false]).await;
        assert_eq!(answers[0].0, 400, "{framing}");
    }
    assert!(
        h.proxy
            .invocations()
            .recent("ns", "f", &gateway::proxy::Filter::default(), 10)
            .is_empty(),
        "a request reached the function"
    );
}

#[tokio::test]
async fn kept_upstream_connections_the_function_closes_are_replaced() {
    // Answers one call per connection without saying so, then closes.
    let closing = raw_upstream(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await;
    let h = Harness::start().await;
    h.routes.set("ns", "closing", ready(&closing, None));
    for i in 0..20 {
        let response = h
            .client
            .post(h.url("/fn/ns/closing/"))
            .body("x")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "call {i}");
        assert_eq!(response.text().await.unwrap(), "ok");
        if i % 2 == 0 {
            // Time for the close to arrive before the next call.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test]
async fn answers_framed_by_close_interim_heads_and_empty_answers_arrive_whole() {
    use tokio::io::AsyncWriteExt;
    let h = Harness::start().await;
    let until_close = raw_upstream(
        b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 200 OK\r\nX-Kind: close\r\n\r\nbody until close",
    )
    .await;
    let empty = raw_upstream(b"HTTP/1.1 204 No Content\r\nX-Kind: empty\r\n\r\n").await;
    let old = raw_upstream(b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nabc").await;
    h.routes.set("ns", "close", ready(&until_close, None));
    h.routes.set("ns", "empty", ready(&empty, None));
    h.routes.set("ns", "old", ready(&old, None));
    let mut stream = connect(&h).await;
    stream
        .write_all(
            b"GET /fn/ns/close/ HTTP/1.1\r\nHost: x\r\n\r\n\
              GET /fn/ns/empty/ HTTP/1.1\r\nHost: x\r\n\r\n\
              GET /fn/ns/old/ HTTP/1.1\r\nHost: x\r\n\r\n\
              GET /fn/ns/close/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await
        .unwrap();
    let answers = read_answers(&mut stream, &[false; 4]).await;
    assert_eq!(answers[0].0, 200);
    assert_eq!(answers[0].1["x-kind"], "close");
    assert_eq!(answers[0].2, b"body until close");
    assert_eq!(answers[1].0, 204);
    assert_eq!((answers[2].0, answers[2].2.as_slice()), (200, &b"abc"[..]));
    assert_eq!(answers[3].2, b"body until close");
}

#[tokio::test]
async fn slow_and_idle_callers_of_functions_are_cut() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let h = Harness::start_with_limits(
        ProxyConfig::default(),
        gateway::serve::Limits {
            header_timeout: Duration::from_millis(500),
            idle_timeout: Duration::from_millis(800),
            max_connections: 100,
        },
    )
    .await;
    // Sends `bytes` on a new connection; how long until the server closes it.
    let closed_after = |bytes: &'static [u8]| async {
        let mut stream = connect(&h).await;
        stream.write_all(bytes).await.unwrap();
        let started = std::time::Instant::now();
        let mut buf = [0u8; 4096];
        loop {
            match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return started.elapsed(),
                Ok(Ok(_)) => {}
                Err(_) => panic!("still open after 5 s"),
            }
        }
    };
    // A head that never ends: cut at the header timeout.
    let closed = closed_after(b"GET /fn/ns/f/ HTTP/1.1\r\nHost: x\r\n").await;
    assert!(
        closed < Duration::from_millis(1500),
        "closed after {closed:?}"
    );

    // After an answer, an idle connection is closed at the idle timeout.
    let closed = closed_after(b"GET /fn/ns/f/ HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(
        closed >= Duration::from_millis(700) && closed < Duration::from_millis(2500),
        "closed after {closed:?}"
    );
}

#[tokio::test]
async fn callers_that_close_their_connections_reuse_the_functions() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // Keep-alive, counting its connections.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let function = listener.local_addr().unwrap().to_string();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    while let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                        request.drain(..end + 4);
                        let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                        if stream.write_all(answer).await.is_err() {
                            return;
                        }
                    }
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
            });
        }
    });
    let h = Harness::start().await;
    h.routes.set("ns", "counted", ready(&function, None));
    for _ in 0..20 {
        let mut stream = connect(&h).await;
        stream
            .write_all(b"GET /fn/ns/counted/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let answers = read_answers(&mut stream, &[false]).await;
        assert_eq!((answers[0].0, answers[0].2.as_slice()), (200, &b"ok"[..]));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // One per serving thread, and one more if a caller came before the last left.
    let connections = accepted.load(Ordering::SeqCst);
    assert!(connections <= 4, "{connections} connections for 20 calls");
}

#[tokio::test]
async fn an_unreachable_function_is_a_502_also_to_a_caller_still_sending() {
    let h = Harness::start().await;
    let free = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gone = free.local_addr().unwrap().to_string();
    drop(free);
    h.routes.set("ns", "gone", ready(&gone, None));
    for i in 0..5 {
        let response = h
            .client
            .post(h.url("/fn/ns/gone/"))
            .body(vec![b'x'; 8 * MIB])
            .send()
            .await
            .unwrap_or_else(|e| panic!("call {i}: {e:?}"));
        let (status, error) = error_of(response).await;
        assert_eq!(status, 502, "call {i}: {error}");
        assert!(error.contains("unreachable"), "{error}");
        // The instance's address is a detail of the machine, not the caller's business.
        assert!(!error.contains(&gone), "{error}");
    }
}

/// As embedded mode's instances serve: on a Unix socket.
#[tokio::test]
async fn functions_on_unix_sockets_are_called_on_both_paths() {
    let mut h = Harness::start().await;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("instance");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    h.tasks.push(tokio::spawn(async move {
        axum::serve(listener, Router::new().fallback(upstream))
            .await
            .unwrap();
    }));
    let route = Route::Ready {
        kind: Kind::Function,
        instances: Address::Unix(socket.clone().into()).into(),
        timeout: Some(Duration::from_secs(30)),
        version: None,
    };
    h.routes.set("ns", "u", route);
    let chunked = || {
        let chunks = futures::stream::iter(["one ", "two"])
            .map(|c| Ok::<_, std::io::Error>(Bytes::from_static(c.as_bytes())));
        reqwest::Body::wrap_stream(chunks)
    };

    // A Content-Length body: the fast path; a chunked one: hyper's client.
    for _ in 0..3 {
        let seen = h
            .echo(
                h.client
                    .post(h.url("/fn/ns/u/a/b?x=1"))
                    .body("twelve bytes"),
            )
            .await;
        assert_eq!(seen["path"], "/a/b");
        assert_eq!(seen["query"], "x=1");
        assert_eq!(seen["body_len"], 12);
        assert_eq!(seen["headers"]["host"], "localhost");
        let seen = h
            .echo(h.client.post(h.url("/fn/ns/u/c")).body(chunked()))
            .await;
        assert_eq!(seen["path"], "/c");
        assert_eq!(seen["body_len"], 7);
        assert_eq!(seen["headers"]["host"], "localhost");
    }

    // No socket there: both paths answer 502 without naming the server's path.
    let gone = Route::Ready {
        kind: Kind::Function,
        instances: Address::Unix(dir.path().join("gone").into()).into(),
        timeout: None,
        version: None,
    };
    h.routes.set("ns", "gone", gone);
    for request in [
        h.client.get(h.url("/fn/ns/gone/")),
        h.client.post(h.url("/fn/ns/gone/")).body(chunked()),
    ] {
        let (status, error) = error_of(request.send().await.unwrap()).await;
        assert_eq!(status, 502, "{error}");
        assert!(error.contains("unreachable"), "{error}");
        let dir = dir.path().to_str().unwrap();
        assert!(!error.contains(dir), "{error}");
    }
}
