//! Embedded builds: unpack an upload into a versioned directory and install its
//! dependencies with the machine's tools, keeping the whole log.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use crate::egress::{self, Egress, ProxyLimits, RefusalLog};
use crate::runtimes::{Toolchain, Wrappers};
use crate::sandbox::{Confinement, Sandbox};
use crate::scratch;
use sless_api::keys::{is_version, version_of_listed};
use sless_core::logs::last_bytes;
use sless_core::model::{DEFAULT_CPU_MILLIS, Runtime};
use sless_core::s3::ObjectStore;
use sless_core::upload::{
    UploadError, UploadLimits, check_zip, unpack, upload_prefixes, version_of, zip_key_for_context,
};

/// A build that did not finish: its cause on the first line, then the log tail.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BuildError(pub String);

/// Dependency installs (pip, npm, go) get this long before they are killed.
const STEP_TIMEOUT: Duration = Duration::from_secs(600);
/// What a dependency install may use: room for the heaviest usual packages (a Go
/// build, numpy from source), not for a hostile `setup.py` to take the machine.
const INSTALL_MEMORY_MB: u32 = 2048;
const INSTALL_DISK_MB: u32 = 4096;
/// A large `node_modules` holds some 100,000 files.
const INSTALL_MAX_FILES: u64 = 1_000_000;
/// How much of the log a failure message carries.
const TAIL_BYTES: usize = 2000;

pub struct Builder {
    pub objects: ObjectStore,
    pub wrappers: Wrappers,
    /// Confines dependency installs here, and every function process elsewhere.
    pub sandbox: Arc<Sandbox>,
    pub toolchain: Toolchain,
    pub limits: UploadLimits,
}

pub fn log_path(dir: &Path) -> PathBuf {
    dir.with_extension("log")
}

impl Builder {
    /// Builds the upload behind `context_key` into `<root>/<version>` unless that
    /// directory already holds a finished build. Returns the directory.
    pub async fn build(
        &self,
        root: &Path,
        context_key: &str,
        runtime: Runtime,
    ) -> Result<PathBuf, BuildError> {
        let dir = root.join(version_of(context_key));
        if dir.is_dir() {
            return Ok(dir);
        }
        let staging = root.join(format!(".{}.staging", version_of(context_key)));
        let log_file = log_path(&dir);
        let mut log = Log::create(&log_file, &self.sandbox, &staging).await?;
        let result = self
            .build_into(&staging, context_key, runtime, &mut log)
            .await;
        match result {
            Ok(()) => {
                log.line("build succeeded").await;
                tokio::fs::rename(&staging, &dir)
                    .await
                    .map_err(|e| BuildError(format!("moving the build into place: {e}")))?;
                Ok(dir)
            }
            Err(e) => {
                log.line(&format!("build failed: {e}")).await;
                let _ = tokio::fs::remove_dir_all(&staging).await;
                let text = tokio::fs::read_to_string(&log_file)
                    .await
                    .unwrap_or_default();
                // The cause first: the line `/fn` callers, describe and deploy show.
                let cause = sless_api::text::error_line(&text).unwrap_or_else(|| {
                    sless_api::text::first_line(last_output_line(&text).unwrap_or(&e.0)).to_string()
                });
                Err(BuildError(format!(
                    "{cause}\n{}",
                    last_bytes(&text, TAIL_BYTES)
                )))
            }
        }
    }

    /// Removes the builds under `root` of versions whose upload is gone (pruned past
    /// `--keep-versions`), never those of `in_use`. Best effort.
    pub async fn prune(&self, root: &Path, namespace: &str, key_name: &str, in_use: &[&str]) {
        let [zips, ..] = upload_prefixes(namespace, key_name);
        let kept = match self.objects.list(&zips).await {
            Ok(keys) => keys,
            Err(e) => {
                tracing::warn!(%namespace, name = %key_name, error = %e, "cannot list uploads to prune builds");
                return;
            }
        };
        let kept: Vec<&str> = kept.iter().filter_map(|k| version_of_listed(k)).collect();
        let Ok(mut entries) = tokio::fs::read_dir(root).await else {
            return;
        };
        while let Ok(Some(entry)) = entries.next_entry().await {
            let path = entry.path();
            let Some(version) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if !is_version(version) || kept.contains(&version) || in_use.contains(&version) {
                continue;
            }
            let removed = tokio::fs::remove_dir_all(&path).await;
            let _ = tokio::fs::remove_file(log_path(&path)).await;
            match removed {
                Ok(()) => {
                    tracing::info!(path = %path.display(), "removed the build of a pruned version")
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot remove an old build")
                }
            }
        }
    }

    async fn build_into(
        &self,
        staging: &Path,
        context_key: &str,
        runtime: Runtime,
        log: &mut Log<'_>,
    ) -> Result<(), BuildError> {
        let _ = tokio::fs::remove_dir_all(staging).await;
        let zip_key = zip_key_for_context(context_key)
            .ok_or_else(|| BuildError(format!("unexpected s3 key {context_key:?}")))?;
        log.line(&format!("fetching {zip_key}")).await;
        // Streamed to a file beside the staging folder: never whole in memory.
        let zip_path = staging.with_extension("zip");
        let fetched = self.fetch_zip(&zip_key, &zip_path).await;
        let limits = self.limits.clone();
        let target = staging.to_path_buf();
        let unpacked = match fetched {
            Ok(()) => {
                let zip_file = zip_path.clone();
                tokio::task::spawn_blocking(move || {
                    let zip = std::fs::File::open(&zip_file)
                        .map_err(|e| UploadError::io("reading the fetched upload", e))?;
                    let mut files = check_zip(std::io::BufReader::new(zip), &limits)?;
                    unpack(&mut files, &target)?;
                    Ok::<_, UploadError>(files.files().len())
                })
                .await
                .map_err(|e| BuildError(format!("unpacking: {e}")))
                .and_then(|r| r.map_err(|e| BuildError(format!("unpacking: {e}"))))
            }
            Err(e) => Err(e),
        };
        let _ = tokio::fs::remove_file(&zip_path).await;
        let count = unpacked?;
        log.line(&format!("unpacked {count} files")).await;

        let descriptor = runtime.descriptor();
        let has_dependencies = staging.join(descriptor.dependency_file).is_file();
        let mut ran = false;
        for step in descriptor
            .build_steps
            .iter()
            .filter(|s| s.applies(has_dependencies))
        {
            let (program, args) =
                self.wrappers
                    .resolve(&self.toolchain, runtime, &step.run, staging);
            log.run(&program, &args, staging).await?;
            ran = true;
        }
        if !ran {
            log.line("no dependency file; nothing to install").await;
        }
        Ok(())
    }

    async fn fetch_zip(&self, zip_key: &str, path: &Path) -> Result<(), BuildError> {
        let mut file = tokio::fs::File::create(path)
            .await
            .map_err(|e| BuildError(format!("creating {}: {e}", path.display())))?;
        let found = self
            .objects
            .get_into(zip_key, &mut file)
            .await
            .map_err(|e| BuildError(format!("fetching the upload: {e}")))?;
        if !found {
            return Err(BuildError(format!(
                "the upload {zip_key} is missing; upload again"
            )));
        }
        tokio::io::AsyncWriteExt::flush(&mut file)
            .await
            .map_err(|e| BuildError(format!("writing {}: {e}", path.display())))
    }
}

/// The build log file; every step's output goes in it. Steps run confined to the
/// staging directory and the namespace's build home: caches (Go's build cache, npm's)
/// kept between its builds and shared with no other tenant.
struct Log<'a> {
    file: tokio::fs::File,
    path: PathBuf,
    sandbox: &'a Sandbox,
    staging: &'a Path,
    home: PathBuf,
}

impl<'a> Log<'a> {
    async fn create(
        path: &Path,
        sandbox: &'a Sandbox,
        staging: &'a Path,
    ) -> Result<Self, BuildError> {
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| BuildError(format!("creating {}: {e}", parent.display())))?;
        }
        let file = tokio::fs::File::create(path)
            .await
            .map_err(|e| BuildError(format!("creating {}: {e}", path.display())))?;
        Ok(Self {
            file,
            path: path.to_path_buf(),
            sandbox,
            staging,
            home: build_home(staging),
        })
    }

    async fn line(&mut self, text: &str) {
        let stamp = chrono::Utc::now().format("%H:%M:%S");
        if let Err(e) = self
            .file
            .write_all(format!("[{stamp}] {text}\n").as_bytes())
            .await
        {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot write build log");
        }
    }

    /// Runs a step with its output appended to the log.
    async fn run(&mut self, program: &str, args: &[String], dir: &Path) -> Result<(), BuildError> {
        self.line(&format!("$ {program} {}", args.join(" "))).await;
        let _ = self.file.flush().await;
        let out = self
            .file
            .try_clone()
            .await
            .map_err(|e| BuildError(e.to_string()))?
            .into_std()
            .await;
        let err = out.try_clone().map_err(|e| BuildError(e.to_string()))?;
        let mut command = Command::new(program);
        crate::process::die_with_parent(&mut command);
        crate::process::limit_file_size(&mut command, INSTALL_DISK_MB);
        let mut guard = self
            .sandbox
            .confine(
                &mut command,
                &Confinement {
                    read: &[],
                    write: &[&self.home, self.staging],
                    memory_mb: Some(INSTALL_MEMORY_MB),
                    // One core: a hostile setup.py cannot take the machine's CPU.
                    cpu_millis: Some(DEFAULT_CPU_MILLIS),
                    disk_mb: None,
                    // The package registries are public addresses; a refusal is
                    // written into the build log.
                    egress: Some(egress::Policy {
                        owner: "the dependency install".into(),
                        egress: Egress::Internet,
                        log: build_log_line(&self.path),
                        limits: ProxyLimits::default(),
                    }),
                },
            )
            .map_err(|e| BuildError(e.to_string()))?;
        let mut child = command
            .envs(Sandbox::build_variables())
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| BuildError(format!("cannot run {program}: {e}; is it installed?")))?;
        guard
            .spawned()
            .map_err(|e| BuildError(format!("cannot start the install's egress proxy: {e}")))?;
        let disk = scratch::Watch::start(
            self.staging.to_path_buf(),
            scratch::Bound {
                mb: INSTALL_DISK_MB,
                name: "the install's disk limit",
                max_files: INSTALL_MAX_FILES,
            },
            guard.killer(child.id().unwrap_or_default()),
        );
        let status = match tokio::time::timeout(STEP_TIMEOUT, child.wait()).await {
            Ok(status) => status.map_err(|e| BuildError(e.to_string()))?,
            Err(_) => {
                let _ = child.kill().await;
                return Err(BuildError(format!(
                    "{program} did not finish within {} s",
                    STEP_TIMEOUT.as_secs()
                )));
            }
        };
        let limit = disk
            .over()
            .or_else(|| guard.out_of_memory())
            .or_else(|| guard.pids_limit());
        match (status.success(), limit) {
            (true, _) => Ok(()),
            (false, Some(reason)) => Err(BuildError(format!(
                "{program} exited with {status}: {reason}"
            ))),
            (false, None) => Err(BuildError(format!("{program} exited with {status}"))),
        }
    }
}

/// Egress refusals of a dependency install, appended to its build log.
fn build_log_line(path: &Path) -> RefusalLog {
    let path = path.to_path_buf();
    Arc::new(move |line: &str| {
        use std::io::Write;
        let appended = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut log| writeln!(log, "{line}"));
        if let Err(e) = appended {
            tracing::warn!(path = %path.display(), error = %e, %line, "cannot write build log");
        }
    })
}

/// The last line a build step printed (sless's own lines start with a `[HH:MM:SS]`
/// stamp): the compiler's error, when no line names one (Go's `undefined: x`).
fn last_output_line(log: &str) -> Option<&str> {
    let stamped = |line: &str| {
        let b = line.as_bytes();
        b.len() > 10 && b[0] == b'[' && b[9] == b']' && b[3] == b':' && b[6] == b':'
    };
    log.lines()
        .rev()
        .map(str::trim)
        .find(|line| !line.is_empty() && !stamped(line))
}

/// `builds/<ns>/.home` for `builds/<ns>/<kind>-<name>/.<version>.staging`.
fn build_home(staging: &Path) -> PathBuf {
    match staging.parent().and_then(Path::parent) {
        Some(namespace) => namespace.join(".home"),
        None => staging.with_extension("home"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cause_of_a_failed_build_is_the_last_line_a_step_printed() {
        let log = "[10:00:00] $ python3 -m pip install -r requirements.txt\n\
                   Collecting nosuch==9\n\
                   ERROR: No matching distribution found for nosuch==9\n\n\
                   [10:00:02] build failed: python3 exited with exit status: 1\n";
        assert_eq!(
            last_output_line(log),
            Some("ERROR: No matching distribution found for nosuch==9")
        );
        assert_eq!(last_output_line("[10:00:00] build failed: x\n"), None);
    }

    #[test]
    fn builds_share_a_home_per_namespace() {
        assert_eq!(
            build_home(Path::new("/d/builds/ns/function-f/.v.staging")),
            Path::new("/d/builds/ns/.home")
        );
    }
}
