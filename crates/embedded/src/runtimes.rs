//! The runtime wrappers, shipped inside the binary and written under the data dir so
//! embedded mode needs nothing but the interpreters on the machine.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sless_api::runtime::{LocalCommand, Word};
use sless_core::model::Runtime;

/// The files of each `runtimes/<name>/` that embedded mode runs, with their modes (the
/// folder's Dockerfile builds the Kubernetes base image instead).
const WRAPPER_FILES: [(&str, &str, u32); 4] = [
    (
        "python3.11/sless_runtime.py",
        include_str!("../../../runtimes/python3.11/sless_runtime.py"),
        0o644,
    ),
    (
        "nodejs20/sless_runtime.js",
        include_str!("../../../runtimes/nodejs20/sless_runtime.js"),
        0o644,
    ),
    (
        "go1.23/main.go",
        include_str!("../../../runtimes/go1.23/main.go"),
        0o644,
    ),
    (
        "go1.23/build.sh",
        include_str!("../../../runtimes/go1.23/build.sh"),
        0o755,
    ),
];

/// The runtimes' tools as found on the machine, by name.
#[derive(Clone, Debug)]
pub struct Toolchain {
    programs: BTreeMap<&'static str, String>,
}

impl Default for Toolchain {
    /// Every tool by its name, looked up on `PATH`.
    fn default() -> Self {
        let tools = Runtime::ALL.iter().flat_map(|r| r.descriptor().tools);
        Self {
            programs: tools.map(|t| (t.program, t.program.to_string())).collect(),
        }
    }
}

impl Toolchain {
    /// Each tool that can say where its executable is replaced by that executable
    /// (`Tool::locate`).
    pub fn resolved(mut self) -> Self {
        for tool in Runtime::ALL.iter().flat_map(|r| r.descriptor().tools) {
            let (Some(args), Some(program)) = (tool.locate, self.programs.get_mut(tool.program))
            else {
                continue;
            };
            let probe = std::process::Command::new(&*program).args(args).output();
            if let Ok(out) = probe
                && out.status.success()
            {
                let executable = String::from_utf8_lossy(&out.stdout).trim().to_string();
                if !executable.is_empty() {
                    *program = executable;
                }
            }
        }
        self
    }

    /// What runs for a tool of a descriptor.
    pub fn program<'a>(&'a self, tool: &'a str) -> &'a str {
        self.programs.get(tool).map_or(tool, String::as_str)
    }

    pub fn programs(&self) -> impl Iterator<Item = &str> {
        self.programs.values().map(String::as_str)
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
        sless_core::data_dir::own_private_dir(root)?;
        for (path, content, mode) in WRAPPER_FILES {
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

    /// Program and arguments that serve (or, in job mode, run) a built function.
    pub fn command(
        &self,
        toolchain: &Toolchain,
        runtime: Runtime,
        dir: &Path,
    ) -> (String, Vec<String>) {
        self.resolve(toolchain, runtime, &runtime.descriptor().start, dir)
    }

    /// A descriptor's command line for the build directory `dir`.
    pub fn resolve(
        &self,
        toolchain: &Toolchain,
        runtime: Runtime,
        command: &LocalCommand,
        dir: &Path,
    ) -> (String, Vec<String>) {
        let word = |word: &Word| match *word {
            Word::Text(text) => text.to_string(),
            Word::Tool(tool) => toolchain.program(tool).to_string(),
            Word::Wrapper(file) => self
                .root
                .join(runtime.as_str())
                .join(file)
                .display()
                .to_string(),
            Word::BuildDir => dir.display().to_string(),
            Word::Build(path) => dir.join(path).display().to_string(),
        };
        (
            word(&command.program),
            command.args.iter().map(word).collect(),
        )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_wrapper_a_descriptor_names_is_shipped() {
        for runtime in Runtime::ALL {
            let d = runtime.descriptor();
            let commands = d.build_steps.iter().map(|s| &s.run).chain([&d.start]);
            for command in commands {
                for word in [&command.program].into_iter().chain(command.args) {
                    if let Word::Wrapper(file) = word {
                        let path = format!("{}/{file}", d.name);
                        assert!(
                            WRAPPER_FILES.iter().any(|(p, ..)| *p == path),
                            "{path} is not shipped"
                        );
                    }
                }
            }
        }
        for (path, ..) in WRAPPER_FILES {
            let folder = path.split('/').next().unwrap();
            assert!(Runtime::ALL.iter().any(|r| r.as_str() == folder), "{path}");
        }
    }

    #[test]
    fn commands_resolve_in_the_build_and_wrapper_directories() {
        let wrappers = Wrappers {
            root: PathBuf::from("/data/runtimes"),
        };
        let tools = Toolchain::default();
        let dir = Path::new("/data/builds/ns/function-f/v1");
        let command = |runtime| wrappers.command(&tools, runtime, dir);
        assert_eq!(
            command(Runtime::Python311),
            (
                "python3".into(),
                vec![
                    "-I".into(),
                    "-S".into(),
                    "-u".into(),
                    "/data/runtimes/python3.11/sless_runtime.py".into()
                ]
            )
        );
        assert_eq!(
            command(Runtime::Go123),
            (
                "/data/builds/ns/function-f/v1/.sless-bin/function".into(),
                vec![]
            )
        );
        let go = Runtime::Go123;
        let build = &go.descriptor().build_steps[0].run;
        assert_eq!(
            wrappers.resolve(&tools, go, build, dir),
            (
                "/data/runtimes/go1.23/build.sh".into(),
                vec![
                    dir.display().to_string(),
                    "/data/builds/ns/function-f/v1/.sless-bin/function".into()
                ]
            )
        );
    }
}
