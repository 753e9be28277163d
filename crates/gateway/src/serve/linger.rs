//! Closing a caller's connection without destroying the answer just sent to it.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// How long and how much a closing connection still reads from its caller.
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 64 * 1024 * 1024;

/// Closing a connection whose caller is still sending: closed at once, the unread
/// bytes make the kernel reset it, which can destroy the answer just sent before the
/// caller reads it (an early 413 to a large upload arrives as a broken pipe). So the
/// write side is shut first and what the caller still sends is read and dropped until
/// it closes too, for at most [`LINGER_TIME`] and [`LINGER_BYTES`].
pub(crate) struct Linger {
    write_closed: bool,
    deadline: Pin<Box<tokio::time::Sleep>>,
    budget: usize,
}

impl Linger {
    pub(crate) fn new() -> Self {
        Self {
            write_closed: false,
            deadline: Box::pin(tokio::time::sleep(LINGER_TIME)),
            budget: LINGER_BYTES,
        }
    }

    pub(crate) fn poll_close(
        &mut self,
        stream: &mut TcpStream,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.write_closed {
            std::task::ready!(Pin::new(&mut *stream).poll_shutdown(cx))?;
            self.write_closed = true;
        }
        let mut scratch = [0u8; 8192];
        loop {
            if self.budget == 0 || self.deadline.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Ok(()));
            }
            let mut buf = ReadBuf::new(&mut scratch);
            match Pin::new(&mut *stream).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if buf.filled().is_empty() => return Poll::Ready(Ok(())),
                Poll::Ready(Ok(())) => {
                    self.budget = self.budget.saturating_sub(buf.filled().len());
                }
                // Reset by the caller: nothing left to protect.
                Poll::Ready(Err(_)) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// Closes `stream` as above.
    pub(crate) async fn close(stream: &mut TcpStream) {
        let mut linger = Self::new();
        let _ = std::future::poll_fn(|cx| linger.poll_close(stream, cx)).await;
    }
}
