//! Header rewriting between caller and function: hop-by-hop headers stay on their own
//! hop (RFC 9110 §7.6.1), the function learns who called through X-Forwarded-*, and
//! nothing of the console's login crosses over: its cookie is neither forwarded nor set
//! by a function, and function pages run sandboxed.

use std::net::IpAddr;

use axum::http::header::{
    CONNECTION, CONTENT_SECURITY_POLICY, COOKIE, HOST, PROXY_AUTHENTICATE, PROXY_AUTHORIZATION,
    SET_COOKIE, TE, TRAILER, TRANSFER_ENCODING, UPGRADE,
};
use axum::http::{HeaderMap, HeaderName, HeaderValue};

const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");
pub(crate) const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub(crate) const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
pub(crate) const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

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
        let named: Vec<HeaderName> = headers
            .get_all(CONNECTION)
            .iter()
            .flat_map(|v| connection_tokens(v.as_bytes()))
            .filter_map(|token| HeaderName::from_bytes(token).ok())
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
    headers
        .get_all(CONNECTION)
        .iter()
        .flat_map(|v| connection_tokens(v.as_bytes()))
        .any(names_extra_header)
}

/// Whether a header of this name stays on its own hop whatever Connection says.
pub(crate) fn is_hop_by_hop(name: &[u8]) -> bool {
    HOP_BY_HOP
        .iter()
        .any(|h| name.eq_ignore_ascii_case(h.as_str().as_bytes()))
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

/// Every `/fn` answer: without `allow-same-origin` the page gets an opaque origin, so
/// its scripts can neither read the console (same host) nor send its cookie along.
/// Scripts, forms, popups and downloads stay allowed for the function's own pages. A
/// policy the function sets is kept: browsers enforce both.
pub(crate) const SANDBOX_POLICY: &str =
    "sandbox allow-scripts allow-forms allow-popups allow-downloads";

pub(crate) fn sandbox(headers: &mut HeaderMap) {
    headers.append(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(SANDBOX_POLICY),
    );
}

/// Removes the cookie `name` from the Cookie header(s), keeping the other pairs as sent.
pub(crate) fn strip_cookie(headers: &mut HeaderMap, name: &str) {
    // The common call carries no such cookie and costs no allocation.
    if !headers
        .get_all(COOKIE)
        .iter()
        .any(|v| has_cookie(v.as_bytes(), name))
    {
        return;
    }
    let kept: Vec<HeaderValue> = headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|value| {
            let kept = cookie_without(value.as_bytes(), name);
            (!kept.is_empty()).then(|| HeaderValue::from_bytes(&kept))
        })
        // Parts of a valid value make a valid value.
        .filter_map(Result::ok)
        .collect();
    headers.remove(COOKIE);
    for value in kept {
        headers.append(COOKIE, value);
    }
}

/// Whether a Cookie header value carries the cookie `name`.
pub(crate) fn has_cookie(value: &[u8], name: &str) -> bool {
    cookie_pairs(value).any(|pair| cookie_name(pair) == name.as_bytes())
}

/// A Cookie header value without the cookie `name` (pairs joined by `; `); empty when
/// nothing else is left.
pub(crate) fn cookie_without(value: &[u8], name: &str) -> Vec<u8> {
    let pairs: Vec<&[u8]> = cookie_pairs(value)
        .filter(|pair| cookie_name(pair) != name.as_bytes())
        .collect();
    pairs.join(&b"; "[..])
}

/// Drops every Set-Cookie of `name`: a function must not plant a console session.
pub(crate) fn strip_set_cookie(headers: &mut HeaderMap, name: &str) {
    let sets = |v: &HeaderValue| sets_cookie(v.as_bytes(), name);
    if !headers.get_all(SET_COOKIE).iter().any(sets) {
        return;
    }
    let kept: Vec<HeaderValue> = headers
        .get_all(SET_COOKIE)
        .iter()
        .filter(|v| !sets(v))
        .cloned()
        .collect();
    headers.remove(SET_COOKIE);
    for value in kept {
        headers.append(SET_COOKIE, value);
    }
}

/// Whether a Set-Cookie header value sets the cookie `name`.
pub(crate) fn sets_cookie(value: &[u8], name: &str) -> bool {
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
        append_forwarded_for(headers, ip);
    }
}

fn append_forwarded_for(headers: &mut HeaderMap, ip: IpAddr) {
    let mut value = Vec::new();
    write_forwarded_for(
        &mut value,
        headers
            .get_all(X_FORWARDED_FOR)
            .iter()
            .map(HeaderValue::as_bytes),
        &ip.to_canonical().to_string(),
    );
    // An address always makes a valid value, and so do the earlier values it is
    // joined to.
    if let Ok(value) = HeaderValue::from_bytes(&value) {
        headers.insert(X_FORWARDED_FOR, value);
    }
}

/// X-Forwarded-For after this hop: the earlier values, then the caller's address
/// (IPv4-mapped IPv6 addresses written as IPv4).
pub(crate) fn write_forwarded_for<'a>(
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
    fn only_the_console_cookie_is_stripped() {
        let mut headers = map(&[
            ("cookie", "a=1; sless_session=secret; b=2"),
            ("cookie", " sless_session = x "),
            ("cookie", "c=3;sless_session_other=4"),
        ]);
        strip_cookie(&mut headers, "sless_session");
        let left: Vec<&str> = headers
            .get_all(COOKIE)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        assert_eq!(left, ["a=1; b=2", "c=3; sless_session_other=4"]);

        let mut untouched = map(&[("cookie", "a=1;b=2")]);
        strip_cookie(&mut untouched, "sless_session");
        assert_eq!(untouched[COOKIE], "a=1;b=2");
    }

    #[test]
    fn functions_cannot_set_the_console_cookie() {
        let mut headers = map(&[
            ("set-cookie", "sless_session=planted; Path=/; HttpOnly"),
            ("set-cookie", "theme=dark; Path=/"),
            ("set-cookie", "sless_session=again"),
        ]);
        strip_set_cookie(&mut headers, "sless_session");
        let left: Vec<&str> = headers
            .get_all(SET_COOKIE)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        assert_eq!(left, ["theme=dark; Path=/"]);
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
