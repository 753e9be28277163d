//! The developer CLI end to end: the real `sless` binary against `sless up` on a random
//! port, with real Python and Node processes.

mod common;

use common::{Sless, start, token};

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A user of the CLI: their endpoint, token, and a home of their own so that `login`
/// never touches the real one.
struct User {
    endpoint: String,
    token: String,
    home: PathBuf,
    use_env: bool,
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn ok(self, what: &str) -> Self {
        assert_eq!(
            self.code, 0,
            "{what} failed\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }

    /// Fails with one `error:` line that contains every `needle`.
    fn fails_with(self, what: &str, needles: &[&str]) -> Self {
        assert_ne!(self.code, 0, "{what} should fail\nstdout:\n{}", self.stdout);
        let last = self.stderr.lines().last().unwrap_or_default();
        assert!(
            last.starts_with("error: "),
            "{what}: stderr:\n{}",
            self.stderr
        );
        for needle in needles {
            assert!(
                self.stderr.contains(needle),
                "{what}: {needle:?} not in stderr:\n{}",
                self.stderr
            );
        }
        self
    }

    fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.stdout))
    }
}

impl User {
    fn new(server: &Sless, token: String, home: &Path) -> Self {
        Self {
            endpoint: server.base.clone(),
            token,
            home: home.to_path_buf(),
            use_env: true,
        }
    }

    /// `sless ARGS` as this user runs it.
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_sless"));
        command
            .args(args)
            .env("HOME", &self.home)
            .env("XDG_CONFIG_HOME", self.home.join(".config"))
            .env_remove("SLESS_ENDPOINT")
            .env_remove("SLESS_API_TOKEN")
            .stdin(Stdio::null());
        if self.use_env {
            command
                .env("SLESS_ENDPOINT", &self.endpoint)
                .env("SLESS_API_TOKEN", &self.token);
        }
        command
    }

    fn sless(&self, args: &[&str]) -> Run {
        let mut command = self.command(args);
        let Output {
            status,
            stdout,
            stderr,
        } = command.output().expect("run sless");
        Run {
            code: status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        }
    }

    /// Retries until `check` passes (logs and stops settle asynchronously).
    fn eventually(&self, args: &[&str], check: impl Fn(&Run) -> bool) -> Run {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let run = self.sless(args);
            if check(&run) {
                return run;
            }
            assert!(
                Instant::now() < deadline,
                "sless {args:?} never passed\nstdout:\n{}\nstderr:\n{}",
                run.stdout,
                run.stderr
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

fn write_files(dir: &Path, files: &[(&str, &str)]) {
    for (path, content) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
}

const PYTHON_HANDLER: &str = r#"
def handle(event):
    name = event.get("name", "world")
    print(f"python handler saw {name}")
    return {"greeting": f"hello, {name}", "runtime": "python"}
"#;

const NODE_HANDLER: &str = r#"
exports.handle = async (event) => {
  const name = event.name || 'world';
  console.log(`node handler saw ${name}`);
  return { greeting: `hi, ${name}`, runtime: 'node' };
};
"#;

fn table_row<'a>(ls: &'a str, name: &str) -> Option<Vec<&'a str>> {
    ls.lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect()
        })
}

#[test]
fn everyday_developer_loop() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = start(&data);
    let user = User::new(&server, token(&data, "cli-user"), &dir.path().join("home"));
    let ns = sless_core::model::namespace_for_sub("cli-user");

    let py = dir.path().join("py");
    write_files(
        &py,
        &[
            ("handler.py", PYTHON_HANDLER),
            ("__pycache__/handler.cpython-311.pyc", "junk"),
            ("notes.txt", "not for the server"),
            (".slessignore", "notes.txt\n"),
        ],
    );
    let node = dir.path().join("node");
    write_files(
        &node,
        &[
            ("handler.js", NODE_HANDLER),
            ("node_modules/left-pad/index.js", "junk"),
        ],
    );
    let py_path = py.display().to_string();
    let node_path = node.display().to_string();

    let deployed = user
        .sless(&[
            "deploy",
            &py_path,
            "--name",
            "py-hello",
            "--runtime",
            "python3.11",
        ])
        .ok("deploy python");
    assert_eq!(
        deployed.stdout.trim(),
        format!("{}/fn/{ns}/py-hello", server.base),
        "{}",
        deployed.stderr
    );
    assert!(deployed.stderr.contains("Ready"), "{}", deployed.stderr);
    assert!(
        deployed.stderr.contains("packed 1 file ("),
        "{}",
        deployed.stderr
    );
    user.sless(&[
        "deploy",
        &node_path,
        "--name",
        "node-hello",
        "--runtime",
        "nodejs20",
        "--env",
        "GREETING=hi",
        "--trigger",
        "http",
        "--trigger",
        "cron:*/5 * * * *",
    ])
    .ok("deploy node");
    // A function meant to run as a job gets no URL.
    let quiet = user
        .sless(&[
            "deploy",
            &py_path,
            "--name",
            "py-quiet",
            "--runtime",
            "python3.11",
            "--no-trigger",
        ])
        .ok("deploy with no trigger");
    assert_eq!(quiet.stdout.trim(), "", "{}", quiet.stderr);
    assert!(
        quiet.stderr.contains(
            "function py-quiet has no trigger: run it with sless job run JOB --function py-quiet"
        ),
        "{}",
        quiet.stderr
    );

    let ls = user.sless(&["ls"]).ok("ls");
    assert_eq!(
        table_row(&ls.stdout, "NAME").unwrap(),
        sless_api::LIST_COLUMNS
    );
    let py_row = table_row(&ls.stdout, "py-hello").expect("py-hello listed");
    assert_eq!(
        py_row[..5],
        ["py-hello", "function", "python3.11", "Ready", "http"]
    );
    let job_row = table_row(&ls.stdout, "py-quiet").expect("py-quiet listed");
    assert_eq!(job_row[4], "-", "{}", ls.stdout);
    let node_row = table_row(&ls.stdout, "node-hello").expect("node-hello listed");
    assert_eq!(
        node_row[..5],
        [
            "node-hello",
            "function",
            "nodejs20",
            "Ready",
            "http,cron(*/5 * * * *)"
        ]
    );

    let answer = user
        .sless(&["invoke", "py-hello", "--data", r#"{"name":"cli"}"#])
        .ok("invoke python")
        .json();
    assert_eq!(answer["greeting"], "hello, cli");
    let event_file = dir.path().join("event.json");
    std::fs::write(&event_file, r#"{"name":"file"}"#).unwrap();
    let answer = user
        .sless(&[
            "invoke",
            "node-hello",
            "--data",
            &format!("@{}", event_file.display()),
        ])
        .ok("invoke node")
        .json();
    assert_eq!(answer["greeting"], "hi, file");

    user.eventually(&["logs", "py-hello", "--tail", "50"], |run| {
        run.code == 0 && run.stdout.contains("python handler saw cli")
    });
    // One call's lines, by the id it was made with.
    user.sless(&[
        "invoke",
        "py-hello",
        "--data",
        r#"{"name":"tagged"}"#,
        "--request-id",
        "cli-call-7",
    ])
    .ok("invoke with a request id");
    let one = user.eventually(&["logs", "py-hello", "--request-id", "cli-call-7"], |run| {
        run.code == 0 && run.stdout.contains("python handler saw tagged")
    });
    assert!(
        one.stdout
            .contains("[cli-call-7] python handler saw tagged")
            && !one.stdout.contains("saw cli"),
        "{}",
        one.stdout
    );
    let searched = user
        .sless(&["logs", "py-hello", "-q", "SAW TAGGED"])
        .ok("logs -q");
    assert_eq!(searched.stdout.lines().count(), 1, "{}", searched.stdout);
    // --follow prints a line printed after it started, and only the followed call's.
    let mut follow = user
        .command(&[
            "logs",
            "py-hello",
            "--follow",
            "--request-id",
            "cli-follow",
            "-n",
            "0",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start sless logs --follow");
    let (lines, seen) = std::sync::mpsc::channel();
    let stdout = follow.stdout.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines.send(line);
        }
    });
    // The stream is open once the command has its answer; until then a line may come
    // before it: call until the follower prints one.
    let deadline = Instant::now() + Duration::from_secs(20);
    let line = loop {
        user.sless(&[
            "invoke",
            "py-hello",
            "--data",
            r#"{"name":"followed"}"#,
            "--request-id",
            "cli-follow",
        ])
        .ok("invoke while following");
        user.sless(&["invoke", "py-hello", "--data", r#"{"name":"other"}"#])
            .ok("another call");
        if let Ok(line) = seen.recv_timeout(Duration::from_secs(2)) {
            break line;
        }
        assert!(
            Instant::now() < deadline,
            "sless logs --follow printed nothing"
        );
    };
    let _ = follow.kill();
    let _ = follow.wait();
    assert!(
        line.contains("[cli-follow] python handler saw followed"),
        "{line}"
    );
    user.eventually(&["logs", "node-hello"], |run| {
        run.code == 0 && run.stdout.contains("node handler saw file")
    });

    let described = user.sless(&["describe", "node-hello"]).ok("describe");
    for needle in [
        "Runtime:",
        "nodejs20",
        "GREETING=hi",
        "node-hello-http",
        "node-hello-cron",
        "*/5 * * * *",
        "POST",
        "VERSION",
        "COLD",
    ] {
        assert!(
            described.stdout.contains(needle),
            "{needle:?} not in\n{}",
            described.stdout
        );
    }

    user.sless(&["trigger", "disable", "py-hello-http"])
        .ok("disable");
    user.sless(&["invoke", "py-hello"]).fails_with(
        "invoke a stopped function",
        &[
            "503",
            "is stopped",
            "start it with: sless trigger enable py-hello-http",
        ],
    );
    let ls = user.sless(&["ls"]).ok("ls");
    assert_eq!(table_row(&ls.stdout, "py-hello").unwrap()[4], "http-off");
    user.sless(&["trigger", "enable", "py-hello-http"])
        .ok("enable");
    let answer = user
        .sless(&["invoke", "py-hello", "--data", r#"{"name":"again"}"#])
        .ok("invoke after enable")
        .json();
    assert_eq!(answer["greeting"], "hello, again");
    user.sless(&["trigger", "disable", "py-hello"])
        .fails_with("disable by function name", &["py-hello-http"]);

    let result = user
        .sless(&[
            "job",
            "run",
            "py-job",
            "--function",
            "py-hello",
            "--event",
            r#"{"name":"job"}"#,
        ])
        .ok("job run")
        .json();
    assert_eq!(result["greeting"], "hello, job");
    let result = user
        .sless(&[
            "job",
            "run",
            "py-job",
            "--function",
            "py-hello",
            "--event",
            r#"{"name":"second run"}"#,
        ])
        .ok("job run again")
        .json();
    assert_eq!(result["greeting"], "hello, second run");
    // A job of a function that does not exist is refused, and nothing is created: the
    // next run of that job name is its first.
    user.sless(&["job", "run", "orphan", "--function", "no-such-function"])
        .fails_with(
            "job of a missing function",
            &["function \"no-such-function\" not found", "sless deploy"],
        );
    let first = user
        .sless(&["job", "run", "orphan", "--function", "py-hello"])
        .ok("job run after the refusal");
    assert!(
        first
            .stderr
            .contains("job orphan: run 1 of function py-hello"),
        "{}",
        first.stderr
    );

    // A redeploy updates the function in place and keeps its trigger.
    std::fs::write(
        py.join("handler.py"),
        PYTHON_HANDLER.replace("hello, ", "hello again, "),
    )
    .unwrap();
    let redeployed = user
        .sless(&["deploy", &py_path, "--name", "py-hello"])
        .ok("redeploy");
    assert!(
        redeployed.stderr.contains("updated function"),
        "{}",
        redeployed.stderr
    );
    let answer = user
        .sless(&["invoke", "py-hello", "--data", r#"{"name":"v2"}"#])
        .ok("invoke v2")
        .json();
    assert_eq!(answer["greeting"], "hello again, v2");

    // login stores the connection; later commands need no environment.
    let mut stored = User::new(&server, user.token.clone(), &user.home);
    stored.use_env = false;
    stored
        .sless(&["ls"])
        .fails_with("ls before login", &["no token"]);
    stored
        .sless(&["login", "--endpoint", &server.base, "--token", &user.token])
        .ok("login");
    let config = user.home.join(".config/sless/config.json");
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    assert_eq!(saved["endpoint"], server.base.as_str());
    assert_eq!(saved["token"], user.token.as_str());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&config).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "config mode {mode:o}");
    }
    let ls = stored.sless(&["ls"]).ok("ls after login");
    assert!(table_row(&ls.stdout, "py-hello").is_some(), "{}", ls.stdout);

    user.sless(&["rm", "py-hello"]).ok("rm python");
    let removed = user.sless(&["rm", "node-hello"]).ok("rm node");
    assert!(
        removed.stderr.contains("node-hello-cron"),
        "{}",
        removed.stderr
    );
    let ls = user.sless(&["ls"]).ok("ls after rm");
    assert!(table_row(&ls.stdout, "py-hello").is_none(), "{}", ls.stdout);
    assert!(
        table_row(&ls.stdout, "node-hello").is_none(),
        "{}",
        ls.stdout
    );
    user.sless(&["trigger", "enable", "py-hello-http"])
        .fails_with("the trigger went with its function", &["no trigger named"]);
    user.sless(&["describe", "py-hello"])
        .fails_with("describe a removed function", &["no function or service"]);
}

#[test]
fn errors_a_person_can_act_on() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = start(&data);
    let home = dir.path().join("home");
    let user = User::new(&server, token(&data, "careless"), &home);

    let closed_port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let mut nowhere = User::new(&server, user.token.clone(), &home);
    nowhere.endpoint = format!("http://127.0.0.1:{closed_port}");
    nowhere.sless(&["ls"]).fails_with(
        "unreachable endpoint",
        &["cannot reach sless", "SLESS_ENDPOINT"],
    );

    let forged = sless_core::auth::issue_hs256(b"some other key", "careless", 600).unwrap();
    let forger = User::new(&server, forged, &home);
    forger.sless(&["ls"]).fails_with(
        "bad token",
        &["the token was refused", "sless token / sless login"],
    );

    let missing = dir.path().join("no-such-folder").display().to_string();
    user.sless(&[
        "deploy",
        &missing,
        "--name",
        "ghost",
        "--runtime",
        "python3.11",
    ])
    .fails_with("missing folder", &["does not exist"]);

    let src = dir.path().join("src");
    write_files(&src, &[("handler.py", PYTHON_HANDLER)]);
    let src_path = src.display().to_string();
    user.sless(&[
        "deploy",
        &src_path,
        "--name",
        "legacy",
        "--runtime",
        "cobol",
    ])
    .fails_with("unsupported runtime", &["cobol", "python3.11", "nodejs20"]);

    let broken = dir.path().join("broken");
    write_files(
        &broken,
        &[
            ("handler.py", PYTHON_HANDLER),
            (
                "requirements.txt",
                "sless-no-such-package-for-the-cli-test==9.9.9\n",
            ),
        ],
    );
    let broken_path = broken.display().to_string();
    let failed = user
        .sless(&[
            "deploy",
            &broken_path,
            "--name",
            "broken",
            "--runtime",
            "python3.11",
        ])
        .fails_with("build failure", &["failed to build", "Failed"]);
    let data_dir = data.display().to_string();
    let no_server_path = |text: &str| !text.contains(&data_dir) && !text.contains("/usr/");
    // The one error line is pip's, as `/fn` and describe say it.
    let last = failed.stderr.lines().last().unwrap();
    assert!(
        last.contains("\"broken\" failed to build: ERROR: ")
            && last.contains(
                "No matching distribution found for sless-no-such-package-for-the-cli-test"
            )
            && no_server_path(last),
        "{last}"
    );
    let invoked = user
        .sless(&["invoke", "broken"])
        .fails_with("calling a failed build", &["HTTP 503"]);
    let answer = invoked.stderr.lines().last().unwrap();
    assert!(
        answer.contains("failed to build: ERROR: ")
            && answer.contains("No matching distribution found")
            && no_server_path(answer),
        "{answer}"
    );
    // The log tail names what went wrong.
    let before_last: String = failed
        .stderr
        .lines()
        .rev()
        .skip(1)
        .take(20)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        before_last.contains("sless-no-such-package-for-the-cli-test"),
        "{}",
        failed.stderr
    );

    // Built, then the instance fails at import: the output never claims it is Ready.
    let syntax = dir.path().join("syntax");
    write_files(&syntax, &[("handler.py", "def handle(event:\n")]);
    let syntax_path = syntax.display().to_string();
    let failed = user
        .sless(&[
            "deploy",
            &syntax_path,
            "--name",
            "syntax",
            "--runtime",
            "python3.11",
        ])
        .fails_with(
            "a handler that does not import",
            &["function syntax: built", "SyntaxError", "sless logs syntax"],
        );
    assert!(
        !failed.stderr.contains("Ready"),
        "a deploy that fails claims Ready:\n{}",
        failed.stderr
    );
    let last = failed.stderr.lines().last().unwrap();
    assert!(
        last.contains("\"syntax\" was built but did not start")
            && last.contains("cannot load handler: SyntaxError: ")
            && no_server_path(last),
        "{last}"
    );
    let invoked = user
        .sless(&["invoke", "syntax"])
        .fails_with("calling a handler that does not load", &["HTTP 503"]);
    let answer = invoked.stderr.lines().last().unwrap();
    assert!(
        answer.contains("did not start: cannot load handler: SyntaxError: ")
            && no_server_path(answer),
        "{answer}"
    );
    let described = user.sless(&["describe", "syntax"]);
    assert!(
        described.stdout.contains("Failed")
            && described
                .stdout
                .contains("cannot load handler: SyntaxError: ")
            && no_server_path(&described.stdout),
        "{}",
        described.stdout
    );
}

#[test]
fn token_never_creates_a_key_the_server_would_not_know() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("sless-data");
    let output = Command::new(env!("CARGO_BIN_EXE_sless"))
        .args(["token", "--sub", "you", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(output.stdout.is_empty(), "a token was printed");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with("error: no signing key at")
            && stderr.contains("--data-dir")
            && stderr.lines().count() == 1,
        "one error line: {stderr}"
    );
    assert!(!data.exists(), "a data dir was created");
}

/// The version column of `sless versions`, newest first, and the starred one.
fn versions_listed(run: &Run) -> (Vec<String>, Option<String>) {
    let mut versions = Vec::new();
    let mut active = None;
    for line in run.stdout.lines().skip(1) {
        let cells: Vec<&str> = line.split_whitespace().collect();
        let (star, version) = match cells.as_slice() {
            ["*", version, ..] => (true, version),
            [version, ..] => (false, version),
            [] => continue,
        };
        versions.push(version.to_string());
        if star {
            active = Some(version.to_string());
        }
    }
    (versions, active)
}

#[test]
fn versions_and_rollback() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = common::start_with_env(&data, &[("SLESS_KEEP_VERSIONS", "2")]);
    let user = User::new(
        &server,
        token(&data, "cli-versions"),
        &dir.path().join("home"),
    );
    let code = dir.path().join("code");
    let path = code.display().to_string();
    let deploy = |answer: &str| {
        write_files(
            &code,
            &[(
                "handler.py",
                &format!("def handle(event):\n    return {answer:?}\n"),
            )],
        );
        user.sless(&["deploy", &path, "--name", "f", "--runtime", "python3.11"])
            .ok("deploy");
        user.sless(&["versions", "f"]).ok("versions")
    };
    let (first, _) = versions_listed(&deploy("one"));
    let again = deploy("one");
    assert_eq!(
        versions_listed(&again),
        (first.clone(), first.first().cloned()),
        "the same code deployed again is no new version:\n{}",
        again.stdout
    );
    deploy("two");
    let listed = deploy("three");
    let (kept, active) = versions_listed(&listed);
    assert_eq!(kept.len(), 2, "SLESS_KEEP_VERSIONS=2:\n{}", listed.stdout);
    assert!(!kept.contains(&first[0]), "{}", listed.stdout);
    assert_eq!(active.as_ref(), Some(&kept[0]), "{}", listed.stdout);
    assert!(
        listed.stdout.contains("cli-versions"),
        "who uploaded:\n{}",
        listed.stdout
    );

    let rolled = user.sless(&["rollback", "f", &kept[1]]).ok("rollback");
    assert_eq!(
        rolled.stdout.trim(),
        format!("function f: version {} serving", kept[1]),
        "{}",
        rolled.stderr
    );
    let answer = user.sless(&["invoke", "f"]).ok("invoke after the rollback");
    assert_eq!(answer.stdout.trim(), "\"two\"");
    let (_, active) = versions_listed(&user.sless(&["versions", "f"]).ok("versions"));
    assert_eq!(active.as_ref(), Some(&kept[1]));

    user.sless(&["rollback", "f", &first[0]]).fails_with(
        "rollback to a pruned version",
        &[&format!("no version {}", first[0]), &kept[0], &kept[1]],
    );
    user.sless(&["rollback", "nothing", &kept[0]]).fails_with(
        "rollback of an unknown name",
        &["no function or service named \"nothing\""],
    );
}
