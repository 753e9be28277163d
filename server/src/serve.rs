//! Serving a router: one place for the threads, socket options and shutdown of every
//! listener (see [`gateway::serve`]).

use anyhow::Context;
use axum::Router;
use tokio::net::TcpListener;

use crate::settings::ServeArgs;

/// The sockets of one process: its main address and, with `--metrics-listen`, the
/// scrape address. Both are bound before the process says it is up, so neither a
/// client nor a scraper finds a port still closed.
pub struct Listeners {
    main: TcpListener,
    scrape: Option<TcpListener>,
}

impl Listeners {
    /// `main` (bound by the caller, who words its error) and the scrape address.
    pub async fn new(main: TcpListener, args: &ServeArgs) -> anyhow::Result<Self> {
        let scrape = match args.metrics_listen {
            Some(address) => Some(
                TcpListener::bind(address)
                    .await
                    .with_context(|| format!("listening for metrics on {address}"))?,
            ),
            None => None,
        };
        Ok(Self { main, scrape })
    }

    pub fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.main.local_addr()
    }
}

/// Serves `app` until SIGINT or SIGTERM (and `/metrics` on the scrape address).
pub async fn serve(
    listeners: Listeners,
    app: impl Into<gateway::serve::App>,
    args: &ServeArgs,
) -> anyhow::Result<()> {
    let threads = gateway::serve::default_threads();
    let limits = args.limits().fit_open_files_limit();
    tracing::info!(
        header_timeout_s = limits.header_timeout.as_secs_f64(),
        idle_timeout_s = limits.idle_timeout.as_secs_f64(),
        max_connections = limits.max_connections,
        "connection limits"
    );
    if let Some(scrape) = listeners.scrape {
        if let Ok(address) = scrape.local_addr() {
            tracing::info!(%address, "serving /metrics without a token");
        }
        let metrics = Router::new().route(
            "/metrics",
            axum::routing::get(|| async { gateway::api::metrics_response() }),
        );
        let one = std::num::NonZeroUsize::MIN;
        tokio::spawn(async move {
            let serving =
                gateway::serve::serve(scrape, metrics, one, limits, std::future::pending());
            if let Err(e) = serving.await {
                tracing::error!(error = %e, "the metrics listener stopped");
            }
        });
    }
    gateway::serve::serve(listeners.main, app, threads, limits, shutdown_signal())
        .await
        .context("serving")
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .expect("SIGTERM handler");
        tokio::select! {
            _ = interrupt => {},
            _ = terminate.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
    // A person pressing Ctrl-C sees that it was taken, and what happens now.
    eprintln!("sless: stopping (finishing calls in flight)");
}
