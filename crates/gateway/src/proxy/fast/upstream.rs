//! Connections to functions: opened per instance, kept by a caller's connection between
//! its calls, and pooled per serving thread when that connection ends.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io;

use sless_core::routes::Address;
use tokio::net::{TcpStream, UnixStream};
use tokio::time::Instant;
use tokio_util::either::Either;

use crate::proxy::{CONNECT_TIMEOUT, POOL_IDLE_TIMEOUT};

/// A connection to an instance's socket (embedded mode) or TCP address (Kubernetes).
pub(super) type Stream = Either<UnixStream, TcpStream>;

pub(super) struct Upstream {
    pub(super) address: Address,
    pub(super) stream: Stream,
}

impl Upstream {
    /// A new connection to `address`; Err is why not, for the caller's 502: it does
    /// not name the instance's address (a detail of this machine), the log does.
    pub(super) async fn open(address: &Address) -> Result<Self, String> {
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, connect(address))
            .await
            .map_err(|_| {
                tracing::debug!(%address, "connecting to an instance timed out");
                "connecting to the instance timed out".to_string()
            })?
            .map_err(|e| {
                tracing::debug!(%address, error = %e, "cannot connect to an instance");
                format!("connecting to the instance: {e}")
            })?;
        Ok(Self {
            address: address.clone(),
            stream,
        })
    }
}

async fn connect(address: &Address) -> io::Result<Stream> {
    match address {
        Address::Unix(path) => UnixStream::connect(path).await.map(Either::Left),
        Address::Tcp(authority) => {
            let stream = TcpStream::connect(&**authority).await?;
            // The head goes out before the body: without this the body would wait for
            // the function's delayed ACK.
            let _ = stream.set_nodelay(true);
            Ok(Either::Right(stream))
        }
    }
}

/// Whether nothing is waiting on a kept connection: still open, nothing unasked-for.
fn quiet(stream: &Stream) -> bool {
    let mut byte = [0u8; 1];
    let read = match stream {
        Either::Left(unix) => unix.try_read(&mut byte),
        Either::Right(tcp) => tcp.try_read(&mut byte),
    };
    matches!(read, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
}

/// Resolves when the kept upstream connection closes (or sends what nobody asked for):
/// it must not take the next call. Never without one.
pub(super) async fn closed(upstream: &Option<Upstream>) {
    let Some(upstream) = upstream else {
        return std::future::pending().await;
    };
    loop {
        let readable = match &upstream.stream {
            Either::Left(unix) => unix.readable().await,
            Either::Right(tcp) => tcp.readable().await,
        };
        if readable.is_err() || !quiet(&upstream.stream) {
            return;
        }
    }
}

/// Idle connections kept per instance and thread.
const MAX_IDLE_PER_INSTANCE: usize = 64;

/// Idle connections by instance, each with when it was left.
#[derive(Default)]
pub(in crate::proxy) struct Idle(HashMap<Address, Vec<(Instant, Stream)>>);

impl Idle {
    /// A kept connection to `address` that the function has not closed.
    pub(super) fn take(&mut self, address: &Address) -> Option<Upstream> {
        let kept = self.0.get_mut(address)?;
        while let Some((since, stream)) = kept.pop() {
            if quiet(&stream) && since.elapsed() < POOL_IDLE_TIMEOUT {
                return Some(Upstream {
                    address: address.clone(),
                    stream,
                });
            }
        }
        None
    }

    pub(super) fn put(&mut self, upstream: Upstream) {
        // Connections past the idle timeout go, and instances left without any.
        self.0.retain(|_, kept| {
            kept.retain(|(since, _)| since.elapsed() < POOL_IDLE_TIMEOUT);
            !kept.is_empty()
        });
        let kept = self.0.entry(upstream.address).or_default();
        if kept.len() < MAX_IDLE_PER_INSTANCE {
            kept.push((Instant::now(), upstream.stream));
        }
    }
}

thread_local! {
    /// Idle upstream connections of this serving thread, by instance. A caller's
    /// connection that ends leaves its upstream connection here for the next one, so
    /// callers that do not keep their connections alive do not cost a connection to
    /// the function (and a port in TIME_WAIT) per call. Per thread: a connection
    /// belongs to the runtime of the thread that opened it ([`crate::serve`]).
    static IDLE: RefCell<Idle> = RefCell::new(Idle::default());
}

/// A kept connection to `address` that the function has not closed.
pub(super) fn take_idle(address: &Address) -> Option<Upstream> {
    IDLE.with_borrow_mut(|idle| idle.take(address))
}

pub(super) fn put_idle(upstream: Upstream) {
    IDLE.with_borrow_mut(|idle| idle.put(upstream));
}
