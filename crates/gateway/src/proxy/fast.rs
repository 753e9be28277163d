//! The proxy's fast path, plugged into serving as its [`FastPath`]: the common `/fn`
//! call, forwarded on the caller's own connection task without the HTTP stack: an
//! HTTP/1.1 request without a body or with a Content-Length one, to a function that is
//! ready. The head is parsed in place (httparse), rewritten by the header rules of the
//! full path ([`super::headers`]) and written with the body to an upstream connection
//! that this caller's connection keeps for itself; the answer streams back as it comes.
//! A call is then one read and one write on each socket, on one task, which is what
//! brings `/fn` to nginx's cost per call (docs/benchmarks.md).
//!
//! Everything else leaves the connection to hyper and the router from that request
//! on, with the bytes already read ([`End::HandOver`]): other versions, HEAD, chunked
//! or `Expect` request bodies, upgrades, large heads, and functions that are not
//! ready (starting, stopped, unknown), whose waits and errors live there. Both paths
//! record calls, count metrics and keep the same limits and timeouts.

use std::future::Future;
use std::io::{self, Write as _};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::header::{CONNECTION, CONTENT_LENGTH, EXPECT, HOST, TRANSFER_ENCODING, UPGRADE};
use axum::http::{Method, StatusCode};
use axum::response::IntoResponse;
use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Sleep;

use super::forward::{Target, invocation, upstream_uri};
use super::headers::connection_tokens;
use super::headers::wire::{self, is, write_header};
use super::log::{CallError, Calls};
use super::{CONNECT_TIMEOUT, InvokeError, Proxy};
use crate::serve::{End, FastPath, Limits, Linger, stop_requested};
use sless_core::routes::Route;

/// Request heads with more headers or bytes go to hyper, which has the limits and the
/// errors (431) for them.
const MAX_REQUEST_HEADERS: usize = 64;
const MAX_REQUEST_HEAD: usize = 16 * 1024;
/// A function's answer head: the limits of hyper's client.
const MAX_RESPONSE_HEADERS: usize = 100;
const MAX_RESPONSE_HEAD: usize = 400 * 1024;
/// A chunk-size line of a chunked answer, extensions included.
const MAX_CHUNK_LINE: usize = 4096;
/// Trailers of a chunked answer, all together.
const MAX_TRAILERS: usize = 16 * 1024;
/// Bytes read at a time.
const READ_SIZE: usize = 16 * 1024;

impl FastPath for Proxy {
    fn serve<'a>(
        &'a self,
        stream: &'a mut TcpStream,
        read: &'a mut BytesMut,
        remote: SocketAddr,
        limits: Limits,
        stopped: &'a mut watch::Receiver<bool>,
    ) -> Pin<Box<dyn Future<Output = End> + Send + 'a>> {
        Box::pin(serve(self, stream, read, remote, limits, stopped))
    }
}

/// Serves the fast calls of one caller's connection, reading into `buf`.
async fn serve(
    proxy: &Proxy,
    client: &mut TcpStream,
    buf: &mut BytesMut,
    remote: SocketAddr,
    limits: Limits,
    stopped: &mut watch::Receiver<bool>,
) -> End {
    // Created once: a stop future per request would register with the watch per call.
    let mut conn = Connection {
        proxy,
        client,
        caller_ip: remote.ip().to_canonical().to_string(),
        function: None,
        upstream: None,
        out: Vec::with_capacity(1024),
        answer: BytesMut::with_capacity(READ_SIZE),
        head_deadline: LazyDeadline::new(tokio::time::Instant::now() + limits.header_timeout),
        call_deadline: None,
    };
    let stop = stop_requested(stopped);
    tokio::pin!(stop);
    let mut first = true;
    loop {
        let next = conn.next_call(buf, limits, first, stop.as_mut()).await;
        first = false;
        let call = match next {
            Some(Next::Call(call)) => call,
            Some(Next::HandOver) => {
                conn.release();
                return End::HandOver;
            }
            None => {
                conn.release();
                return End::Closed;
            }
        };
        let close = call.close;
        if !conn.forward(call, buf).await || close {
            conn.release();
            return End::Closed;
        }
    }
}

enum Next {
    Call(Call),
    HandOver,
}

/// What `prepare` learnt of a request head.
enum Step {
    Partial,
    HandOver,
    Call(Call),
}

/// A request the fast path takes; its upstream head is in `Connection::out`.
struct Call {
    started: Instant,
    method: Method,
    head_len: usize,
    body_len: u64,
    /// The caller asked to close after this answer.
    close: bool,
    function: Arc<Function>,
    /// The path after the function's name, for the invocation record.
    rest: String,
    authority: Arc<str>,
    timeout: Option<Duration>,
}

/// The function a connection called last, kept for its next call: a caller usually
/// calls the same function again.
struct Function {
    namespace: String,
    name: String,
    calls: Arc<Calls>,
}

struct Upstream {
    authority: Arc<str>,
    stream: TcpStream,
}

struct Connection<'a> {
    proxy: &'a Proxy,
    client: &'a mut TcpStream,
    /// For X-Forwarded-For.
    caller_ip: String,
    function: Option<Arc<Function>>,
    /// Kept between calls while the function's instance stays the same.
    upstream: Option<Upstream>,
    /// The head being written (the upstream request, then the caller's answer).
    out: Vec<u8>,
    /// What was read of the function's answer.
    answer: BytesMut,
    /// The header or idle timeout of the next request.
    head_deadline: LazyDeadline,
    /// The function's timeout of the call in flight.
    call_deadline: Option<LazyDeadline>,
}

/// A deadline that costs a timer operation only when it moves earlier than its timer,
/// or when the timer fires before the deadline (then it is set again). On a kept-alive
/// connection each request and call moves its deadline later than the last one, so
/// the timer is touched about once per timeout instead of twice per call.
struct LazyDeadline {
    timer: Pin<Box<Sleep>>,
    deadline: tokio::time::Instant,
}

impl LazyDeadline {
    fn new(deadline: tokio::time::Instant) -> Self {
        Self {
            timer: Box::pin(tokio::time::sleep_until(deadline)),
            deadline,
        }
    }

    fn set(&mut self, deadline: tokio::time::Instant) {
        self.deadline = deadline;
        if deadline < self.timer.deadline() {
            self.timer.as_mut().reset(deadline);
        }
    }

    async fn passed(&mut self) {
        loop {
            self.timer.as_mut().await;
            if tokio::time::Instant::now() >= self.deadline {
                return;
            }
            let deadline = self.deadline;
            self.timer.as_mut().reset(deadline);
        }
    }
}

/// `future`'s output, or None when `deadline` passed first.
async fn within<F: Future>(deadline: Option<&mut LazyDeadline>, future: F) -> Option<F::Output> {
    match deadline {
        Some(deadline) => tokio::select! {
            biased;
            output = future => Some(output),
            () = deadline.passed() => None,
        },
        None => Some(future.await),
    }
}

/// How a function's answer body is delimited.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Framing {
    Empty,
    Length(u64),
    Chunked,
    /// Read until the function closes; re-framed as chunked for the caller.
    UntilClose,
}

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
    /// Leaves the kept upstream connection for the next caller on this thread.
    fn release(&mut self) {
        if let Some(upstream) = self.upstream.take() {
            idle::put(upstream);
        }
    }

    /// Waits for the next request head: the header timeout from the connection's start
    /// or a request's first byte, the idle timeout before that byte. None when the
    /// connection is to close.
    async fn next_call<S: Future<Output = ()>>(
        &mut self,
        buf: &mut BytesMut,
        limits: Limits,
        first: bool,
        mut stop: Pin<&mut S>,
    ) -> Option<Next> {
        if !first {
            let wait = if buf.is_empty() {
                limits.idle_timeout
            } else {
                limits.header_timeout
            };
            self.head_deadline.set(tokio::time::Instant::now() + wait);
        }
        loop {
            if !buf.is_empty() {
                let prepared = prepare(
                    self.proxy,
                    buf,
                    &self.caller_ip,
                    &mut self.function,
                    &mut self.out,
                );
                match prepared {
                    Step::Partial => {}
                    Step::HandOver => return Some(Next::HandOver),
                    Step::Call(call) => return Some(Next::Call(call)),
                }
            }
            let was_empty = buf.is_empty();
            buf.reserve(READ_SIZE);
            let read = tokio::select! {
                read = self.client.read_buf(buf) => read,
                () = closed(&self.upstream) => {
                    self.upstream = None;
                    continue;
                }
                () = self.head_deadline.passed() => return None,
                () = stop.as_mut(), if was_empty => return None,
            };
            match read {
                Ok(0) | Err(_) => return None,
                Ok(_) if was_empty && !first => {
                    self.head_deadline
                        .set(tokio::time::Instant::now() + limits.header_timeout);
                }
                Ok(_) => {}
            }
        }
    }

    /// One call; false when the caller's connection must close after it.
    async fn forward(&mut self, call: Call, buf: &mut BytesMut) -> bool {
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
                            .why_unreachable(&target, &call.authority, name, detail)
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
        let recorded = match error {
            Some(CallError::Timeout) => StatusCode::GATEWAY_TIMEOUT,
            Some(CallError::BadAnswer) => StatusCode::BAD_GATEWAY,
            None => status,
        };
        call.function.calls.record(invocation(
            call.method,
            call.rest,
            recorded,
            call.started,
            error,
        ));
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
            .is_some_and(|u| u.authority == call.authority)
        {
            return Ok(true);
        }
        self.upstream = idle::take(&call.authority);
        if self.upstream.is_some() {
            return Ok(true);
        }
        let unreachable = |detail: String| InvokeError::Unreachable {
            name: call.function.name.clone(),
            detail,
        };
        let authority = &*call.authority;
        upstream_uri(authority, "/", None)
            .map_err(|e| unreachable(format!("bad address {authority:?}: {e}")))?;
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(authority))
            .await
            .map_err(|_| unreachable(format!("connecting to {authority} timed out")))?
            .map_err(|e| unreachable(format!("connecting to {authority}: {e}")))?;
        // The head goes out before the body: without this the body would wait for
        // the function's delayed ACK.
        let _ = stream.set_nodelay(true);
        self.upstream = Some(Upstream {
            authority: call.authority.clone(),
            stream,
        });
        Ok(false)
    }

    /// Reads the function's answer head (skipping interim 1xx answers) and the start
    /// of its body, and writes the caller's head into `out`.
    async fn read_head(&mut self, call: &Call) -> Result<(StatusCode, Framing, bool), Failed> {
        let upstream = &mut self.upstream.as_mut().expect("connected").stream;
        loop {
            let parsed = parse_answer(
                &self.answer,
                &mut self.out,
                self.proxy.config.console_cookie.as_deref(),
                call.close,
            );
            match parsed {
                Parsed::Interim(len) => {
                    self.answer.advance(len);
                    continue;
                }
                Parsed::Head {
                    len,
                    status,
                    framing,
                    reusable,
                } => {
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
            write_header(&mut self.out, name.as_str().as_bytes(), value.as_bytes());
        }
        write_header(
            &mut self.out,
            CONTENT_LENGTH.as_str().as_bytes(),
            body.len().to_string().as_bytes(),
        );
        wire::write_added(&mut self.out);
        if !keep {
            write_header(&mut self.out, CONNECTION.as_str().as_bytes(), b"close");
        }
        self.out.extend_from_slice(b"\r\n");
        self.out.extend_from_slice(&body);
        let written = self.client.write_all(&self.out).await.is_ok();
        self.out.clear();
        // Recorded before the close, which may linger for a caller still sending.
        call.function.calls.record(invocation(
            call.method.clone(),
            call.rest.clone(),
            status,
            call.started,
            None,
        ));
        if written && !keep {
            Linger::close(self.client).await;
        }
        written && keep
    }
}

impl Function {
    fn target(&self) -> Target<'_> {
        Target {
            namespace: &self.namespace,
            name: &self.name,
            rest: "/",
            query: None,
        }
    }
}

/// Idle upstream connections of this serving thread, by instance. A caller's
/// connection that ends leaves its upstream connection here for the next one, so
/// callers that do not keep their connections alive do not cost a connection to the
/// function (and a port in TIME_WAIT) per call. Per thread: a connection belongs to
/// the runtime of the thread that opened it ([`crate::serve`]).
mod idle {
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::io;
    use std::sync::Arc;

    use tokio::net::TcpStream;
    use tokio::time::Instant;

    use super::Upstream;
    use crate::proxy::POOL_IDLE_TIMEOUT;

    /// Idle connections kept per instance and thread.
    const MAX_PER_INSTANCE: usize = 64;

    type Idle = HashMap<Arc<str>, Vec<(Instant, TcpStream)>>;

    thread_local! {
        static IDLE: RefCell<Idle> = RefCell::new(HashMap::new());
    }

    /// A kept connection to `authority` that the function has not closed.
    pub(super) fn take(authority: &Arc<str>) -> Option<Upstream> {
        IDLE.with_borrow_mut(|idle| {
            let kept = idle.get_mut(authority)?;
            while let Some((since, stream)) = kept.pop() {
                let mut byte = [0u8; 1];
                let open = matches!(
                    stream.try_read(&mut byte),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock
                );
                if open && since.elapsed() < POOL_IDLE_TIMEOUT {
                    return Some(Upstream {
                        authority: authority.clone(),
                        stream,
                    });
                }
            }
            None
        })
    }

    pub(super) fn put(upstream: Upstream) {
        IDLE.with_borrow_mut(|idle| {
            // Connections past the idle timeout go, and instances left without any.
            idle.retain(|_, kept| {
                kept.retain(|(since, _)| since.elapsed() < POOL_IDLE_TIMEOUT);
                !kept.is_empty()
            });
            let kept = idle.entry(upstream.authority).or_default();
            if kept.len() < MAX_PER_INSTANCE {
                kept.push((Instant::now(), upstream.stream));
            }
        });
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
    upstream: &mut TcpStream,
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

/// Resolves when the kept upstream connection closes (or sends what nobody asked for):
/// it must not take the next call. Never without one.
async fn closed(upstream: &Option<Upstream>) {
    let Some(upstream) = upstream else {
        return std::future::pending().await;
    };
    let mut byte = [0u8; 1];
    loop {
        if upstream.stream.readable().await.is_err() {
            return;
        }
        match upstream.stream.try_read(&mut byte) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            _ => return,
        }
    }
}

/// Writes the request head and streams a body that has not all arrived yet.
async fn send_streaming(
    upstream: &mut TcpStream,
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

/// Decides on a request head in `buf` and, for a fast call, writes its upstream head
/// into `out`.
fn prepare(
    proxy: &Proxy,
    buf: &[u8],
    caller_ip: &str,
    last: &mut Option<Arc<Function>>,
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
        if is(name, &TRANSFER_ENCODING) || is(name, &UPGRADE) || is(name, &EXPECT) {
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
        authority, timeout, ..
    } = proxy.routes.route(target.namespace, target.name)
    else {
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
    wire::request(
        out,
        headers,
        &authority,
        caller_ip,
        proxy.config.console_cookie.as_deref(),
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
        authority,
        timeout,
    })
}

/// What `parse_answer` found in the bytes read so far.
enum Parsed {
    Partial,
    Invalid(String),
    /// A 1xx answer before the real one, `len` bytes long.
    Interim(usize),
    Head {
        len: usize,
        status: StatusCode,
        framing: Framing,
        /// The upstream connection may take another call after this answer.
        reusable: bool,
    },
}

/// Parses a function's answer head and writes the caller's head into `out`.
fn parse_answer(
    answer: &[u8],
    out: &mut Vec<u8>,
    console_cookie: Option<&str>,
    close: bool,
) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; MAX_RESPONSE_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
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
    let headers = &*response.headers;
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

    out.clear();
    write_status_line(out, code, response.reason.unwrap_or_default());
    for header in wire::answer(headers, console_cookie) {
        // Framing is the fast path's own, written below.
        if is(header.name, &CONTENT_LENGTH) && status != StatusCode::NOT_MODIFIED {
            continue;
        }
        wire::write_header(out, header.name.as_bytes(), header.value);
    }
    match framing {
        Framing::Empty => {}
        Framing::Length(len) => {
            let _ = write!(out, "{CONTENT_LENGTH}: {len}\r\n");
        }
        Framing::Chunked | Framing::UntilClose => {
            write_header(out, TRANSFER_ENCODING.as_str().as_bytes(), b"chunked")
        }
    }
    wire::write_added(out);
    if close {
        write_header(out, CONNECTION.as_str().as_bytes(), b"close");
    }
    out.extend_from_slice(b"\r\n");
    Parsed::Head {
        len,
        status,
        framing,
        reusable: keep_alive && framing != Framing::UntilClose,
    }
}

fn write_status_line(out: &mut Vec<u8>, code: u16, reason: &str) {
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

/// A Content-Length value: digits only (no sign), surrounding blanks allowed.
fn decimal(value: &[u8]) -> Option<u64> {
    let digits = value.trim_ascii();
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    digits.iter().try_fold(0u64, |n, d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// Follows a chunked body as it passes through, to find where it ends.
#[derive(Debug, Default)]
struct ChunkedScan {
    state: ChunkState,
    trailer_bytes: usize,
}

#[derive(Debug, Default, PartialEq)]
enum ChunkState {
    #[default]
    Size,
    Data(u64),
    DataEnd,
    Trailers,
    Done,
}

impl ChunkedScan {
    /// How many bytes of `bytes` belong to the body (whole framing elements only);
    /// None when the framing is broken.
    fn scan(&mut self, bytes: &[u8]) -> Option<usize> {
        let mut at = 0;
        loop {
            let rest = &bytes[at..];
            match self.state {
                ChunkState::Done => return Some(at),
                ChunkState::Size => match httparse::parse_chunk_size(rest) {
                    Ok(httparse::Status::Complete((len, 0))) => {
                        at += len;
                        self.state = ChunkState::Trailers;
                    }
                    Ok(httparse::Status::Complete((len, size))) => {
                        at += len;
                        self.state = ChunkState::Data(size);
                    }
                    Ok(httparse::Status::Partial) if rest.len() < MAX_CHUNK_LINE => {
                        return Some(at);
                    }
                    _ => return None,
                },
                ChunkState::Data(size) => {
                    if rest.is_empty() {
                        return Some(at);
                    }
                    let take = usize::try_from(size).unwrap_or(usize::MAX).min(rest.len());
                    at += take;
                    let left = size - take as u64;
                    self.state = if left == 0 {
                        ChunkState::DataEnd
                    } else {
                        ChunkState::Data(left)
                    };
                }
                ChunkState::DataEnd => {
                    if rest.len() < 2 {
                        return Some(at);
                    }
                    if &rest[..2] != b"\r\n" {
                        return None;
                    }
                    at += 2;
                    self.state = ChunkState::Size;
                }
                ChunkState::Trailers => {
                    let Some(end) = rest.windows(2).position(|w| w == b"\r\n") else {
                        return (self.trailer_bytes + rest.len() < MAX_TRAILERS).then_some(at);
                    };
                    at += end + 2;
                    self.trailer_bytes += end + 2;
                    if end == 0 {
                        self.state = ChunkState::Done;
                    } else if self.trailer_bytes > MAX_TRAILERS {
                        return None;
                    }
                }
            }
        }
    }

    fn done(&self) -> bool {
        self.state == ChunkState::Done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, HeaderName, HeaderValue};
    use sless_core::model::Kind;
    use sless_core::routes::RouteTable;

    use crate::proxy::headers::{SANDBOX_POLICY, map};
    use crate::proxy::{Caller, ProxyConfig};

    struct OneFunction;

    impl RouteTable for OneFunction {
        fn route(&self, namespace: &str, name: &str) -> Route {
            match (namespace, name) {
                ("ns", "f") => Route::Ready {
                    kind: Kind::Function,
                    authority: "127.0.0.1:9000".into(),
                    timeout: None,
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
        let mut out = Vec::new();
        match prepare(&proxy(), request.as_bytes(), CALLER_IP, &mut None, &mut out) {
            Step::Call(_) => Some(out),
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
            ("Accept", "*/*"),
        ];
        let mut request = String::from("POST /fn/ns/f/a/b?x=1 HTTP/1.1\r\n");
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\nhello");
        let fast = prepared(&request).expect("taken by the fast path");
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
            prepare(&proxy(), partial, CALLER_IP, &mut None, &mut out),
            Step::Partial
        ));
        let endless = format!(
            "GET /fn/ns/f/ HTTP/1.1\r\nX-A: {}",
            "a".repeat(MAX_REQUEST_HEAD)
        );
        assert!(matches!(
            prepare(&proxy(), endless.as_bytes(), CALLER_IP, &mut None, &mut out),
            Step::HandOver
        ));
    }

    /// (status, framing, reusable, the caller's head) of an answer head.
    fn answer(head: &str, close: bool) -> (u16, Framing, bool, String) {
        let mut out = Vec::new();
        match parse_answer(head.as_bytes(), &mut out, Some("sless_session"), close) {
            Parsed::Head {
                status,
                framing,
                reusable,
                ..
            } => (
                status.as_u16(),
                framing,
                reusable,
                String::from_utf8(out).unwrap(),
            ),
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
                "HTTP/1.1 201 Created\r\nset-cookie: theme=dark\r\ncontent-length: 3\r\ncontent-security-policy: {SANDBOX_POLICY}\r\n\r\n"
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

        let mut out = Vec::new();
        for bad in [
            "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            "HTTP/1.1 101 Switching Protocols\r\n\r\n",
            "HTTP/1.1 2000 Wrong\r\n\r\n",
            "NOT HTTP\r\n\r\n",
        ] {
            assert!(
                matches!(
                    parse_answer(bad.as_bytes(), &mut out, None, false),
                    Parsed::Invalid(_)
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn chunked_bodies_end_where_their_framing_says_in_any_split() {
        let body = b"5;ext=1\r\nhello\r\n0\r\nX-Sum: 1\r\n\r\n";
        let mut next = body.to_vec();
        next.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        for split in 0..body.len() {
            let mut scan = ChunkedScan::default();
            let first = scan.scan(&next[..split]).unwrap();
            let mut at = first;
            while !scan.done() {
                let taken = scan.scan(&next[at..]).unwrap();
                assert!(taken > 0 || at < body.len(), "stuck at {at}");
                at += taken;
            }
            assert_eq!(at, body.len(), "split at {split}");
        }
        for broken in [&b"zz\r\n"[..], b"5\r\nhelloXX", b"ffffffffffffffffffff\r\n"] {
            let mut scan = ChunkedScan::default();
            assert_eq!(
                scan.scan(broken),
                None,
                "{:?}",
                String::from_utf8_lossy(broken)
            );
        }
        let mut scan = ChunkedScan::default();
        let endless_trailers =
            [&b"0\r\n"[..], &b"X-A: 1\r\n".repeat(MAX_TRAILERS / 8 + 1)].concat();
        assert_eq!(scan.scan(&endless_trailers), None);
    }

    #[test]
    fn content_lengths_are_plain_digits() {
        assert_eq!(decimal(b" 42 "), Some(42));
        assert_eq!(decimal(b"0"), Some(0));
        for bad in [
            &b""[..],
            b"+5",
            b"-5",
            b"5 5",
            b"0x10",
            b"99999999999999999999999",
        ] {
            assert_eq!(decimal(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
