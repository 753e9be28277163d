//! nodejs20: `runtimes/nodejs20/sless_runtime.js` serves `exports.handle` of the module
//! the entrypoint names.

use super::{LocalCommand, RuntimeDescriptor, Step, Tool, Word};

pub static NODEJS20: RuntimeDescriptor = RuntimeDescriptor {
    name: "nodejs20",
    dependency_file: "package.json",
    skipped_dirs: &["node_modules"],
    image_steps: &[Step {
        if_dependency_file: true,
        run: "npm install --omit=dev",
    }],
    // Node writes nothing beside the code.
    read_only_root: true,
    tools: &[
        Tool {
            program: "node",
            locate: None,
        },
        Tool {
            program: "npm",
            locate: None,
        },
    ],
    build_steps: &[Step {
        if_dependency_file: true,
        run: LocalCommand {
            program: Word::Tool("npm"),
            args: &[
                Word::Text("install"),
                Word::Text("--omit=dev"),
                Word::Text("--no-audit"),
                Word::Text("--no-fund"),
            ],
        },
    }],
    start: LocalCommand {
        program: Word::Tool("node"),
        args: &[Word::Wrapper("sless_runtime.js")],
    },
    standby: true,
    // One event loop serves many calls waiting on I/O.
    target_concurrency: 32,
    etc_paths: &["npmrc"],
    build_variables: &["NPM_CONFIG_REGISTRY", "npm_config_registry"],
};
