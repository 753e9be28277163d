//! The header rules applied to a head parsed in place (httparse) and written out as
//! bytes: the fast path's public calls. Nothing here allocates but for the rare Cookie
//! header that carries the console's cookie.

use axum::http::HeaderName;
use axum::http::header::{CONNECTION, HOST};
use httparse::Header;

use super::call_id::{CallIds, TRACEPARENT, X_REQUEST_ID};
use super::{
    ADDED_TO_ANSWERS, Answer, FORWARDED_PROTO, Request, X_FORWARDED_FOR, X_FORWARDED_HOST,
    X_FORWARDED_PROTO, connection_tokens, cookie_without, has_cookie, names_extra_header, rule_for,
    sets_cookie, write_forwarded_for,
};

/// The ids of the call whose head this is.
pub(crate) fn call_ids(headers: &[Header<'_>]) -> CallIds {
    let first = |name: &HeaderName| headers.iter().find(|h| is(h.name, name)).map(|h| h.value);
    CallIds::new(first(&X_REQUEST_ID), first(&TRACEPARENT))
}

/// Writes the header lines of a public call to the function at `upstream`, from the
/// caller's `headers`.
pub(crate) fn request(
    out: &mut Vec<u8>,
    headers: &[Header<'_>],
    upstream: &str,
    caller_ip: &str,
    console_cookie: Option<&str>,
    ids: &CallIds,
) {
    let named = ConnectionNamed::new(headers);
    let mut host = None;
    for header in headers {
        if named.drops(header.name) {
            continue;
        }
        let name = header.name.as_bytes();
        let rule = rule_for(name).map_or(Request::Pass, |rule| rule.request);
        match rule {
            Request::Pass => {}
            // X-Forwarded-* are written below, Host as the function's address.
            Request::Hop
            | Request::Trigger
            | Request::ForwardedHost
            | Request::ForwardedProto
            | Request::ForwardedFor
            | Request::Forged
            | Request::CallId => {
                continue;
            }
            Request::Host => {
                host = Some(header.value);
                continue;
            }
            Request::Cookie => {
                if let Some(cookie) = console_cookie
                    && has_cookie(header.value, cookie)
                {
                    let kept = cookie_without(header.value, cookie);
                    if !kept.is_empty() {
                        write_header(out, name, &kept);
                    }
                    continue;
                }
            }
        }
        write_header(out, name, header.value);
    }
    write_header(out, HOST.as_str().as_bytes(), upstream.as_bytes());
    write_header(out, X_REQUEST_ID.as_str().as_bytes(), ids.request_id());
    write_header(out, TRACEPARENT.as_str().as_bytes(), ids.traceparent());
    if let Some(host) = host {
        write_header(out, X_FORWARDED_HOST.as_str().as_bytes(), host);
    }
    write_header(
        out,
        X_FORWARDED_PROTO.as_str().as_bytes(),
        FORWARDED_PROTO.as_bytes(),
    );
    out.extend_from_slice(X_FORWARDED_FOR.as_str().as_bytes());
    out.extend_from_slice(b": ");
    write_forwarded_for(
        out,
        headers
            .iter()
            .filter(|h| is(h.name, &X_FORWARDED_FOR) && !named.drops(h.name))
            .map(|h| h.value),
        caller_ip,
    );
    out.extend_from_slice(b"\r\n");
}

/// The headers of a function's answer that reach the caller, in order.
pub(crate) fn answer<'h, 'b>(
    headers: &'h [Header<'b>],
    console_cookie: Option<&'h str>,
) -> impl Iterator<Item = &'h Header<'b>> {
    let named = ConnectionNamed::new(headers);
    headers.iter().filter(move |header| {
        if named.drops(header.name) {
            return false;
        }
        match rule_for(header.name.as_bytes()).map_or(Answer::Pass, |rule| rule.answer) {
            Answer::Pass => true,
            Answer::Hop | Answer::CallId => false,
            Answer::SetCookie => !console_cookie.is_some_and(|c| sets_cookie(header.value, c)),
        }
    })
}

/// Writes what every public answer carries: the sandbox policy and the request id.
pub(crate) fn write_added(out: &mut Vec<u8>, ids: &CallIds) {
    for (name, value) in &ADDED_TO_ANSWERS {
        write_header(out, name.as_str().as_bytes(), value.as_bytes());
    }
    write_header(out, X_REQUEST_ID.as_str().as_bytes(), ids.request_id());
}

pub(crate) fn write_header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Whether a header name as received is `header`.
pub(crate) fn is(name: &str, header: &HeaderName) -> bool {
    name.eq_ignore_ascii_case(header.as_str())
}

/// The headers a head's Connection headers name beyond the fixed hop-by-hop ones.
#[derive(Clone, Copy)]
struct ConnectionNamed<'h, 'b> {
    headers: &'h [Header<'b>],
    /// Whether there is any: the common `Connection: keep-alive` looks no further.
    any: bool,
}

impl<'h, 'b> ConnectionNamed<'h, 'b> {
    fn new(headers: &'h [Header<'b>]) -> Self {
        Self {
            headers,
            any: tokens(headers).any(names_extra_header),
        }
    }

    fn drops(&self, name: &str) -> bool {
        self.any
            && tokens(self.headers).any(|token| {
                names_extra_header(token) && token.eq_ignore_ascii_case(name.as_bytes())
            })
    }
}

/// The tokens of every Connection header.
fn tokens<'h, 'b>(headers: &'h [Header<'b>]) -> impl Iterator<Item = &'b [u8]> + 'h {
    headers
        .iter()
        .filter(|h| is(h.name, &CONNECTION))
        .flat_map(|h| connection_tokens(h.value))
}
