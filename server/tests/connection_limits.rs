//! `sless up`'s connection limits, set through its environment: slow request heads and
//! idle keep-alive connections are closed while `/healthz` keeps answering.

mod common;

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn connect(base: &str) -> TcpStream {
    TcpStream::connect(base.trim_start_matches("http://"))
        .await
        .unwrap()
}

/// Reads until the server closes `stream`; how long that took from `since`.
async fn closed_after(stream: &mut TcpStream, since: Instant) -> Duration {
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return since.elapsed(),
            Ok(_) => {}
        }
    }
}

#[tokio::test]
async fn slow_heads_and_idle_connections_are_closed_while_healthz_answers() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start_with_env(
        &dir.path().join("data"),
        &[
            ("SLESS_HEADER_TIMEOUT_SECS", "1"),
            ("SLESS_IDLE_TIMEOUT_SECS", "2"),
        ],
    );
    let base = server.base.clone();
    let started = Instant::now();
    let mut slow = Vec::new();
    for _ in 0..50 {
        let mut stream = connect(&base).await;
        slow.push(tokio::spawn(async move {
            stream
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
                .await
                .unwrap();
            let mut buf = [0u8; 64];
            loop {
                // A header byte every 300 ms: the head never completes.
                tokio::select! {
                    read = stream.read(&mut buf) => match read {
                        Ok(0) | Err(_) => return started.elapsed(),
                        Ok(_) => {}
                    },
                    () = tokio::time::sleep(Duration::from_millis(300)) => {
                        if stream.write_all(b"X").await.is_err() {
                            return started.elapsed();
                        }
                    }
                }
            }
        }));
    }

    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let health = http.get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200, "/healthz during the slow heads");

    for connection in slow {
        let closed = tokio::time::timeout(Duration::from_secs(15), connection)
            .await
            .expect("a slow head is still open after 15 s")
            .unwrap();
        assert!(closed < Duration::from_secs(4), "closed after {closed:?}");
    }

    // A kept-alive connection is closed once it has been idle for 2 s.
    let mut idle = connect(&base).await;
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 4096];
    let n = idle.read(&mut buf).await.unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&buf[..n])
    );
    let since = Instant::now();
    let closed = tokio::time::timeout(Duration::from_secs(15), closed_after(&mut idle, since))
        .await
        .expect("an idle connection is still open after 15 s");
    assert!(
        closed >= Duration::from_millis(1500) && closed < Duration::from_secs(5),
        "idle connection closed after {closed:?}"
    );
}
