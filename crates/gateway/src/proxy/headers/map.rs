//! The header rules applied to a `HeaderMap`: every call hyper serves, and trigger calls.

use std::net::IpAddr;

use axum::http::header::{CONNECTION, COOKIE, SET_COOKIE};
use axum::http::{HeaderMap, HeaderName, HeaderValue};

use super::call_id::{CallIds, TRACEPARENT, X_REQUEST_ID};
use super::{
    ADDED_TO_ANSWERS, Answer, FORWARDED_PROTO, RULES, Request, X_FORWARDED_FOR, X_FORWARDED_HOST,
    connection_tokens, cookie_without, has_cookie, names_extra_header, sets_cookie,
    write_forwarded_for,
};
use crate::proxy::Caller;

/// The ids of the call with these headers.
pub(crate) fn call_ids(headers: &HeaderMap) -> CallIds {
    CallIds::new(
        headers.get(X_REQUEST_ID).map(HeaderValue::as_bytes),
        headers.get(TRACEPARENT).map(HeaderValue::as_bytes),
    )
}

/// Gives an answer the call's request id (the function's own value was dropped).
pub(crate) fn add_request_id(headers: &mut HeaderMap, ids: &CallIds) {
    if let Ok(value) = HeaderValue::from_bytes(ids.request_id()) {
        headers.insert(X_REQUEST_ID, value);
    }
}

/// Rewrites a caller's request for the function at `upstream` (a valid header value:
/// it already parsed as part of the upstream URI). `uri_authority` stands in for Host
/// when the request had none (HTTP/2).
pub(crate) fn request(
    headers: &mut HeaderMap,
    caller: Caller,
    console_cookie: Option<&str>,
    upstream: HeaderValue,
    client_ip: Option<IpAddr>,
    uri_authority: Option<&str>,
    ids: &CallIds,
) {
    strip_connection_named(headers);
    let mut upstream = Some(upstream);
    for rule in &RULES {
        let name = &rule.name;
        match rule.request {
            Request::Pass | Request::ForwardedHost => {}
            Request::Hop | Request::Forged => {
                headers.remove(name);
            }
            Request::Trigger => {
                if !caller.is_trigger() {
                    headers.remove(name);
                }
            }
            Request::Cookie => {
                if let Some(cookie) = console_cookie {
                    strip_cookie(headers, cookie);
                }
            }
            Request::Host => {
                // X-Forwarded-Host is written here, from the Host it replaces.
                let incoming = upstream
                    .take()
                    .and_then(|upstream| headers.insert(name, upstream))
                    .or_else(|| uri_authority.and_then(|a| HeaderValue::from_str(a).ok()));
                match incoming {
                    Some(host) => {
                        headers.insert(X_FORWARDED_HOST, host);
                    }
                    None => {
                        headers.remove(X_FORWARDED_HOST);
                    }
                }
            }
            Request::ForwardedProto => {
                headers.insert(name, HeaderValue::from_static(FORWARDED_PROTO));
            }
            Request::ForwardedFor => {
                if let Some(ip) = client_ip {
                    append_forwarded_for(headers, ip);
                }
            }
            Request::CallId => {
                let value = if *name == X_REQUEST_ID {
                    ids.request_id()
                } else {
                    ids.traceparent()
                };
                if let Ok(value) = HeaderValue::from_bytes(value) {
                    headers.insert(name, value);
                }
            }
        }
    }
}

/// Rewrites a function's answer for the caller.
pub(crate) fn answer(headers: &mut HeaderMap, console_cookie: Option<&str>) {
    strip_connection_named(headers);
    for rule in &RULES {
        match rule.answer {
            Answer::Pass => {}
            Answer::Hop | Answer::CallId => {
                headers.remove(&rule.name);
            }
            Answer::SetCookie => {
                if let Some(cookie) = console_cookie {
                    strip_set_cookie(headers, cookie);
                }
            }
        }
    }
}

/// Adds what every public answer carries.
pub(crate) fn sandbox(headers: &mut HeaderMap) {
    for (name, value) in &ADDED_TO_ANSWERS {
        headers.append(name.clone(), value.clone());
    }
}

/// Removes every header a Connection header names beyond the fixed hop-by-hop ones.
fn strip_connection_named(headers: &mut HeaderMap) {
    if !names_extra_headers(headers) {
        return;
    }
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

/// Whether Connection lists anything beyond `close` and the fixed hop-by-hop names, so
/// the common `Connection: keep-alive` costs no allocation.
fn names_extra_headers(headers: &HeaderMap) -> bool {
    headers
        .get_all(CONNECTION)
        .iter()
        .flat_map(|v| connection_tokens(v.as_bytes()))
        .any(names_extra_header)
}

/// Removes the cookie `name` from the Cookie header(s); the other pairs, and headers
/// without it, stay as sent.
fn strip_cookie(headers: &mut HeaderMap, name: &str) {
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
            if !has_cookie(value.as_bytes(), name) {
                return Some(value.clone());
            }
            let kept = cookie_without(value.as_bytes(), name);
            // Parts of a valid value make a valid value.
            (!kept.is_empty())
                .then(|| HeaderValue::from_bytes(&kept).ok())
                .flatten()
        })
        .collect();
    headers.remove(COOKIE);
    for value in kept {
        headers.append(COOKIE, value);
    }
}

/// Drops every Set-Cookie of `name`.
fn strip_set_cookie(headers: &mut HeaderMap, name: &str) {
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

    fn values<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Vec<&'a str> {
        headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect()
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
        answer(&mut headers, None);
        let left: Vec<&str> = headers.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, ["x-ordinary", "content-type"]);
    }

    #[test]
    fn plain_keep_alive_is_just_removed() {
        let mut headers = map(&[("connection", "Keep-Alive"), ("x-a", "1")]);
        assert!(!names_extra_headers(&headers));
        answer(&mut headers, None);
        assert_eq!(headers.len(), 1);
    }

    #[test]
    fn bad_tokens_do_not_panic() {
        let mut headers = HeaderMap::new();
        headers.insert(
            CONNECTION,
            HeaderValue::from_bytes(b"\xff, ,a b,,").unwrap(),
        );
        answer(&mut headers, None);
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
        assert_eq!(
            values(&headers, &COOKIE),
            ["a=1; b=2", "c=3;sless_session_other=4"]
        );

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
        answer(&mut headers, Some("sless_session"));
        assert_eq!(values(&headers, &SET_COOKIE), ["theme=dark; Path=/"]);
    }

    #[test]
    fn forwarding_headers() {
        let mut headers = map(&[("host", "public:8080"), ("x-forwarded-for", "10.0.0.1")]);
        request(
            &mut headers,
            Caller::Public,
            None,
            HeaderValue::from_static("127.0.0.1:9000"),
            Some("::ffff:192.168.1.2".parse().unwrap()),
            None,
            &CallIds::new(None, None),
        );
        assert_eq!(headers["host"], "127.0.0.1:9000");
        assert_eq!(headers["x-forwarded-host"], "public:8080");
        assert_eq!(headers["x-forwarded-proto"], "http");
        assert_eq!(headers["x-forwarded-for"], "10.0.0.1, 192.168.1.2");

        let mut headers = map(&[("x-forwarded-proto", "https")]);
        request(
            &mut headers,
            Caller::Public,
            None,
            HeaderValue::from_static("u:1"),
            None,
            Some("h2-authority"),
            &CallIds::new(None, None),
        );
        assert_eq!(headers["x-forwarded-proto"], "http", "overwritten");
        assert_eq!(headers["x-forwarded-host"], "h2-authority");
        assert!(!headers.contains_key("x-forwarded-for"));
    }

    #[test]
    fn only_triggers_pass_the_trigger_header() {
        let sent = map(&[("x-sless-amqp", "e30=")]);
        for (caller, kept) in [(Caller::Public, false), (Caller::Event, true)] {
            let mut headers = sent.clone();
            request(
                &mut headers,
                caller,
                None,
                HeaderValue::from_static("u:1"),
                None,
                None,
                &CallIds::new(None, None),
            );
            assert_eq!(headers.contains_key("x-sless-amqp"), kept, "{caller:?}");
        }
    }
}
