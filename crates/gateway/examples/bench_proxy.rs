//! Bench-only proxy for `scripts/bench-proxy`: the real invoke proxy with a fixed route
//! `bench/f` → `127.0.0.1:<upstream-port>`.
//!
//! Usage: `bench_proxy <listen-port> <upstream-port>` (listens on 127.0.0.1).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use gateway::proxy::{self, Proxy, ProxyConfig};
use sless_core::model::Kind;
use sless_core::routes::{Address, Route, RouteTable};
use tokio::net::TcpListener;

struct StaticRoute(Route);

impl RouteTable for StaticRoute {
    fn route(&self, namespace: &str, name: &str) -> Route {
        if namespace == "bench" && name == "f" {
            self.0.clone()
        } else {
            Route::Unknown
        }
    }
}

// The same allocator as the `sless` binary, so the figures are the product's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let ports: Vec<u16> = std::env::args()
        .skip(1)
        .filter_map(|p| p.parse().ok())
        .collect();
    let [listen, upstream] = ports[..] else {
        eprintln!("usage: bench_proxy <listen-port> <upstream-port>");
        std::process::exit(2);
    };
    let routes = Arc::new(StaticRoute(Route::Ready {
        kind: Kind::Function,
        instances: Address::Tcp(format!("127.0.0.1:{upstream}").into()).into(),
        timeout: Some(Duration::from_secs(30)),
        version: None,
    }));
    let proxy = Arc::new(Proxy::new(routes, ProxyConfig::default()));
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], listen))).await?;
    eprintln!("bench_proxy listening on 127.0.0.1:{listen}, upstream 127.0.0.1:{upstream}");
    // Served as `sless` serves it.
    let threads = gateway::serve::default_threads();
    gateway::serve::serve(
        listener,
        gateway::serve::App::with_proxy(proxy::router(proxy.clone()), proxy),
        threads,
        gateway::serve::Limits::default().fit_open_files_limit(),
        std::future::pending(),
    )
    .await
}
