//! The `/fn` header rules, one table for both paths: hop-by-hop headers stay on their
//! own hop (RFC 9110 §7.6.1), the function learns who called through X-Forwarded-*, and
//! nothing of the console's login crosses over: its cookie is neither forwarded nor set
//! by a function, and function pages run sandboxed. [`map`] applies the table to a
//! `HeaderMap` (calls hyper serves), [`wire`] to a head parsed in place (the fast path).

pub(crate) mod call_id;
pub(crate) mod map;
pub(crate) mod wire;

use axum::http::header::{
    CONNECTION, CONTENT_SECURITY_POLICY, COOKIE, FORWARDED, HOST, PROXY_AUTHENTICATE,
    PROXY_AUTHORIZATION, SET_COOKIE, TE, TRAILER, TRANSFER_ENCODING, UPGRADE,
};
use axum::http::{HeaderName, HeaderValue};

use super::TRIGGER_HEADER;
use sless_core::auth::TRIGGER_TOKEN_HEADER;

/// What a caller's header becomes on its way to the function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Request {
    Pass,
    /// Stays on the caller's hop.
    Hop,
    /// Only sless sets it, for a trigger's call: dropped from public calls.
    Trigger,
    /// Loses the console's cookie; other cookies pass as sent.
    Cookie,
    /// Becomes the function's address; the caller's value moves to X-Forwarded-Host.
    Host,
    /// Written from the caller's Host, whatever the caller sent.
    ForwardedHost,
    /// Written by sless, whatever the caller sent: the scheme sless was reached by.
    ForwardedProto,
    /// A caller's claim about who it is or how it came: dropped (X-Forwarded-For carries
    /// the address sless saw, X-Forwarded-Proto the scheme).
    Forged,
    /// The caller's address is appended.
    ForwardedFor,
    /// The call's own ([`call_id::CallIds`]): a caller's valid value is kept, any other
    /// replaced.
    CallId,
}

/// What a function's answer header becomes on its way to the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    Pass,
    /// Stays on the function's hop.
    Hop,
    /// Refused when it sets the console's cookie: a function must not plant a session.
    SetCookie,
    /// Written by sless (the call's request id), whatever the function sent.
    CallId,
}

pub(crate) struct Rule {
    pub(crate) name: HeaderName,
    pub(crate) request: Request,
    pub(crate) answer: Answer,
}

const fn rule(name: HeaderName, request: Request, answer: Answer) -> Rule {
    Rule {
        name,
        request,
        answer,
    }
}

const fn hop(name: HeaderName) -> Rule {
    rule(name, Request::Hop, Answer::Hop)
}

pub(crate) const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
pub(crate) const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
pub(crate) const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The scheme `/fn` is served on: sless listens on plain HTTP (a TLS proxy in front of
/// it is a hop of its own).
pub(crate) const FORWARDED_PROTO: &str = "http";

/// Every header not passed on as sent, both ways. Beyond these, a Connection header
/// can name more headers to keep on their hop. Applied in this order (the map keeps the
/// header order it had before the table).
pub(crate) static RULES: [Rule; 21] = [
    hop(CONNECTION),
    hop(HeaderName::from_static("keep-alive")),
    hop(PROXY_AUTHENTICATE),
    hop(PROXY_AUTHORIZATION),
    hop(TE),
    hop(TRAILER),
    hop(TRANSFER_ENCODING),
    hop(UPGRADE),
    hop(HeaderName::from_static("proxy-connection")),
    rule(
        HeaderName::from_static(TRIGGER_HEADER),
        Request::Trigger,
        Answer::Pass,
    ),
    rule(COOKIE, Request::Cookie, Answer::Pass),
    rule(HOST, Request::Host, Answer::Pass),
    rule(X_FORWARDED_HOST, Request::ForwardedHost, Answer::Pass),
    rule(X_FORWARDED_PROTO, Request::ForwardedProto, Answer::Pass),
    rule(X_FORWARDED_FOR, Request::ForwardedFor, Answer::Pass),
    rule(
        HeaderName::from_static("x-real-ip"),
        Request::Forged,
        Answer::Pass,
    ),
    rule(FORWARDED, Request::Forged, Answer::Pass),
    // Proves a cron fire to the proxy; the function has no use for it.
    rule(
        HeaderName::from_static(TRIGGER_TOKEN_HEADER),
        Request::Forged,
        Answer::Pass,
    ),
    rule(SET_COOKIE, Request::Pass, Answer::SetCookie),
    rule(call_id::X_REQUEST_ID, Request::CallId, Answer::CallId),
    rule(call_id::TRACEPARENT, Request::CallId, Answer::Pass),
];

/// The rule for a header name in any case; None for a header passed on as sent.
pub(crate) fn rule_for(name: &[u8]) -> Option<&'static Rule> {
    RULES
        .iter()
        .find(|rule| name.eq_ignore_ascii_case(rule.name.as_str().as_bytes()))
}

/// Every `/fn` answer: without `allow-same-origin` the page gets an opaque origin, so
/// its scripts can neither read the console (same host) nor send its cookie along.
/// Scripts, forms, popups and downloads stay allowed for the function's own pages. A
/// policy the function sets is kept: browsers enforce both.
pub(crate) const SANDBOX_POLICY: &str =
    "sandbox allow-scripts allow-forms allow-popups allow-downloads";

/// Added to every public `/fn` answer, the function's own and the proxy's errors.
pub(crate) static ADDED_TO_ANSWERS: [(HeaderName, HeaderValue); 1] = [(
    CONTENT_SECURITY_POLICY,
    HeaderValue::from_static(SANDBOX_POLICY),
)];

/// Whether a header of this name stays on its own hop whatever Connection says.
fn is_hop_by_hop(name: &[u8]) -> bool {
    rule_for(name).is_some_and(|rule| rule.request == Request::Hop)
}

/// Whether a Connection token names a header to drop beyond the fixed ones.
pub(crate) fn names_extra_header(token: &[u8]) -> bool {
    !token.eq_ignore_ascii_case(b"close") && !is_hop_by_hop(token)
}

/// The tokens of one Connection header value.
pub(crate) fn connection_tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|b| *b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|token| !token.is_empty())
}

/// Whether a Cookie header value carries the cookie `name`.
fn has_cookie(value: &[u8], name: &str) -> bool {
    cookie_pairs(value).any(|pair| cookie_name(pair) == name.as_bytes())
}

/// A Cookie header value without the cookie `name` (pairs joined by `; `); empty when
/// nothing else is left.
fn cookie_without(value: &[u8], name: &str) -> Vec<u8> {
    let pairs: Vec<&[u8]> = cookie_pairs(value)
        .filter(|pair| cookie_name(pair) != name.as_bytes())
        .collect();
    pairs.join(&b"; "[..])
}

/// Whether a Set-Cookie header value sets the cookie `name`.
fn sets_cookie(value: &[u8], name: &str) -> bool {
    cookie_name(value.split(|b| *b == b';').next().unwrap_or_default()) == name.as_bytes()
}

fn cookie_pairs(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|b| *b == b';')
        .map(<[u8]>::trim_ascii)
        .filter(|pair| !pair.is_empty())
}

/// The name of `name=value`, as browsers compare it (surrounding blanks ignored).
fn cookie_name(pair: &[u8]) -> &[u8] {
    pair.split(|b| *b == b'=')
        .next()
        .unwrap_or_default()
        .trim_ascii()
}

/// X-Forwarded-For after this hop: the earlier values, then the caller's address
/// (IPv4-mapped IPv6 addresses written as IPv4).
fn write_forwarded_for<'a>(
    out: &mut Vec<u8>,
    earlier: impl IntoIterator<Item = &'a [u8]>,
    ip: &str,
) {
    for value in earlier {
        out.extend_from_slice(value);
        out.extend_from_slice(b", ");
    }
    out.extend_from_slice(ip.as_bytes());
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use axum::http::HeaderMap;

    use super::*;
    use crate::proxy::Caller;

    const CONSOLE: Option<&str> = Some("sless_session");

    /// Header (name, value) pairs, names lowercased, sorted.
    fn sorted<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> Vec<(String, Vec<u8>)> {
        let mut pairs: Vec<_> = pairs
            .into_iter()
            .map(|(name, value)| (name.to_ascii_lowercase(), value.to_vec()))
            .collect();
        pairs.sort();
        pairs
    }

    fn header_map(headers: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    fn parsed<'a>(headers: &'a [(&'a str, &'a str)]) -> Vec<httparse::Header<'a>> {
        headers
            .iter()
            .map(|(name, value)| httparse::Header {
                name,
                value: value.as_bytes(),
            })
            .collect()
    }

    /// The headers of a head written by [`wire`], parsed back.
    fn written(out: &[u8]) -> Vec<(String, Vec<u8>)> {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let head = [b"GET / HTTP/1.1\r\n", out, b"\r\n"].concat();
        let mut request = httparse::Request::new(&mut headers);
        assert!(request.parse(&head).unwrap().is_complete());
        sorted(request.headers.iter().map(|h| (h.name, h.value)))
    }

    /// A sample of every rule, in the cases that differ.
    const REQUEST: [(&str, &str); 21] = [
        ("Host", "public.example:8080"),
        ("Connection", "keep-alive, X-Custom-Hop"),
        ("connection", "X-Forwarded-Proto, x-other"),
        ("X-Custom-Hop", "drop me"),
        ("x-other", "drop me too"),
        ("Keep-Alive", "timeout=5"),
        ("TE", "trailers"),
        ("Proxy-Authorization", "Basic eA=="),
        ("Cookie", "a=1; sless_session=secret; b=2"),
        ("Cookie", "sless_session=only"),
        ("Cookie", "c=3;sless_session_other=4"),
        ("X-Forwarded-For", "192.0.2.1"),
        ("X-Forwarded-For", "192.0.2.2"),
        ("X-Forwarded-Host", "forged"),
        ("X-Forwarded-Proto", "https"),
        ("X-Sless-Amqp", "e30="),
        ("X-Real-IP", "203.0.113.66"),
        ("Forwarded", "for=203.0.113.66;proto=https"),
        ("X-Request-Id", "the caller's own"),
        (
            "traceparent",
            "00-00000000000000000000000000000001-0000000000000001-01",
        ),
        ("Accept", "*/*"),
    ];

    const CALLER_TRACE: &[u8] = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    /// Both paths' headers for the call `call-1` continuing [`CALLER_TRACE`]; the
    /// traceparent (its span id is random) is checked and left out.
    fn both_request_paths(headers: &[(&str, &str)]) -> (Vec<(String, Vec<u8>)>, HeaderMap) {
        let ids = call_id::CallIds::new(Some(b"call-1"), Some(CALLER_TRACE));
        let mut out = Vec::new();
        wire::request(
            &mut out,
            &parsed(headers),
            "127.0.0.1:9000",
            "10.1.2.3",
            CONSOLE,
            &ids,
        );
        let mut map = header_map(headers);
        let ip: IpAddr = "::ffff:10.1.2.3".parse().unwrap();
        map::request(
            &mut map,
            Caller::Public,
            CONSOLE,
            HeaderValue::from_static("127.0.0.1:9000"),
            Some(ip),
            None,
            &ids,
        );
        let mut wire = written(&out);
        wire.retain(|(name, value)| {
            name != "traceparent" || {
                assert_eq!(value, ids.traceparent());
                false
            }
        });
        let traceparent = map.remove(call_id::TRACEPARENT).unwrap();
        assert_eq!(traceparent.as_bytes(), ids.traceparent());
        assert!(traceparent.as_bytes().starts_with(&CALLER_TRACE[..36]));
        (wire, map)
    }

    fn map_pairs(map: &HeaderMap) -> Vec<(String, Vec<u8>)> {
        sorted(
            map.iter()
                .map(|(name, value)| (name.as_str(), value.as_bytes())),
        )
    }

    #[test]
    fn both_paths_rewrite_requests_alike() {
        for headers in [
            &REQUEST[..],
            &[("Host", "h"), ("Connection", "x-forwarded-for, host")],
            &[
                ("Cookie", "sless_session=1"),
                ("X-Forwarded-Proto", "https"),
            ],
            &[],
        ] {
            let (wire, map) = both_request_paths(headers);
            assert_eq!(wire, map_pairs(&map), "{headers:?}");
        }
        // A caller cannot claim another scheme or address.
        let (wire, _) = both_request_paths(&[
            ("X-Forwarded-Proto", "https"),
            ("x-real-ip", "203.0.113.66"),
            ("FORWARDED", "for=203.0.113.66"),
        ]);
        let expected: Vec<(&str, &[u8])> = vec![
            ("host", b"127.0.0.1:9000"),
            ("x-forwarded-for", b"10.1.2.3"),
            ("x-forwarded-proto", b"http"),
            ("x-request-id", b"call-1"),
        ];
        assert_eq!(wire, sorted(expected));
        let (wire, _) = both_request_paths(&REQUEST);
        let expected: Vec<(&str, &[u8])> = vec![
            ("accept", b"*/*"),
            ("cookie", b"a=1; b=2"),
            ("cookie", b"c=3;sless_session_other=4"),
            ("host", b"127.0.0.1:9000"),
            ("x-forwarded-for", b"192.0.2.1, 192.0.2.2, 10.1.2.3"),
            ("x-forwarded-host", b"public.example:8080"),
            ("x-forwarded-proto", b"http"),
            ("x-request-id", b"call-1"),
        ];
        assert_eq!(wire, sorted(expected));
    }

    #[test]
    fn both_paths_rewrite_answers_alike() {
        let headers = [
            ("Content-Type", "text/html"),
            ("Connection", "keep-alive, X-Hop"),
            ("X-Hop", "1"),
            ("Transfer-Encoding", "chunked"),
            ("Trailer", "x-sum"),
            ("Set-Cookie", "sless_session=planted; Path=/; HttpOnly"),
            ("Set-Cookie", "theme=dark; Path=/"),
            ("set-cookie", " sless_session =again"),
            ("Content-Security-Policy", "default-src 'self'"),
            ("X-Request-Id", "the function's own"),
        ];
        let ids = call_id::CallIds::new(Some(b"call-1"), None);
        let mut out = Vec::new();
        for header in wire::answer(&parsed(&headers), CONSOLE) {
            wire::write_header(&mut out, header.name.as_bytes(), header.value);
        }
        wire::write_added(&mut out, &ids);
        let mut map = header_map(&headers);
        map::answer(&mut map, CONSOLE);
        map::sandbox(&mut map);
        map::add_request_id(&mut map, &ids);
        assert_eq!(written(&out), map_pairs(&map));
        let expected: Vec<(&str, &[u8])> = vec![
            ("content-security-policy", b"default-src 'self'"),
            ("content-security-policy", SANDBOX_POLICY.as_bytes()),
            ("content-type", b"text/html"),
            ("set-cookie", b"theme=dark; Path=/"),
            ("x-request-id", b"call-1"),
        ];
        assert_eq!(written(&out), sorted(expected));
    }

    #[test]
    fn only_the_console_cookie_is_recognised() {
        assert!(has_cookie(b"a=1; sless_session=x", "sless_session"));
        assert!(has_cookie(b" sless_session = x ", "sless_session"));
        assert!(!has_cookie(b"sless_session_other=x", "sless_session"));
        assert_eq!(
            cookie_without(b"a=1;sless_session=x;b=2", "sless_session"),
            b"a=1; b=2"
        );
        assert!(cookie_without(b"sless_session=x", "sless_session").is_empty());
        assert!(sets_cookie(b"sless_session=x; Path=/", "sless_session"));
        assert!(!sets_cookie(b"theme=sless_session", "sless_session"));
    }

    #[test]
    fn close_and_fixed_hop_headers_name_nothing_more() {
        assert!(!names_extra_header(b"Close"));
        assert!(!names_extra_header(b"Keep-Alive"));
        assert!(names_extra_header(b"x-custom"));
        assert!(names_extra_header(b"cookie"));
        let tokens: Vec<&[u8]> = connection_tokens(b" a ,, b,").collect();
        assert_eq!(tokens, [&b"a"[..], b"b"]);
    }
}
