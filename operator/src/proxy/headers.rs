//! Header rewriting between caller and function: hop-by-hop headers stay on their own
//! hop (RFC 9110 §7.6.1), the function learns who called through X-Forwarded-*.

use std::net::IpAddr;

use axum::http::header::{
    CONNECTION, HOST, PROXY_AUTHENTICATE, PROXY_AUTHORIZATION, TE, TRAILER, TRANSFER_ENCODING,
    UPGRADE,
};
use axum::http::{HeaderMap, HeaderName, HeaderValue};

const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

const HOP_BY_HOP: [HeaderName; 9] = [
    CONNECTION,
    KEEP_ALIVE,
    PROXY_AUTHENTICATE,
    PROXY_AUTHORIZATION,
    TE,
    TRAILER,
    TRANSFER_ENCODING,
    UPGRADE,
    PROXY_CONNECTION,
];

/// Removes the fixed hop-by-hop headers and every header the Connection header names.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    if names_extra_headers(headers) {
        let named: Vec<HeaderName> = connection_tokens(headers)
            .filter_map(|token| HeaderName::from_bytes(token.as_bytes()).ok())
            .collect();
        for name in named {
            headers.remove(name);
        }
    }
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
}

/// Whether Connection lists anything beyond `close` and the fixed hop-by-hop names, so
/// the common `Connection: keep-alive` costs no allocation.
fn names_extra_headers(headers: &HeaderMap) -> bool {
    connection_tokens(headers).any(|token| {
        !token.eq_ignore_ascii_case("close")
            && !HOP_BY_HOP
                .iter()
                .any(|h| token.eq_ignore_ascii_case(h.as_str()))
    })
}

fn connection_tokens(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|token| !token.is_empty())
}

/// Points Host at the upstream and adds X-Forwarded-For/-Proto/-Host. Call after
/// [`strip_hop_by_hop`]. `authority` must be a valid header value (it already parsed
/// as part of the upstream URI).
pub(crate) fn set_forwarding(
    headers: &mut HeaderMap,
    upstream: HeaderValue,
    client_ip: Option<IpAddr>,
    uri_authority: Option<&str>,
) {
    let incoming_host = headers
        .insert(HOST, upstream)
        .or_else(|| uri_authority.and_then(|a| HeaderValue::from_str(a).ok()));
    match incoming_host {
        Some(host) => {
            headers.insert(X_FORWARDED_HOST, host);
        }
        None => {
            headers.remove(X_FORWARDED_HOST);
        }
    }
    if !headers.contains_key(X_FORWARDED_PROTO) {
        headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static("http"));
    }
    if let Some(ip) = client_ip {
        append_forwarded_for(headers, ip.to_canonical());
    }
}

fn append_forwarded_for(headers: &mut HeaderMap, ip: IpAddr) {
    let ip = ip.to_string();
    let mut value = Vec::new();
    for earlier in headers.get_all(X_FORWARDED_FOR) {
        value.extend_from_slice(earlier.as_bytes());
        value.extend_from_slice(b", ");
    }
    let value = if value.is_empty() {
        HeaderValue::try_from(ip)
    } else {
        value.extend_from_slice(ip.as_bytes());
        HeaderValue::from_bytes(&value)
    };
    // An address always makes a valid value, and so do the earlier values it is
    // joined to.
    if let Ok(value) = value {
        headers.insert(X_FORWARDED_FOR, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (k, v) in pairs {
            headers.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        headers
    }

    #[test]
    fn strips_fixed_and_named_hop_headers() {
        let mut headers = map(&[
            ("connection", "keep-alive, X-Custom-Hop"),
            ("connection", "x-other"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("trailer", "x-sum"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("proxy-authorization", "Basic eA=="),
            ("proxy-authenticate", "Basic"),
            ("proxy-connection", "keep-alive"),
            ("x-custom-hop", "1"),
            ("x-other", "2"),
            ("x-ordinary", "3"),
            ("content-type", "text/plain"),
        ]);
        strip_hop_by_hop(&mut headers);
        let left: Vec<&str> = headers.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, ["x-ordinary", "content-type"]);
    }

    #[test]
    fn plain_keep_alive_is_just_removed() {
        let mut headers = map(&[("connection", "Keep-Alive"), ("x-a", "1")]);
        assert!(!names_extra_headers(&headers));
        strip_hop_by_hop(&mut headers);
        assert_eq!(headers.len(), 1);
    }

    #[test]
    fn bad_tokens_do_not_panic() {
        let mut headers = HeaderMap::new();
        headers.insert(
            CONNECTION,
            HeaderValue::from_bytes(b"\xff, ,a b,,").unwrap(),
        );
        strip_hop_by_hop(&mut headers);
        assert!(headers.is_empty());
    }

    #[test]
    fn forwarding_headers() {
        let mut headers = map(&[("host", "public:8080"), ("x-forwarded-for", "10.0.0.1")]);
        set_forwarding(
            &mut headers,
            HeaderValue::from_static("127.0.0.1:9000"),
            Some("::ffff:192.168.1.2".parse().unwrap()),
            None,
        );
        assert_eq!(headers["host"], "127.0.0.1:9000");
        assert_eq!(headers["x-forwarded-host"], "public:8080");
        assert_eq!(headers["x-forwarded-proto"], "http");
        assert_eq!(headers["x-forwarded-for"], "10.0.0.1, 192.168.1.2");

        let mut headers = map(&[("x-forwarded-proto", "https")]);
        set_forwarding(
            &mut headers,
            HeaderValue::from_static("u:1"),
            None,
            Some("h2-authority"),
        );
        assert_eq!(headers["x-forwarded-proto"], "https");
        assert_eq!(headers["x-forwarded-host"], "h2-authority");
        assert!(!headers.contains_key("x-forwarded-for"));
    }
}
