//! The provider with the real `terraform` against a real `sless up` on a loopback port:
//! the example of examples/terraform applied, changed, drifted, imported and destroyed,
//! and the original Go provider's example applied unchanged. The provider is installed
//! through `dev_overrides` (no registry, no `terraform init`), or for the original
//! example through a filesystem mirror, so `terraform init` runs as its users run it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;
use sless_api::WorkloadRequest;
use sless_client::archive::zip_folder;
use sless_client::client::{Client, Kind};

/// A running `sless up`; killed when dropped.
struct Sless {
    child: Child,
    base: String,
}

impl Drop for Sless {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `sless` binary of this workspace as `cargo test --workspace` builds it: a plain
/// `cargo build -p sless` resolves other features (no dev-dependencies) and rebuilds
/// ~100 crates after the workspace's tests were built.
fn sless_binary() -> PathBuf {
    // Tests running side by side wait for one build rather than each running cargo.
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(build_sless).clone()
}

fn build_sless() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml");
    let mut build = Command::new(cargo);
    // Cargo gives this test its package's variables; build scripts (ring's) rerun when
    // they differ from a plain build's, and everything above them would be rebuilt.
    for (name, _) in std::env::vars() {
        let ours = [
            "CARGO_PKG_",
            "CARGO_MANIFEST_",
            "CARGO_BIN_",
            "CARGO_CRATE_",
        ]
        .iter()
        .any(|prefix| name.starts_with(prefix))
            || ["OUT_DIR", "CARGO_PRIMARY_PACKAGE", "CARGO_TARGET_TMPDIR"].contains(&name.as_str());
        if ours {
            build.env_remove(name);
        }
    }
    let output = build
        .args(["test", "--locked", "--workspace", "--no-run"])
        .args([
            "--message-format=json-render-diagnostics",
            "--manifest-path",
        ])
        .arg(manifest)
        .stderr(Stdio::inherit())
        .output()
        .expect("run cargo test --workspace --no-run");
    assert!(
        output.status.success(),
        "cargo test --workspace --no-run failed"
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|message| {
            message["target"]["name"] == "sless"
                && message["profile"]["test"] == false
                && message["target"]["kind"]
                    .as_array()
                    .is_some_and(|kinds| kinds.iter().any(|kind| kind == "bin"))
        })
        .find_map(|message| message["executable"].as_str().map(PathBuf::from))
        .expect("cargo reported no sless executable")
}

fn start_sless(binary: &Path, data_dir: &Path) -> Sless {
    start_sless_with_env(binary, data_dir, &[])
}

fn start_sless_with_env(binary: &Path, data_dir: &Path, env: &[(&str, &str)]) -> Sless {
    let mut child = Command::new(binary)
        .args(["up", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .env_remove("SLESS_S3_ENDPOINT")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start sless up");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let base = loop {
        let line = lines
            .next()
            .expect("sless exited before it was up")
            .unwrap();
        if let Some(rest) = line.strip_prefix("sless is up on ") {
            break rest.trim().to_string();
        }
    };
    // Keep draining stdout so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Sless { child, base }
}

fn mint_token(binary: &Path, data_dir: &Path, sub: &str) -> String {
    let output = Command::new(binary)
        .args(["token", "--sub", sub, "--data-dir"])
        .arg(data_dir)
        .output()
        .unwrap();
    assert!(output.status.success(), "sless token failed");
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

/// `sless up` with a token, and the environment for `terraform` with this build's
/// provider installed through `dev_overrides`.
struct Platform {
    binary: PathBuf,
    data_dir: PathBuf,
    server: Sless,
    token: String,
    client: Client,
    env: Vec<(&'static str, String)>,
}

fn start_platform(work: &Path) -> Platform {
    require_terraform();
    let binary = sless_binary();
    let data_dir = work.join("data");
    let server = start_sless(&binary, &data_dir);
    let token = mint_token(&binary, &data_dir, "terraform-test");
    let client = Client::new(&server.base, &token).unwrap();
    let env = terraform_env(work, &server, &token);
    Platform {
        binary,
        data_dir,
        server,
        token,
        client,
        env,
    }
}

fn provider_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_terraform-provider-sless"))
}

/// Copies a folder (the examples) so the test can edit handlers freely.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            if entry.file_name() != ".terraform" {
                copy_dir(&entry.path(), &target);
            }
        } else if !entry
            .file_name()
            .to_string_lossy()
            .starts_with("terraform.tfstate")
        {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// `terraform` in one working directory, with the provider from this build.
struct Terraform {
    dir: PathBuf,
    env: Vec<(&'static str, String)>,
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
    took: Duration,
}

impl Run {
    fn ok(self, what: &str) -> Self {
        assert_eq!(
            self.code, 0,
            "{what} failed\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        eprintln!("{what}: {:.1} s", self.took.as_secs_f64());
        self
    }
}

impl Terraform {
    fn run(&self, args: &[&str]) -> Run {
        let started = Instant::now();
        let output: Output = Command::new("terraform")
            .args(args)
            .current_dir(&self.dir)
            .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .output()
            .expect("run terraform");
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            took: started.elapsed(),
        }
    }

    fn apply(&self, vars: &[&str], what: &str) -> Run {
        let mut args = vec!["apply", "-input=false", "-no-color", "-auto-approve"];
        args.extend(vars.iter().flat_map(|v| ["-var", *v]));
        self.run(&args).ok(what)
    }

    /// `plan -detailed-exitcode`: 0 = no changes, 2 = changes.
    fn plan(&self, vars: &[&str]) -> Run {
        let mut args = vec!["plan", "-input=false", "-no-color", "-detailed-exitcode"];
        args.extend(vars.iter().flat_map(|v| ["-var", *v]));
        self.run(&args)
    }

    fn outputs(&self) -> Value {
        let run = self.run(&["output", "-json"]).ok("terraform output");
        serde_json::from_str(&run.stdout).unwrap()
    }

    /// The attributes of one resource in the state.
    fn resource(&self, address: &str) -> Value {
        let run = self.run(&["show", "-json"]).ok("terraform show");
        let shown: Value = serde_json::from_str(&run.stdout).unwrap();
        shown["values"]["root_module"]["resources"]
            .as_array()
            .and_then(|all| all.iter().find(|r| r["address"] == address))
            .map(|r| r["values"].clone())
            .unwrap_or_else(|| panic!("{address} is not in the state"))
    }
}

/// The environment of `terraform` runs: the provider of this build through
/// `dev_overrides` (its CLI config written under `work`), and the server to talk to.
fn terraform_env(work: &Path, server: &Sless, token: &str) -> Vec<(&'static str, String)> {
    let provider = provider_binary();
    let cli_config = work.join("terraform.rc");
    std::fs::write(
        &cli_config,
        format!(
            "provider_installation {{\n  dev_overrides {{\n    \"kube5s/sless\" = {:?}\n  }}\n  direct {{}}\n}}\n",
            provider.parent().unwrap()
        ),
    )
    .unwrap();
    vec![
        ("TF_CLI_CONFIG_FILE", cli_config.display().to_string()),
        ("TF_IN_AUTOMATION", "1".into()),
        ("CHECKPOINT_DISABLE", "1".into()),
        // Diagnostics must stay free of backtraces even for a developer who sets this.
        ("RUST_BACKTRACE", "1".into()),
        ("SLESS_ENDPOINT", server.base.clone()),
        ("SLESS_API_TOKEN", token.to_string()),
    ]
}

fn require_terraform() {
    assert!(
        Command::new("terraform")
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "terraform is not installed: this test needs the terraform CLI (1.x) on PATH"
    );
}

/// GET `url` through the public proxy: status and body.
fn call(runtime: &tokio::runtime::Runtime, url: &str) -> (u16, String) {
    runtime.block_on(async {
        let response = reqwest::get(url).await.expect("call the function");
        let status = response.status().as_u16();
        (status, response.text().await.unwrap_or_default())
    })
}

fn url_of(outputs: &Value, name: &str) -> String {
    outputs[name]["value"]
        .as_str()
        .unwrap_or_else(|| panic!("output {name} is not a URL: {outputs}"))
        .to_string()
}

/// No function, service, trigger or job is left in the client's namespace.
fn assert_nothing_left(runtime: &tokio::runtime::Runtime, client: &Client) {
    for collection in [Kind::Function, Kind::Service] {
        let left = runtime.block_on(client.list_workloads(collection)).unwrap();
        assert!(left.is_empty(), "{} left: {left:?}", collection.path());
    }
    assert!(
        runtime.block_on(client.list_triggers()).unwrap().is_empty(),
        "triggers left"
    );
    assert!(
        runtime.block_on(client.list_jobs()).unwrap().is_empty(),
        "jobs left"
    );
}

#[test]
fn terraform_deploys_changes_and_destroys_the_example() {
    let started = Instant::now();
    let work = tempfile::tempdir().unwrap();
    let Platform {
        binary: sless,
        data_dir,
        server,
        token,
        client,
        env,
    } = start_platform(work.path());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let examples = work.path().join("examples");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples"),
        &examples,
    );
    let tf = Terraform {
        dir: examples.join("terraform"),
        env: env.clone(),
    };

    // Everything deploys and answers; the job's result is in the state.
    tf.apply(&[], "first apply");
    let outputs = tf.outputs();
    let hello = url_of(&outputs, "hello_url");
    let (status, body) = call(&runtime, &format!("{hello}?name=tf"));
    assert_eq!((status, body.contains("hello, tf!")), (200, true), "{body}");
    let (status, body) = call(&runtime, &url_of(&outputs, "greeter_url"));
    assert_eq!(
        (status, body.contains("hi from node")),
        (200, true),
        "{body}"
    );
    let (status, body) = call(&runtime, &url_of(&outputs, "clock_url"));
    assert_eq!((status, body.contains("served")), (200, true), "{body}");
    let report: Value = serde_json::from_str(outputs["report"]["value"].as_str().unwrap()).unwrap();
    assert_eq!(report["sum"], 6, "{report}");
    assert_eq!(outputs["hello_runtime"]["value"], "python3.11");
    let deployed = outputs["deployed"]["value"].to_string();
    assert!(
        deployed.contains("service clock-service: Ready"),
        "{deployed}"
    );
    let hello_state = tf.resource("sless_function.hello");
    assert_eq!(
        hello_state["timeout_sec"],
        Value::Null,
        "unset timeout_sec must stay null"
    );
    assert_eq!(hello_state["phase"], "Ready");
    let first_version = hello_state["version"]
        .as_str()
        .expect("version")
        .to_string();
    let served = runtime
        .block_on(client.get_workload(Kind::Function, hello_state["name"].as_str().unwrap()))
        .unwrap();
    assert_eq!(served.version.as_deref(), Some(first_version.as_str()));
    assert_eq!(tf.resource("sless_function.greeter")["timeout_sec"], 30);

    // Right after apply there is nothing to do.
    let plan = tf.plan(&[]);
    assert_eq!(
        plan.code, 0,
        "second plan is not empty:\n{}{}",
        plan.stdout, plan.stderr
    );

    // One changed file: one update, a rebuild, the new answer.
    let handler = examples.join("hello-python/handler.py");
    let code = std::fs::read_to_string(&handler).unwrap();
    std::fs::write(
        &handler,
        code.replace("hello, {name}!", "hi again, {name}!")
            + "\n\ndef again(event):\n    return {\"entrypoint\": \"again\"}\n",
    )
    .unwrap();
    let plan = tf.plan(&[]);
    assert_eq!(plan.code, 2, "{}{}", plan.stdout, plan.stderr);
    assert!(
        plan.stdout.contains("0 to add, 1 to change, 0 to destroy"),
        "{}",
        plan.stdout
    );
    assert!(
        plan.stdout.contains("sless_function.hello will be updated"),
        "{}",
        plan.stdout
    );
    tf.apply(&[], "apply of a changed handler");
    let changed = tf.resource("sless_function.hello")["version"].clone();
    assert!(
        changed.is_string() && changed != first_version.as_str(),
        "a new upload is a new version: {changed} after {first_version}"
    );
    let (status, body) = call(&runtime, &format!("{hello}?name=tf"));
    assert_eq!(
        (status, body.contains("hi again, tf!")),
        (200, true),
        "{body}"
    );

    // A new entrypoint: the server rebuilds the stored code, which is still Terraform's,
    // so the plan after is empty.
    let main_tf = examples.join("terraform/main.tf");
    let config = std::fs::read_to_string(&main_tf).unwrap();
    let hello_block =
        "  runtime    = \"python3.11\"\n  source_dir = \"${path.module}/../hello-python\"\n";
    assert!(config.contains(hello_block), "{config}");
    let again = format!("{hello_block}  entrypoint = \"handler.again\"\n");
    std::fs::write(&main_tf, config.replace(hello_block, &again)).unwrap();
    tf.apply(&[], "apply of a new entrypoint");
    let (status, body) = call(&runtime, &hello);
    let answer: Value = serde_json::from_str(&body).unwrap_or_default();
    assert_eq!(
        (status, &answer["entrypoint"]),
        (200, &Value::from("again")),
        "{body}"
    );
    let plan = tf.plan(&[]);
    assert_eq!(
        plan.code, 0,
        "plan after a new entrypoint:\n{}{}",
        plan.stdout, plan.stderr
    );
    std::fs::write(&main_tf, &config).unwrap();
    tf.apply(&[], "apply of the default entrypoint");
    let (status, body) = call(&runtime, &format!("{hello}?name=tf"));
    assert_eq!(
        (status, body.contains("hi again, tf!")),
        (200, true),
        "{body}"
    );

    // An event trigger's concurrency and max_retries: set, read back, changed in place,
    // left out (the API's default); refused like the API refuses them. Stopped, it
    // settles without a broker.
    let event_trigger = |settings: &str| {
        format!(
            "{config}\nresource \"sless_trigger\" \"orders\" {{\n  name     = \"orders\"\n  \
             type     = \"event\"\n  function = sless_function.hello.name\n  queue    = \"orders\"\n  \
             enabled  = false\n{settings}}}\n"
        )
    };
    std::fs::write(
        &main_tf,
        event_trigger("  concurrency = 4\n  max_retries = 2\n"),
    )
    .unwrap();
    tf.apply(&[], "apply of an event trigger");
    let orders = tf.resource("sless_trigger.orders");
    assert_eq!(
        (&orders["concurrency"], &orders["max_retries"]),
        (&4.into(), &2.into())
    );
    let read = |runtime: &tokio::runtime::Runtime| {
        let trigger = runtime.block_on(client.get_trigger("orders")).unwrap();
        (trigger.concurrency, trigger.max_retries)
    };
    assert_eq!(read(&runtime), (Some(4), Some(2)));
    assert_eq!(tf.plan(&[]).code, 0, "plan after an event trigger");
    std::fs::write(
        &main_tf,
        event_trigger("  concurrency = 4\n  max_retries = 3\n"),
    )
    .unwrap();
    let plan = tf.plan(&[]);
    assert!(
        plan.stdout.contains("0 to add, 1 to change, 0 to destroy"),
        "{}",
        plan.stdout
    );
    tf.apply(&[], "apply of max_retries 3");
    assert_eq!(read(&runtime), (Some(4), Some(3)));
    std::fs::write(&main_tf, event_trigger("")).unwrap();
    tf.apply(&[], "apply without concurrency and max_retries");
    assert_eq!(read(&runtime), (Some(1), Some(5)), "the API's defaults");
    assert_eq!(tf.plan(&[]).code, 0, "plan after the defaults");
    let refused = event_trigger("  concurrency = 0\n  max_retries = -1\n").replace(
        "  function = sless_function.hello.name\n}",
        "  function = sless_function.hello.name\n  max_retries = 1\n}",
    );
    std::fs::write(&main_tf, refused).unwrap();
    let plan = tf.plan(&[]);
    assert_eq!(plan.code, 1, "{}{}", plan.stdout, plan.stderr);
    for said in [
        "0 is out of range: messages handled at once, 1 to 64",
        "max_retries must not be negative",
        "applies to event triggers only",
    ] {
        assert!(
            plan.stderr.contains(said),
            "{said:?} missing:\n{}",
            plan.stderr
        );
    }
    assert!(!plan.stderr.contains("panicked"), "{}", plan.stderr);
    std::fs::write(&main_tf, &config).unwrap();
    tf.apply(&[], "apply without the event trigger");

    // A stopped trigger: /fn answers 503; the other functions still answer.
    let greeter_off = "greeter_enabled=false";
    tf.apply(&[greeter_off], "apply with greeter stopped");
    assert_eq!(call(&runtime, &url_of(&outputs, "greeter_url")).0, 503);
    assert_eq!(call(&runtime, &hello).0, 200);

    // A higher run_id runs the job again, in place.
    let first_run = runtime.block_on(client.get_job("report-job")).unwrap();
    assert_eq!(first_run.run_id, 1);
    tf.apply(&[greeter_off, "report_run_id=2"], "apply of run_id 2");
    let second_run = runtime.block_on(client.get_job("report-job")).unwrap();
    assert_eq!(
        (second_run.run_id, second_run.phase.as_str()),
        (2, "Succeeded")
    );
    assert_ne!(
        second_run.completion_time, first_run.completion_time,
        "the job did not run again"
    );
    assert_eq!(tf.resource("sless_job.report")["run_id"], 2);

    // Drift: a function deleted behind Terraform's back (its trigger left) is re-created.
    runtime
        .block_on(client.delete(Kind::Function, "hello-python"))
        .unwrap();
    let plan = tf.plan(&[greeter_off, "report_run_id=2"]);
    assert_eq!(plan.code, 2, "{}{}", plan.stdout, plan.stderr);
    assert!(
        plan.stdout.contains("sless_function.hello will be created"),
        "{}",
        plan.stdout
    );
    assert!(
        plan.stdout.contains("1 to add, 0 to change, 0 to destroy"),
        "{}",
        plan.stdout
    );
    // A setting changed through the API shows up too.
    let mut greeter = runtime
        .block_on(client.get_workload(Kind::Function, "greeter-node"))
        .unwrap();
    greeter.memory_mb = 512;
    let request = WorkloadRequest {
        runtime: Some(greeter.runtime.clone()),
        entrypoint: Some(greeter.entrypoint.clone()),
        memory_mb: Some(512),
        timeout_sec: Some(greeter.timeout_sec),
        env_vars: Some(greeter.env_vars.clone()),
        ..Default::default()
    };
    runtime
        .block_on(client.replace_workload(Kind::Function, "greeter-node", &request))
        .unwrap();
    let plan = tf.plan(&[greeter_off, "report_run_id=2"]);
    assert!(
        plan.stdout.contains("~ memory_mb") && plan.stdout.contains("512 -> 256"),
        "{}",
        plan.stdout
    );
    tf.apply(&[greeter_off, "report_run_id=2"], "apply after drift");
    let (status, body) = call(&runtime, &format!("{hello}?name=tf"));
    assert_eq!(
        (status, body.contains("hi again, tf!")),
        (200, true),
        "{body}"
    );
    let greeter = runtime
        .block_on(client.get_workload(Kind::Function, "greeter-node"))
        .unwrap();
    assert_eq!(greeter.memory_mb, 256);

    // Import of a function made through the API, code and all: nothing to do after.
    let adopt = work.path().join("adopt");
    std::fs::create_dir_all(&adopt).unwrap();
    let source = examples.join("report-job");
    let request = WorkloadRequest {
        name: Some("adopted".into()),
        runtime: Some("python3.11".into()),
        ..Default::default()
    };
    runtime
        .block_on(client.create_workload(Kind::Function, &request))
        .unwrap();
    let packed = zip_folder(&source).unwrap();
    runtime
        .block_on(client.upload(Kind::Function, "adopted", packed.zip))
        .unwrap();
    std::fs::write(
        adopt.join("main.tf"),
        format!(
            "terraform {{\n  required_providers {{\n    sless = {{ source = \"kube5s/sless\" }}\n  }}\n}}\n\n\
             resource \"sless_function\" \"adopted\" {{\n  name       = \"adopted\"\n  runtime    = \"python3.11\"\n  source_dir = {:?}\n}}\n",
            source.display()
        ),
    )
    .unwrap();
    let adopted = Terraform {
        dir: adopt,
        env: env.clone(),
    };
    let id = format!("adopted,{}", source.display());
    adopted
        .run(&[
            "import",
            "-input=false",
            "-no-color",
            "sless_function.adopted",
            &id,
        ])
        .ok("terraform import");
    let plan = adopted.plan(&[]);
    assert_eq!(
        plan.code, 0,
        "plan after import is not empty:\n{}{}",
        plan.stdout, plan.stderr
    );
    // A job that runs an existing function's code.
    let mut config = std::fs::read_to_string(adopted.dir.join("main.tf")).unwrap();
    config.push_str(
        "\nresource \"sless_job\" \"sum\" {\n  name       = \"sum\"\n  function   = sless_function.adopted.name\n  \
         event_json = jsonencode({ numbers = [4, 5] })\n  run_id     = 1\n}\n",
    );
    std::fs::write(adopted.dir.join("main.tf"), config).unwrap();
    adopted.apply(&[], "apply of a job of a function");
    let job = adopted.resource("sless_job.sum");
    assert_eq!(job["phase"], "Succeeded", "{job}");
    let result: Value = serde_json::from_str(job["message"].as_str().unwrap()).unwrap();
    assert_eq!(result["sum"], 9, "{job}");

    // A source_dir known only at apply: the hash is filled then, and nothing is left to do.
    let mut config = std::fs::read_to_string(adopted.dir.join("main.tf")).unwrap();
    config.push_str(&format!(
        "\nresource \"terraform_data\" \"late_dir\" {{\n  input = {:?}\n}}\n\n\
         resource \"sless_function\" \"late\" {{\n  name       = \"late\"\n  runtime    = \"python3.11\"\n  \
         source_dir = terraform_data.late_dir.output\n}}\n",
        source.display()
    ));
    std::fs::write(adopted.dir.join("main.tf"), config).unwrap();
    adopted.apply(&[], "apply of a source_dir known at apply");
    let late = adopted.resource("sless_function.late");
    let adopted_hash = adopted.resource("sless_function.adopted")["source_hash"].clone();
    assert_eq!(
        (&late["source_hash"], &late["phase"]),
        (&adopted_hash, &Value::from("Ready"))
    );
    let plan = adopted.plan(&[]);
    assert_eq!(plan.code, 0, "{}{}", plan.stdout, plan.stderr);

    adopted
        .run(&["destroy", "-input=false", "-no-color", "-auto-approve"])
        .ok("destroy of the import");

    // A bad runtime fails at plan time, naming the attribute, before anything is made.
    let bad = work.path().join("bad");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(
        bad.join("main.tf"),
        "terraform {\n  required_providers {\n    sless = { source = \"kube5s/sless\" }\n  }\n}\n\n\
         resource \"sless_function\" \"bad\" {\n  name    = \"bad\"\n  runtime = \"cobol\"\n}\n",
    )
    .unwrap();
    let bad = Terraform {
        dir: bad,
        env: env.clone(),
    };
    let plan = bad.plan(&[]);
    assert_eq!(plan.code, 1, "{}{}", plan.stdout, plan.stderr);
    assert!(
        plan.stderr
            .contains("runtime: unsupported runtime \"cobol\"")
            && plan.stderr.contains("runtime = \"cobol\""),
        "{}",
        plan.stderr
    );

    // A failed build fails the apply with the end of the build log.
    let broken = bad.dir.join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(
        broken.join("handler.js"),
        "exports.handle = async () => ({});\n",
    )
    .unwrap();
    std::fs::write(broken.join("package.json"), "{\n").unwrap();
    std::fs::write(
        bad.dir.join("main.tf"),
        "terraform {\n  required_providers {\n    sless = { source = \"kube5s/sless\" }\n  }\n}\n\n\
         resource \"sless_function\" \"broken\" {\n  name       = \"broken\"\n  runtime    = \"nodejs20\"\n  \
         source_dir = \"broken\"\n}\n",
    )
    .unwrap();
    let apply = bad.run(&["apply", "-input=false", "-no-color", "-auto-approve"]);
    assert_eq!(apply.code, 1, "{}{}", apply.stdout, apply.stderr);
    assert!(
        apply.stderr.contains("function broken failed to build: ")
            && apply.stderr.contains("end of the build log:")
            && apply.stderr.contains("EJSONPARSE")
            && !apply.stderr.contains("tf_provider::"),
        "{}",
        apply.stderr
    );
    bad.run(&["destroy", "-input=false", "-no-color", "-auto-approve"])
        .ok("destroy of the broken function");

    // A failed job run fails the apply with the reason and the run's output.
    let failing = bad.dir.join("failing");
    std::fs::create_dir_all(&failing).unwrap();
    std::fs::write(
        failing.join("handler.py"),
        "def handle(event):\n    print('checking the numbers')\n    raise ValueError('no numbers given')\n",
    )
    .unwrap();
    std::fs::write(
        bad.dir.join("main.tf"),
        "terraform {\n  required_providers {\n    sless = { source = \"kube5s/sless\" }\n  }\n}\n\n\
         resource \"sless_job\" \"failing\" {\n  name       = \"failing\"\n  runtime    = \"python3.11\"\n  \
         source_dir = \"failing\"\n  run_id     = 1\n}\n",
    )
    .unwrap();
    let apply = bad.run(&["apply", "-input=false", "-no-color", "-auto-approve"]);
    assert_eq!(apply.code, 1, "{}{}", apply.stdout, apply.stderr);
    assert!(
        apply.stderr.contains("job failing failed (run 1)")
            && apply.stderr.contains("no numbers given")
            && apply.stderr.contains("checking the numbers"),
        "{}",
        apply.stderr
    );
    bad.run(&["destroy", "-input=false", "-no-color", "-auto-approve"])
        .ok("destroy of the failing job");

    // Provider settings at fault are named: nothing listening, a refused token, a
    // namespace the token may not act on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nowhere = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let foreign =
        Client::new(&server.base, &mint_token(&sless, &data_dir, "someone-else")).unwrap();
    let forged = {
        let mut parts: Vec<String> = token.split('.').map(String::from).collect();
        parts[2] = parts[2].chars().rev().collect();
        parts.join(".")
    };
    for (variable, value, expected) in [
        ("SLESS_ENDPOINT", nowhere.as_str(), "cannot reach sless"),
        ("SLESS_API_TOKEN", forged.as_str(), "the token was refused"),
        (
            "TF_VAR_namespace",
            foreign.namespace(),
            "the token may not act on this namespace",
        ),
    ] {
        let dir = work.path().join(format!("settings-{variable}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("main.tf"),
            "terraform {\n  required_providers {\n    sless = { source = \"kube5s/sless\" }\n  }\n}\n\n\
             variable \"namespace\" {\n  type    = string\n  default = null\n}\n\n\
             provider \"sless\" {\n  namespace = var.namespace\n}\n\n\
             data \"sless_functions\" \"all\" {}\n",
        )
        .unwrap();
        let mut env = env.clone();
        env.retain(|(name, _)| *name != variable);
        env.push((variable, value.to_string()));
        let plan = Terraform { dir, env }.plan(&[]);
        assert_eq!(plan.code, 1, "{variable}: {}{}", plan.stdout, plan.stderr);
        assert!(
            plan.stderr.contains(expected),
            "{variable}: {}",
            plan.stderr
        );
    }

    // Destroy leaves nothing in the namespace.
    tf.run(&[
        "destroy",
        "-input=false",
        "-no-color",
        "-auto-approve",
        "-var",
        greeter_off,
        "-var",
        "report_run_id=2",
    ])
    .ok("terraform destroy");
    assert_nothing_left(&runtime, &client);
    eprintln!(
        "terraform test: {:.1} s in all",
        started.elapsed().as_secs_f64()
    );
    drop(server);
}

/// A chat-completions endpoint on a loopback port that refuses every upload with
/// `reason`, one connection at a time; it stops with the test process.
fn refusing_model(reason: &str) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "http://{}/v1/chat/completions",
        listener.local_addr().unwrap()
    );
    let content = serde_json::json!({"safe": false, "reason": reason}).to_string();
    let body = serde_json::json!({
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
    })
    .to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let mut reader = BufReader::new(stream);
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some((name, value)) = line.split_once(':')
                    && name.eq_ignore_ascii_case("content-length")
                {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
            let mut request = vec![0; length];
            let _ = std::io::Read::read_exact(&mut reader, &mut request);
            let answer = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = std::io::Write::write_all(reader.get_mut(), answer.as_bytes());
        }
    });
    url
}

#[test]
fn a_refused_upload_fails_the_apply_with_the_reviews_reason() {
    require_terraform();
    let reason = "handler.py starts the xmrig Monero miner";
    let model = refusing_model(reason);
    let sless = sless_binary();
    let work = tempfile::tempdir().unwrap();
    let data_dir = work.path().join("data");
    let server = start_sless_with_env(
        &sless,
        &data_dir,
        &[
            ("SLESS_LLM_ENABLED", "true"),
            ("SLESS_LLM_ENDPOINT", &model),
        ],
    );
    let token = mint_token(&sless, &data_dir, "terraform-review");
    let dir = work.path().join("config");
    std::fs::create_dir_all(dir.join("miner")).unwrap();
    std::fs::write(
        dir.join("miner/handler.py"),
        "import subprocess\n\ndef handle(event):\n    subprocess.Popen(['xmrig'])\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("main.tf"),
        "terraform {\n  required_providers {\n    sless = { source = \"kube5s/sless\" }\n  }\n}\n\n\
         resource \"sless_function\" \"miner\" {\n  name       = \"miner\"\n  runtime    = \"python3.11\"\n  \
         source_dir = \"miner\"\n}\n",
    )
    .unwrap();
    let tf = Terraform {
        dir,
        env: terraform_env(work.path(), &server, &token),
    };
    let apply = tf.run(&["apply", "-input=false", "-no-color", "-auto-approve"]);
    assert_eq!(apply.code, 1, "{}{}", apply.stdout, apply.stderr);
    assert!(
        apply
            .stderr
            .contains("uploading the code of function miner")
            && apply
                .stderr
                .contains(&format!("code review refused this upload: {reason}"))
            && !apply.stderr.contains("tf_provider::"),
        "{}",
        apply.stderr
    );
}

/// The example of the original Go provider's users (issue 31), as they wrote it: it has
/// to apply unchanged but for the provider's endpoint and token.
const ORIGINAL_EXAMPLE: &str = r#"provider "sless" {
  endpoint       = "http://127.0.0.1:8080"
  token          = file("${path.module}/../../secrets/prod.token")
  nubes_endpoint = "https://deck.example/api/v1"
}
resource "sless_function" "hello_http" {
  name        = "hello-http"
  runtime     = "nodejs20"
  source_dir  = "${path.module}/../../code"
  memory_mb   = 128
  timeout_sec = 30
  env_vars    = { "NODE_ENV" = "production" }
}
resource "sless_trigger" "hello_http" {
  name = "hello-http-trigger"
  function_ref = sless_function.hello_http.name
  type = "http"
  enabled = true
}
resource "sless_trigger" "daily" {
  name = "daily-job"
  function_ref = sless_function.hello_http.name
  type = "cron"
  schedule = "0 9 * * *"
}
resource "sless_job" "hello_run" {
  name         = "hello-run"
  function_ref = sless_function.hello_http.name
  run_id       = 1
  event_json   = jsonencode({"input": [100, 200, 300]})
}
output "trigger_url" { value = sless_trigger.hello_http.trigger_url }
output "job_result"  { value = sless_job.hello_run.job_message }
"#;

/// Terraform's name for this machine's platform, as in a provider mirror's layout.
fn terraform_platform() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    format!("{}_{arch}", std::env::consts::OS)
}

#[test]
fn the_original_providers_example_applies_unchanged() {
    let work = tempfile::tempdir().unwrap();
    let platform = start_platform(work.path());
    let runtime = tokio::runtime::Runtime::new().unwrap();

    // This build as the registry's kube5s/sless in a filesystem mirror, so `terraform
    // init` installs it as it would the published one.
    let mirror = work.path().join("mirror");
    let package = mirror
        .join("registry.terraform.io/kube5s/sless")
        .join(env!("CARGO_PKG_VERSION"))
        .join(terraform_platform());
    std::fs::create_dir_all(&package).unwrap();
    std::os::unix::fs::symlink(provider_binary(), package.join("terraform-provider-sless"))
        .unwrap();
    let cli_config = work.path().join("mirror.rc");
    std::fs::write(
        &cli_config,
        format!(
            "provider_installation {{\n  filesystem_mirror {{\n    path    = {mirror:?}\n    \
             include = [\"kube5s/sless\"]\n  }}\n}}\n"
        ),
    )
    .unwrap();
    // Endpoint and token come from the provider block alone.
    let mut env = platform.env.clone();
    env.retain(|(name, _)| !name.starts_with("SLESS_") && *name != "TF_CLI_CONFIG_FILE");
    env.push(("TF_CLI_CONFIG_FILE", cli_config.display().to_string()));

    // The layout its paths assume: envs/prod/ beside secrets/ and code/. The token file
    // ends with a newline, as files do.
    let project = work.path().join("project");
    let module = project.join("envs/prod");
    std::fs::create_dir_all(&module).unwrap();
    std::fs::create_dir_all(project.join("secrets")).unwrap();
    std::fs::write(
        project.join("secrets/prod.token"),
        format!("{}\n", platform.token),
    )
    .unwrap();
    let code = project.join("code");
    std::fs::create_dir_all(&code).unwrap();
    let handler = code.join("handler.js");
    std::fs::write(
        &handler,
        "// Answers over HTTP and as a job: the sum of the event's input, and its environment.\n\
         exports.handle = async (event) => ({\n  greeting: 'hello from the original example',\n  \
         sum: (event.input || []).reduce((a, b) => a + b, 0),\n  node_env: process.env.NODE_ENV,\n});\n",
    )
    .unwrap();
    let example_endpoint = "endpoint       = \"http://127.0.0.1:8080\"";
    assert!(ORIGINAL_EXAMPLE.contains(example_endpoint));
    let main_tf = module.join("main.tf");
    let config = ORIGINAL_EXAMPLE.replace(
        example_endpoint,
        &format!("endpoint       = {:?}", platform.server.base),
    );
    std::fs::write(&main_tf, &config).unwrap();
    // The provider's source, declared beside the example as its modules do.
    std::fs::write(
        module.join("versions.tf"),
        "terraform {\n  required_providers {\n    sless = { source = \"kube5s/sless\" }\n  }\n}\n",
    )
    .unwrap();
    let tf = Terraform { dir: module, env };

    tf.run(&["init", "-input=false", "-no-color"])
        .ok("terraform init");
    let apply = tf.apply(&[], "apply of the original example");
    assert!(
        format!("{}{}", apply.stdout, apply.stderr).contains("nubes_endpoint is not used"),
        "no warning about nubes_endpoint:\n{}{}",
        apply.stdout,
        apply.stderr
    );

    // trigger_url is url, and the function answers there with its env_vars.
    let outputs = tf.outputs();
    let trigger_url = url_of(&outputs, "trigger_url");
    assert_eq!(
        tf.resource("sless_trigger.hello_http")["url"],
        trigger_url.as_str()
    );
    let answer = |runtime: &tokio::runtime::Runtime| {
        let (status, body) = call(runtime, &trigger_url);
        assert_eq!(status, 200, "{body}");
        serde_json::from_str::<Value>(&body).unwrap_or_else(|_| panic!("not JSON: {body}"))
    };
    let answered = answer(&runtime);
    assert_eq!(
        (&answered["greeting"], &answered["node_env"]),
        (
            &Value::from("hello from the original example"),
            &Value::from("production")
        ),
        "{answered}"
    );
    // job_message is message: the run's result.
    let job = tf.resource("sless_job.hello_run");
    assert_eq!(outputs["job_result"]["value"], job["message"], "{job}");
    let result = |outputs: &Value| {
        serde_json::from_str::<Value>(outputs["job_result"]["value"].as_str().unwrap()).unwrap()
    };
    assert_eq!(result(&outputs)["sum"], 600, "{outputs}");
    let daily = tf.resource("sless_trigger.daily");
    assert_eq!(
        (
            &daily["function_ref"],
            &daily["function"],
            &daily["schedule"]
        ),
        (
            &Value::from("hello-http"),
            &Value::from("hello-http"),
            &Value::from("0 9 * * *")
        )
    );

    // The alias attributes plan nothing more.
    let plan = tf.plan(&[]);
    assert_eq!(
        plan.code, 0,
        "second plan is not empty:\n{}{}",
        plan.stdout, plan.stderr
    );
    // Nor does a state written before they existed: refresh fills them in.
    let state_file = tf.dir.join("terraform.tfstate");
    let mut state: Value =
        serde_json::from_str(&std::fs::read_to_string(&state_file).unwrap()).unwrap();
    for resource in state["resources"].as_array_mut().unwrap() {
        for instance in resource["instances"].as_array_mut().unwrap() {
            let attributes = instance["attributes"].as_object_mut().unwrap();
            for alias in ["function_ref", "trigger_url", "job_message"] {
                attributes.remove(alias);
            }
        }
    }
    std::fs::write(&state_file, state.to_string()).unwrap();
    let plan = tf.plan(&[]);
    assert_eq!(
        plan.code, 0,
        "plan of a state without the new names:\n{}{}",
        plan.stdout, plan.stderr
    );

    // A changed file redeploys the function in place.
    let original = std::fs::read_to_string(&handler).unwrap();
    std::fs::write(
        &handler,
        original.replace("hello from the original example", "hello again"),
    )
    .unwrap();
    let plan = tf.plan(&[]);
    assert!(
        plan.stdout.contains("0 to add, 1 to change, 0 to destroy")
            && plan
                .stdout
                .contains("sless_function.hello_http will be updated"),
        "{}",
        plan.stdout
    );
    tf.apply(&[], "apply of a changed file");
    assert_eq!(answer(&runtime)["greeting"], "hello again");

    // run_id = 2 runs the job again, with the new code.
    let run_1 = "run_id       = 1";
    assert!(config.contains(run_1));
    std::fs::write(&main_tf, config.replace(run_1, "run_id       = 2")).unwrap();
    tf.apply(&[], "apply of run_id 2");
    let job = runtime
        .block_on(platform.client.get_job("hello-run"))
        .unwrap();
    assert_eq!((job.run_id, job.phase.as_str()), (2, "Succeeded"));
    let outputs = tf.outputs();
    assert_eq!(
        (&result(&outputs)["greeting"], &result(&outputs)["sum"]),
        (&Value::from("hello again"), &Value::from(600)),
        "{outputs}"
    );
    let plan = tf.plan(&[]);
    assert_eq!(plan.code, 0, "{}{}", plan.stdout, plan.stderr);

    tf.run(&["destroy", "-input=false", "-no-color", "-auto-approve"])
        .ok("destroy of the original example");
    assert_nothing_left(&runtime, &platform.client);
}
