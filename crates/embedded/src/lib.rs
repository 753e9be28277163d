//! sless embedded mode: the SQLite store ([`sqlite`]), the in-process S3 endpoint
//! ([`s3`]) and the embedded runner ([`LocalRunner`]), which makes the store's desired
//! state true with local, sandboxed processes. It reacts to the store's change
//! notifications; each workload and each job has one actor task that reconciles it, so
//! work on one never blocks another.

mod build;
mod cgroup;
mod cron;
pub mod egress;
mod jobs;
mod namespaces;
mod process;
mod runtimes;
pub mod s3;
mod sandbox;
mod scratch;
mod socket;
pub mod sqlite;
mod standby;
mod workload;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

use tokio::sync::{broadcast, mpsc};

pub use runtimes::Toolchain;

use build::Builder;
use runtimes::Wrappers;
use sandbox::Sandbox;
use sless_core::data_dir::own_private_dir;
use sless_core::logs::{Following, LogBook, LogFilter, LogLine, WorkloadLogs};
use sless_core::model::{Function, Kind, Trigger, TriggerType};
use sless_core::quota::MemoryLedger;
use sless_core::routes::{Route, RouteTable, TriggerCalls};
use sless_core::s3::ObjectStore;
use sless_core::store::{SpecWrite, Store, StoreExt};
use sless_core::upload::UploadLimits;
use socket::SocketDir;

/// Enough for a runtime's threads and a handler's worker pool; a fork bomb stops here.
pub const DEFAULT_MAX_PIDS: u32 = 256;

#[derive(Clone, Debug)]
pub struct RunnerConfig {
    pub data_dir: PathBuf,
    /// Base of the URLs written to status (`<external_url>/fn/<ns>/<name>`).
    pub external_url: String,
    pub toolchain: Toolchain,
    pub limits: UploadLimits,
    /// How long a new instance may take to answer `/health`.
    pub health_timeout: Duration,
    /// How often the cron scheduler looks at the clock.
    pub cron_tick: Duration,
    /// Test-only: scheduler seconds per real second (1 in production), so a test
    /// sees a 5-field `* * * * *` schedule fire without waiting a minute.
    pub cron_time_scale: u32,
    /// Lines of output kept per workload.
    pub log_lines: usize,
    /// A full pass over every object, as a safety net behind change notifications.
    pub resync_every: Duration,
    /// Run functions even where the kernel has no Landlock to sandbox them.
    pub allow_unsandboxed: bool,
    /// Processes and threads per instance, job run and dependency install (a cgroup's
    /// `pids.max`); 0 = no limit.
    pub max_pids: u32,
    /// Pre-started runtime processes kept per runtime (Python, Node) once a function of
    /// it exists, which any of its functions takes when an instance starts: that start
    /// skips the interpreter's (module `standby`). 0 turns them off.
    pub standby_pool: usize,
    /// MiB of `memory_mb` one namespace's running instances and job runs may add up to;
    /// past it an instance does not start and its status says why.
    pub max_running_memory_mb: u64,
    /// Runs each job keeps in its history (`--job-runs-kept`).
    pub job_runs_kept: usize,
    /// An instance with no call for this long stops, down to its workload's
    /// `min_instances` (`--scale-to-zero-after`); the next call starts one.
    pub scale_to_zero_after: Duration,
}

/// `--scale-to-zero-after`'s default.
pub const DEFAULT_SCALE_TO_ZERO_AFTER: Duration = Duration::from_secs(300);

impl RunnerConfig {
    pub fn new(data_dir: PathBuf, external_url: String) -> Self {
        Self {
            data_dir,
            external_url,
            toolchain: Toolchain::default(),
            limits: UploadLimits::default(),
            health_timeout: Duration::from_secs(30),
            cron_tick: Duration::from_secs(1),
            cron_time_scale: 1,
            log_lines: 1000,
            resync_every: Duration::from_secs(300),
            allow_unsandboxed: false,
            max_pids: DEFAULT_MAX_PIDS,
            standby_pool: 4,
            max_running_memory_mb: sless_core::quota::DEFAULT_MAX_RUNNING_MEMORY_MB,
            job_runs_kept: sless_core::model::DEFAULT_JOB_RUNS_KEPT,
            scale_to_zero_after: DEFAULT_SCALE_TO_ZERO_AFTER,
        }
    }
}

/// The running instances of a workload: how many (its status), and their processes,
/// oldest first (tests look at them).
#[derive(Clone, Debug)]
struct Endpoint {
    instances: u32,
    pids: Vec<u32>,
}

type Key = (String, String);

struct Shared {
    store: Arc<dyn Store>,
    builder: Builder,
    config: RunnerConfig,
    logs: Arc<LogBook>,
    sockets: SocketDir,
    /// Namespace → name → route, so the invoke path looks up borrowed strings.
    routes: RwLock<HashMap<String, HashMap<String, Route>>>,
    /// Workloads with a spec write (theirs or a trigger's) their actor has not
    /// reconciled yet, with the write's number: their route is not to be believed
    /// unless ready, and calls wait for the actor (read your writes).
    unsettled: Mutex<HashMap<Key, u64>>,
    /// Numbers the writes in `unsettled`.
    writes: std::sync::atomic::AtomicU64,
    endpoints: RwLock<HashMap<Key, Endpoint>>,
    actors: Mutex<HashMap<(Kind, String, String), mpsc::Sender<()>>>,
    /// Trigger → the function it last named, so a change (or deletion, which no longer
    /// says) wakes only that function.
    trigger_functions: Mutex<HashMap<Key, String>>,
    /// The standbys waiting for a function ([`RunnerConfig::standby_pool`]).
    standbys: standby::Pool,
    /// Memory reserved by each namespace's running instances and job runs.
    memory: Arc<MemoryLedger>,
    /// What cron fires go through, once the proxy is up ([`LocalRunner::call_triggers_through`]).
    trigger_calls: OnceLock<Arc<dyn TriggerCalls>>,
}

/// Handle to the runner; also the embedded [`RouteTable`] of the proxy.
#[derive(Clone)]
pub struct LocalRunner {
    shared: Arc<Shared>,
}

impl RouteTable for LocalRunner {
    fn route(&self, namespace: &str, name: &str) -> Route {
        let route = {
            let routes = self.shared.routes.read().unwrap_or_else(|e| e.into_inner());
            routes
                .get(namespace)
                .and_then(|names| names.get(name))
                .cloned()
                .unwrap_or(Route::Unknown)
        };
        // The common call costs no second look.
        if matches!(route, Route::Ready { .. }) || !self.shared.is_unsettled(namespace, name) {
            return route;
        }
        Route::Starting {
            reason: format!("{name:?} is being updated"),
        }
    }

    fn instances(&self, namespace: &str, name: &str) -> Option<u32> {
        Some(
            self.shared
                .endpoint(namespace, name)
                .map_or(0, |e| e.instances),
        )
    }
}

impl LocalRunner {
    /// Writes the runtime wrappers, then starts reconciling every object.
    pub fn start(
        store: Arc<dyn Store>,
        objects: ObjectStore,
        mut config: RunnerConfig,
    ) -> std::io::Result<Self> {
        // Processes run with their build directory as cwd: every path handed to them
        // must be absolute.
        config.data_dir = std::path::absolute(&config.data_dir)?;
        own_private_dir(&config.data_dir.join("builds"))?;
        config.toolchain = config.toolchain.resolved();
        let wrappers = Wrappers::install(&config.data_dir.join("runtimes"))?;
        let sandbox = Arc::new(Sandbox::new(
            &config.toolchain,
            wrappers.root(),
            &config.data_dir,
            config.allow_unsandboxed,
            config.max_pids,
        ));
        let shared = Arc::new(Shared {
            builder: Builder {
                objects,
                wrappers,
                sandbox,
                toolchain: config.toolchain.clone(),
                limits: config.limits.clone(),
            },
            logs: Arc::new(LogBook::new(config.log_lines)),
            sockets: SocketDir::prepare(config.data_dir.join("run"))?,
            routes: RwLock::new(HashMap::new()),
            unsettled: Mutex::new(HashMap::new()),
            writes: std::sync::atomic::AtomicU64::new(0),
            endpoints: RwLock::new(HashMap::new()),
            actors: Mutex::new(HashMap::new()),
            trigger_functions: Mutex::new(HashMap::new()),
            standbys: standby::Pool::default(),
            memory: MemoryLedger::new(config.max_running_memory_mb),
            trigger_calls: OnceLock::new(),
            store,
            config,
        });
        shared.clear_standbys()?;
        let weak = Arc::downgrade(&shared);
        shared.store.hook_spec_writes(Arc::new(move |write| {
            if let Some(shared) = weak.upgrade() {
                shared.spec_written(write);
            }
        }));
        let changes = shared.store.subscribe();
        tokio::spawn(watch(shared.clone(), changes));
        tokio::spawn(cron::schedule(shared.clone()));
        Ok(Self { shared })
    }

    /// Cron fires go through `calls` (the proxy's) from now on; set once, when the proxy
    /// that routes to this runner exists.
    pub fn call_triggers_through(&self, calls: Arc<dyn TriggerCalls>) {
        if self.shared.trigger_calls.set(calls).is_err() {
            tracing::warn!("cron calls were already routed; the second route is ignored");
        }
    }

    pub fn logs(&self) -> Arc<LogBook> {
        self.shared.logs.clone()
    }

    /// The process serving a workload now (its oldest instance), if one is.
    pub fn pid(&self, namespace: &str, name: &str) -> Option<u32> {
        self.pids(namespace, name).first().copied()
    }

    /// The processes of every running instance of a workload, oldest first.
    pub fn pids(&self, namespace: &str, name: &str) -> Vec<u32> {
        self.shared
            .endpoint(namespace, name)
            .map(|e| e.pids)
            .unwrap_or_default()
    }
}

#[async_trait::async_trait]
impl WorkloadLogs for LocalRunner {
    fn lines(&self, namespace: &str, name: &str, query: &LogFilter) -> Vec<LogLine> {
        self.shared.logs.lines(namespace, name, query)
    }

    fn follow(&self, namespace: &str, name: &str, query: &LogFilter) -> Option<Following> {
        Some(self.shared.logs.follow(namespace, name, query))
    }

    /// The whole log of the latest build of a workload or job, if there was one.
    async fn build_log(&self, kind: Kind, namespace: &str, name: &str) -> Option<String> {
        let root = self.shared.builds_root(kind, namespace, name);
        let mut newest: Option<(std::time::SystemTime, PathBuf)> = None;
        let mut entries = tokio::fs::read_dir(&root).await.ok()?;
        while let Ok(Some(entry)) = entries.next_entry().await {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "log")
                && let Ok(meta) = entry.metadata().await
                && let Ok(modified) = meta.modified()
                && newest.as_ref().is_none_or(|(t, _)| modified > *t)
            {
                newest = Some((modified, path));
            }
        }
        tokio::fs::read_to_string(newest?.1).await.ok()
    }
}

impl Shared {
    /// The first line of a message as `/fn` callers may see it: no path of this machine
    /// (the function's own folder reads ".", the data dir and the tools by name).
    fn public_line(&self, message: &str, function_dir: Option<&std::path::Path>) -> String {
        let mut line = sless_api::text::first_line(message).to_string();
        if let Some(dir) = function_dir {
            line = line.replace(&dir.display().to_string(), ".");
        }
        line = line.replace(&self.config.data_dir.display().to_string(), "<data dir>");
        for program in self.config.toolchain.programs() {
            if let Some((_, name)) = program.rsplit_once('/') {
                line = line.replace(program, name);
            }
        }
        line
    }

    fn builds_root(&self, kind: Kind, namespace: &str, name: &str) -> PathBuf {
        self.config
            .data_dir
            .join("builds")
            .join(namespace)
            .join(format!("{}-{name}", kind.noun()))
    }

    /// The HOME and TMPDIR of a workload's or job's processes, the only place they
    /// may write; beside its builds, so deleting the object removes it.
    fn scratch(&self, kind: Kind, namespace: &str, name: &str) -> PathBuf {
        self.builds_root(kind, namespace, name).join(".scratch")
    }

    fn url(&self, namespace: &str, name: &str) -> String {
        sless_core::model::function_url(&self.config.external_url, namespace, name)
    }

    fn set_route(&self, namespace: &str, name: &str, route: Route) {
        let mut routes = self.routes.write().unwrap_or_else(|e| e.into_inner());
        routes
            .entry(namespace.to_string())
            .or_default()
            .insert(name.to_string(), route);
    }

    /// A spec was written: the workloads it concerns are unsettled until their actor
    /// has reconciled it. A trigger concerns the function it names now and before, if
    /// that function exists (an unknown name stays a 404).
    fn spec_written(&self, write: &SpecWrite<'_>) {
        let function = |spec: &serde_json::Value| {
            spec.get("functionRef")
                .and_then(|f| f.as_str())
                .map(str::to_string)
        };
        let names: Vec<String> = match write.kind {
            Kind::Function | Kind::Service => vec![write.name.to_string()],
            Kind::Trigger => {
                let before = self
                    .trigger_functions
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(&(write.namespace.to_string(), write.name.to_string()))
                    .cloned();
                write
                    .spec
                    .and_then(function)
                    .into_iter()
                    .chain(before)
                    .filter(|f| self.is_known(write.namespace, f))
                    .collect()
            }
            Kind::FunctionJob => return,
        };
        let number = self.writes.fetch_add(1, Ordering::SeqCst) + 1;
        let mut unsettled = self.unsettled.lock().unwrap_or_else(|e| e.into_inner());
        for name in names {
            unsettled.insert((write.namespace.to_string(), name), number);
        }
    }

    /// A workload this runner has a route for, or one just written.
    fn is_known(&self, namespace: &str, name: &str) -> bool {
        let routes = self.routes.read().unwrap_or_else(|e| e.into_inner());
        routes
            .get(namespace)
            .is_some_and(|names| names.contains_key(name))
            || self.is_unsettled(namespace, name)
    }

    fn is_unsettled(&self, namespace: &str, name: &str) -> bool {
        self.unsettled_write(namespace, name).is_some()
    }

    /// The number of the last write of this workload its actor has not reconciled.
    fn unsettled_write(&self, namespace: &str, name: &str) -> Option<u64> {
        let unsettled = self.unsettled.lock().unwrap_or_else(|e| e.into_inner());
        unsettled
            .get(&(namespace.to_string(), name.to_string()))
            .copied()
    }

    /// The actor reconciled what was written up to write `number` (None: nothing was
    /// unsettled when it began): later writes keep the workload unsettled.
    fn settled(&self, namespace: &str, name: &str, number: Option<u64>) {
        let Some(number) = number else { return };
        let mut unsettled = self.unsettled.lock().unwrap_or_else(|e| e.into_inner());
        let key = (namespace.to_string(), name.to_string());
        if unsettled.get(&key) == Some(&number) {
            unsettled.remove(&key);
        }
    }

    fn remove_route(&self, namespace: &str, name: &str) {
        let mut routes = self.routes.write().unwrap_or_else(|e| e.into_inner());
        if let Some(names) = routes.get_mut(namespace) {
            names.remove(name);
        }
    }

    fn set_endpoint(&self, namespace: &str, name: &str, endpoint: Option<Endpoint>) {
        let running = endpoint.as_ref().map_or(0, |e| e.instances);
        sless_core::metrics::metrics().instances(namespace, name, running);
        let mut endpoints = self.endpoints.write().unwrap_or_else(|e| e.into_inner());
        let key = (namespace.to_string(), name.to_string());
        match endpoint {
            Some(endpoint) => endpoints.insert(key, endpoint),
            None => endpoints.remove(&key),
        };
    }

    fn endpoint(&self, namespace: &str, name: &str) -> Option<Endpoint> {
        let endpoints = self.endpoints.read().unwrap_or_else(|e| e.into_inner());
        endpoints
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// Wakes (or starts) the actor of one object. Pokes coalesce: an actor that is
    /// busy reconciles once more when it is done, not once per change.
    fn poke(self: &Arc<Self>, kind: Kind, namespace: &str, name: &str) {
        if kind == Kind::Trigger {
            tokio::spawn(trigger_changed(
                self.clone(),
                namespace.to_string(),
                name.to_string(),
            ));
            return;
        }
        let key = (kind, namespace.to_string(), name.to_string());
        let mut actors = self.actors.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(sender) = actors.get(&key)
            && !sender.is_closed()
        {
            let _ = sender.try_send(());
            return;
        }
        let (sender, receiver) = mpsc::channel(1);
        let _ = sender.try_send(());
        actors.insert(key, sender);
        let shared = self.clone();
        let (namespace, name) = (namespace.to_string(), name.to_string());
        tokio::spawn(async move {
            match kind {
                Kind::Function | Kind::Service => {
                    workload::run(
                        shared.clone(),
                        kind,
                        namespace.clone(),
                        name.clone(),
                        receiver,
                    )
                    .await
                }
                Kind::FunctionJob => {
                    jobs::run(shared.clone(), namespace.clone(), name.clone(), receiver).await
                }
                Kind::Trigger => {}
            }
            shared.actor_done(kind, &namespace, &name);
        });
    }

    fn actor_done(&self, kind: Kind, namespace: &str, name: &str) {
        let mut actors = self.actors.lock().unwrap_or_else(|e| e.into_inner());
        let key = (kind, namespace.to_string(), name.to_string());
        if actors.get(&key).is_some_and(|s| s.is_closed()) {
            actors.remove(&key);
        }
    }

    /// Records which function a trigger names now (`None`: it is gone); the one it
    /// named before, if any.
    fn remember_trigger(
        &self,
        namespace: &str,
        trigger: &str,
        function: Option<&str>,
    ) -> Option<String> {
        let mut index = self
            .trigger_functions
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let key = (namespace.to_string(), trigger.to_string());
        match function {
            Some(function) => index.insert(key, function.to_string()),
            None => index.remove(&key),
        }
    }

    /// Wakes a function's actor if it has one (a function without one does not exist).
    fn poke_function(self: &Arc<Self>, namespace: &str, name: &str) {
        let running = {
            let actors = self.actors.lock().unwrap_or_else(|e| e.into_inner());
            actors.contains_key(&(Kind::Function, namespace.to_string(), name.to_string()))
        };
        if running {
            self.poke(Kind::Function, namespace, name);
        }
    }

    fn poke_functions(self: &Arc<Self>, namespace: &str) {
        let names: Vec<String> = {
            let actors = self.actors.lock().unwrap_or_else(|e| e.into_inner());
            actors
                .keys()
                .filter(|(k, ns, _)| *k == Kind::Function && ns == namespace)
                .map(|(_, _, name)| name.clone())
                .collect()
        };
        for name in names {
            self.poke(Kind::Function, namespace, &name);
        }
    }

    /// Every object once: at start, after missed notifications, and now and then.
    async fn resync(self: &Arc<Self>) {
        match self.store.list_typed::<Trigger>(None).await {
            Ok(triggers) => {
                for trigger in triggers {
                    self.remember_trigger(
                        &trigger.meta.namespace,
                        &trigger.meta.name,
                        Some(&trigger.spec.function_ref),
                    );
                }
            }
            Err(e) => tracing::warn!(error = %e, "resync: cannot list triggers"),
        }
        for kind in [Kind::Function, Kind::Service, Kind::FunctionJob] {
            match self.store.list(kind, None).await {
                Ok(objects) => {
                    for object in objects {
                        self.poke(kind, &object.meta.namespace, &object.meta.name);
                    }
                }
                Err(e) => tracing::warn!(%kind, error = %e, "resync: cannot list"),
            }
        }
    }
}

/// A trigger changed: wake the function it names and the one it named before; if
/// it names a function that does not exist, say so in its status (the function's actor
/// takes over that status once the function is created).
async fn trigger_changed(shared: Arc<Shared>, namespace: String, name: String) {
    let store = &*shared.store;
    let trigger = match store.get_typed::<Trigger>(&namespace, &name).await {
        Ok(trigger) => trigger,
        Err(e) => {
            tracing::warn!(trigger = %name, error = %e, "cannot read a changed trigger");
            shared.poke_functions(&namespace);
            return;
        }
    };
    let function = trigger.as_ref().map(|t| t.spec.function_ref.as_str());
    let before = shared.remember_trigger(&namespace, &name, function);
    match (function, before) {
        // Deleted before this runner ever saw it: which function it fed is unknown.
        (None, None) => shared.poke_functions(&namespace),
        (now, before) => {
            for function in now.into_iter().chain(before.as_deref()) {
                shared.poke_function(&namespace, function);
            }
        }
    }
    // An event trigger's status is the dispatcher's.
    let Some(trigger) = trigger.filter(|t| t.spec.trigger_type != TriggerType::Event) else {
        return;
    };
    let function = &trigger.spec.function_ref;
    if !matches!(
        store.get_typed::<Function>(&namespace, function).await,
        Ok(None)
    ) {
        return;
    }
    let message = format!("function {function:?} not found in {namespace}");
    if trigger.status.message.as_ref() == Some(&message) && !trigger.status.active {
        return;
    }
    let written = sless_core::store::modify_status::<Trigger, _>(store, &namespace, &name, |t| {
        t.status.active = false;
        t.status.message = Some(message.clone());
    })
    .await;
    if let Err(e) = written {
        tracing::debug!(trigger = %name, error = %e, "trigger status not written");
    }
}

async fn watch(shared: Arc<Shared>, mut changes: broadcast::Receiver<sless_core::store::Change>) {
    shared.resync().await;
    let mut resync = tokio::time::interval(shared.config.resync_every);
    resync.tick().await;
    loop {
        tokio::select! {
            change = changes.recv() => match change {
                Ok(change) => shared.poke(change.kind, &change.namespace, &change.name),
                Err(broadcast::error::RecvError::Lagged(_)) => shared.resync().await,
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = resync.tick() => shared.resync().await,
        }
    }
}
