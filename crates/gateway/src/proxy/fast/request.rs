//! A caller's request head, parsed in place: whether the fast path takes it and, when
//! it does, the head it sends the function.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::Method;
use axum::http::header::{CONNECTION, CONTENT_LENGTH, EXPECT, HOST, TRANSFER_ENCODING, UPGRADE};
use sless_core::auth::TRIGGER_TOKEN_HEADER;
use sless_core::routes::{Address, Lease, Route};

use super::decimal;
use crate::proxy::Proxy;
use crate::proxy::forward::Target;
use crate::proxy::headers::call_id::CallIds;
use crate::proxy::headers::connection_tokens;
use crate::proxy::headers::wire::{self, is};
use crate::proxy::log::Calls;

/// Request heads with more headers or bytes go to hyper, which has the limits and the
/// errors (431) for them.
const MAX_REQUEST_HEADERS: usize = 64;
const MAX_REQUEST_HEAD: usize = 16 * 1024;

/// What `prepare` learnt of a request head.
#[expect(
    clippy::large_enum_variant,
    reason = "a call is moved a few times, never stored: a box would cost an allocation per call"
)]
pub(super) enum Step {
    Partial,
    HandOver,
    Call(Call),
}

/// A request the fast path takes; its upstream head is in `Connection::out`.
pub(super) struct Call {
    pub(super) started: Instant,
    pub(super) method: Method,
    pub(super) head_len: usize,
    pub(super) body_len: u64,
    /// The caller asked to close after this answer.
    pub(super) close: bool,
    pub(super) function: Arc<Function>,
    /// The path after the function's name, for the invocation record.
    pub(super) rest: String,
    /// Its place on an instance, held until the call ends.
    pub(super) lease: Lease,
    pub(super) timeout: Option<Duration>,
    /// The version its instances run, for the record.
    pub(super) version: Option<Arc<str>>,
    /// Its request id (given to the caller) and trace context.
    pub(super) ids: CallIds,
}

impl Call {
    pub(super) fn address(&self) -> &Address {
        self.lease.address()
    }
}

/// The function a connection called last, kept for its next call: a caller usually
/// calls the same function again.
pub(super) struct Function {
    pub(super) namespace: String,
    pub(super) name: String,
    pub(super) calls: Arc<Calls>,
}

impl Function {
    pub(super) fn target(&self) -> Target<'_> {
        Target {
            namespace: &self.namespace,
            name: &self.name,
            rest: "/",
            query: None,
        }
    }
}

/// Decides on a request head in `buf` and, for a fast call, writes its upstream head
/// into `out`.
pub(super) fn prepare(
    proxy: &Proxy,
    buf: &[u8],
    caller_ip: &str,
    last: &mut Option<Arc<Function>>,
    kept: Option<&Address>,
    out: &mut Vec<u8>,
) -> Step {
    let mut headers = [httparse::EMPTY_HEADER; MAX_REQUEST_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let head_len = match request.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() < MAX_REQUEST_HEAD => return Step::Partial,
        _ => return Step::HandOver,
    };
    let (Some(method), Some(path), Some(1)) = (request.method, request.path, request.version)
    else {
        return Step::HandOver;
    };
    let Ok(method) = Method::from_bytes(method.as_bytes()) else {
        return Step::HandOver;
    };
    // HEAD answers carry no body whatever their framing says; CONNECT is a tunnel.
    if method == Method::HEAD || method == Method::CONNECT {
        return Step::HandOver;
    }
    // What a URI may hold, as sent on: no fragment, nothing to escape.
    if !path.bytes().all(|b| b.is_ascii_graphic() && b != b'#') {
        return Step::HandOver;
    }
    let (path_only, query) = match path.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (path, None),
    };
    let Some(target) = Target::from_path(path_only, query) else {
        return Step::HandOver;
    };

    let headers = &*request.headers;
    let mut body_len = 0;
    let mut lengths = 0;
    let mut hosts = 0;
    let mut close = false;
    for header in headers {
        let name = header.name;
        // A cron fire's token is checked on the full path, which knows such callers.
        if is(name, &TRANSFER_ENCODING)
            || is(name, &UPGRADE)
            || is(name, &EXPECT)
            || name.eq_ignore_ascii_case(TRIGGER_TOKEN_HEADER)
        {
            return Step::HandOver;
        }
        if is(name, &CONTENT_LENGTH) {
            lengths += 1;
            match decimal(header.value) {
                Some(len) => body_len = len,
                None => return Step::HandOver,
            }
        } else if is(name, &HOST) {
            hosts += 1;
        } else if is(name, &CONNECTION) {
            close |= connection_tokens(header.value).any(|t| t.eq_ignore_ascii_case(b"close"));
        }
    }
    // Over the limit: the full path's 413.
    if lengths > 1 || hosts > 1 || body_len > proxy.config.max_body_bytes {
        return Step::HandOver;
    }
    let Route::Ready {
        instances,
        timeout,
        version,
        ..
    } = proxy.routes.route(target.namespace, target.name)
    else {
        return Step::HandOver;
    };
    // None ready (scaled to zero): the full path waits for one.
    let Some(lease) = instances.lease_near(kept) else {
        return Step::HandOver;
    };

    out.clear();
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.rest.as_bytes());
    if let Some(query) = target.query {
        out.push(b'?');
        out.extend_from_slice(query.as_bytes());
    }
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let ids = wire::call_ids(headers);
    wire::request(
        out,
        headers,
        lease.address().host(),
        caller_ip,
        proxy.config.console_cookie.as_deref(),
        &ids,
    );
    out.extend_from_slice(b"\r\n");

    let function = match last {
        Some(function)
            if function.namespace == target.namespace && function.name == target.name =>
        {
            function.clone()
        }
        _ => {
            let function = Arc::new(Function {
                namespace: target.namespace.to_owned(),
                name: target.name.to_owned(),
                calls: proxy.invocations.calls(target.namespace, target.name),
            });
            *last = Some(function.clone());
            function
        }
    };
    Step::Call(Call {
        started: Instant::now(),
        method,
        head_len,
        body_len,
        close,
        function,
        rest: target.rest.to_owned(),
        lease,
        timeout,
        version,
        ids,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    use axum::http::{HeaderMap, HeaderName, HeaderValue};
    use sless_core::model::Kind;
    use sless_core::routes::RouteTable;

    use crate::proxy::headers::map;
    use crate::proxy::{Caller, ProxyConfig};

    struct OneFunction;

    impl RouteTable for OneFunction {
        fn route(&self, namespace: &str, name: &str) -> Route {
            match (namespace, name) {
                ("ns", "f") => Route::Ready {
                    kind: Kind::Function,
                    instances: Address::Tcp("127.0.0.1:9000".into()).into(),
                    timeout: None,
                    version: None,
                },
                _ => Route::Unknown,
            }
        }
    }

    fn proxy() -> Proxy {
        Proxy::new(
            Arc::new(OneFunction),
            ProxyConfig {
                console_cookie: Some("sless_session".into()),
                max_body_bytes: 100,
                ..ProxyConfig::default()
            },
        )
    }

    const REMOTE: &str = "[::ffff:10.1.2.3]:4567";
    const CALLER_IP: &str = "10.1.2.3";

    /// The upstream head `prepare` writes for `request`, if it takes it.
    fn prepared(request: &str) -> Option<Vec<u8>> {
        prepared_call(request).map(|(head, _)| head)
    }

    fn prepared_call(request: &str) -> Option<(Vec<u8>, CallIds)> {
        let mut out = Vec::new();
        match prepare(
            &proxy(),
            request.as_bytes(),
            CALLER_IP,
            &mut None,
            None,
            &mut out,
        ) {
            Step::Call(call) => Some((out, call.ids)),
            Step::Partial | Step::HandOver => None,
        }
    }

    /// Header (name, value) pairs, names lowercased, sorted.
    fn sorted(pairs: impl IntoIterator<Item = (String, Vec<u8>)>) -> Vec<(String, Vec<u8>)> {
        let mut pairs: Vec<_> = pairs.into_iter().collect();
        pairs.sort();
        pairs
    }

    #[test]
    fn rewrites_heads_as_the_full_path_does() {
        let headers = [
            ("Host", "public.example:8080"),
            ("Connection", "keep-alive, X-Custom-Hop"),
            ("X-Custom-Hop", "drop me"),
            ("Keep-Alive", "timeout=5"),
            ("TE", "trailers"),
            ("Proxy-Authorization", "Basic eA=="),
            ("Cookie", "a=1; sless_session=secret; b=2"),
            ("Cookie", "sless_session=only"),
            ("X-Forwarded-For", "192.0.2.1"),
            ("X-Forwarded-Host", "forged"),
            ("X-Sless-Amqp", "e30="),
            ("Content-Length", "5"),
            ("X-Ordinary", "kept"),
            ("X-Request-Id", "order-7"),
            ("Accept", "*/*"),
        ];
        let mut request = String::from("POST /fn/ns/f/a/b?x=1 HTTP/1.1\r\n");
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\nhello");
        let (fast, ids) = prepared_call(&request).expect("taken by the fast path");
        assert_eq!(ids.request_id(), b"order-7");
        let mut parsed = [httparse::EMPTY_HEADER; 32];
        let mut upstream = httparse::Request::new(&mut parsed);
        assert!(upstream.parse(&fast).unwrap().is_complete());
        assert_eq!(upstream.method, Some("POST"));
        assert_eq!(upstream.path, Some("/a/b?x=1"));
        let fast = sorted(
            upstream
                .headers
                .iter()
                .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec())),
        );

        // The full path, as `forward` rewrites a public call.
        let mut full = HeaderMap::new();
        for (name, value) in headers {
            full.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map::request(
            &mut full,
            Caller::Public,
            Some("sless_session"),
            HeaderValue::from_static("127.0.0.1:9000"),
            Some(REMOTE.parse::<SocketAddr>().unwrap().ip()),
            None,
            &ids,
        );
        let full = sorted(
            full.iter()
                .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec())),
        );
        assert_eq!(fast, full);
    }

    #[test]
    fn leaves_other_requests_to_the_http_stack() {
        let get = |extra: &str| format!("GET /fn/ns/f/ HTTP/1.1\r\nHost: x\r\n{extra}\r\n");
        assert!(prepared(&get("")).is_some());
        for other in [
            "GET /fn/ns/f/ HTTP/1.0\r\n\r\n".to_owned(),
            "HEAD /fn/ns/f/ HTTP/1.1\r\n\r\n".to_owned(),
            "GET /fn/ns/unknown/ HTTP/1.1\r\n\r\n".to_owned(),
            "GET /v1/namespaces HTTP/1.1\r\n\r\n".to_owned(),
            "GET http://x/fn/ns/f/ HTTP/1.1\r\n\r\n".to_owned(),
            "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_owned(),
            get("Transfer-Encoding: chunked\r\n"),
            get("Content-Length: 5\r\nContent-Length: 5\r\n"),
            get("Content-Length: +5\r\n"),
            get("Content-Length: 101\r\n"),
            get("Expect: 100-continue\r\n"),
            get("Upgrade: websocket\r\nConnection: upgrade\r\n"),
            get("Host: y\r\n"),
            "GET /fn/ns/f/\u{e9} HTTP/1.1\r\n\r\n".to_owned(),
            format!("GET /fn/ns/f/ HTTP/1.1\r\n{}\r\n", "X-A: 1\r\n".repeat(70)),
        ] {
            assert!(prepared(&other).is_none(), "{other:?}");
        }
        let mut out = Vec::new();
        let partial = b"GET /fn/ns/f/ HTTP/1.1\r\nHost:";
        assert!(matches!(
            prepare(&proxy(), partial, CALLER_IP, &mut None, None, &mut out),
            Step::Partial
        ));
        let endless = format!(
            "GET /fn/ns/f/ HTTP/1.1\r\nX-A: {}",
            "a".repeat(MAX_REQUEST_HEAD)
        );
        assert!(matches!(
            prepare(
                &proxy(),
                endless.as_bytes(),
                CALLER_IP,
                &mut None,
                None,
                &mut out
            ),
            Step::HandOver
        ));
    }
}
