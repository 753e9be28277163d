//! Connections to functions: opened per instance, kept by a caller's connection between
//! its calls, and pooled per serving thread when that connection ends.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::sync::Arc;

use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::proxy::{CONNECT_TIMEOUT, POOL_IDLE_TIMEOUT};

pub(super) struct Upstream {
    pub(super) authority: Arc<str>,
    pub(super) stream: TcpStream,
}

impl Upstream {
    /// A new connection to `authority`; Err is why not, for the caller's 502: it does
    /// not name the instance's address (a detail of this machine), the log does.
    pub(super) async fn open(authority: &Arc<str>) -> Result<Self, String> {
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&**authority))
            .await
            .map_err(|_| {
                tracing::debug!(%authority, "connecting to an instance timed out");
                "connecting to the instance timed out".to_string()
            })?
            .map_err(|e| {
                tracing::debug!(%authority, error = %e, "cannot connect to an instance");
                format!("connecting to the instance: {e}")
            })?;
        // The head goes out before the body: without this the body would wait for
        // the function's delayed ACK.
        let _ = stream.set_nodelay(true);
        Ok(Self {
            authority: authority.clone(),
            stream,
        })
    }
}

/// Resolves when the kept upstream connection closes (or sends what nobody asked for):
/// it must not take the next call. Never without one.
pub(super) async fn closed(upstream: &Option<Upstream>) {
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

/// Idle connections kept per instance and thread.
const MAX_IDLE_PER_INSTANCE: usize = 64;

type Idle = HashMap<Arc<str>, Vec<(Instant, TcpStream)>>;

thread_local! {
    /// Idle upstream connections of this serving thread, by instance. A caller's
    /// connection that ends leaves its upstream connection here for the next one, so
    /// callers that do not keep their connections alive do not cost a connection to
    /// the function (and a port in TIME_WAIT) per call. Per thread: a connection
    /// belongs to the runtime of the thread that opened it ([`crate::serve`]).
    static IDLE: RefCell<Idle> = RefCell::new(HashMap::new());
}

/// A kept connection to `authority` that the function has not closed.
pub(super) fn take_idle(authority: &Arc<str>) -> Option<Upstream> {
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

pub(super) fn put_idle(upstream: Upstream) {
    IDLE.with_borrow_mut(|idle| {
        // Connections past the idle timeout go, and instances left without any.
        idle.retain(|_, kept| {
            kept.retain(|(since, _)| since.elapsed() < POOL_IDLE_TIMEOUT);
            !kept.is_empty()
        });
        let kept = idle.entry(upstream.authority).or_default();
        if kept.len() < MAX_IDLE_PER_INSTANCE {
            kept.push((Instant::now(), upstream.stream));
        }
    });
}
