//! A function's answer head, parsed in place: how its body is framed, whether the
//! connection may serve again, and the head the caller gets.

use std::io::Write as _;

use axum::http::StatusCode;
use axum::http::header::{CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING};
use httparse::Header;

use super::decimal;
use crate::proxy::headers::call_id::CallIds;
use crate::proxy::headers::connection_tokens;
use crate::proxy::headers::wire::{self, is};

/// A function's answer head: the limits of hyper's client.
const MAX_RESPONSE_HEADERS: usize = 100;
pub(super) const MAX_RESPONSE_HEAD: usize = 400 * 1024;

/// How a function's answer body is delimited.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Framing {
    Empty,
    Length(u64),
    Chunked,
    /// Read until the function closes; re-framed as chunked for the caller.
    UntilClose,
}

/// What `parse_answer` found in the bytes read so far.
pub(super) enum Parsed<'h, 'b> {
    Partial,
    Invalid(String),
    /// A 1xx answer before the real one, `len` bytes long.
    Interim(usize),
    Head(Head<'h, 'b>),
}

/// A function's final answer head, borrowed from the bytes read.
pub(super) struct Head<'h, 'b> {
    /// Its length in bytes.
    pub(super) len: usize,
    pub(super) status: StatusCode,
    reason: &'b str,
    headers: &'h [Header<'b>],
    pub(super) framing: Framing,
    /// The upstream connection may take another call after this answer.
    pub(super) reusable: bool,
}

/// Parses a function's answer head, its headers going into `headers`.
pub(super) fn parse_answer<'h, 'b>(
    answer: &'b [u8],
    headers: &'h mut [Header<'b>; MAX_RESPONSE_HEADERS],
) -> Parsed<'h, 'b> {
    let mut response = httparse::Response::new(headers);
    let len = match response.parse(answer) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(e) => return Parsed::Invalid(format!("invalid answer head: {e}")),
    };
    let (Some(code), Some(version)) = (response.code, response.version) else {
        return Parsed::Invalid("invalid answer head".into());
    };
    let Ok(status) = StatusCode::from_u16(code) else {
        return Parsed::Invalid(format!("invalid status {code}"));
    };
    if status == StatusCode::SWITCHING_PROTOCOLS {
        return Parsed::Invalid("switched protocols without being asked".into());
    }
    if status.is_informational() {
        return Parsed::Interim(len);
    }
    let reason = response.reason.unwrap_or_default();
    let headers: &'h [Header<'b>] = response.headers;
    let mut framing = None;
    let mut length = None;
    let mut keep_alive = version == 1;
    for header in headers {
        if is(header.name, &TRANSFER_ENCODING) {
            let last = header
                .value
                .rsplit(|b| *b == b',')
                .next()
                .unwrap_or_default();
            framing = Some(if last.trim_ascii().eq_ignore_ascii_case(b"chunked") {
                Framing::Chunked
            } else {
                Framing::UntilClose
            });
        } else if is(header.name, &CONTENT_LENGTH) {
            match (decimal(header.value), length) {
                (Some(len), None) => length = Some(len),
                (Some(len), Some(earlier)) if len == earlier => {}
                _ => return Parsed::Invalid("invalid content-length".into()),
            }
        } else if is(header.name, &CONNECTION) {
            keep_alive &=
                !connection_tokens(header.value).any(|t| t.eq_ignore_ascii_case(b"close"));
        }
    }
    let framing = if status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
        Framing::Empty
    } else {
        framing.unwrap_or(length.map_or(Framing::UntilClose, Framing::Length))
    };
    Parsed::Head(Head {
        len,
        status,
        reason,
        headers,
        framing,
        reusable: keep_alive && framing != Framing::UntilClose,
    })
}

impl<'b> Head<'_, 'b> {
    /// The headers that reach the caller, by the answer rules of every path.
    pub(super) fn passed<'a>(
        &'a self,
        console_cookie: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Header<'b>> {
        wire::answer(self.headers, console_cookie)
    }

    /// Writes the caller's head into `out`.
    pub(super) fn write_for_caller(
        &self,
        out: &mut Vec<u8>,
        console_cookie: Option<&str>,
        close: bool,
        ids: &CallIds,
    ) {
        let status = self.status;
        out.clear();
        write_status_line(out, status.as_u16(), self.reason);
        for header in self.passed(console_cookie) {
            // Framing is the fast path's own, written below.
            if is(header.name, &CONTENT_LENGTH) && status != StatusCode::NOT_MODIFIED {
                continue;
            }
            wire::write_header(out, header.name.as_bytes(), header.value);
        }
        match self.framing {
            Framing::Empty => {}
            Framing::Length(len) => {
                let _ = write!(out, "{CONTENT_LENGTH}: {len}\r\n");
            }
            Framing::Chunked | Framing::UntilClose => {
                wire::write_header(out, TRANSFER_ENCODING.as_str().as_bytes(), b"chunked")
            }
        }
        wire::write_added(out, ids);
        if close {
            wire::write_header(out, CONNECTION.as_str().as_bytes(), b"close");
        }
        out.extend_from_slice(b"\r\n");
    }
}

/// Room for the headers of an answer head.
pub(super) fn header_room<'b>() -> [Header<'b>; MAX_RESPONSE_HEADERS] {
    [httparse::EMPTY_HEADER; MAX_RESPONSE_HEADERS]
}

pub(super) fn write_status_line(out: &mut Vec<u8>, code: u16, reason: &str) {
    let reason = if reason.is_empty() {
        StatusCode::from_u16(code)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or_default()
    } else {
        reason
    };
    // Writing to a Vec cannot fail.
    let _ = write!(out, "HTTP/1.1 {code} ");
    out.extend_from_slice(reason.as_bytes());
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::headers::SANDBOX_POLICY;

    /// (status, framing, reusable, the caller's head) of an answer head.
    fn answer(head: &str, close: bool) -> (u16, Framing, bool, String) {
        let mut out = Vec::new();
        let ids = CallIds::new(Some(b"call-1"), None);
        match parse_answer(head.as_bytes(), &mut header_room()) {
            Parsed::Head(parsed) => {
                parsed.write_for_caller(&mut out, Some("sless_session"), close, &ids);
                (
                    parsed.status.as_u16(),
                    parsed.framing,
                    parsed.reusable,
                    String::from_utf8(out).unwrap(),
                )
            }
            Parsed::Interim(_) => (100, Framing::Empty, false, String::new()),
            Parsed::Partial => panic!("partial: {head:?}"),
            Parsed::Invalid(e) => panic!("invalid: {e}"),
        }
    }

    #[test]
    fn frames_answers_for_the_caller() {
        let (status, framing, reusable, head) = answer(
            "HTTP/1.1 201 Created\r\nContent-Length: 3\r\nConnection: keep-alive, x-hop\r\nX-Hop: 1\r\nSet-Cookie: sless_session=planted\r\nSet-Cookie: theme=dark\r\n\r\n",
            false,
        );
        assert_eq!((status, framing, reusable), (201, Framing::Length(3), true));
        assert_eq!(
            head,
            format!(
                "HTTP/1.1 201 Created\r\nset-cookie: theme=dark\r\ncontent-length: 3\r\ncontent-security-policy: {SANDBOX_POLICY}\r\nx-request-id: call-1\r\n\r\n"
            )
            .replace("set-cookie", "Set-Cookie")
        );

        // Chunked wins over a Content-Length, which does not reach the caller.
        let (_, framing, _, head) = answer(
            "HTTP/1.1 200 OK\r\nContent-Length: 10\r\nTransfer-Encoding: chunked\r\n\r\n",
            true,
        );
        assert_eq!(framing, Framing::Chunked);
        assert!(
            !head.to_ascii_lowercase().contains("content-length"),
            "{head}"
        );
        assert!(head.contains("transfer-encoding: chunked\r\n"), "{head}");
        assert!(head.contains("connection: close\r\n"), "{head}");

        let (_, framing, reusable, head) = answer("HTTP/1.1 200 OK\r\n\r\n", false);
        assert_eq!((framing, reusable), (Framing::UntilClose, false));
        assert!(head.contains("transfer-encoding: chunked\r\n"), "{head}");
        let (_, framing, reusable, _) = answer(
            "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: close\r\n\r\n",
            false,
        );
        assert_eq!((framing, reusable), (Framing::Length(1), false));
        let (_, _, reusable, _) = answer("HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", false);
        assert!(!reusable);
        let (status, framing, _, _) = answer("HTTP/1.1 204 No Content\r\n\r\n", false);
        assert_eq!((status, framing), (204, Framing::Empty));
        let (status, ..) = answer("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n", false);
        assert_eq!(status, 100, "interim");

        for bad in [
            "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            "HTTP/1.1 101 Switching Protocols\r\n\r\n",
            "HTTP/1.1 2000 Wrong\r\n\r\n",
            "NOT HTTP\r\n\r\n",
        ] {
            assert!(
                matches!(
                    parse_answer(bad.as_bytes(), &mut header_room()),
                    Parsed::Invalid(_)
                ),
                "{bad:?}"
            );
        }
    }
}
