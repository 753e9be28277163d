//! The public invoke proxy `ANY /fn/{ns}/{name}/{rest...}` (docs/spec.md §7).

mod body;
mod error;
mod fast;
mod forward;
mod headers;
mod log;
mod traces;
mod unix;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::any;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use thread_local::ThreadLocal;

use body::RequestBody;
use sless_core::auth::TriggerKey;
use sless_core::calls::CallArchive;
use sless_core::routes::{Route, RouteTable};
use sless_core::store;
use unix::UnixConnector;

pub use error::InvokeError;
pub(crate) use forward::MAX_TRIGGER_ANSWER_READ;
pub use log::{CallError, Filter, Invocation, InvocationLog, InvocationStats, Retention, Via};
pub use traces::{TraceExport, export_from_env as export_traces_from_env};

/// Who calls through the proxy: the public `/fn` route, or sless itself on behalf of
/// a trigger (which may reach a [`Route::Hidden`] function and set [`TRIGGER_HEADER`]
/// and [`TRIGGER_NAME_HEADER`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caller {
    Public,
    /// The console's Invoke form: a public call, recorded as the console's.
    Console,
    /// An event trigger's delivery.
    Event,
    /// A cron trigger's fire.
    Cron,
}

impl Caller {
    /// sless itself, for a trigger: may reach hidden functions and set trigger headers.
    pub fn is_trigger(self) -> bool {
        matches!(self, Caller::Event | Caller::Cron)
    }
}

/// Request header with what a trigger knows about the call (base64 of a JSON object;
/// the runtimes put it under `_amqp`). Removed from public calls: nobody may forge it.
pub const TRIGGER_HEADER: &str = "x-sless-amqp";

/// Request header naming the trigger a call of sless's own is made for.
pub const TRIGGER_NAME_HEADER: &str = "x-sless-trigger";

#[derive(Clone, Debug)]
pub struct ProxyConfig {
    /// Larger request bodies are refused with 413.
    pub max_body_bytes: u64,
    /// Added to a function's timeout for the network in between; small, so a caller
    /// gets its 504 at the time the function's `timeout_sec` says.
    pub timeout_margin: Duration,
    /// How long a call waits for a [`Route::Starting`] function before it gets 503.
    pub start_wait: Duration,
    /// How long a call waits for a [`Route::NoCode`] function to get its upload.
    pub upload_wait: Duration,
    /// The console's session cookie, when the console shares the host: never forwarded
    /// to a function, never set by one.
    pub console_cookie: Option<String>,
    /// Which calls each function's records keep.
    pub call_records: Retention,
    /// Checks the token of cron fires that reach `/fn` over the network (Kubernetes);
    /// without it every caller is public.
    pub trigger_key: Option<TriggerKey>,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: 256 * 1024 * 1024,
            timeout_margin: Duration::from_millis(250),
            start_wait: Duration::from_secs(10),
            upload_wait: Duration::from_secs(2),
            console_cookie: None,
            call_records: Retention::DEFAULT,
            trigger_key: None,
        }
    }
}

/// Idle upstream connections are kept this long for reuse.
pub(crate) const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// A function that does not accept a connection in this time is unreachable, also when
/// it has no call timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The pooled clients of one thread: to instances on Unix sockets (embedded mode) and
/// on TCP (Kubernetes Services).
struct Clients {
    unix: Client<UnixConnector, RequestBody>,
    tcp: Client<HttpConnector, RequestBody>,
}

pub struct Proxy {
    routes: Arc<dyn RouteTable>,
    /// One pool per thread: a pooled connection is driven by a task on the thread
    /// that opened it, and a serving thread should not wake another per call
    /// ([`crate::serve`]).
    clients: ThreadLocal<Clients>,
    /// Idle connections of trigger calls ([`fast::in_hand`]).
    trigger_upstreams: std::sync::Mutex<fast::in_hand::Idle>,
    config: ProxyConfig,
    invocations: InvocationLog,
}

impl Proxy {
    pub fn new(routes: Arc<dyn RouteTable>, config: ProxyConfig) -> Self {
        Self {
            routes,
            clients: ThreadLocal::new(),
            trigger_upstreams: Default::default(),
            invocations: InvocationLog::new(config.call_records),
            config,
        }
    }

    /// Instances of a workload running now, where its runner counts them.
    pub fn instances(&self, namespace: &str, name: &str) -> Option<u32> {
        self.routes.instances(namespace, name)
    }

    /// This thread's pooled clients.
    fn clients(&self) -> &Clients {
        self.clients.get_or(|| {
            let mut tcp = HttpConnector::new();
            tcp.set_nodelay(true);
            tcp.set_connect_timeout(Some(CONNECT_TIMEOUT));
            tcp.set_keepalive(Some(Duration::from_secs(60)));
            let mut builder = Client::builder(TokioExecutor::new());
            builder
                .pool_idle_timeout(POOL_IDLE_TIMEOUT)
                .pool_timer(TokioTimer::new());
            Clients {
                unix: builder.build(UnixConnector),
                tcp: builder.build(tcp),
            }
        })
    }

    /// Where a call to `/fn/{namespace}/{name}` would go now.
    pub fn route(&self, namespace: &str, name: &str) -> Route {
        self.routes.route(namespace, name)
    }

    pub fn config(&self) -> &ProxyConfig {
        &self.config
    }

    pub fn invocations(&self) -> &InvocationLog {
        &self.invocations
    }

    /// Loads the call records `archive` holds, then saves the changed ones to it every
    /// [`FLUSH_INTERVAL`] (and once more when the returned flusher stops or is dropped).
    pub async fn keep_calls_in(
        self: &Arc<Self>,
        archive: Arc<dyn CallArchive>,
    ) -> store::Result<CallFlusher> {
        self.invocations.load(archive).await?;
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let proxy = self.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(FLUSH_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => proxy.invocations.flush().await,
                    _ = &mut stopped => break,
                }
            }
            proxy.invocations.flush().await;
        });
        Ok(CallFlusher { stop, task })
    }
}

/// How often changed call records are saved: what a crash may lose.
pub const FLUSH_INTERVAL: Duration = Duration::from_secs(2);

/// The background task saving call records.
pub struct CallFlusher {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl CallFlusher {
    /// Saves what changed since the last flush, then stops.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        if let Err(e) = self.task.await {
            tracing::warn!(error = %e, "the call records' flusher failed");
        }
    }
}

/// `ANY /fn/{ns}/{name}` and everything below it, for the server to merge into its
/// main router (served with `into_make_service_with_connect_info::<SocketAddr>()` so
/// X-Forwarded-For can name the caller).
pub fn router(proxy: Arc<Proxy>) -> Router {
    Router::new()
        .route("/fn/{ns}/{name}", any(forward::invoke))
        .route("/fn/{ns}/{name}/", any(forward::invoke))
        .route("/fn/{ns}/{name}/{*rest}", any(forward::invoke))
        .with_state(proxy)
}
