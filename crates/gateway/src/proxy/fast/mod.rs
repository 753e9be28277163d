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
//!
//! Here is a caller's connection loop; [`request`] and [`answer`] read heads in place,
//! [`call`] forwards one call, [`upstream`] keeps the connections to functions,
//! [`chunked`] follows chunked answers and [`deadline`] times it all. [`in_hand`] sends
//! the calls of triggers, whose whole request sless holds, the same way.

mod answer;
mod call;
mod chunked;
mod deadline;
pub(super) mod in_hand;
mod request;
mod upstream;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use bytes::BytesMut;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;

use super::Proxy;
use crate::serve::{End, FastPath, Limits, stop_requested};
use deadline::LazyDeadline;
use request::{Call, Function, Step, prepare};
use upstream::{Upstream, closed};

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
        head_deadline: LazyDeadline::new(Instant::now() + limits.header_timeout),
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

#[expect(
    clippy::large_enum_variant,
    reason = "a call is moved a few times, never stored: a box would cost an allocation per call"
)]
enum Next {
    Call(Call),
    HandOver,
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

impl Connection<'_> {
    /// Leaves the kept upstream connection for the next caller on this thread.
    fn release(&mut self) {
        if let Some(upstream) = self.upstream.take() {
            upstream::put_idle(upstream);
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
            self.head_deadline.set(Instant::now() + wait);
        }
        loop {
            if !buf.is_empty() {
                let prepared = prepare(
                    self.proxy,
                    buf,
                    &self.caller_ip,
                    &mut self.function,
                    self.upstream.as_ref().map(|u| &u.address),
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
                        .set(Instant::now() + limits.header_timeout);
                }
                Ok(_) => {}
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
