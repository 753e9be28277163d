//! Bodies through the proxy: the caller's request on its way upstream, streamed frame
//! by frame and counted against the configured limit; the function's answer on its way
//! back, cut at the call's deadline and recorded when it ends.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::body::Body;
use bytes::Bytes;
use hyper::body::{Frame, Incoming, SizeHint};
use tokio::time::Sleep;

use super::log::CallError;

pub(crate) struct RequestBody {
    inner: Body,
    remaining: u64,
    limit: u64,
}

impl RequestBody {
    pub(crate) fn new(inner: Body, limit: u64) -> Self {
        Self {
            inner,
            remaining: limit,
            limit,
        }
    }
}

/// Ends the upstream request; the proxy finds it again in the client's error chain to
/// tell a too-large body (413) from a broken upstream (502).
#[derive(Debug, thiserror::Error)]
pub(crate) enum RequestBodyError {
    #[error("request body is larger than {limit} bytes")]
    TooLarge { limit: u64 },
    #[error("{0}")]
    Caller(axum::Error),
}

impl hyper::body::Body for RequestBody {
    type Data = Bytes;
    type Error = RequestBodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, RequestBodyError>>> {
        let this = &mut *self;
        let frame = match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
            Some(Ok(frame)) => frame,
            Some(Err(e)) => return Poll::Ready(Some(Err(RequestBodyError::Caller(e)))),
            None => return Poll::Ready(None),
        };
        if let Some(data) = frame.data_ref() {
            let len = data.len() as u64;
            if len > this.remaining {
                this.remaining = 0;
                return Poll::Ready(Some(Err(RequestBodyError::TooLarge { limit: this.limit })));
            }
            this.remaining -= len;
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The rest of a function's answer after its first frame went back with the head. The
/// call is recorded once, when the body ends, fails, runs out of time or the caller
/// leaves (drop).
pub(crate) struct ResponseBody<R: FnOnce(Option<CallError>) + Send + 'static> {
    inner: Incoming,
    first: Option<Frame<Bytes>>,
    deadline: Option<Pin<Box<Sleep>>>,
    record: Option<R>,
}

/// Ends the caller's response; hyper then closes the connection, so a cut answer
/// cannot pass for a complete one.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ResponseBodyError {
    #[error("the function's timeout_sec ran out while it sent its answer")]
    Timeout,
    #[error("the function's answer broke off: {0}")]
    Upstream(hyper::Error),
}

impl<R: FnOnce(Option<CallError>) + Send + 'static> ResponseBody<R> {
    pub(crate) fn new(
        first: Frame<Bytes>,
        inner: Incoming,
        deadline: Option<Pin<Box<Sleep>>>,
        record: R,
    ) -> Self {
        Self {
            inner,
            first: Some(first),
            deadline,
            record: Some(record),
        }
    }

    fn end(&mut self, error: Option<CallError>) {
        if let Some(record) = self.record.take() {
            record(error);
        }
    }
}

impl<R: FnOnce(Option<CallError>) + Send + 'static> Drop for ResponseBody<R> {
    fn drop(&mut self) {
        self.end(None);
    }
}

// No field is structurally pinned: `Sleep` is boxed.
impl<R: FnOnce(Option<CallError>) + Send + 'static> Unpin for ResponseBody<R> {}

impl<R: FnOnce(Option<CallError>) + Send + 'static> hyper::body::Body for ResponseBody<R> {
    type Data = Bytes;
    type Error = ResponseBodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ResponseBodyError>>> {
        let this = &mut *self;
        if let Some(first) = this.first.take() {
            return Poll::Ready(Some(Ok(first)));
        }
        // Checked first: a function that keeps sending is cut at its deadline too.
        if let Some(deadline) = &mut this.deadline
            && deadline.as_mut().poll(cx).is_ready()
        {
            this.end(Some(CallError::Timeout));
            return Poll::Ready(Some(Err(ResponseBodyError::Timeout)));
        }
        match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
            Some(Ok(frame)) => Poll::Ready(Some(Ok(frame))),
            Some(Err(e)) => {
                this.end(Some(CallError::BadAnswer));
                Poll::Ready(Some(Err(ResponseBodyError::Upstream(e))))
            }
            None => {
                this.end(None);
                Poll::Ready(None)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let mut hint = self.inner.size_hint();
        if let Some(len) = self
            .first
            .as_ref()
            .and_then(Frame::data_ref)
            .map(|d| d.len() as u64)
        {
            // Upper first: a lower bound above the upper one panics.
            if let Some(upper) = hint.upper() {
                hint.set_upper(upper + len);
            }
            hint.set_lower(hint.lower() + len);
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn passes_bodies_up_to_the_limit() {
        let body = RequestBody::new(Body::from(vec![7u8; 10]), 10);
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(bytes.len(), 10);
    }

    #[tokio::test]
    async fn fails_past_the_limit() {
        let chunks = futures::stream::iter(
            (0..3).map(|_| Ok::<_, std::io::Error>(Bytes::from_static(b"abcd"))),
        );
        let body = RequestBody::new(Body::from_stream(chunks), 10);
        let err = body.collect().await.err().unwrap();
        assert!(matches!(err, RequestBodyError::TooLarge { limit: 10 }));
    }
}
