//! One runtime process: spawned on a free loopback port, its output captured into the
//! log book, health-checked, stopped with SIGTERM (then SIGKILL).
//!
//! Readiness: the runtime writes a byte to descriptor [`READY_FD`] once it listens, so
//! the health check runs at that moment instead of on a poll schedule; a runtime that
//! never writes it (a Go binary built by an older sless) is found by polling.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::process::{Child, ChildStdin, Command};

use crate::namespaces::DEFAULT_DISK_MB;
use crate::sandbox::{Confinement, Guard, Sandbox};
use sless_core::logs::{LogBook, Stream};

/// What to start and whose logs its output belongs to.
pub struct Launch<'a> {
    pub program: &'a str,
    pub args: &'a [String],
    pub dir: &'a Path,
    /// Its HOME and TMPDIR, the one place it may write.
    pub scratch: &'a Path,
    pub memory_mb: u32,
    pub env: BTreeMap<String, String>,
    pub namespace: &'a str,
    pub name: &'a str,
    pub version: &'a str,
    /// Pre-start: the runtime loads and takes its port, then waits on stdin for the
    /// version directory under `dir` it is to serve ([`Instance::bind`]).
    pub standby: bool,
}

pub struct Instance {
    pub port: u16,
    child: Child,
    guard: Guard,
    /// Until read: where the runtime says it listens.
    ready: Option<pipe::Receiver>,
    /// A standby's stdin, until it is told its version directory.
    stdin: Option<ChildStdin>,
    /// The version its output is logged under (a standby learns it at bind).
    version: Arc<Mutex<String>>,
}

/// The descriptor the runtime finds its end of the ready pipe on (`SLESS_READY_FD`).
const READY_FD: i32 = 3;

/// Makes the write end the child's descriptor [`READY_FD`], kept across exec.
fn pass_ready_fd(command: &mut Command, write: &std::io::PipeWriter) {
    let fd = write.as_raw_fd();
    // SAFETY: dup2 and fcntl are async-signal-safe and touch only the child's table.
    unsafe {
        command.pre_exec(move || {
            let ok = if fd == READY_FD {
                libc::fcntl(fd, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, READY_FD)
            };
            if ok < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// A free loopback port: bind port 0, read it, let it go for the child to take.
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Forwards every line of a child's stream into the log book.
fn capture(
    reader: impl AsyncRead + Unpin + Send + 'static,
    logs: Arc<LogBook>,
    stream: Stream,
    namespace: String,
    name: String,
    version: Arc<Mutex<String>>,
) {
    tokio::spawn(async move {
        sless_core::logs::read_lines(reader, sless_core::logs::MAX_LINE_BYTES, |line| {
            let version = version.lock().unwrap_or_else(|e| e.into_inner()).clone();
            logs.push(&namespace, &name, stream, &version, &line);
        })
        .await;
    });
}

impl Instance {
    /// Starts the process in its sandbox; the error says why it could not.
    pub fn spawn(
        launch: &Launch<'_>,
        logs: &Arc<LogBook>,
        sandbox: &Sandbox,
    ) -> Result<Self, String> {
        let cannot =
            |e: std::io::Error| format!("cannot start {}: {e}; is it installed?", launch.program);
        let port = free_port().map_err(cannot)?;
        let mut command = Command::new(launch.program);
        die_with_parent(&mut command);
        let guard = sandbox
            .confine(
                &mut command,
                &Confinement {
                    read: &[launch.dir],
                    write: &[launch.scratch],
                    memory_mb: Some(launch.memory_mb),
                    port: Some(port),
                    disk_mb: Some(DEFAULT_DISK_MB),
                    // Until instances serve on a socket sless can reach from outside
                    // their namespace, they share the host's.
                    isolate_network: false,
                },
            )
            .map_err(|e| e.to_string())?;
        // Both ends close on exec; the child gets the write end as READY_FD.
        let (ready, ready_write) =
            std::io::pipe().map_err(|e| format!("cannot create the ready pipe: {e}"))?;
        pass_ready_fd(&mut command, &ready_write);
        if launch.standby {
            command.env("SLESS_STANDBY", "1").stdin(Stdio::piped());
        } else {
            command
                .env("SLESS_FUNCTION_DIR", launch.dir)
                .stdin(Stdio::null());
        }
        let mut child = command
            .args(launch.args)
            .current_dir(launch.dir)
            .envs(&launch.env)
            .env("PORT", port.to_string())
            .env("SLESS_HOST", "127.0.0.1")
            .env("SLESS_READY_FD", READY_FD.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(cannot)?;
        // Only the child holds the write end now: its exit ends the pipe.
        drop(ready_write);
        let child_stdin = child.stdin.take();
        let ready = pipe::Receiver::from_owned_fd(OwnedFd::from(ready)).ok();
        let version = Arc::new(Mutex::new(launch.version.to_string()));
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
                capture(
                    reader,
                    logs.clone(),
                    stream,
                    launch.namespace.to_string(),
                    launch.name.to_string(),
                    version.clone(),
                );
            }
        }
        Ok(Self {
            port,
            child,
            guard,
            ready,
            stdin: child_stdin,
            version,
        })
    }

    /// Tells a standby which version directory to serve; then [`Instance::wait_healthy`]
    /// as after a spawn.
    pub async fn bind(&mut self, dir: &Path, version: &str) -> Result<(), String> {
        let mut stdin = self.stdin.take().ok_or("not a standby process")?;
        *self.version.lock().unwrap_or_else(|e| e.into_inner()) = version.to_string();
        let line = format!("{}\n", dir.display());
        stdin
            .write_all(line.as_bytes())
            .await
            .map_err(|e| format!("the standby process is gone: {e}"))
    }

    pub fn authority(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Checks `GET /health` when the runtime says it listens (else on a backoff
    /// schedule) until it answers 200, the process exits, or time runs out.
    pub async fn wait_healthy(
        &mut self,
        client: &reqwest::Client,
        within: Duration,
    ) -> Result<(), String> {
        let url = format!("http://{}/health", self.authority());
        let deadline = tokio::time::Instant::now() + within;
        let mut delay = Duration::from_millis(10);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "the process exited with {status} before it was healthy"
                ));
            }
            if let Ok(response) = client.get(&url).send().await
                && response.status().is_success()
            {
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
                _ = ready_or_closed(self.ready.as_mut()) => self.ready = None,
            }
            delay = (delay * 2).min(Duration::from_millis(200));
        }
    }

    /// Resolves when the process exits, with why when it is known (out of memory).
    pub async fn exited(&mut self) -> String {
        match self.child.wait().await {
            Ok(status) => match self.guard.out_of_memory() {
                Some(reason) => format!("{reason} ({status})"),
                None => status.to_string(),
            },
            Err(e) => e.to_string(),
        }
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
