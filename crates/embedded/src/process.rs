//! One runtime process: spawned with a listening Unix socket of its own ([`crate::socket`])
//! as descriptor [`LISTEN_FD`], its output captured into the log book, health-checked,
//! stopped with SIGTERM (then SIGKILL).
//!
//! Readiness: the runtime writes a byte to descriptor [`READY_FD`] once it listens, so
//! the health check runs at that moment instead of on a poll schedule; a runtime that
//! never writes it (a Go binary built by an older sless) is found by polling. A standby
//! writes it once it has loaded and waits for its function ([`Instance::is_loaded`]).

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::net::unix::pipe;
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::watch;

use crate::cgroup::Cgroup;
use crate::egress::{self, Egress, ProxyLimits};
use crate::sandbox::{BoundLimits, Confinement, Guard, Sandbox};
use crate::scratch;
use crate::socket::{SocketDir, SocketFile};
use crate::standby::Slot;
use sless_core::data_dir::create_private_dir;
use sless_core::logs::{LogBook, Stream};

/// What to start: a function's instance, or a standby for any function of a runtime.
pub struct Launch<'a> {
    pub program: &'a str,
    pub args: &'a [String],
    /// Where its listening socket is made.
    pub sockets: &'a SocketDir,
    pub target: Target<'a>,
}

pub enum Target<'a> {
    /// Serves this function's version from the start.
    Serve(&'a Function<'a>),
    /// Pre-start: the runtime loads and takes its socket, confined to the slot's
    /// directories with no function's limits, env or egress, then waits on stdin to be
    /// bound to a function ([`Instance::bind`]).
    Standby(Slot),
}

/// A function's version as an instance runs it, and whose logs its output belongs to.
pub struct Function<'a> {
    pub dir: &'a Path,
    /// Its HOME and TMPDIR, the one place it may write.
    pub scratch: &'a Path,
    /// The size limit of `scratch` ([`crate::scratch`]).
    pub disk_mb: u32,
    pub memory_mb: u32,
    pub cpu_millis: u32,
    /// Where its code may connect, through its egress proxy.
    pub egress: Egress,
    pub env: BTreeMap<String, String>,
    pub namespace: &'a str,
    pub name: &'a str,
    pub version: &'a str,
}

impl Function<'_> {
    fn owner(&self) -> Owner {
        Owner {
            namespace: self.namespace.to_string(),
            name: self.name.to_string(),
            version: self.version.to_string(),
        }
    }

    fn policy(&self, logs: &Arc<LogBook>, owner: &Arc<Mutex<Owner>>) -> egress::Policy {
        egress::Policy {
            owner: format!("{}/{}", self.namespace, self.name),
            egress: self.egress.clone(),
            log: egress::log_book(logs.clone(), owner.clone()),
            limits: ProxyLimits::default(),
        }
    }
}

/// Whose process it is: its output, egress refusals and pids-limit lines go to this
/// workload's log under this version (a standby's is set when it is bound).
#[derive(Clone, Debug, Default)]
pub struct Owner {
    pub namespace: String,
    pub name: String,
    pub version: String,
}

impl Owner {
    fn push(shared: &Mutex<Owner>, logs: &LogBook, stream: Stream, line: &str, raw: bool) {
        let owner = shared.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if raw {
            logs.push_output(&owner.namespace, &owner.name, stream, &owner.version, line);
        } else {
            logs.push(&owner.namespace, &owner.name, stream, &owner.version, line);
        }
    }
}

pub struct Instance {
    socket: SocketFile,
    child: Child,
    guard: Guard,
    /// Until read: where the runtime says it listens.
    ready: Option<pipe::Receiver>,
    /// A standby's stdin, until it is bound.
    stdin: Option<ChildStdin>,
    /// A standby's directories, which its function's are mounted on when it is bound.
    slot: Option<Slot>,
    /// A standby's ready byte: true once it has loaded.
    loaded: Option<watch::Receiver<bool>>,
    /// When the spawn began, for the debug log of how long each step took.
    spawned_at: std::time::Instant,
    owner: Arc<Mutex<Owner>>,
    /// Its scratch directory and the watch on its size (a standby's from its bind).
    scratch: Option<(PathBuf, scratch::Watch)>,
}

/// Files an instance's scratch may hold ([`scratch::Bound`]).
const INSTANCE_MAX_FILES: u64 = 20_000;

/// The descriptor the runtime finds its end of the ready pipe on (`SLESS_READY_FD`).
const READY_FD: RawFd = 3;
/// The descriptor the runtime finds its listening socket on (`SLESS_LISTEN_FD`).
const LISTEN_FD: RawFd = 4;
/// Descriptors at or above this are free in the child while the others are placed.
const SPARE_FD: RawFd = 16;

/// Gives the child each `(ours, theirs)` descriptor under its number `theirs`, kept
/// across exec (ours are close-on-exec). Each goes to a spare number first, so one
/// placed cannot overwrite another not placed yet.
fn pass_fds<const N: usize>(command: &mut Command, fds: [(RawFd, RawFd); N]) {
    // SAFETY: fcntl and dup2 are async-signal-safe and touch only the child's table.
    unsafe {
        command.pre_exec(move || {
            let mut spare = [0; N];
            for (spare, (ours, _)) in spare.iter_mut().zip(fds) {
                *spare = libc::fcntl(ours, libc::F_DUPFD_CLOEXEC, SPARE_FD);
                if *spare < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            for (spare, (_, theirs)) in spare.into_iter().zip(fds) {
                if libc::dup2(spare, theirs) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// Forwards every line of a child's stream into the log book.
fn capture(
    reader: impl AsyncRead + Unpin + Send + 'static,
    logs: Arc<LogBook>,
    stream: Stream,
    owner: Arc<Mutex<Owner>>,
) {
    tokio::spawn(async move {
        sless_core::logs::read_lines(reader, sless_core::logs::MAX_LINE_BYTES, |line| {
            // Each runtime tags a line with the call that printed it.
            Owner::push(&owner, &logs, stream, &line, true);
        })
        .await;
    });
}

impl Instance {
    /// Starts the process in its sandbox; the error says why it could not.
    pub fn spawn(
        launch: Launch<'_>,
        logs: &Arc<LogBook>,
        sandbox: &Sandbox,
    ) -> Result<Self, String> {
        // The first line is the cause callers see; the program's path (a detail of this
        // machine) only follows on the next line, for the log and the status.
        let cannot = |e: std::io::Error| {
            let cause = if e.raw_os_error() == Some(libc::E2BIG) {
                "cannot start the runtime: its environment is too large; make env_vars smaller"
                    .to_string()
            } else {
                format!("cannot start the runtime: {e}")
            };
            format!("{cause}\n{}: {e}; is it installed?", launch.program)
        };
        let spawned_at = std::time::Instant::now();
        let (listener, socket) = launch
            .sockets
            .listen()
            .map_err(|e| format!("cannot create the instance's socket: {e}"))?;
        let owner = Arc::new(Mutex::new(match &launch.target {
            Target::Serve(function) => function.owner(),
            Target::Standby(_) => Owner::default(),
        }));
        let mut command = Command::new(launch.program);
        die_with_parent(&mut command);
        let confined = match &launch.target {
            Target::Serve(function) => {
                limit_file_size(&mut command, function.disk_mb);
                sandbox.confine(
                    &mut command,
                    &Confinement {
                        read: &[function.dir],
                        write: &[function.scratch],
                        memory_mb: Some(function.memory_mb),
                        cpu_millis: Some(function.cpu_millis),
                        // An instance's scratch stays the function's directory on disk,
                        // kept across restarts (event handlers keep state there): it is
                        // measured ([`scratch::Watch`]), a tmpfs is a job run's.
                        disk_mb: None,
                        egress: Some(function.policy(logs, &owner)),
                    },
                )
            }
            Target::Standby(slot) => {
                // Lowered to the function's `disk_mb` when bound.
                limit_file_size(&mut command, u32::MAX);
                // Its function's code and scratch are mounted beneath these when it is
                // bound ([`crate::standby`]). Its writable directory is a tmpfs of 1 MB:
                // nothing it writes outside the scratch reaches the disk.
                sandbox.confine(
                    &mut command,
                    &Confinement {
                        read: &[&slot.readable()],
                        write: &[&slot.writable()],
                        memory_mb: None,
                        cpu_millis: None,
                        disk_mb: Some(1),
                        egress: None,
                    },
                )
            }
        };
        let mut guard = confined.map_err(|e| e.to_string())?;
        let confined = spawned_at.elapsed();
        // Both ends close on exec; the child gets the write end as READY_FD.
        let (ready, ready_write) =
            std::io::pipe().map_err(|e| format!("cannot create the ready pipe: {e}"))?;
        pass_fds(
            &mut command,
            [
                (ready_write.as_raw_fd(), READY_FD),
                (listener.as_raw_fd(), LISTEN_FD),
            ],
        );
        let dir = match &launch.target {
            Target::Serve(function) => {
                command
                    .env("SLESS_FUNCTION_DIR", function.dir)
                    .envs(&function.env)
                    .stdin(Stdio::null());
                function.dir.to_path_buf()
            }
            Target::Standby(slot) => {
                command.env("SLESS_STANDBY", "1").stdin(Stdio::piped());
                slot.code()
            }
        };
        let mut child = command
            .args(launch.args)
            .current_dir(dir)
            .env("SLESS_LISTEN_FD", LISTEN_FD.to_string())
            .env("SLESS_READY_FD", READY_FD.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(cannot)?;
        let executed = spawned_at.elapsed();
        guard
            .spawned()
            .map_err(|e| format!("cannot start the instance's egress proxy: {e}"))?;
        tracing::debug!(
            standby = matches!(launch.target, Target::Standby(_)),
            confine_us = confined.as_micros() as u64,
            fork_exec_us = (executed - confined).as_micros() as u64,
            proxy_us = (spawned_at.elapsed() - executed).as_micros() as u64,
            "spawned a runtime process"
        );
        // Only the child holds the write end now: its exit ends the pipe. And the only
        // listener: calls to an instance that exited fail at once, not in a backlog.
        drop(ready_write);
        drop(listener);
        let child_stdin = child.stdin.take();
        let ready = pipe::Receiver::from_owned_fd(OwnedFd::from(ready)).ok();
        // A standby's byte says it loaded; bound, its first health check waits in the
        // socket's backlog until it serves.
        let (ready, loaded) = match &launch.target {
            Target::Standby(_) => (None, ready.map(watch_loaded)),
            Target::Serve(_) => (ready, None),
        };
        for (stream, reader) in [
            (
                Stream::Stdout,
                child
                    .stdout
                    .take()
                    .map(|r| Box::new(r) as Box<dyn AsyncRead + Unpin + Send>),
            ),
            (
                Stream::Stderr,
                child
                    .stderr
                    .take()
                    .map(|r| Box::new(r) as Box<dyn AsyncRead + Unpin + Send>),
            ),
        ] {
            if let Some(reader) = reader {
                capture(reader, logs.clone(), stream, owner.clone());
            }
        }
        if let Some(cgroup) = guard.pids_watch() {
            watch_pids(cgroup, logs.clone(), owner.clone());
        }
        let mut instance = Self {
            socket,
            child,
            guard,
            ready,
            stdin: child_stdin,
            slot: None,
            loaded,
            spawned_at,
            owner,
            scratch: None,
        };
        match launch.target {
            Target::Serve(function) => instance.watch_scratch(function),
            Target::Standby(slot) => instance.slot = Some(slot),
        }
        Ok(instance)
    }

    fn watch_scratch(&mut self, function: &Function<'_>) {
        let watch = scratch::Watch::start(
            function.scratch.to_path_buf(),
            scratch::Bound {
                mb: function.disk_mb,
                name: "disk_mb",
                max_files: INSTANCE_MAX_FILES,
            },
            self.guard.killer(self.child.id().unwrap_or_default()),
        );
        self.scratch = Some((function.scratch.to_path_buf(), watch));
    }

    /// Makes a standby the instance of `function`: its code and scratch mounted on its
    /// slot's directories, its limits and egress policy set, its logs its function's,
    /// then its env and directory sent on stdin; then [`Instance::wait_healthy`] as
    /// after a spawn.
    pub async fn bind(
        &mut self,
        function: &Function<'_>,
        sandbox: &Sandbox,
        logs: &Arc<LogBook>,
    ) -> Result<(), String> {
        let (Some(slot), Some(mut stdin)) = (self.slot.as_ref(), self.stdin.take()) else {
            return Err("not a standby process".into());
        };
        // Not reaped before this (only `has_exited` and `exited` reap): even a standby
        // that died meanwhile keeps its pid, so the helper cannot join another's.
        let pid = self.child.id().ok_or("the standby process is gone")?;
        create_private_dir(function.scratch)
            .map_err(|e| format!("cannot create the scratch directory: {e}"))?;
        let (code, home) = (slot.code(), slot.home());
        sandbox
            .bind_into(pid, &[(function.dir, &code), (function.scratch, &home)])
            .map_err(|e| format!("cannot mount the function into the standby: {e}"))?;
        let policy = function.policy(logs, &self.owner);
        let limits = BoundLimits {
            memory_mb: function.memory_mb,
            cpu_millis: function.cpu_millis,
            disk_mb: function.disk_mb,
        };
        self.guard
            .bind(pid, &limits, policy)
            .map_err(|e| format!("cannot set the standby's limits: {e}"))?;
        *self.owner.lock().unwrap_or_else(|e| e.into_inner()) = function.owner();
        self.watch_scratch(function);
        let mut env = function.env.clone();
        for key in ["HOME", "TMPDIR"] {
            env.insert(key.into(), home.display().to_string());
        }
        env.extend(
            egress::proxy_variables(&function.egress)
                .into_iter()
                .map(|(k, v)| (k.to_string(), v)),
        );
        let message = serde_json::json!({"dir": code, "env": env});
        stdin
            .write_all(format!("{message}\n").as_bytes())
            .await
            .map_err(|e| format!("the standby process is gone: {e}"))
    }

    /// Whether a standby has loaded and waits for its function.
    pub fn is_loaded(&self) -> bool {
        self.loaded.as_ref().is_some_and(|loaded| *loaded.borrow())
    }

    /// Where it serves.
    pub fn socket(&self) -> &Arc<Path> {
        self.socket.path()
    }

    /// Checks `GET /health` when the runtime says it listens (else on a backoff
    /// schedule) until it answers 200, the process exits, or time runs out.
    pub async fn wait_healthy(&mut self, within: Duration) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + within;
        let mut delay = Duration::from_millis(10);
        let waited = std::time::Instant::now();
        let mut ready_at = None;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "the process exited with {status} before it was healthy"
                ));
            }
            let check = tokio::time::timeout_at(deadline, healthy(self.socket.path()));
            if check.await == Ok(true) {
                tracing::debug!(
                    since_spawn_us = self.spawned_at.elapsed().as_micros() as u64,
                    waited_us = waited.elapsed().as_micros() as u64,
                    ready_us = ready_at.map(|d: Duration| d.as_micros() as u64),
                    "healthy"
                );
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "no healthy answer on /health within {} s",
                    within.as_secs()
                ));
            }
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                // A byte (it listens) or the end of the pipe (it exited or closed it).
                _ = ready_or_closed(self.ready.as_mut()) => {
                    self.ready = None;
                    ready_at = Some(waited.elapsed());
                }
            }
            delay = (delay * 2).min(Duration::from_millis(200));
        }
    }

    /// Resolves when the process exits, with why when it is known (out of memory, the
    /// pids limit, its scratch over `disk_mb`: then the scratch is emptied, as Kubernetes
    /// gives an evicted pod a new `emptyDir`).
    pub async fn exited(&mut self) -> String {
        let status = match self.child.wait().await {
            Ok(status) => status,
            Err(e) => return e.to_string(),
        };
        let over = self
            .scratch
            .as_ref()
            .and_then(|(dir, watch)| Some((dir.clone(), watch.over()?)));
        if let Some((dir, reason)) = over {
            self.guard.kill_all();
            let cleared = tokio::task::spawn_blocking(move || scratch::clear(&dir)).await;
            let emptied = match cleared {
                Ok(Ok(())) => "it was killed and its scratch emptied",
                _ => "it was killed; its scratch could not be emptied",
            };
            return format!("{reason}; {emptied} ({status})");
        }
        match self
            .guard
            .out_of_memory()
            .or_else(|| self.guard.pids_limit())
        {
            Some(reason) => format!("{reason} ({status})"),
            None => status.to_string(),
        }
    }

    /// Where a standby sees the code it was bound to (`None`: not a standby).
    pub fn bound_dir(&self) -> Option<PathBuf> {
        self.slot.as_ref().map(Slot::code)
    }

    /// Whether the process has ended (a standby that died waiting is not taken).
    pub fn has_exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// SIGTERM (the runtimes finish in-flight requests), SIGKILL after `grace`.
    pub async fn stop(mut self, grace: Duration) {
        if let Some(pid) = self.child.id() {
            terminate(pid);
            if tokio::time::timeout(grace, self.child.wait()).await.is_ok() {
                return;
            }
        }
        let _ = self.child.kill().await;
    }
}

/// Whether the runtime on the socket at `path` answers `GET /health` with a success.
/// A connection waits in the socket's backlog until the runtime serves.
async fn healthy(path: &Path) -> bool {
    let Ok(stream) = UnixStream::connect(path).await else {
        return false;
    };
    let Ok((mut sender, connection)) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
    else {
        return false;
    };
    let Ok(request) = hyper::Request::get("/health")
        .header(hyper::header::HOST, "localhost")
        .body(Empty::<Bytes>::new())
    else {
        return false;
    };
    tokio::select! {
        answer = sender.send_request(request) => {
            answer.is_ok_and(|a| a.status().is_success())
        }
        _ = connection => false,
    }
}

/// Logs the pids limit into the workload's log when it refuses forks (checked each
/// second, a line per second at most) for as long as the process's cgroup lives.
fn watch_pids(cgroup: Weak<Cgroup>, logs: Arc<LogBook>, owner: Arc<Mutex<Owner>>) {
    tokio::spawn(async move {
        let mut seen = 0;
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let Some(cgroup) = cgroup.upgrade() else {
                return;
            };
            let refused = cgroup.pids_refused();
            if refused > seen {
                seen = refused;
                if let Some(reason) = cgroup.pids_reason() {
                    let line = format!("[sless] {reason}");
                    Owner::push(&owner, &logs, Stream::Stderr, &line, false);
                }
            }
        }
    });
}

/// True on a standby's first byte.
fn watch_loaded(mut pipe: pipe::Receiver) -> watch::Receiver<bool> {
    let (sender, receiver) = watch::channel(false);
    tokio::spawn(async move {
        if pipe.read(&mut [0u8; 1]).await.is_ok_and(|n| n == 1) {
            let _ = sender.send(true);
        }
    });
    receiver
}

async fn ready_or_closed(ready: Option<&mut pipe::Receiver>) {
    match ready {
        Some(ready) => {
            let _ = ready.read(&mut [0u8; 1]).await;
        }
        None => std::future::pending().await,
    }
}

/// Children must not outlive a `sless` that was killed (SIGKILL runs no cleanup): the
/// kernel sends them SIGKILL when their parent dies.
/// No file it writes may grow past `limit_mb` (a write fails with EFBIG rather than the
/// process being killed by SIGXFSZ): one file alone cannot pass the scratch limit.
pub(crate) fn limit_file_size(command: &mut Command, limit_mb: u32) {
    let bytes = u64::from(limit_mb) << 20;
    // SAFETY: setrlimit and signal are async-signal-safe and affect only the child.
    unsafe {
        command.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            Ok(())
        });
    }
}

pub fn die_with_parent(command: &mut Command) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl is async-signal-safe and only affects the child being spawned.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = command;
}

#[cfg(unix)]
fn terminate(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        // SAFETY: kill(2) on a child we spawned; it touches no memory of ours.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
    }
}

#[cfg(not(unix))]
fn terminate(_pid: u32) {}
