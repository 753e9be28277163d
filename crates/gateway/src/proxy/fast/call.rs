//! One call the fast path takes, on the caller's connection: the request goes to the
//! function, the answer streams back, and an error before the answer is the caller's
//! JSON answer, as on the full path.

use std::io;

use axum::http::StatusCode;
use axum::http::header::{CONNECTION, CONTENT_LENGTH};
use axum::response::IntoResponse;
use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::answer::{
    Framing, MAX_RESPONSE_HEAD, Parsed, header_room, parse_answer, write_status_line,
};
use super::chunked::{ChunkedScan, MAX_CHUNK_LINE};
use super::deadline::{LazyDeadline, within};
use super::request::Call;
use super::upstream::{self, Stream, Upstream};
use super::{Connection, READ_SIZE};
use crate::proxy::InvokeError;
use crate::proxy::forward::{invocation, upstream_uri};
use crate::proxy::headers::wire;
use crate::proxy::log::{CallError, Via};
use crate::serve::Linger;
use sless_core::routes::Address;

/// A request sent and its answer's head read: Ok(status, framing, whether the upstream
/// connection may serve again), or Err(what went wrong, whether the request body was
/// read whole).
type Exchanged = Result<(StatusCode, Framing, bool), (InvokeError, bool)>;

/// Why an answer stopped after its head went to the caller.
enum Cut {
    Timeout,
    BadAnswer,
    CallerGone,
}

impl Connection<'_> {
    /// One call; false when the caller's connection must close after it.
    pub(super) async fn forward(&mut self, call: Call, buf: &mut BytesMut) -> bool {
        let in_flight = call.function.calls.in_flight();
        // Out of `self` while the call borrows it.
        let mut deadline = call.timeout.map(|timeout| {
            let at = tokio::time::Instant::now()
                + timeout.saturating_add(self.proxy.config.timeout_margin);
            let mut deadline = self
                .call_deadline
                .take()
                .unwrap_or_else(|| LazyDeadline::new(at));
            deadline.set(at);
            deadline
        });
        let exchange = within(deadline.as_mut(), self.exchange(&call, buf)).await;
        let outcome = self.finish(call, exchange, deadline.as_mut(), buf).await;
        drop(in_flight);
        self.call_deadline = deadline.or(self.call_deadline.take());
        outcome
    }

    /// The rest of a call once the answer's head is in (or failed).
    async fn finish(
        &mut self,
        call: Call,
        exchange: Option<Exchanged>,
        deadline: Option<&mut LazyDeadline>,
        buf: &mut BytesMut,
    ) -> bool {
        let (status, framing, reusable) = match exchange {
            Some(Ok(head)) => head,
            Some(Err((error, body_sent))) => {
                self.upstream = None;
                let error = match error {
                    InvokeError::Unreachable { name, detail } => {
                        let target = call.function.target();
                        self.proxy
                            .why_unreachable(&target, call.address(), name, detail)
                            .await
                    }
                    error => error,
                };
                return self.fail(&call, error, body_sent, buf).await;
            }
            None => {
                self.upstream = None;
                let error = InvokeError::Timeout {
                    name: call.function.name.clone(),
                    timeout: call.timeout.unwrap_or_default(),
                };
                // How much of the body went up is unknown here: the caller's
                // connection closes after the answer.
                return self.fail(&call, error, false, buf).await;
            }
        };
        let cut = match within(deadline, self.relay(framing)).await {
            Some(Ok(())) => None,
            Some(Err(cut)) => Some(cut),
            None => Some(Cut::Timeout),
        };
        if cut.is_some() || !reusable || !self.answer.is_empty() {
            self.upstream = None;
            self.answer.clear();
        }
        let error = match cut {
            Some(Cut::Timeout) => Some(CallError::Timeout),
            Some(Cut::BadAnswer) => Some(CallError::BadAnswer),
            Some(Cut::CallerGone) | None => None,
        };
        let mut record = invocation(
            call.method,
            call.rest,
            status,
            call.started,
            error,
            &call.ids,
            Via::Http,
        );
        // Only a call to a ready instance takes the fast path: never a cold one.
        record.served_by(call.version, None);
        call.function.calls.record(record);
        cut.is_none()
    }

    /// Sends the request and reads the answer's head, written into `out` for the
    /// caller. Ok: the status, framing and whether the upstream connection may serve
    /// again. Err: what went wrong and whether the request body was read whole.
    async fn exchange(&mut self, call: &Call, buf: &mut BytesMut) -> Exchanged {
        // The whole request when it is in hand: then it can be sent again when a kept
        // connection turns out closed.
        let whole = usize::try_from(call.body_len)
            .ok()
            .and_then(|len| call.head_len.checked_add(len))
            .filter(|end| *end <= buf.len());
        let head_len = self.out.len();
        let mut retried = false;
        loop {
            let reused = self.connect(call).await.map_err(|e| (e, false))?;
            let upstream = &mut self
                .upstream
                .as_mut()
                .expect("connect leaves an upstream")
                .stream;
            let sent = match whole {
                Some(end) => {
                    self.out.extend_from_slice(&buf[call.head_len..end]);
                    upstream.write_all(&self.out).await.map_err(Failed::Io)
                }
                None => send_streaming(upstream, self.client, &self.out, call, buf).await,
            };
            // A kept connection may fail and the request go again: consumed after.
            if let Some(end) = whole
                && !reused
            {
                buf.advance(end);
            }
            self.answer.clear();
            let head = match sent {
                Ok(()) => self.read_head(call).await,
                Err(failed) => Err(failed),
            };
            let failed = match head {
                Ok(head) => {
                    if let Some(end) = whole
                        && reused
                    {
                        buf.advance(end);
                    }
                    return Ok(head);
                }
                Err(failed) => failed,
            };
            if let (Some(_), Failed::Io(_)) = (whole, &failed)
                && reused
                && !retried
                && self.answer.is_empty()
            {
                // The function closed the kept connection as the call went out.
                self.upstream = None;
                self.out.truncate(head_len);
                retried = true;
                continue;
            }
            if let Some(end) = whole
                && reused
            {
                buf.advance(end);
            }
            let name = call.function.name.clone();
            return Err(match failed {
                Failed::Io(e) => (
                    InvokeError::Unreachable {
                        name,
                        detail: sless_core::error_text::error_chain(&e),
                    },
                    whole.is_some(),
                ),
                Failed::Answer(detail) => (InvokeError::Unreachable { name, detail }, true),
                Failed::Body(detail) => (InvokeError::BadAnswer { name, detail }, true),
                Failed::Caller(detail) => (InvokeError::BadRequestBody(detail), false),
            });
        }
    }

    /// A connection to the call's instance; true when it is a kept one.
    async fn connect(&mut self, call: &Call) -> Result<bool, InvokeError> {
        if self
            .upstream
            .as_ref()
            .is_some_and(|u| u.address == *call.address())
        {
            return Ok(true);
        }
        self.upstream = upstream::take_idle(call.address());
        if self.upstream.is_some() {
            return Ok(true);
        }
        let unreachable = |detail: String| InvokeError::Unreachable {
            name: call.function.name.clone(),
            detail,
        };
        if let Address::Tcp(authority) = call.address() {
            upstream_uri(authority, "/", None)
                .map_err(|e| unreachable(format!("bad address {authority:?}: {e}")))?;
        }
        self.upstream = Some(Upstream::open(call.address()).await.map_err(unreachable)?);
        Ok(false)
    }

    /// Reads the function's answer head (skipping interim 1xx answers) and the start
    /// of its body, and writes the caller's head into `out`.
    async fn read_head(&mut self, call: &Call) -> Result<(StatusCode, Framing, bool), Failed> {
        let upstream = &mut self.upstream.as_mut().expect("connected").stream;
        loop {
            let mut headers = header_room();
            let parsed = parse_answer(&self.answer, &mut headers);
            match parsed {
                Parsed::Interim(len) => {
                    self.answer.advance(len);
                    continue;
                }
                Parsed::Head(head) => {
                    head.write_for_caller(
                        &mut self.out,
                        self.proxy.config.console_cookie.as_deref(),
                        call.close,
                        &call.ids,
                    );
                    let (len, status, framing, reusable) =
                        (head.len, head.status, head.framing, head.reusable);
                    self.answer.advance(len);
                    first_body_bytes(upstream, &mut self.answer, framing).await?;
                    return Ok((status, framing, reusable));
                }
                Parsed::Partial if self.answer.len() < MAX_RESPONSE_HEAD => {}
                Parsed::Partial => {
                    return Err(Failed::Answer("its answer head is too large".into()));
                }
                Parsed::Invalid(detail) => return Err(Failed::Answer(detail)),
            }
            self.answer.reserve(READ_SIZE);
            let read = upstream
                .read_buf(&mut self.answer)
                .await
                .map_err(Failed::Io)?;
            if read == 0 {
                return Err(Failed::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed before the answer's head was complete",
                )));
            }
        }
    }

    /// Streams the answer's body after the head in `out`, which goes out with the
    /// first bytes.
    async fn relay(&mut self, framing: Framing) -> Result<(), Cut> {
        let upstream = &mut self.upstream.as_mut().expect("connected").stream;
        let mut chunked = ChunkedScan::default();
        let mut remaining = match framing {
            Framing::Length(len) => len,
            _ => 0,
        };
        let mut upstream_done = false;
        loop {
            let done = match framing {
                Framing::Empty => true,
                Framing::Length(_) => {
                    let take = usize::try_from(remaining)
                        .unwrap_or(usize::MAX)
                        .min(self.answer.len());
                    self.out.extend_from_slice(&self.answer[..take]);
                    self.answer.advance(take);
                    remaining -= take as u64;
                    remaining == 0
                }
                Framing::Chunked => {
                    let take = chunked.scan(&self.answer).ok_or(Cut::BadAnswer)?;
                    self.out.extend_from_slice(&self.answer[..take]);
                    self.answer.advance(take);
                    chunked.done()
                }
                Framing::UntilClose => {
                    if !self.answer.is_empty() {
                        self.out
                            .extend_from_slice(format!("{:x}\r\n", self.answer.len()).as_bytes());
                        self.out.extend_from_slice(&self.answer);
                        self.out.extend_from_slice(b"\r\n");
                        self.answer.clear();
                    }
                    if upstream_done {
                        self.out.extend_from_slice(b"0\r\n\r\n");
                    }
                    upstream_done
                }
            };
            if !self.out.is_empty() {
                self.client
                    .write_all(&self.out)
                    .await
                    .map_err(|_| Cut::CallerGone)?;
                self.out.clear();
            }
            if done {
                return Ok(());
            }
            if upstream_done {
                return Err(Cut::BadAnswer);
            }
            self.answer.reserve(READ_SIZE);
            match upstream.read_buf(&mut self.answer).await {
                Ok(0) => upstream_done = true,
                Ok(_) => {}
                Err(_) if framing == Framing::UntilClose => upstream_done = true,
                Err(_) => return Err(Cut::BadAnswer),
            }
        }
    }

    /// Answers with `error` before any of the function's answer went out; false when
    /// the connection closes after it.
    async fn fail(
        &mut self,
        call: &Call,
        error: InvokeError,
        body_sent: bool,
        buf: &mut BytesMut,
    ) -> bool {
        let status = error.status();
        let response = error.into_response();
        let (parts, body) = response.into_parts();
        // A small in-memory JSON body.
        let body = axum::body::to_bytes(body, usize::MAX)
            .await
            .unwrap_or_default();
        let keep = body_sent && !call.close;
        if !body_sent {
            // The rest of the request is unread: the next request cannot be found.
            buf.clear();
        }
        self.out.clear();
        write_status_line(&mut self.out, status.as_u16(), "");
        for (name, value) in &parts.headers {
            wire::write_header(&mut self.out, name.as_str().as_bytes(), value.as_bytes());
        }
        wire::write_header(
            &mut self.out,
            CONTENT_LENGTH.as_str().as_bytes(),
            body.len().to_string().as_bytes(),
        );
        wire::write_added(&mut self.out, &call.ids);
        if !keep {
            wire::write_header(&mut self.out, CONNECTION.as_str().as_bytes(), b"close");
        }
        self.out.extend_from_slice(b"\r\n");
        self.out.extend_from_slice(&body);
        let written = self.client.write_all(&self.out).await.is_ok();
        self.out.clear();
        // Recorded before the close, which may linger for a caller still sending.
        let mut record = invocation(
            call.method.clone(),
            call.rest.clone(),
            status,
            call.started,
            None,
            &call.ids,
            Via::Http,
        );
        record.served_by(call.version.clone(), None);
        call.function.calls.record(record);
        if written && !keep {
            Linger::close(self.client).await;
        }
        written && keep
    }
}

/// Why sending a request or reading its answer's head failed.
enum Failed {
    /// On the function's connection.
    Io(io::Error),
    /// The caller's body broke off.
    Caller(String),
    Answer(String),
    /// The head came, then the body was missing or malformed from its start.
    Body(String),
}

/// Waits for the start of the body, as the full path waits for its first frame: an
/// answer that breaks off or is malformed there is still a 502 the caller can read.
async fn first_body_bytes(
    upstream: &mut Stream,
    answer: &mut BytesMut,
    framing: Framing,
) -> Result<(), Failed> {
    loop {
        let enough = match framing {
            Framing::Empty | Framing::Length(0) => true,
            Framing::Length(_) | Framing::UntilClose => !answer.is_empty(),
            Framing::Chunked => match httparse::parse_chunk_size(answer) {
                Ok(httparse::Status::Complete(_)) => true,
                Ok(httparse::Status::Partial) if answer.len() < MAX_CHUNK_LINE => false,
                _ => return Err(Failed::Body("invalid chunk size line".into())),
            },
        };
        if enough {
            return Ok(());
        }
        answer.reserve(READ_SIZE);
        if upstream.read_buf(answer).await.map_err(Failed::Io)? == 0 {
            return match framing {
                Framing::UntilClose => Ok(()),
                _ => Err(Failed::Body("the answer broke off before its body".into())),
            };
        }
    }
}

/// Writes the request head and streams a body that has not all arrived yet.
async fn send_streaming(
    upstream: &mut Stream,
    client: &mut TcpStream,
    head: &[u8],
    call: &Call,
    buf: &mut BytesMut,
) -> Result<(), Failed> {
    upstream.write_all(head).await.map_err(Failed::Io)?;
    buf.advance(call.head_len);
    let mut remaining = call.body_len;
    loop {
        let take = usize::try_from(remaining)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        upstream.write_all(&buf[..take]).await.map_err(Failed::Io)?;
        buf.advance(take);
        remaining -= take as u64;
        if remaining == 0 {
            return Ok(());
        }
        buf.reserve(READ_SIZE);
        match client.read_buf(buf).await {
            Ok(0) => {
                return Err(Failed::Caller(
                    "the caller closed before sending the whole body".into(),
                ));
            }
            Ok(_) => {}
            Err(e) => return Err(Failed::Caller(e.to_string())),
        }
    }
}
