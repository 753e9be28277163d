//! The runtime wrappers, shipped inside the binary and written under the data dir so
//! embedded mode needs nothing but the interpreters on the machine.

use std::path::{Path, PathBuf};

use sless_core::model::Runtime;

const PYTHON_WRAPPER: &str = include_str!("../../../runtimes/python3.11/sless_runtime.py");
const NODE_WRAPPER: &str = include_str!("../../../runtimes/nodejs20/sless_runtime.js");
const GO_MAIN: &str = include_str!("../../../runtimes/go1.23/main.go");
const GO_BUILD: &str = include_str!("../../../runtimes/go1.23/build.sh");

/// Where a built Go function's binary lives inside its build directory.
pub const GO_BINARY: &str = ".sless-bin/function";

/// Interpreters and compilers found on the machine.
#[derive(Clone, Debug)]
pub struct Toolchain {
    pub python: String,
    pub node: String,
    pub npm: String,
    pub go: String,
}

impl Default for Toolchain {
    fn default() -> Self {
        Self {
            python: "python3".into(),
            node: "node".into(),
            npm: "npm".into(),
            go: "go".into(),
        }
    }
}

impl Toolchain {
    /// `python` as the interpreter itself: a version manager's shim (pyenv) is a
    /// script that writes beside itself after `pip install`, which the sandbox denies.
    pub fn resolved(mut self) -> Self {
        let probe = std::process::Command::new(&self.python)
            .args(["-c", "import sys; print(sys.executable)"])
            .output();
        if let Ok(out) = probe
            && out.status.success()
        {
            let executable = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if !executable.is_empty() {
                self.python = executable;
            }
        }
        self
    }
}

/// The wrappers on disk.
#[derive(Clone, Debug)]
pub struct Wrappers {
    root: PathBuf,
}

impl Wrappers {
    /// Writes (refreshes) the wrappers under `root`.
    pub fn install(root: &Path) -> std::io::Result<Self> {
        let files: [(&str, &str, u32); 4] = [
            ("python3.11/sless_runtime.py", PYTHON_WRAPPER, 0o644),
            ("nodejs20/sless_runtime.js", NODE_WRAPPER, 0o644),
            ("go1.23/main.go", GO_MAIN, 0o644),
            ("go1.23/build.sh", GO_BUILD, 0o755),
        ];
        sless_core::data_dir::own_private_dir(root)?;
        for (path, content, mode) in files {
            let target = root.join(path);
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&target, content)?;
            set_mode(&target, mode)?;
        }
        Ok(Self {
            root: root.to_path_buf(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn python(&self) -> PathBuf {
        self.root.join("python3.11/sless_runtime.py")
    }

    pub fn node(&self) -> PathBuf {
        self.root.join("nodejs20/sless_runtime.js")
    }

    pub fn go_build(&self) -> PathBuf {
        self.root.join("go1.23/build.sh")
    }

    /// Program and arguments that serve (or, in job mode, run) a built function.
    pub fn command(
        &self,
        toolchain: &Toolchain,
        runtime: Runtime,
        dir: &Path,
    ) -> (String, Vec<String>) {
        match runtime {
            Runtime::Python311 => (
                toolchain.python.clone(),
                vec!["-u".into(), self.python().display().to_string()],
            ),
            Runtime::Nodejs20 => (
                toolchain.node.clone(),
                vec![self.node().display().to_string()],
            ),
            Runtime::Go123 => (dir.join(GO_BINARY).display().to_string(), vec![]),
        }
    }
}

#[cfg(unix)]
fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

#[cfg(not(unix))]
fn set_mode(_path: &Path, _mode: u32) -> std::io::Result<()> {
    Ok(())
}
