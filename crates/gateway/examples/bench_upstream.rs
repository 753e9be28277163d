//! Bench-only upstream for `scripts/bench-proxy`: answers every request with the same
//! small JSON over plain hyper HTTP/1.1, so the comparison measures the proxy and not
//! a runtime wrapper.
//!
//! Usage: `bench_upstream <port> [delay_us]` (listens on 127.0.0.1); a delay makes
//! each answer wait that long, like a function doing some work.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

const ANSWER: &[u8] = br#"{"ok":true,"message":"hello from the bench upstream"}"#;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let port: u16 = match args.next().map(|p| p.parse()) {
        Some(Ok(port)) => port,
        _ => {
            eprintln!("usage: bench_upstream <port> [delay_us]");
            std::process::exit(2);
        }
    };
    let delay = Duration::from_micros(args.next().and_then(|d| d.parse().ok()).unwrap_or(0));
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port))).await?;
    eprintln!("bench_upstream listening on {}", listener.local_addr()?);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                eprintln!("accept: {e}");
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let _ = http1::Builder::new()
                .serve_connection(
                    TokioIo::new(stream),
                    service_fn(move |request| answer(request, delay)),
                )
                .await;
        });
    }
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
