//! go1.23: `runtimes/go1.23/build.sh` compiles the handler package together with the
//! server of `runtimes/go1.23/main.go` into one binary, which is the function.

use super::{LocalCommand, RuntimeDescriptor, Step, Tool, Word};

/// Where embedded mode puts the binary inside the build directory.
const BINARY: &str = ".sless-bin/function";

pub static GO123: RuntimeDescriptor = RuntimeDescriptor {
    name: "go1.23",
    dependency_file: "go.mod",
    skipped_dirs: &[],
    // The base image provides build.sh at /opt/sless and runs /app/bin/function.
    image_steps: &[
        Step {
            if_dependency_file: true,
            run: "go mod download",
        },
        Step {
            if_dependency_file: false,
            run: "/opt/sless/build.sh /app/function /app/bin/function",
        },
    ],
    // The binary writes nothing.
    read_only_root: true,
    // build.sh runs the go on PATH; declared so that builds may read its installation.
    tools: &[Tool {
        program: "go",
        locate: None,
    }],
    build_steps: &[Step {
        if_dependency_file: false,
        run: LocalCommand {
            program: Word::Wrapper("build.sh"),
            args: &[Word::BuildDir, Word::Build(BINARY)],
        },
    }],
    start: LocalCommand {
        program: Word::Build(BINARY),
        args: &[],
    },
    // The binary is built per version: nothing to start before the code is known.
    standby: false,
    // Goroutines per call: many at once.
    target_concurrency: 32,
    etc_paths: &[],
    build_variables: &["GOPROXY", "GONOSUMDB", "GOFLAGS"],
};
