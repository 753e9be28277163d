//! Serving a router: one place for the socket options and shutdown of every listener.

use std::net::SocketAddr;

use anyhow::Context;
use axum::Router;
use axum::serve::ListenerExt;
use tokio::net::TcpListener;

/// Serves `app` until SIGINT or SIGTERM. Connections get TCP_NODELAY: the proxy writes a
/// response head before the body arrives from the function, and with Nagle the body
/// would wait for the caller's delayed ACK (about 40 ms).
pub async fn serve(listener: TcpListener, app: Router) -> anyhow::Result<()> {
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
    });
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown_signal())
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
