//! python3.11: `runtimes/python3.11/sless_runtime.py` serves `def handle(event)` (or
//! `async def`) from the module the entrypoint names.

use super::{LocalCommand, RuntimeDescriptor, Step, Tool, Word};

const REQUIREMENTS: &str = "requirements.txt";
/// Where the build installs the dependencies; the wrapper puts it on `sys.path`.
const DEPS: &str = ".deps";

pub static PYTHON311: RuntimeDescriptor = RuntimeDescriptor {
    name: "python3.11",
    dependency_file: REQUIREMENTS,
    skipped_dirs: &["__pycache__", DEPS],
    image_steps: &[Step {
        if_dependency_file: true,
        run: "pip install --no-cache-dir -r requirements.txt",
    }],
    // The image sets PYTHONDONTWRITEBYTECODE: nothing is written beside the code.
    read_only_root: true,
    tools: &[Tool {
        program: "python3",
        locate: Some(&["-c", "import sys; print(sys.executable)"]),
    }],
    build_steps: &[Step {
        if_dependency_file: true,
        run: LocalCommand {
            program: Word::Tool("python3"),
            args: &[
                Word::Text("-m"),
                Word::Text("pip"),
                Word::Text("install"),
                Word::Text("--disable-pip-version-check"),
                Word::Text("--no-input"),
                Word::Text("--no-cache-dir"),
                Word::Text("--target"),
                Word::Build(DEPS),
                Word::Text("-r"),
                Word::Text(REQUIREMENTS),
            ],
        },
    }],
    // -I: no PYTHONPATH (or other PYTHON* variables) and no user site; -S: no
    // site-packages of the host's interpreter. The function sees the standard library,
    // its own code and its `.deps`, as in the image, where only its requirements are
    // installed.
    start: LocalCommand {
        program: Word::Tool("python3"),
        args: &[
            Word::Text("-I"),
            Word::Text("-S"),
            Word::Text("-u"),
            Word::Wrapper("sless_runtime.py"),
        ],
    },
    standby: true,
    // 64 handler threads, but one interpreter lock: a few calls waiting on I/O at once.
    target_concurrency: 8,
    etc_paths: &["pip.conf", "python3", "python3.11"],
    build_variables: &[
        "PIP_INDEX_URL",
        "PIP_EXTRA_INDEX_URL",
        "PIP_CERT",
        "PIP_FIND_LINKS",
        "PIP_NO_INDEX",
        "PIP_TRUSTED_HOST",
        "PIP_DEFAULT_TIMEOUT",
    ],
};
