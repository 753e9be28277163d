//! Standbys that any function takes: started before any function is known, bound at
//! its start to its code, scratch, env, limits and egress policy, and to nothing of
//! another function's. Real processes, real namespaces, real cgroups where the machine
//! has them.

#[path = "../../gateway/tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::api::Api;
use common::*;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Reports what it can reach; `note` is what it writes into its scratch.
const PROBE: &[u8] = br#"
import os, socket

def attempt(action):
    try:
        return action()
    except Exception as e:
        return type(e).__name__

def read(path):
    with open(path) as f:
        return f.read()

def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return "done"

def through_proxy():
    with socket.create_connection(("127.0.0.1", 3128), timeout=5) as s:
        s.sendall(b"CONNECT 10.1.2.3:80 HTTP/1.1\r\nHost: 10.1.2.3:80\r\n\r\n")
        return s.recv(64).decode().split("\r\n")[0]

def handle(event):
    me = os.environ["SLESS_FUNCTION_DIR"]
    home = os.environ["HOME"]
    return {
        "dir": me,
        "own code": attempt(lambda: read(os.path.join(me, "handler.py"))[:20]),
        "write own code": attempt(lambda: write(os.path.join(me, "handler.py"), "")),
        "write scratch": attempt(lambda: write(os.path.join(home, "note"), event["note"])),
        "TMPDIR is HOME": os.environ.get("TMPDIR") == home,
        "read the other's code": attempt(lambda: os.listdir(event["other_code"])),
        "read the other's scratch": attempt(lambda: read(event["other_note"])),
        "OWN": os.environ.get("OWN"),
        "proxy variable": os.environ.get("HTTPS_PROXY"),
        "proxy": attempt(through_proxy),
    }
"#;

fn builds(data: &Path, api: &Api<'_>, name: &str) -> PathBuf {
    data.join("builds")
        .join(&api.user.ns)
        .join(format!("function-{name}"))
}

/// Until the function has no instance left (scaled to zero).
async fn scaled_to_zero(runner: &sless_embedded::LocalRunner, api: &Api<'_>, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !runner.pids(&api.user.ns, name).is_empty() {
        assert!(Instant::now() < deadline, "{name} did not scale to zero");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A limit of the cgroup sless put the process in: the v1 hierarchy of `controller`,
/// else the unified one; `None` when the process is in no cgroup of sless's (the
/// machine lets sless use no such controller).
fn cgroup_value(pid: u32, controller: &str, v1_file: &str, v2_file: &str) -> Option<String> {
    let own = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let v1 = own.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        controllers
            .split(',')
            .any(|c| c == controller)
            .then(|| (Path::new("/sys/fs/cgroup").join(controller), path, v1_file))
    });
    let (root, path, file) = match v1 {
        Some(found) => found,
        None => {
            let path = own.lines().find_map(|l| l.strip_prefix("0::"))?;
            (PathBuf::from("/sys/fs/cgroup"), path, v2_file)
        }
    };
    if !path.contains("/sless-") {
        return None;
    }
    let value = std::fs::read_to_string(root.join(&path[1..]).join(file)).ok()?;
    Some(value.trim().to_string())
}

#[tokio::test]
async fn a_standby_bound_to_a_function_is_that_function_and_no_other() {
    // Long enough that both instances outlive the two calls and the checks of their
    // processes below, on a loaded machine too (300 ms lost the first one at times).
    let (server, runner) = TestServer::platform(|config| {
        config.scale_to_zero_after = Duration::from_secs(3);
    })
    .await;
    let data = server.data_dir().to_path_buf();
    let alpha = Api::new(&server, "alpha");
    let beta = Api::new(&server, "beta");
    let files: &[(&str, &[u8])] = &[("handler.py", PROBE)];
    alpha
        .deploy_spec(
            json!({"name": "first", "runtime": "python3.11", "memory_mb": 100,
                   "cpu_millis": 300, "disk_mb": 20, "egress": "none",
                   "env_vars": {"OWN": "alpha"}}),
            files,
        )
        .await;
    beta.deploy_spec(
        json!({"name": "second", "runtime": "python3.11", "memory_mb": 150,
               "env_vars": {"OWN": "beta"}}),
        files,
    )
    .await;
    scaled_to_zero(&runner, &alpha, "first").await;
    scaled_to_zero(&runner, &beta, "second").await;

    // Both scratches hold a note before either call, for the other to try.
    for (api, name) in [(&alpha, "first"), (&beta, "second")] {
        std::fs::write(
            builds(&data, api, name).join(".scratch").join("note"),
            "before",
        )
        .unwrap();
    }
    // Each start now binds a standby (the pool refills once a function exists).
    let call = |api: &'static str| {
        let (me, other, other_name) = match api {
            "alpha" => (&alpha, &beta, "second"),
            _ => (&beta, &alpha, "first"),
        };
        let event = json!({
            "note": format!("note of {api}"),
            "other_code": builds(&data, other, other_name),
            "other_note": builds(&data, other, other_name).join(".scratch").join("note"),
        });
        let name = if api == "alpha" { "first" } else { "second" };
        async move { me.invoke(name, event).await }
    };
    let (status, first) = call("alpha").await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let (status, second) = call("beta").await;
    assert_eq!(status, StatusCode::OK, "{second}");
    let first_pid = runner.pid(&alpha.user.ns, "first").unwrap();
    let second_pid = runner.pid(&beta.user.ns, "second").unwrap();

    let standbys = data.join("standby");
    for (outcome, name) in [(&first, "first"), (&second, "second")] {
        let dir = outcome["dir"].as_str().unwrap();
        assert!(
            Path::new(dir).starts_with(&standbys),
            "{name} was not served by a standby: {dir}"
        );
        assert_eq!(
            outcome["own code"], "\nimport os, socket\n\n",
            "{name}: {outcome}"
        );
        assert_eq!(
            outcome["write own code"], "PermissionError",
            "{name}: {outcome}"
        );
        assert_eq!(outcome["write scratch"], "done", "{name}: {outcome}");
        assert_eq!(outcome["TMPDIR is HOME"], true, "{name}: {outcome}");
        assert_eq!(
            outcome["read the other's code"], "PermissionError",
            "{name}: {outcome}"
        );
        assert_eq!(
            outcome["read the other's scratch"], "PermissionError",
            "{name}: {outcome}"
        );
    }
    // Its scratch is the function's own directory on disk, as a fresh process's is.
    for (api, name, who) in [(&alpha, "first", "alpha"), (&beta, "second", "beta")] {
        let note = builds(&data, api, name).join(".scratch").join("note");
        assert_eq!(
            std::fs::read_to_string(&note).unwrap(),
            format!("note of {who}")
        );
    }
    assert_eq!(first["OWN"], "alpha");
    assert_eq!(second["OWN"], "beta");
    // Egress none: no proxy variable and nothing listening; the default: its proxy
    // refuses a private address.
    assert_eq!(first["proxy variable"], Value::Null);
    assert_eq!(first["proxy"], "ConnectionRefusedError", "{first}");
    assert_eq!(second["proxy variable"], "http://127.0.0.1:3128");
    assert_eq!(second["proxy"], "HTTP/1.1 403 Forbidden", "{second}");
    let refusal = runner
        .logs()
        .tail(&beta.user.ns, "second", 100)
        .iter()
        .any(|l| l.line.contains("refuses 10.1.2.3:80"));
    assert!(refusal, "the refusal is in the function's log");

    // Its limits: the function's file size cap, memory and CPU in its cgroup.
    let limits = std::fs::read_to_string(format!("/proc/{first_pid}/limits")).unwrap();
    let file_size = limits
        .lines()
        .find(|l| l.starts_with("Max file size"))
        .unwrap();
    assert!(
        file_size.contains(&(20u64 << 20).to_string()),
        "{file_size}"
    );
    for (pid, mb) in [(first_pid, 100u64), (second_pid, 150)] {
        let memory = cgroup_value(pid, "memory", "memory.limit_in_bytes", "memory.max")
            .expect("the instance is in a memory cgroup");
        assert_eq!(memory, (mb << 20).to_string());
    }
    if let Some(quota) = cgroup_value(first_pid, "cpu", "cpu.cfs_quota_us", "cpu.max") {
        assert!(quota.starts_with("30000"), "cpu_millis 300: {quota}");
    }
}

/// Standbys of this test process (the runner runs in it) still waiting for a function:
/// their cwd is still their slot's `r/code`.
fn waiting_standbys() -> usize {
    let me = std::process::id().to_string();
    let standby = |entry: std::fs::DirEntry| {
        let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // "pid (comm) state ppid ...": comm may hold spaces.
        let parent = stat
            .rsplit(')')
            .next()?
            .split_whitespace()
            .nth(1)?
            .to_string();
        let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
        (parent == me && cwd.ends_with("r/code") && cwd.to_string_lossy().contains("/standby/"))
            .then_some(())
    };
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(standby)
        .count()
}

/// Polls until `done` holds of the number of waiting standbys; the last number.
async fn standbys_until(within: Duration, done: impl Fn(usize) -> bool) -> usize {
    let deadline = Instant::now() + within;
    loop {
        let count = waiting_standbys();
        if done(count) || Instant::now() > deadline {
            return count;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn first_calls_in_a_burst_grow_the_pool_which_shrinks_back_once_idle() {
    let (server, runner) = TestServer::platform(|config| {
        config.scale_to_zero_after = Duration::from_millis(300);
        config.standby_pool = 2;
    })
    .await;
    let api = Api::new(&server, "burst");
    let names = ["b0", "b1", "b2", "b3", "b4"];
    let handler: &[u8] = b"def handle(event):\n    return 'ok'\n";
    for name in names {
        api.deploy(name, "python3.11", &[("handler.py", handler)])
            .await;
    }
    for name in names {
        scaled_to_zero(&runner, &api, name).await;
    }
    for name in names {
        let (status, body) = api.invoke(name, json!({})).await;
        assert_eq!(status, StatusCode::OK, "{name}: {body}");
    }
    // Each take counts for 10 s: more than the idle pool waits for the next burst.
    let grown = standbys_until(Duration::from_secs(5), |n| n > 2).await;
    assert!(
        grown > 2,
        "the pool of 2 did not grow with the takes: {grown}"
    );
    let shrunk = standbys_until(Duration::from_secs(30), |n| n == 2).await;
    assert_eq!(
        shrunk, 2,
        "the pool did not shrink back once the takes stopped"
    );
}
