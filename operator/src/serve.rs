//! Serving a router on every core: one single-threaded runtime per serving thread, all
//! accepting from the same listening socket, each keeping its connections to itself.
//!
//! A proxied call then stays on one thread from the caller's socket to the function's
//! and back. On tokio's work-stealing runtime it crossed threads several times per call
//! (stolen tasks, the upstream connection's task), which cost 20–60 % of the calls per
//! second on two cores (docs/benchmarks.md). As on any async runtime, blocking work
//! belongs in `spawn_blocking`: a handler that blocks stalls its thread's connections.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::num::NonZeroUsize;

use axum::Router;
use axum::serve::ListenerExt;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

/// One serving thread per CPU the process may use.
pub fn default_threads() -> NonZeroUsize {
    std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN)
}

/// Serves `app` on `listener` from `threads` threads until `shutdown` completes, then
/// lets the calls in flight finish. Connections get TCP_NODELAY: the proxy writes a
/// response head before the body arrives from the function, and with Nagle the body
/// would wait for the caller's delayed ACK (about 40 ms). An error of one serving thread
/// stops them all and is returned.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    threads: NonZeroUsize,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let listener = listener.into_std()?;
    let (stop, stopped) = watch::channel(false);
    let (exit, mut exits) = mpsc::unbounded_channel();
    for index in 0..threads.get() {
        let listener = listener.try_clone()?;
        let app = app.clone();
        let stopped = stopped.clone();
        let exit = exit.clone();
        std::thread::Builder::new()
            .name(format!("sless-http-{index}"))
            .spawn(move || {
                let _ = exit.send(serve_on_this_thread(listener, app, stopped));
            })?;
    }
    drop(exit);

    let mut outcome = tokio::select! {
        () = shutdown => Ok(()),
        first = exits.recv() => first.unwrap_or(Ok(())),
    };
    let _ = stop.send(true);
    while let Some(result) = exits.recv().await {
        outcome = outcome.and(result);
    }
    outcome
}

fn serve_on_this_thread(
    listener: std::net::TcpListener,
    app: Router,
    mut stopped: watch::Receiver<bool>,
) -> io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = TcpListener::from_std(listener)?.tap_io(|tcp| {
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::debug!(error = %e, "cannot set TCP_NODELAY");
            }
        });
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        })
        .await
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use std::time::{Duration, Instant};

    async fn start(
        threads: usize,
    ) -> (
        String,
        watch::Sender<bool>,
        tokio::task::JoinHandle<io::Result<()>>,
    ) {
        let app = Router::new()
            .route(
                "/thread",
                get(|| async { std::thread::current().name().unwrap_or("").to_owned() }),
            )
            .route(
                "/block",
                get(|| async {
                    // Blocks its serving thread on purpose.
                    std::thread::sleep(Duration::from_millis(1500));
                    "done"
                }),
            );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, mut stopped) = watch::channel(false);
        let threads = NonZeroUsize::new(threads).unwrap();
        let server = tokio::spawn(serve(listener, app, threads, async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        }));
        (base, stop, server)
    }

    /// The body of `GET url`, on a new connection each time.
    async fn text(url: String) -> String {
        reqwest::get(url).await.unwrap().text().await.unwrap()
    }

    #[tokio::test]
    async fn handlers_run_on_the_serving_threads() {
        let (base, stop, server) = start(2).await;
        let name = text(format!("{base}/thread")).await;
        assert!(name.starts_with("sless-http-"), "{name}");
        stop.send(true).unwrap();
        server.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_blocked_thread_leaves_new_connections_to_the_others() {
        let (base, stop, server) = start(2).await;
        let blocked = tokio::spawn(text(format!("{base}/block")));
        tokio::time::sleep(Duration::from_millis(200)).await;
        let started = Instant::now();
        // A new connection, accepted by the thread that is not blocked.
        let name = text(format!("{base}/thread")).await;
        assert!(
            started.elapsed() < Duration::from_millis(800),
            "waited {:?}",
            started.elapsed()
        );
        assert!(name.starts_with("sless-http-"), "{name}");
        assert_eq!(blocked.await.unwrap(), "done");
        stop.send(true).unwrap();
        server.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn shutdown_lets_calls_in_flight_finish() {
        let (base, stop, server) = start(1).await;
        let in_flight = tokio::spawn(text(format!("{base}/block")));
        tokio::time::sleep(Duration::from_millis(200)).await;
        stop.send(true).unwrap();
        assert_eq!(in_flight.await.unwrap(), "done");
        server.await.unwrap().unwrap();
        assert!(
            reqwest::get(format!("{base}/thread")).await.is_err(),
            "still serving"
        );
    }
}
