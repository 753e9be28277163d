//! One runtime process: spawned on a free loopback port, its output captured into the
//! log book, health-checked, stopped with SIGTERM (then SIGKILL).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncRead;
use tokio::process::{Child, Command};

use super::sandbox::{Confinement, Guard, Sandbox};
use crate::logs::{LogBook, Stream};

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
}

pub struct Instance {
    pub port: u16,
    child: Child,
    guard: Guard,
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
    version: String,
) {
    tokio::spawn(async move {
        crate::logs::read_lines(reader, crate::logs::MAX_LINE_BYTES, |line| {
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
                },
            )
            .map_err(|e| e.to_string())?;
        let mut child = command
            .args(launch.args)
            .current_dir(launch.dir)
            .envs(&launch.env)
            .env("PORT", port.to_string())
            .env("SLESS_HOST", "127.0.0.1")
            .env("SLESS_FUNCTION_DIR", launch.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(cannot)?;
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
                    launch.version.to_string(),
                );
            }
        }
        Ok(Self { port, child, guard })
    }

    pub fn authority(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Polls `GET /health` until it answers 200, the process exits, or time runs out.
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
            tokio::time::sleep(delay).await;
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
