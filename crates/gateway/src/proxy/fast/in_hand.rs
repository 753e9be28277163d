//! A call whose whole request is in hand (a trigger's: an event delivery, a cron fire)
//! sent as the fast path sends `/fn` calls: on a kept connection to the instance
//! ([`super::upstream`]), its head written out by hand, the answer read in place
//! ([`super::answer`]). The full path does everything around it (routing, waits,
//! limits, header rules, the call's record, [`crate::proxy::forward`]); this replaces
//! only hyper's pooled client, whose connection task and channels cost an event
//! delivery more than the call itself.

use std::io;
use std::sync::{Mutex, PoisonError};

use axum::http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::READ_SIZE;
use super::answer::{Framing, MAX_RESPONSE_HEAD, Parsed, header_room, parse_answer};
use super::chunked::ChunkedScan;
pub(in crate::proxy) use super::upstream::Idle;
use super::upstream::{Stream, Upstream};
use crate::proxy::headers::wire;
use sless_core::routes::Address;

/// A function's whole answer, its headers as the answer rules leave them.
pub(in crate::proxy) struct Answered {
    pub(in crate::proxy) status: StatusCode,
    pub(in crate::proxy) headers: HeaderMap,
    /// Its first bytes, up to what the caller keeps.
    pub(in crate::proxy) body: Bytes,
}

/// Why a call got no whole answer.
pub(in crate::proxy) enum Failed {
    /// No answer head: the caller's 502 "unreachable".
    Unreachable(String),
    /// The head came, then the body broke off or was malformed.
    BadAnswer(String),
}

/// The HTTP/1.1 request for `rest` and `query` with `headers` (already rewritten by the
/// header rules) and `body`.
pub(in crate::proxy) fn request(
    method: &Method,
    rest: &str,
    query: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(512 + body.len());
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(rest.as_bytes());
    if let Some(query) = query {
        out.push(b'?');
        out.extend_from_slice(query.as_bytes());
    }
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in headers {
        // The framing is the body's own, written below.
        if name == CONTENT_LENGTH || name == TRANSFER_ENCODING {
            continue;
        }
        wire::write_header(&mut out, name.as_str().as_bytes(), value.as_bytes());
    }
    wire::write_header(
        &mut out,
        CONTENT_LENGTH.as_str().as_bytes(),
        body.len().to_string().as_bytes(),
    );
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

/// Sends `request` to the instance at `address` and reads its answer to the end,
/// keeping the first `keep` bytes of the body. `idle` keeps the connections between
/// calls: one pool for all trigger calls, not the serving thread's, as they run on a
/// work-stealing runtime where a call may end on another thread than it began.
pub(in crate::proxy) async fn exchange(
    idle: &Mutex<Idle>,
    address: &Address,
    request: &[u8],
    console_cookie: Option<&str>,
    keep: usize,
) -> Result<Answered, Failed> {
    let mut retried = false;
    loop {
        let kept = idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take(address);
        let (mut upstream, reused) = match kept {
            Some(upstream) => (upstream, true),
            None => (
                Upstream::open(address).await.map_err(Failed::Unreachable)?,
                false,
            ),
        };
        let mut answer = BytesMut::with_capacity(READ_SIZE);
        let failed = match send(
            &mut upstream.stream,
            request,
            &mut answer,
            console_cookie,
            keep,
        )
        .await
        {
            Ok((answered, reusable)) => {
                if reusable && answer.is_empty() {
                    idle.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .put(upstream);
                }
                return Ok(answered);
            }
            Err(failed) => failed,
        };
        match failed {
            // The function closed the kept connection as the call went out: once more
            // on a new one.
            Exchange::Io(_) if reused && !retried && answer.is_empty() => retried = true,
            Exchange::Io(e) => {
                return Err(Failed::Unreachable(sless_core::error_text::error_chain(&e)));
            }
            Exchange::Answer(detail) => return Err(Failed::Unreachable(detail)),
            Exchange::Body(detail) => return Err(Failed::BadAnswer(detail)),
        }
    }
}

/// Why one exchange failed.
enum Exchange {
    Io(io::Error),
    /// The answer head was malformed.
    Answer(String),
    Body(String),
}

/// Writes the request and reads the answer; true when the connection may serve again.
async fn send(
    stream: &mut Stream,
    request: &[u8],
    answer: &mut BytesMut,
    console_cookie: Option<&str>,
    keep: usize,
) -> Result<(Answered, bool), Exchange> {
    stream.write_all(request).await.map_err(Exchange::Io)?;
    loop {
        let mut headers = header_room();
        match parse_answer(answer, &mut headers) {
            Parsed::Interim(len) => {
                answer.advance(len);
                continue;
            }
            Parsed::Head(head) => {
                let mut map = HeaderMap::new();
                for header in head.passed(console_cookie) {
                    // The body in hand is framed by its own length.
                    if wire::is(header.name, &CONTENT_LENGTH) {
                        continue;
                    }
                    if let (Ok(name), Ok(value)) = (
                        HeaderName::from_bytes(header.name.as_bytes()),
                        HeaderValue::from_bytes(header.value),
                    ) {
                        map.append(name, value);
                    }
                }
                let (len, status, framing, reusable) =
                    (head.len, head.status, head.framing, head.reusable);
                answer.advance(len);
                let body = read_body(stream, answer, framing, keep).await?;
                let answered = Answered {
                    status,
                    headers: map,
                    body,
                };
                return Ok((answered, reusable));
            }
            Parsed::Partial if answer.len() < MAX_RESPONSE_HEAD => {}
            Parsed::Partial => return Err(Exchange::Answer("its answer head is too large".into())),
            Parsed::Invalid(detail) => return Err(Exchange::Answer(detail)),
        }
        answer.reserve(READ_SIZE);
        if stream.read_buf(answer).await.map_err(Exchange::Io)? == 0 {
            return Err(Exchange::Io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed before the answer's head was complete",
            )));
        }
    }
}

/// Reads the body to its end (the call lasts as long as the function's answer, and the
/// connection may serve again), keeping its first `keep` bytes.
async fn read_body(
    stream: &mut Stream,
    answer: &mut BytesMut,
    framing: Framing,
    keep: usize,
) -> Result<Bytes, Exchange> {
    let mut body = Vec::new();
    let mut kept = |data: &[u8]| {
        let room = keep.saturating_sub(body.len());
        body.extend_from_slice(&data[..data.len().min(room)]);
    };
    let mut chunked = ChunkedScan::default();
    let mut remaining = match framing {
        Framing::Length(len) => len,
        _ => 0,
    };
    loop {
        let done = match framing {
            Framing::Empty => true,
            Framing::Length(_) => {
                let take = usize::try_from(remaining)
                    .unwrap_or(usize::MAX)
                    .min(answer.len());
                kept(&answer[..take]);
                answer.advance(take);
                remaining -= take as u64;
                remaining == 0
            }
            Framing::Chunked => {
                let take = chunked
                    .scan_data(&answer[..], &mut kept)
                    .ok_or_else(|| Exchange::Body("invalid chunked framing".into()))?;
                answer.advance(take);
                chunked.done()
            }
            Framing::UntilClose => {
                kept(&answer[..]);
                answer.clear();
                false
            }
        };
        if done {
            return Ok(Bytes::from(body));
        }
        answer.reserve(READ_SIZE);
        match stream.read_buf(answer).await {
            Ok(0) | Err(_) if framing == Framing::UntilClose => return Ok(Bytes::from(body)),
            Ok(0) => return Err(Exchange::Body("the answer broke off".into())),
            Ok(_) => {}
            Err(e) => return Err(Exchange::Body(e.to_string())),
        }
    }
}
