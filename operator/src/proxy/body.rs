//! The caller's request body on its way upstream: streamed frame by frame, counted
//! against the configured limit.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::body::Body;
use bytes::Bytes;
use hyper::body::{Frame, SizeHint};

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
