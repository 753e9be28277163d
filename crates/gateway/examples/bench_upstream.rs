//! Bench-only upstream for `scripts/bench-proxy`: answers every request with the same
//! small JSON over plain hyper HTTP/1.1, so the comparison measures the proxy and not
//! a runtime wrapper.
//!
//! Usage: `bench_upstream <port | fd:N> [delay_us]`: listens on 127.0.0.1:<port>, or
//! serves on the inherited listening Unix socket N (as a function instance of `sless
//! up` does); a delay makes each answer wait that long, like a function doing some work.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::os::fd::FromRawFd;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};

const ANSWER: &[u8] = br#"{"ok":true,"message":"hello from the bench upstream"}"#;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let Some(listen) = args.next() else {
        eprintln!("usage: bench_upstream <port | fd:N> [delay_us]");
        std::process::exit(2);
    };
    let delay = Duration::from_micros(args.next().and_then(|d| d.parse().ok()).unwrap_or(0));
    if let Some(fd) = listen.strip_prefix("fd:").and_then(|fd| fd.parse().ok()) {
        // SAFETY: the descriptor was inherited for this purpose and nothing else owns it.
        let listener = unsafe { std::os::unix::net::UnixListener::from_raw_fd(fd) };
        listener.set_nonblocking(true)?;
        let listener = UnixListener::from_std(listener)?;
        eprintln!("bench_upstream serving on descriptor {fd}");
        loop {
            match listener.accept().await {
                Ok((stream, _)) => serve(stream, delay),
                Err(e) => eprintln!("accept: {e}"),
            }
        }
    }
    let Ok(port) = listen.parse::<u16>() else {
        eprintln!("usage: bench_upstream <port | fd:N> [delay_us]");
        std::process::exit(2);
    };
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port))).await?;
    eprintln!("bench_upstream listening on {}", listener.local_addr()?);
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                serve(stream, delay);
            }
            Err(e) => eprintln!("accept: {e}"),
        }
    }
}

fn serve(stream: impl AsyncRead + AsyncWrite + Unpin + Send + 'static, delay: Duration) {
    tokio::spawn(async move {
        let _ = http1::Builder::new()
            .serve_connection(
                TokioIo::new(stream),
                service_fn(move |request| answer(request, delay)),
            )
            .await;
    });
}

async fn answer(
    _request: Request<Incoming>,
    delay: Duration,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let mut response = Response::new(Full::new(Bytes::from_static(ANSWER)));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(response)
}
