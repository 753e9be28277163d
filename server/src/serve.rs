//! Serving a router: one place for the threads, socket options and shutdown of every
//! listener (see [`operator::serve`]).

use anyhow::Context;
use axum::Router;
use tokio::net::TcpListener;

use crate::settings::ServeArgs;

/// Serves `app` until SIGINT or SIGTERM.
pub async fn serve(listener: TcpListener, app: Router, args: &ServeArgs) -> anyhow::Result<()> {
    let threads = operator::serve::default_threads();
    let limits = args.limits().fit_open_files_limit();
    tracing::info!(
        header_timeout_s = limits.header_timeout.as_secs_f64(),
        idle_timeout_s = limits.idle_timeout.as_secs_f64(),
        max_connections = limits.max_connections,
        "connection limits"
    );
    if let Some(address) = args.metrics_listen {
        let scrape = TcpListener::bind(address)
            .await
            .with_context(|| format!("listening for metrics on {address}"))?;
        tracing::info!(%address, "serving /metrics without a token");
        let metrics = Router::new().route(
            "/metrics",
            axum::routing::get(|| async { operator::api::metrics_response() }),
        );
        let one = std::num::NonZeroUsize::MIN;
        let scrape_limits = limits;
        tokio::spawn(async move {
            let serving =
                operator::serve::serve(scrape, metrics, one, scrape_limits, std::future::pending());
            if let Err(e) = serving.await {
                tracing::error!(error = %e, "the metrics listener stopped");
            }
        });
    }
    operator::serve::serve(listener, app, threads, limits, shutdown_signal())
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
