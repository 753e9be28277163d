//! The event dispatcher: one AMQP consumer per enabled `event` trigger (docs/spec.md
//! §3, Trigger). Each message is one call to the function through the `/fn` proxy's
//! call path ([`Proxy::call`]); 2xx acks it, anything else retries it later through
//! `<queue>.retry.<delay>` and finally moves it to `<queue>.dead`. Nothing is acked
//! before the function answered 2xx or the message was safely re-published: at least
//! once.
//!
//! One implementation for both modes: `sless up --amqp-url` runs it beside the
//! embedded runner, Kubernetes runs it as its own component (`SLESS_COMPONENTS=
//! dispatcher`), so a broker outage never touches the controllers. It alone writes
//! the status of event triggers: `active`, `message`, and the counters.

mod consumer;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use lapin::{Connection, ConnectionProperties};
use tokio::runtime::Handle;
use tokio::sync::{broadcast, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::proxy::Proxy;
use consumer::{Consumer, ConsumerState, backoff};
use sless_core::model::{Kind, Trigger, TriggerSpec, TriggerType};
use sless_core::routes::Route;
use sless_core::store::{Object, Store, StoreExt, modify_status};

/// Said by every enabled event trigger when sless runs without a broker.
pub const NO_BROKER: &str =
    "no broker configured: start sless with --amqp-url (or SLESS_AMQP_URL) to consume queues";

#[derive(Clone, Debug)]
pub struct DispatchConfig {
    /// `amqp://user:pass@host:port/vhost` (or `amqps://`); `None`: no broker.
    pub amqp_url: Option<String>,
    /// The first retry of a failed message waits this long, each next one twice as long.
    pub retry_base: Duration,
    pub retry_max: Duration,
    /// Reconnecting to a lost broker waits from `retry_base`-like 1 s up to this.
    pub reconnect_max: Duration,
    /// How often triggers, routes and the connection are looked at (store changes wake
    /// the dispatcher at once as well).
    pub poll_every: Duration,
}

impl DispatchConfig {
    pub fn new(amqp_url: Option<String>) -> Self {
        Self {
            amqp_url,
            retry_base: Duration::from_secs(1),
            retry_max: Duration::from_secs(300),
            reconnect_max: Duration::from_secs(30),
            poll_every: Duration::from_secs(1),
        }
    }
}

/// The running dispatcher; dropping it stops every consumer.
pub struct Dispatcher {
    task: JoinHandle<()>,
    /// Ends the consumers' thread, and with its runtime every consumer.
    _consumers: oneshot::Sender<()>,
}

impl Drop for Dispatcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Dispatcher {
    pub fn start(store: Arc<dyn Store>, proxy: Arc<Proxy>, config: DispatchConfig) -> Self {
        let (stop, consumers) = consumer_thread();
        let shared = Arc::new(Shared {
            store,
            proxy,
            config,
            consumers_on: consumers,
            consumers: Mutex::new(HashMap::new()),
            counters: Mutex::new(HashMap::new()),
        });
        Self {
            task: tokio::spawn(run(shared)),
            _consumers: stop,
        }
    }
}

/// A thread of its own with a single-threaded runtime for the consumers and the calls
/// they make: on the shared work-stealing runtime each delivery, answer and ack woke
/// another worker thread, and on two cores those wake-ups cost more than the call's
/// own work. Its runtime ends when the sender is dropped.
fn consumer_thread() -> (oneshot::Sender<()>, Handle) {
    let (stop, stopped) = oneshot::channel::<()>();
    let started = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .and_then(|runtime| {
            let handle = runtime.handle().clone();
            std::thread::Builder::new()
                .name("sless-events".into())
                .spawn(move || {
                    let _ = runtime.block_on(stopped);
                })
                .map(|_| handle)
        });
    let handle = started.unwrap_or_else(|e| {
        // Slower, not broken: the consumers share the caller's runtime.
        tracing::warn!(error = %e, "no thread of their own for the event consumers");
        Handle::current()
    });
    (stop, handle)
}

type Key = (String, String);

/// Messages handled since the last status write, per trigger.
#[derive(Default)]
struct Counters {
    delivered: AtomicU64,
    failed: AtomicU64,
    dead_lettered: AtomicU64,
    /// Unix seconds of the last message handled, 0 for none since the last write: per
    /// message a store, formatted only when written.
    last_message_time: AtomicI64,
    /// When counts were last written. Each status write is a store change that wakes
    /// the dispatcher (and every other watcher) again: counts are written at most once
    /// per poll, or a busy trigger would rewrite its status as fast as the store syncs.
    counted_at: Mutex<Option<Instant>>,
}

impl Counters {
    fn touch(&self) {
        let now = chrono::Utc::now().timestamp();
        self.last_message_time.store(now, Ordering::Relaxed);
    }

    /// Whether counts may be written now: none written within `every`.
    fn count_due(&self, every: Duration) -> bool {
        let at = self
            .counted_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        at.is_none_or(|at| at.elapsed() >= every)
    }

    fn counts_written(&self) {
        *self
            .counted_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    }
}

/// A [`Counters::last_message_time`] as the status shows it.
fn rfc3339(unix_secs: i64) -> Option<String> {
    let time = chrono::DateTime::from_timestamp(unix_secs, 0)?;
    Some(time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}

/// What a consumer was started for; a change restarts it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Target {
    namespace: String,
    trigger: String,
    function: String,
    queue: String,
    concurrency: u16,
    max_retries: u32,
}

impl Target {
    fn of(trigger: &Object<Trigger>) -> Self {
        let spec = &trigger.spec;
        Self {
            namespace: trigger.meta.namespace.clone(),
            trigger: trigger.meta.name.clone(),
            function: spec.function_ref.clone(),
            queue: spec.queue.clone().unwrap_or_default(),
            concurrency: u16::try_from(spec.concurrency_or_default()).unwrap_or(1),
            max_retries: spec.max_retries_or_default(),
        }
    }
}

struct Running {
    target: Target,
    /// The broker connection it consumes on.
    connection: Arc<Connection>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    state: Arc<Mutex<ConsumerState>>,
    /// Failures in a row before this start; a consumer that consumes resets them.
    failures: u32,
    /// When a failed consumer may start again (set once its failure is seen).
    retry_at: Option<Instant>,
    /// What the failure before this start said, shown until it consumes.
    last_error: Option<String>,
}

struct Shared {
    store: Arc<dyn Store>,
    proxy: Arc<Proxy>,
    config: DispatchConfig,
    /// Where consumers run ([`consumer_thread`]).
    consumers_on: Handle,
    consumers: Mutex<HashMap<Key, Running>>,
    counters: Mutex<HashMap<Key, Arc<Counters>>>,
}

/// The broker as the dispatcher sees it in one pass.
enum Link<'a> {
    Up(&'a Arc<Connection>),
    Down(&'a str),
}

async fn run(shared: Arc<Shared>) {
    let mut changes = shared.store.subscribe();
    let Some(url) = shared.config.amqp_url.clone() else {
        loop {
            shared.pass(&Link::Down(NO_BROKER)).await;
            shared.wait(&mut changes, shared.config.poll_every).await;
        }
    };
    let first_delay = Duration::from_secs(1).min(shared.config.reconnect_max);
    let mut delay = first_delay;
    loop {
        let properties = ConnectionProperties::default().with_connection_name("sless".into());
        // Made on the consumers' runtime, so its socket wakes their thread, not one of
        // the shared runtime's that would only pass the wake-up on.
        let mut connect = shared.consumers_on.spawn({
            let url = url.clone();
            async move { Connection::connect(&url, properties).await }
        });
        let connected = match tokio::time::timeout(Duration::from_secs(10), &mut connect).await {
            Ok(joined) => joined
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string())),
            Err(_) => {
                connect.abort();
                Err("no answer in 10 s".to_string())
            }
        };
        let down = match connected {
            Ok(connection) => {
                tracing::info!("dispatcher: connected to the broker");
                delay = first_delay;
                let connection = Arc::new(connection);
                while connection.status().connected() {
                    shared.pass(&Link::Up(&connection)).await;
                    shared.wait(&mut changes, shared.config.poll_every).await;
                }
                "broker connection lost; reconnecting".to_string()
            }
            Err(e) => format!("broker unreachable: {e}; retrying in {} s", delay.as_secs()),
        };
        tracing::warn!("dispatcher: {down}");
        let until = tokio::time::Instant::now() + delay;
        while tokio::time::Instant::now() < until {
            shared.pass(&Link::Down(&down)).await;
            shared.wait(&mut changes, shared.config.poll_every).await;
        }
        delay = (delay * 2).min(shared.config.reconnect_max);
    }
}

/// Whether the dispatcher can call a function now; why not otherwise.
fn callable(route: &Route, namespace: &str, function: &str) -> Result<(), String> {
    match route {
        Route::Ready { .. } | Route::Hidden { .. } => Ok(()),
        Route::Unknown => Err(format!("function {function:?} not found in {namespace}")),
        Route::Unavailable { reason } | Route::Starting { reason } | Route::NoCode { reason } => {
            Err(format!("waiting for the function: {reason}"))
        }
    }
}

impl Shared {
    /// Until the store changes or `limit` passes.
    async fn wait(
        &self,
        changes: &mut broadcast::Receiver<sless_core::store::Change>,
        limit: Duration,
    ) {
        let sleep = tokio::time::sleep(limit);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                _ = &mut sleep => return,
                change = changes.recv() => match change {
                    Ok(change) if matches!(change.kind, Kind::Trigger | Kind::Function) => return,
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => return,
                    Err(broadcast::error::RecvError::Closed) => {
                        sleep.as_mut().await;
                        return;
                    }
                },
            }
        }
    }

    /// Makes the consumers match the enabled event triggers and writes their status.
    async fn pass(self: &Arc<Self>, link: &Link<'_>) {
        let triggers = match self.store.list_typed::<Trigger>(None).await {
            Ok(triggers) => triggers,
            Err(e) => {
                tracing::warn!(error = %e, "dispatcher: cannot list triggers");
                return;
            }
        };
        let mut seen = HashSet::new();
        for trigger in triggers
            .iter()
            .filter(|t| t.spec.trigger_type == TriggerType::Event)
        {
            let key = (trigger.meta.namespace.clone(), trigger.meta.name.clone());
            seen.insert(key.clone());
            let wanted = self.wanted(trigger, link);
            let (active, message) = match wanted {
                Ok(connection) => self.ensure_consumer(&key, Target::of(trigger), connection),
                Err(message) => {
                    self.stop_consumer(&key);
                    // Without a broker nothing consumes, whatever is still in hand.
                    let draining = matches!(link, Link::Up(_)) && self.still_running(&key);
                    (draining, message)
                }
            };
            self.write_status(trigger, &key, active, message).await;
        }
        self.forget_all_but(&seen);
    }

    /// The connection to consume on, or why the trigger does not consume now.
    fn wanted<'a>(
        &self,
        trigger: &Object<Trigger>,
        link: &Link<'a>,
    ) -> Result<&'a Arc<Connection>, Option<String>> {
        let spec: &TriggerSpec = &trigger.spec;
        if !spec.enabled {
            return Err(None);
        }
        if let Err(e) = spec.validate() {
            return Err(Some(format!("invalid trigger: {e}")));
        }
        let connection = match link {
            Link::Up(connection) => *connection,
            Link::Down(why) => return Err(Some(why.to_string())),
        };
        let route = self
            .proxy
            .route(&trigger.meta.namespace, &spec.function_ref);
        callable(&route, &trigger.meta.namespace, &spec.function_ref).map_err(Some)?;
        Ok(connection)
    }

    fn counters(&self, key: &Key) -> Arc<Counters> {
        let mut counters = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        counters.entry(key.clone()).or_default().clone()
    }

    /// Starts (or restarts, after a failure or a change) the trigger's consumer; its
    /// (active, message) now. A consumer failing again and again (e.g. its queue exists
    /// with other arguments) is restarted after 1 s, 2 s … up to `reconnect_max`.
    fn ensure_consumer(
        self: &Arc<Self>,
        key: &Key,
        target: Target,
        connection: &Arc<Connection>,
    ) -> (bool, Option<String>) {
        let mut consumers = self
            .consumers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(running) = consumers.get(key)
            && !Arc::ptr_eq(&running.connection, connection)
        {
            // Its connection was lost: the broker gives what it had in hand to the next
            // consumer, and an ack or confirm it still awaits there never comes.
            running.task.abort();
            consumers.insert(key.clone(), self.spawn(target, connection, key));
            return (false, Some("starting the consumer".into()));
        }
        if let Some(running) = consumers.get_mut(key) {
            let state = running
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            let same = running.target == target;
            let finished = running.task.is_finished();
            if same && !finished {
                return match state {
                    ConsumerState::Consuming => {
                        running.failures = 0;
                        running.last_error = None;
                        (true, None)
                    }
                    ConsumerState::Starting => {
                        let starting = "starting the consumer".to_string();
                        (false, Some(running.last_error.clone().unwrap_or(starting)))
                    }
                    ConsumerState::Failed(e) => (false, Some(e)),
                };
            }
            if !finished {
                // A changed trigger: the old consumer drains first.
                let _ = running.stop.send(true);
                return (false, Some("restarting the consumer".into()));
            }
            if let ConsumerState::Failed(e) = state
                && same
            {
                let failures = running.failures.saturating_add(1);
                let first = Duration::from_secs(1).min(self.config.reconnect_max);
                let delay = backoff(first, self.config.reconnect_max, failures);
                let message = format!("{e}; retrying in {} s", delay.as_secs());
                let retry_at = *running
                    .retry_at
                    .get_or_insert_with(|| Instant::now() + delay);
                if Instant::now() < retry_at {
                    return (false, Some(message));
                }
                let mut restarted = self.spawn(target, connection, key);
                restarted.failures = failures;
                restarted.last_error = Some(message.clone());
                consumers.insert(key.clone(), restarted);
                return (false, Some(message));
            }
        }
        consumers.insert(key.clone(), self.spawn(target, connection, key));
        (false, Some("starting the consumer".into()))
    }

    fn spawn(self: &Arc<Self>, target: Target, connection: &Arc<Connection>, key: &Key) -> Running {
        let (stop, stopped) = watch::channel(false);
        let state = Arc::new(Mutex::new(ConsumerState::Starting));
        let consumer = Consumer {
            target: target.clone(),
            proxy: self.proxy.clone(),
            counters: self.counters(key),
            state: state.clone(),
            retry_base: self.config.retry_base,
            retry_max: self.config.retry_max,
        };
        let task = self
            .consumers_on
            .spawn(consumer.run(connection.clone(), stopped));
        Running {
            target,
            connection: connection.clone(),
            stop,
            task,
            state,
            failures: 0,
            retry_at: None,
            last_error: None,
        }
    }

    fn stop_consumer(&self, key: &Key) {
        let mut consumers = self
            .consumers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(running) = consumers.get(key) {
            if running.task.is_finished() {
                consumers.remove(key);
            } else {
                let _ = running.stop.send(true);
            }
        }
    }

    /// A stopped consumer still handling its last messages counts as active.
    fn still_running(&self, key: &Key) -> bool {
        let consumers = self
            .consumers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        consumers.get(key).is_some_and(|r| !r.task.is_finished())
    }

    /// Deleted triggers: their consumers stop, their counters go.
    fn forget_all_but(&self, seen: &HashSet<Key>) {
        let mut consumers = self
            .consumers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        consumers.retain(|key, running| {
            if !seen.contains(key) {
                let _ = running.stop.send(true);
            }
            seen.contains(key) || !running.task.is_finished()
        });
        let mut counters = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        counters.retain(|key, _| seen.contains(key) || consumers.contains_key(key));
    }

    /// Writes (active, message) and adds the counted messages, when anything changed;
    /// counts alone at most once per poll.
    async fn write_status(
        &self,
        trigger: &Object<Trigger>,
        key: &Key,
        active: bool,
        message: Option<String>,
    ) {
        let status = &trigger.status;
        let same_state = status.active == active && status.message == message;
        let counters = self.counters(key);
        if same_state && !counters.count_due(self.config.poll_every) {
            return;
        }
        let delivered = counters.delivered.swap(0, Ordering::Relaxed);
        let failed = counters.failed.swap(0, Ordering::Relaxed);
        let dead_lettered = counters.dead_lettered.swap(0, Ordering::Relaxed);
        let last_secs = counters.last_message_time.swap(0, Ordering::Relaxed);
        let last = if last_secs == 0 {
            None
        } else {
            rfc3339(last_secs)
        };
        let counted = delivered + failed + dead_lettered > 0 || last.is_some();
        if !counted && same_state {
            return;
        }
        if counted {
            counters.counts_written();
        }
        let written = modify_status::<Trigger, _>(&*self.store, &key.0, &key.1, |t| {
            t.status.active = active;
            t.status.message = message.clone();
            t.status.url = None;
            t.status.delivered += delivered;
            t.status.failed += failed;
            t.status.dead_lettered += dead_lettered;
            if last.is_some() {
                t.status.last_message_time = last.clone();
            }
        })
        .await;
        if let Err(e) = written {
            tracing::debug!(trigger = %key.1, error = %e, "event trigger status not written");
            // Counted again on the next pass.
            counters.delivered.fetch_add(delivered, Ordering::Relaxed);
            counters.failed.fetch_add(failed, Ordering::Relaxed);
            counters
                .dead_lettered
                .fetch_add(dead_lettered, Ordering::Relaxed);
            // A message handled meanwhile is the newer.
            counters
                .last_message_time
                .fetch_max(last_secs, Ordering::Relaxed);
        }
    }
}
