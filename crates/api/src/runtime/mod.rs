//! One descriptor per runtime (`python.rs`, `node.rs`, `go.rs`): everything sless knows
//! about a runtime, read by validation, the Dockerfile generator, the Kubernetes
//! manifests, the embedded build and runner, the CLI and the Terraform provider. A new
//! runtime is a variant here, its descriptor file, and its wrapper folder
//! `runtimes/<name>/` (which embedded mode ships: `crates/embedded/src/runtimes.rs`).
//!
//! Plain data with no dependency, so every client can read it.

mod go;
mod node;
mod python;

use std::fmt;

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum Runtime {
    #[serde(rename = "python3.11")]
    Python311,
    #[serde(rename = "nodejs20")]
    Nodejs20,
    #[serde(rename = "go1.23")]
    Go123,
}

impl Runtime {
    pub const ALL: [Runtime; 3] = [Runtime::Python311, Runtime::Nodejs20, Runtime::Go123];

    pub fn descriptor(self) -> &'static RuntimeDescriptor {
        match self {
            Runtime::Python311 => &python::PYTHON311,
            Runtime::Nodejs20 => &node::NODEJS20,
            Runtime::Go123 => &go::GO123,
        }
    }

    pub fn as_str(self) -> &'static str {
        self.descriptor().name
    }

    /// The supported names for help texts: `python3.11, nodejs20 or go1.23`.
    pub fn choices() -> String {
        one_of(Runtime::ALL.map(Runtime::as_str))
    }
}

impl fmt::Display for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `a, b or c`.
pub fn one_of<'a>(words: impl IntoIterator<Item = &'a str>) -> String {
    let words: Vec<&str> = words.into_iter().collect();
    match words.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// What sless knows about one runtime.
#[derive(Debug)]
pub struct RuntimeDescriptor {
    /// The API's name; also the wrapper folder `runtimes/<name>/` and the base image
    /// `<prefix>/runtime-<name>:<version>`.
    pub name: &'static str,
    /// The file at the root of an upload that lists its dependencies.
    pub dependency_file: &'static str,
    /// Folders the runtime's tools make beside the code, never packed for an upload
    /// (the build makes them again).
    pub skipped_dirs: &'static [&'static str],
    /// Kubernetes: the generated Dockerfile's `RUN` commands after the code is copied
    /// in. The base image's `CMD` (`runtimes/<name>/Dockerfile`) starts the function.
    pub image_steps: &'static [Step<&'static str>],
    /// Kubernetes: the container runs with a read-only root file system (`/tmp` is an
    /// emptyDir for handlers that need scratch space).
    pub read_only_root: bool,
    /// Embedded: the programs the machine must provide; the sandbox lets the runtime's
    /// processes read their installations.
    pub tools: &'static [Tool],
    /// Embedded: the build, run in the unpacked upload.
    pub build_steps: &'static [Step<LocalCommand>],
    /// Embedded: serves (or, for a job, runs) a built function.
    pub start: LocalCommand,
    /// Embedded: a process can start before its code is known (a standby that loads
    /// the code when bound), which takes the interpreter's start-up off a cold start.
    pub standby: bool,
    /// Calls in flight per instance before embedded mode starts another, when the
    /// function does not say (`target_concurrency`): what one process of the runtime
    /// serves well at once.
    pub target_concurrency: u32,
    /// Embedded sandbox: entries of `/etc` the runtime's processes read.
    pub etc_paths: &'static [&'static str],
    /// Embedded builds: variables of sless's environment that reach the build (the
    /// package index settings).
    pub build_variables: &'static [&'static str],
}

/// One build step.
#[derive(Debug)]
pub struct Step<T> {
    /// Runs only when the upload has the dependency file at its root.
    pub if_dependency_file: bool,
    pub run: T,
}

impl<T> Step<T> {
    /// Whether the step runs for an upload with, or without, the dependency file.
    pub fn applies(&self, has_dependency_file: bool) -> bool {
        has_dependency_file || !self.if_dependency_file
    }
}

/// A program found on the machine.
#[derive(Debug)]
pub struct Tool {
    /// Its name on `PATH`.
    pub program: &'static str,
    /// Arguments that make it print its own executable, which is used instead of the
    /// name (a version manager's shim is a script that the sandbox may not allow).
    pub locate: Option<&'static [&'static str]>,
}

/// A command line of embedded mode; the runner resolves its words.
#[derive(Debug)]
pub struct LocalCommand {
    pub program: Word,
    pub args: &'static [Word],
}

#[derive(Debug)]
pub enum Word {
    /// As written.
    Text(&'static str),
    /// One of the runtime's [`Tool`]s, as found on the machine.
    Tool(&'static str),
    /// A file of the runtime's wrapper folder, as installed under the data dir.
    Wrapper(&'static str),
    /// The function's build directory.
    BuildDir,
    /// A path inside the function's build directory.
    Build(&'static str),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_serde_names() {
        for runtime in Runtime::ALL {
            let json = serde_json::to_string(&runtime).unwrap();
            assert_eq!(json, format!("\"{}\"", runtime.descriptor().name));
        }
        assert_eq!(Runtime::choices(), "python3.11, nodejs20 or go1.23");
        assert_eq!(one_of(["a"]), "a");
    }

    #[test]
    fn tools_used_are_declared() {
        for runtime in Runtime::ALL {
            let d = runtime.descriptor();
            let steps = d.build_steps.iter().map(|s| &s.run);
            for command in steps.chain([&d.start]) {
                for word in [&command.program].into_iter().chain(command.args) {
                    if let Word::Tool(name) = word {
                        assert!(
                            d.tools.iter().any(|t| t.program == *name),
                            "{runtime}: {name} is not among its tools"
                        );
                    }
                }
            }
        }
    }
}
