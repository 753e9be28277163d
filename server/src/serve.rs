//! Serving a router: one place for the threads, socket options and shutdown of every
//! listener (see [`operator::serve`]).

use anyhow::Context;
use axum::Router;
use tokio::net::TcpListener;

/// Serves `app` until SIGINT or SIGTERM.
pub async fn serve(listener: TcpListener, app: Router) -> anyhow::Result<()> {
    let threads = operator::serve::default_threads();
    operator::serve::serve(listener, app, threads, shutdown_signal())
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
}
