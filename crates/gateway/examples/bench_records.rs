//! Bench of the call records' bounds (issue 32): pushes calls through the real invoke
//! proxy to a trivial upstream, spread over functions, with the records saved to a real
//! `sless.db` by the background flusher, and prints the process's RSS and the size of
//! `sless.db` (with its WAL) as the calls go. Both should level off once every function
//! holds its 100 records.
//!
//! Usage: `cargo run --release -p sless-gateway --example bench_records [calls] [functions]`
//! (default 100000 calls over 100 functions; the data dir is a temporary one).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use gateway::proxy::{self, Proxy, ProxyConfig};
use sless_core::calls::CallArchive;
use sless_core::error_text::BoxError;
use sless_core::model::Kind;
use sless_core::routes::{Address, Route, RouteTable};
use sless_embedded::sqlite::SqliteStore;
use tokio::net::TcpListener;

/// Every `bench/*` function answers from the same upstream.
struct AnyBench(Route);

impl RouteTable for AnyBench {
    fn route(&self, namespace: &str, _name: &str) -> Route {
        if namespace == "bench" {
            self.0.clone()
        } else {
            Route::Unknown
        }
    }
}

// The same allocator as the `sless` binary, so the figures are the product's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CONCURRENCY: usize = 32;

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

/// `sless.db` and its WAL, in MiB.
fn db_mib(dir: &Path) -> f64 {
    ["sless.db", "sless.db-wal"]
        .iter()
        .filter_map(|f| std::fs::metadata(dir.join(f)).ok())
        .map(|m| m.len() as f64 / (1024.0 * 1024.0))
        .sum()
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>());
    let calls = args.next().transpose()?.unwrap_or(100_000);
    let functions = args.next().transpose()?.unwrap_or(100).max(1);

    let upstream = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let upstream_address = upstream.local_addr()?;
    tokio::spawn(async move {
        let app = axum::Router::new().fallback(|| async { "ok" });
        axum::serve(upstream, app).await
    });

    let dir = tempfile::tempdir()?;
    let store = Arc::new(SqliteStore::open(dir.path()).await?);
    let routes = Arc::new(AnyBench(Route::Ready {
        kind: Kind::Function,
        instances: Address::Tcp(upstream_address.to_string().into()).into(),
        timeout: Some(Duration::from_secs(30)),
        version: None,
    }));
    let proxy = Arc::new(Proxy::new(routes, ProxyConfig::default()));
    let flusher = proxy.keep_calls_in(store.clone()).await?;
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let base = format!("http://{}/fn/bench", listener.local_addr()?);
    let app = gateway::serve::App::with_proxy(proxy::router(proxy.clone()), proxy.clone());
    tokio::spawn(gateway::serve::serve(
        listener,
        app,
        gateway::serve::default_threads(),
        gateway::serve::Limits::default(),
        std::future::pending(),
    ));

    println!("{calls} calls over {functions} functions, {CONCURRENCY} at a time");
    println!(
        "{:>9} {:>9} {:>10} {:>9}",
        "calls", "RSS MiB", "db MiB", "calls/s"
    );
    let client = reqwest::Client::new();
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let report_every = (calls / 10).max(1);
    let workers: Vec<_> = (0..CONCURRENCY)
        .map(|_| {
            let (client, next, base) = (client.clone(), next.clone(), base.clone());
            let dir = dir.path().to_path_buf();
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= calls {
                        return Ok::<(), BoxError>(());
                    }
                    let url = format!("{base}/f{}", i % functions);
                    let status = client.get(url).send().await?.status();
                    if !status.is_success() {
                        return Err(format!("call {i}: {status}").into());
                    }
                    if (i + 1) % report_every == 0 {
                        let rate = (i + 1) as f64 / started.elapsed().as_secs_f64();
                        println!(
                            "{:>9} {:>9.1} {:>10.2} {:>9.0}",
                            i + 1,
                            rss_mib(),
                            db_mib(&dir),
                            rate
                        );
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await??;
    }
    flusher.stop().await;
    let saved = store.load_all().await?;
    let records: usize = saved
        .iter()
        .map(|s| {
            serde_json::from_slice::<serde_json::Value>(&s.document)
                .map(|d| d["recent"].as_array().map_or(0, Vec::len))
                .unwrap_or(0)
        })
        .sum();
    let counted: u64 = (0..functions)
        .map(|f| proxy.invocations().stats("bench", &format!("f{f}")).count)
        .sum();
    println!(
        "done in {:.1} s: {counted} calls counted, {} functions and {records} records on disk, \
         RSS {:.1} MiB, sless.db {:.2} MiB",
        started.elapsed().as_secs_f64(),
        saved.len(),
        rss_mib(),
        db_mib(dir.path())
    );
    Ok(())
}
