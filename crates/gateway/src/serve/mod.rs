//! Serving a router on every core: one single-threaded runtime per serving thread, all
//! accepting from the same listening socket, each keeping its connections to itself
//! (a new connection goes to the thread with the fewest open, see [`Balance`]).
//!
//! A proxied call then stays on one thread from the caller's socket to the function's
//! and back. On tokio's work-stealing runtime it crossed threads several times per call
//! (stolen tasks, the upstream connection's task), which cost 20–60 % of the calls per
//! second on two cores (docs/benchmarks.md). As on any async runtime, blocking work
//! belongs in `spawn_blocking`: a handler that blocks stalls its thread's connections.
//!
//! Every connection is bounded ([`Limits`]): its request head must arrive within the
//! header timeout, a keep-alive connection waiting for its next request is closed after
//! the idle timeout, and past the connection cap new connections are closed at once, so
//! slow or idle clients cannot take every file descriptor.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::Request;
use bytes::{Bytes, BytesMut};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;
use tower::Service;

mod limits;
mod linger;

pub use limits::Limits;

/// In every request's extensions: resolves once the server stops, so that an endless
/// answer (a log stream) ends and does not hold the shutdown.
#[derive(Clone)]
pub struct Stopping(watch::Receiver<bool>);

impl Stopping {
    pub async fn wait(mut self) {
        stop_requested(&mut self.0).await;
    }
}
pub(crate) use linger::Linger;

/// What a server serves: its router and, when it has one, a fast path that reads each
/// connection's requests first.
#[derive(Clone)]
pub struct App {
    router: Router,
    fast: Option<Arc<dyn FastPath>>,
}

impl App {
    /// Serves `router` behind `proxy`'s fast path. `router` must serve what the fast
    /// path hands over (for the `/fn` proxy: its calls, so it merges the proxy's router).
    pub fn with_proxy(router: Router, proxy: Arc<impl FastPath>) -> Self {
        Self {
            router,
            fast: Some(proxy),
        }
    }
}

impl From<Router> for App {
    fn from(router: Router) -> Self {
        Self { router, fast: None }
    }
}

/// Reads a connection's requests before hyper and the router do: serves those it
/// takes, and leaves the connection to them from the first it does not take. The `/fn`
/// proxy plugs its fast path in here; serving knows no more of it.
pub trait FastPath: Send + Sync + 'static {
    /// Serves `stream` from its start, under `limits`, until it closes or hands over;
    /// `read` holds what was read and not served (on [`End::HandOver`], the start of
    /// the request hyper serves next). `stopped` turns true when the server stops.
    fn serve<'a>(
        &'a self,
        stream: &'a mut TcpStream,
        read: &'a mut BytesMut,
        remote: SocketAddr,
        limits: Limits,
        stopped: &'a mut watch::Receiver<bool>,
    ) -> Pin<Box<dyn Future<Output = End> + Send + 'a>>;
}

/// How a [`FastPath`] left a connection.
pub enum End {
    /// Done: closed by either side, timed out, cut or shut down.
    Closed,
    /// Hyper serves the rest, starting with what is left in the read buffer.
    HandOver,
}

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
    app: impl Into<App>,
    threads: NonZeroUsize,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let app = app.into();
    let listener = listener.into_std()?;
    let (stop, stopped) = watch::channel(false);
    let (exit, mut exits) = tokio::sync::mpsc::unbounded_channel();
    let connections = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let (balance, inboxes) = Balance::new(threads.get());
    for (index, inbox) in inboxes.into_iter().enumerate() {
        let listener = listener.try_clone()?;
        let app = app.clone();
        let stopped = stopped.clone();
        let exit = exit.clone();
        let connections = connections.clone();
        let balance = balance.clone();
        std::thread::Builder::new()
            .name(format!("sless-http-{index}"))
            .spawn(move || {
                let _ = exit.send(serve_on_this_thread(
                    listener,
                    app,
                    limits,
                    (connections, balance, index, inbox),
                    stopped,
                ));
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

/// A connection one serving thread accepted for another, already counted there.
type Handed = (
    std::net::TcpStream,
    SocketAddr,
    (OwnedSemaphorePermit, OpenOn),
);

/// Spreads connections over the serving threads. They all accept from one socket, and
/// whichever wakes first takes a burst of new connections (one thread held 60 of 64 in
/// the proxy bench, leaving the other core idle): a thread that accepts while it has
/// more open than the least busy one hands the connection over. Only new connections
/// move; a connection then stays on its thread.
struct Balance {
    open: Vec<AtomicUsize>,
    inboxes: Vec<tokio::sync::mpsc::UnboundedSender<Handed>>,
}

impl Balance {
    fn new(threads: usize) -> (Arc<Self>, Vec<tokio::sync::mpsc::UnboundedReceiver<Handed>>) {
        let (inboxes, receivers) = (0..threads)
            .map(|_| tokio::sync::mpsc::unbounded_channel())
            .unzip();
        let open = (0..threads).map(|_| AtomicUsize::new(0)).collect();
        (Arc::new(Self { open, inboxes }), receivers)
    }

    /// The thread a connection accepted by `mine` should go to.
    fn thread_for(&self, mine: usize) -> usize {
        let load = |index: usize| self.open[index].load(Ordering::Relaxed);
        let least = (0..self.open.len())
            .min_by_key(|&i| load(i))
            .unwrap_or(mine);
        // A margin of one keeps two threads with nearly equal loads from trading.
        if load(mine) > load(least) + 1 {
            least
        } else {
            mine
        }
    }

    /// Counts a connection on `thread` until the guard drops.
    fn opened(self: &Arc<Self>, thread: usize) -> OpenOn {
        self.open[thread].fetch_add(1, Ordering::Relaxed);
        OpenOn {
            balance: self.clone(),
            thread,
        }
    }
}

struct OpenOn {
    balance: Arc<Balance>,
    thread: usize,
}

impl Drop for OpenOn {
    fn drop(&mut self) {
        self.balance.open[self.thread].fetch_sub(1, Ordering::Relaxed);
    }
}

fn serve_on_this_thread(
    listener: std::net::TcpListener,
    app: App,
    limits: Limits,
    (connections, balance, index, mut inbox): (
        Arc<Semaphore>,
        Arc<Balance>,
        usize,
        tokio::sync::mpsc::UnboundedReceiver<Handed>,
    ),
    mut stopped: watch::Receiver<bool>,
) -> io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = TcpListener::from_std(listener)?;
        let mut builder = auto::Builder::new(TokioExecutor::new());
        // The connection's own watch (below) times heads; hyper's would also end idle
        // keep-alive connections at the header timeout.
        builder.http1().header_read_timeout(None);
        let builder = Arc::new(builder);
        // Connections of this thread still open; shutdown waits for them.
        let (open, mut none_open) = watch::channel(());
        loop {
            let (stream, remote, (permit, counted)) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, remote)) => {
                        let Ok(permit) = connections.clone().try_acquire_owned() else {
                            // Closed at once: a refused client learns it now, not after
                            // a timeout.
                            tracing::debug!(%remote, "connection cap reached, closing");
                            continue;
                        };
                        if let Err(e) = stream.set_nodelay(true) {
                            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
                        }
                        let thread = balance.thread_for(index);
                        let held = (permit, balance.opened(thread));
                        if thread == index {
                            (stream, remote, held)
                        } else {
                            match stream.into_std() {
                                Ok(stream) => {
                                    let _ = balance.inboxes[thread].send((stream, remote, held));
                                }
                                Err(e) => tracing::debug!(error = %e, "cannot hand a connection over"),
                            }
                            continue;
                        }
                    }
                    Err(e) => {
                        // Out of descriptors or a connection reset before accept: the
                        // listener itself is fine.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                Some((stream, remote, held)) = inbox.recv() => match TcpStream::from_std(stream) {
                    Ok(stream) => (stream, remote, held),
                    Err(e) => {
                        tracing::debug!(error = %e, "cannot take a handed connection");
                        continue;
                    }
                },
                () = stop_requested(&mut stopped) => break,
            };
            tokio::spawn(serve_connection(
                stream,
                remote,
                app.clone(),
                builder.clone(),
                limits,
                stopped.clone(),
                (permit, open.clone(), counted),
            ));
        }
        drop(open);
        // Every sender dropped = every connection of this thread closed.
        while none_open.changed().await.is_ok() {}
        Ok(())
    })
}

async fn serve_connection(
    mut stream: TcpStream,
    remote: SocketAddr,
    app: App,
    builder: Arc<auto::Builder<TokioExecutor>>,
    limits: Limits,
    mut stopped: watch::Receiver<bool>,
    _held: (OwnedSemaphorePermit, watch::Sender<()>, OpenOn),
) {
    let mut read = BytesMut::new();
    if let Some(fast) = &app.fast {
        match fast
            .serve(&mut stream, &mut read, remote, limits, &mut stopped)
            .await
        {
            End::Closed => return,
            End::HandOver => {}
        }
    }
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched {
        inner: stream,
        read: read.freeze(),
        activity: activity.clone(),
        closing: None,
    });
    let app = app.router;
    let calls = activity.clone();
    let stopping = Stopping(stopped.clone());
    let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
        request.extensions_mut().insert(ConnectInfo(remote));
        request.extensions_mut().insert(stopping.clone());
        let call = Call::begin(calls.clone());
        // A Router is always ready: no poll_ready first.
        let response = app.clone().call(request);
        async move {
            let response = response.await?;
            Ok::<_, Infallible>(response.map(|body| CallBody { body, _call: call }))
        }
    });
    let mut conn = std::pin::pin!(builder.serve_connection_with_upgrades(io, service));
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(e) = result {
                tracing::trace!(error = %e, "connection ended with an error");
            }
        }
        () = stop_requested(&mut stopped) => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
        waited = activity.expired(limits) => {
            tracing::debug!(%remote, ?waited, "closing a connection that waited too long");
        }
    }
}

/// The guard `wait_for` returns must not live across an await (it is not `Send`).
pub(crate) async fn stop_requested(stopped: &mut watch::Receiver<bool>) {
    let _ = stopped.wait_for(|stop| *stop).await;
}

/// What a connection is waiting for, as far as its watch needs to know.
#[derive(Debug)]
enum Wait {
    /// The rest of a request head (a new connection counts as one).
    Head,
    /// The next request on a kept-alive connection.
    Idle,
}

/// Shared by a connection's socket, its calls and its watch. All of them run on one
/// thread; atomics only make it `Sync`. Only the start of a head wakes the watch (it may
/// bring the deadline forward); the end of a call does not, which spares a wake-up per
/// call: while calls are in flight the watch looks again after an idle timeout, never
/// later than the idle deadline of a call ending meanwhile.
struct Activity {
    started: Instant,
    in_flight: AtomicUsize,
    /// Milliseconds since `started` when the current wait began.
    waiting_since_ms: AtomicU64,
    waiting_for_head: AtomicBool,
    changed: Notify,
}

impl Activity {
    fn new() -> Self {
        Self {
            started: Instant::now(),
            in_flight: AtomicUsize::new(0),
            waiting_since_ms: AtomicU64::new(0),
            waiting_for_head: AtomicBool::new(true),
            changed: Notify::new(),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Bytes arrived: on an idle connection they begin a head, which now has the
    /// header timeout to complete.
    fn read(&self) {
        if self.in_flight.load(Ordering::Relaxed) == 0
            && !self.waiting_for_head.load(Ordering::Relaxed)
        {
            self.waiting_since_ms
                .store(self.now_ms(), Ordering::Relaxed);
            self.waiting_for_head.store(true, Ordering::Relaxed);
            self.changed.notify_one();
        }
    }

    /// Resolves when the connection has waited longer than `limits` allow; never while
    /// a call is in flight (a call's own time is the handler's business).
    async fn expired(&self, limits: Limits) -> Wait {
        loop {
            let changed = self.changed.notified();
            if self.in_flight.load(Ordering::Relaxed) > 0 {
                // A call ending from now on starts an idle timeout ending after this.
                tokio::select! {
                    () = tokio::time::sleep(limits.idle_timeout) => {}
                    () = changed => {}
                }
                continue;
            }
            let (wait, limit) = if self.waiting_for_head.load(Ordering::Relaxed) {
                (Wait::Head, limits.header_timeout)
            } else {
                (Wait::Idle, limits.idle_timeout)
            };
            let since = Duration::from_millis(self.waiting_since_ms.load(Ordering::Relaxed));
            let deadline = self.started + since + limit;
            let now = Instant::now();
            if now >= deadline {
                return wait;
            }
            // A call may start and end unseen meanwhile; its idle deadline is no earlier
            // than an idle timeout from now.
            tokio::select! {
                () = tokio::time::sleep_until(deadline.min(now + limits.idle_timeout)) => {}
                () = changed => {}
            }
        }
    }
}

/// A request from its head until its response body is done or dropped.
struct Call(Arc<Activity>);

impl Call {
    fn begin(activity: Arc<Activity>) -> Self {
        activity.in_flight.fetch_add(1, Ordering::Relaxed);
        Call(activity)
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        let activity = &self.0;
        if activity.in_flight.fetch_sub(1, Ordering::Relaxed) == 1 {
            activity
                .waiting_since_ms
                .store(activity.now_ms(), Ordering::Relaxed);
            activity.waiting_for_head.store(false, Ordering::Relaxed);
        }
    }
}

/// A response body that keeps its call in flight until it is done.
struct CallBody {
    body: Body,
    _call: Call,
}

impl hyper::body::Body for CallBody {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<bytes::Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The socket, telling [`Activity`] when bytes arrive.
struct Watched {
    inner: TcpStream,
    /// Read before hyper took over the connection; served first.
    read: Bytes,
    activity: Arc<Activity>,
    closing: Option<Linger>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.read.is_empty() {
            let take = self.read.len().min(buf.remaining());
            let read = self.read.split_to(take);
            buf.put_slice(&read);
            self.activity.read();
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.read();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let linger = this.closing.get_or_insert_with(Linger::new);
        linger.poll_close(&mut this.inner, cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use std::collections::HashMap;
    use std::time::Instant;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn start(
        threads: usize,
    ) -> (
        String,
        watch::Sender<bool>,
        tokio::task::JoinHandle<io::Result<()>>,
    ) {
        start_with(threads, Limits::default()).await
    }

    async fn start_with(
        threads: usize,
        limits: Limits,
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
            )
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_millis(1500)).await;
                    "done"
                }),
            )
            .route("/healthz", get(|| async { "ok" }))
            .route(
                "/refuse",
                axum::routing::post(|| async {
                    // Answers before reading the body, as a size limit does.
                    (axum::http::StatusCode::PAYLOAD_TOO_LARGE, "too large")
                }),
            );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, mut stopped) = watch::channel(false);
        let threads = NonZeroUsize::new(threads).unwrap();
        let server = tokio::spawn(serve(listener, app, threads, limits, async move {
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
    async fn a_burst_of_connections_is_spread_over_the_threads() {
        let (base, stop, server) = start(2).await;
        let mut streams = Vec::new();
        for _ in 0..20 {
            streams.push(connect(&base).await);
        }
        let mut on = HashMap::<String, usize>::new();
        for stream in &mut streams {
            *on.entry(get_on(stream, "/thread").await).or_default() += 1;
        }
        for thread in ["sless-http-0", "sless-http-1"] {
            let count = on.get(thread).copied().unwrap_or_default();
            assert!(count >= 8, "{thread} serves {count} of 20: {on:?}");
        }
        drop(streams);
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

    fn limits(header_ms: u64, idle_ms: u64) -> Limits {
        Limits {
            header_timeout: Duration::from_millis(header_ms),
            idle_timeout: Duration::from_millis(idle_ms),
            max_connections: 1000,
        }
    }

    async fn connect(base: &str) -> TcpStream {
        TcpStream::connect(base.trim_start_matches("http://"))
            .await
            .unwrap()
    }

    /// Sends `GET path` on `stream` and reads the answer's body (keep-alive).
    async fn get_on(stream: &mut TcpStream, path: &str) -> String {
        let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let mut buf = [0u8; 1024];
        loop {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed before answering");
            answer.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&answer).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length: usize = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length: ")
                            .map(str::to_owned)
                    })
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap();
                if body.len() >= length {
                    return body.to_owned();
                }
            }
        }
    }

    /// When the server closed `stream` (EOF or reset), reading whatever it sends.
    async fn closed_after(stream: &mut TcpStream, started: Instant) -> Duration {
        let mut buf = [0u8; 1024];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return started.elapsed(),
                Ok(_) => {}
            }
        }
    }

    #[tokio::test]
    async fn slow_headers_are_cut_while_healthz_answers() {
        let (base, stop, server) = start_with(2, limits(1000, 30_000)).await;
        let started = Instant::now();
        let mut drips = Vec::new();
        for _ in 0..50 {
            let mut stream = connect(&base).await;
            drips.push(tokio::spawn(async move {
                stream
                    .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n")
                    .await
                    .unwrap();
                let mut buf = [0u8; 64];
                loop {
                    // A header byte every 200 ms: the head never completes.
                    tokio::select! {
                        read = stream.read(&mut buf) => match read {
                            Ok(0) | Err(_) => return started.elapsed(),
                            Ok(_) => {}
                        },
                        () = tokio::time::sleep(Duration::from_millis(200)) => {
                            if stream.write_all(b"X").await.is_err() {
                                return started.elapsed();
                            }
                        }
                    }
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(text(format!("{base}/healthz")).await, "ok");
        for drip in drips {
            let closed = tokio::time::timeout(Duration::from_secs(15), drip)
                .await
                .expect("a slow-header connection is still open after 15 s")
                .unwrap();
            assert!(
                closed >= Duration::from_millis(900) && closed < Duration::from_secs(3),
                "closed after {closed:?}"
            );
        }
        assert_eq!(text(format!("{base}/healthz")).await, "ok");
        stop.send(true).unwrap();
        server.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn idle_keep_alive_connections_are_closed_after_the_idle_timeout() {
        // Idle shorter than the header timeout: the idle timeout closes it.
        let (base, stop, server) = start_with(1, limits(5000, 800)).await;
        let mut stream = connect(&base).await;
        assert_eq!(get_on(&mut stream, "/healthz").await, "ok");
        let idle = Instant::now();
        let closed = closed_after(&mut stream, idle).await;
        assert!(
            closed >= Duration::from_millis(700) && closed < Duration::from_millis(2500),
            "closed after {closed:?}"
        );
        stop.send(true).unwrap();
        server.await.unwrap().unwrap();

        // Idle longer than the header timeout: a kept-alive connection outlives the
        // header timeout and serves its next request.
        let (base, stop, server) = start_with(1, limits(500, 10_000)).await;
        let mut stream = connect(&base).await;
        assert_eq!(get_on(&mut stream, "/healthz").await, "ok");
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert_eq!(get_on(&mut stream, "/healthz").await, "ok");
        stop.send(true).unwrap();
        server.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn calls_in_flight_are_not_idle() {
        let (base, stop, server) = start_with(1, limits(300, 300)).await;
        let mut stream = connect(&base).await;
        assert_eq!(get_on(&mut stream, "/slow").await, "done");
        stop.send(true).unwrap();
        server.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn an_early_answer_reaches_a_caller_still_sending() {
        let (base, stop, server) = start(2).await;
        let client = reqwest::Client::new();
        for i in 0..10 {
            let response = client
                .post(format!("{base}/refuse"))
                .body(vec![b'x'; 8 * 1024 * 1024])
                .send()
                .await
                .unwrap_or_else(|e| panic!("upload {i}: {e:?}"));
            assert_eq!(response.status(), 413, "upload {i}");
            assert_eq!(response.text().await.unwrap(), "too large");
        }
        stop.send(true).unwrap();
        server.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn connections_past_the_cap_are_closed_at_once() {
        let (base, stop, server) = start_with(
            1,
            Limits {
                max_connections: 3,
                ..limits(5000, 5000)
            },
        )
        .await;
        let mut held = Vec::new();
        for _ in 0..3 {
            let mut stream = connect(&base).await;
            assert_eq!(get_on(&mut stream, "/healthz").await, "ok");
            held.push(stream);
        }
        let started = Instant::now();
        let mut refused = connect(&base).await;
        let _ = refused
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await;
        let closed = closed_after(&mut refused, started).await;
        assert!(
            closed < Duration::from_millis(500),
            "refused after {closed:?}"
        );

        // A freed place serves again.
        drop(held.pop());
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(text(format!("{base}/healthz")).await, "ok");
        drop(held);
        stop.send(true).unwrap();
        server.await.unwrap().unwrap();
    }
}
