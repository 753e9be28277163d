//! Tenant code against the embedded platform: a hostile handler gets none of sless's
//! secrets nor other tenants' code, cannot signal or write outside its own directory,
//! and `memory_mb` is enforced with the reason recorded. Real processes throughout.

#[path = "../../gateway/tests/common/mod.rs"]
mod common;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::api::Api;
use common::*;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// A Python function with an http trigger, Ready.
async fn deploy(tenant: &Api<'_>, name: &str, memory_mb: u32, handler: &[u8]) -> Value {
    deploy_files(
        tenant,
        name,
        "python3.11",
        memory_mb,
        &[("handler.py", handler)],
    )
    .await
}

/// Like [`Api::deploy`], with a memory limit and an env var of its own.
async fn deploy_files(
    tenant: &Api<'_>,
    name: &str,
    runtime: &str,
    memory_mb: u32,
    files: &[(&str, &[u8])],
) -> Value {
    let spec = json!({"name": name, "runtime": runtime, "memory_mb": memory_mb,
                      "timeout_sec": 30, "env_vars": {"OWN_SETTING": "kept"}});
    tenant.deploy_spec(spec, files).await
}

const HOSTILE: &[u8] = br#"
import os, signal, socket

def attempt(action):
    try:
        action()
        return "done"
    except Exception as e:
        return type(e).__name__

def read(path):
    with open(path, "rb") as f:
        f.read(1)

def write(path):
    with open(path, "w") as f:
        f.write("pwned")

def listen_elsewhere():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))

def handle(event):
    me = os.environ["SLESS_FUNCTION_DIR"]
    data = os.path.abspath(os.path.join(me, "../../../.."))
    other = os.path.join(data, "builds", event["other_ns"], "function-" + event["other_name"])
    sless = os.getppid()
    tried = {
        "read the signing key": lambda: read(os.path.join(data, "jwt-hs256.key")),
        "read the database": lambda: read(os.path.join(data, "sless.db")),
        "list the data dir": lambda: os.listdir(data),
        "list another tenant's builds": lambda: os.listdir(other),
        "read another tenant's code": lambda: read(event["other_code"]),
        "list the uploads": lambda: os.listdir(os.path.join(data, "objects")),
        "read another tenant's upload": lambda: read(event["other_upload"]),
        "read sless's environ": lambda: read("/proc/%d/environ" % sless),
        "signal sless": lambda: os.kill(sless, signal.SIGURG),
        "signal another tenant": lambda: os.kill(event["other_pid"], signal.SIGURG),
        "write its own code": lambda: write(os.path.join(me, "handler.py")),
        "write the data dir": lambda: write(os.path.join(data, "planted")),
        "write /tmp": lambda: write("/tmp/sless-sandbox-escape"),
        "chown a file": lambda: os.chown(os.path.join(os.environ["HOME"], "note"), 1, 1),
        "listen on another port": listen_elsewhere,
        "list the instances' sockets": lambda: os.listdir(os.path.join(data, "run")),
        "read the host's socket table": lambda: read("/proc/net/unix"),
    }
    write(os.path.join(os.environ["HOME"], "note"))
    outcome = {name: attempt(action) for name, action in tried.items()}
    with open(os.path.join(os.environ["HOME"], "note")) as f:
        outcome["its own scratch"] = f.read()
    outcome["TMPDIR is HOME"] = os.environ.get("TMPDIR") == os.environ["HOME"]
    scratch = os.statvfs(os.environ["HOME"])
    outcome["scratch MB"] = scratch.f_blocks * scratch.f_frsize // (1 << 20)
    outcome["env"] = sorted(os.environ)
    return outcome
"#;

/// The one file under `root` whose path contains `part` and ends with `suffix`.
fn find(root: &Path, part: &str, suffix: &str) -> PathBuf {
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let text = path.to_string_lossy();
            if path.is_dir() {
                stack.push(path);
            } else if text.contains(part) && text.ends_with(suffix) {
                return path;
            }
        }
    }
    panic!("no {suffix} file of {part} under {}", root.display());
}

#[tokio::test]
async fn a_hostile_function_reaches_nothing_outside_its_sandbox() {
    let (server, runner) = TestServer::platform(|_| {}).await;
    let data = server.data_dir();
    // What `sless up` keeps in its data dir beside the store.
    std::fs::write(data.join("jwt-hs256.key"), "00".repeat(32)).unwrap();

    let victim = Api::new(&server, "victim");
    deploy(
        &victim,
        "secret",
        128,
        b"def handle(e):\n    return 'victim code'\n",
    )
    .await;
    assert_eq!(victim.invoke("secret", json!({})).await.0, StatusCode::OK);
    let other_code = find(&data.join("builds"), &victim.user.ns, "handler.py");
    let other_upload = find(&data.join("objects"), &victim.user.ns, ".zip");
    let other_pid = runner.pid(&victim.user.ns, "secret").unwrap();

    let attacker = Api::new(&server, "attacker");
    deploy(&attacker, "probe", 128, HOSTILE).await;
    let (status, outcome) = attacker
        .invoke(
            "probe",
            json!({"other_ns": victim.user.ns, "other_name": "secret",
                   "other_code": other_code, "other_upload": other_upload,
                   "other_pid": other_pid}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "it still serves: {outcome}");
    for attempt in [
        "read the signing key",
        "read the database",
        "list the data dir",
        "list another tenant's builds",
        "read another tenant's code",
        "list the uploads",
        "read another tenant's upload",
        "read sless's environ",
        "signal sless",
        "signal another tenant",
        "write its own code",
        "write the data dir",
        "write /tmp",
        "chown a file",
        "listen on another port",
        "list the instances' sockets",
        "read the host's socket table",
    ] {
        assert_eq!(outcome[attempt], "PermissionError", "{attempt}: {outcome}");
    }
    assert_eq!(outcome["its own scratch"], "pwned", "{outcome}");
    assert_eq!(outcome["TMPDIR is HOME"], true, "{outcome}");
    // The proxy variables point at its own egress proxy.
    let allowed = [
        "HOME",
        "HTTPS_PROXY",
        "HTTP_PROXY",
        "LANG",
        "NO_PROXY",
        "OWN_SETTING",
        "PATH",
        "SLESS_ENTRYPOINT",
        "SLESS_FUNCTION_DIR",
        "TMPDIR",
        "http_proxy",
        "https_proxy",
        "no_proxy",
    ];
    let env: Vec<&str> = outcome["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(env, allowed, "a fresh environment");
    assert!(!data.join("planted").exists());
    assert_eq!(
        std::fs::read_to_string(&other_code).unwrap(),
        "def handle(e):\n    return 'victim code'\n"
    );
    assert_eq!(
        victim.invoke("secret", json!({})).await,
        (StatusCode::OK, json!("victim code")),
        "the other tenant was not signalled away"
    );
}

/// npm runs a project's own install scripts: tenant code at build time.
const HOOKED_PACKAGE: &[u8] = br#"{"name": "fn", "version": "1.0.0", "scripts": {
  "preinstall": "cat ../../../../jwt-hs256.key > leaked.txt 2>&1; ls ../.. >> leaked.txt 2>&1; touch ../../../../planted 2>> leaked.txt; true"
}}"#;

const SHOW_LEAK: &[u8] = br#"
exports.handle = async () => require('fs').readFileSync(__dirname + '/leaked.txt', 'utf8');
"#;

#[tokio::test]
async fn a_dependency_install_is_sandboxed_too() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let key = "ab".repeat(32);
    std::fs::write(server.data_dir().join("jwt-hs256.key"), &key).unwrap();
    let tenant = Api::new(&server, "hooked");
    deploy_files(
        &tenant,
        "hook",
        "nodejs20",
        128,
        &[("package.json", HOOKED_PACKAGE), ("handler.js", SHOW_LEAK)],
    )
    .await;
    let (status, leaked) = tenant.invoke("hook", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{leaked}");
    let leaked = leaked.as_str().unwrap();
    assert!(
        !leaked.contains(&key),
        "the install hook read the key: {leaked}"
    );
    assert_eq!(
        leaked.matches("Permission denied").count(),
        3,
        "read, list and write were all refused: {leaked}"
    );
    assert!(!server.data_dir().join("planted").exists());
}

const HOG: &[u8] = br#"
def handle(event):
    if event.get("hog"):
        data = b"x" * (1 << 30)
        return len(data)
    return "small"
"#;

#[tokio::test]
async fn memory_mb_is_enforced_and_an_oom_kill_is_recorded() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let tenant = Api::new(&server, "hungry");
    deploy(&tenant, "hog", 64, HOG).await;
    assert_eq!(
        tenant.invoke("hog", json!({})).await,
        (StatusCode::OK, json!("small"))
    );

    let (status, body) = tenant.invoke("hog", json!({"hog": true})).await;
    assert_eq!(
        status,
        StatusCode::BAD_GATEWAY,
        "1 GiB in a 64 MB function: {body}"
    );
    let error = body["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("out of memory") && error.contains("64 MB"),
        "the failed call says why: {body}"
    );
    let logs = tenant
        .wait_until(
            "functions/hog/logs?tail=50",
            Duration::from_secs(120),
            |logs| logs.to_string().contains("out of memory"),
        )
        .await;
    let text = logs.to_string();
    assert!(
        text.contains("memory_mb limit of 64 MB") && text.contains("restarting"),
        "{logs}"
    );
    assert_eq!(
        tenant.invoke("hog", json!({})).await,
        (StatusCode::OK, json!("small")),
        "the instance restarted and serves calls under the limit"
    );

    tenant
        .post(
            "jobs",
            json!({"name": "greedy", "function_ref": "hog", "run_id": 1,
                   "event_json": "{\"hog\": true}"}),
        )
        .await;
    let job = tenant
        .wait_until("jobs/greedy", Duration::from_secs(120), |j| {
            j["phase"] == "Failed" || j["phase"] == "Succeeded"
        })
        .await;
    assert_eq!(job["phase"], "Failed", "{job}");
    assert!(
        job["message"]
            .as_str()
            .unwrap_or_default()
            .contains("out of memory"),
        "{job}"
    );
}

#[tokio::test]
async fn the_data_dir_is_private_to_sless() {
    use std::os::unix::fs::PermissionsExt;
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let tenant = Api::new(&server, "modes");
    deploy(&tenant, "plain", 128, b"def handle(e):\n    return 1\n").await;
    let data = server.data_dir();
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&data.join("sless.db")), 0o600);
    for dir in ["objects", "builds", "runtimes", "run"] {
        assert_eq!(mode(&data.join(dir)), 0o700, "{dir}");
    }
}

/// The inodes of the sockets process `pid` holds.
fn socket_inodes(pid: u32) -> HashSet<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|target| {
            let target = target.to_str()?;
            Some(
                target
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .to_owned(),
            )
        })
        .collect()
}

/// Inodes of the TCP sockets in LISTEN state in the network namespace of `pid`.
fn tcp_listeners(pid: u32) -> HashSet<String> {
    let mut inodes = HashSet::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields[3] == "0A" {
                inodes.insert(fields[9].to_owned());
            }
        }
    }
    inodes
}

/// Inode → path of the bound Unix sockets of the host's network namespace, where sless
/// binds the instances' sockets.
fn unix_sockets() -> HashMap<String, PathBuf> {
    let text = std::fs::read_to_string("/proc/self/net/unix").unwrap();
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            Some((fields[6].to_owned(), PathBuf::from(fields.get(7)?)))
        })
        .collect()
}

#[tokio::test]
async fn an_instance_listens_on_its_own_unix_socket_only() {
    let (server, runner) = TestServer::platform(|_| {}).await;
    let tenant = Api::new(&server, "sockets");
    deploy(&tenant, "plain", 128, b"def handle(e):\n    return 1\n").await;
    assert_eq!(tenant.invoke("plain", json!({})).await.0, StatusCode::OK);
    let pid = runner.pid(&tenant.user.ns, "plain").unwrap();

    let held = socket_inodes(pid);
    assert!(!held.is_empty(), "it holds its listening socket");
    let listening: Vec<_> = held.intersection(&tcp_listeners(pid)).cloned().collect();
    assert!(listening.is_empty(), "TCP listeners {listening:?}");
    let unix = unix_sockets();
    let paths: HashSet<&PathBuf> = held.iter().filter_map(|inode| unix.get(inode)).collect();
    let run = server.data_dir().join("run");
    assert_eq!(paths.len(), 1, "{paths:?}");
    let socket = paths.into_iter().next().unwrap().clone();
    assert_eq!(socket.parent(), Some(run.as_path()), "{}", socket.display());

    // The socket goes with its instance.
    let (status, _) = tenant
        .send(reqwest::Method::DELETE, "functions/plain", None)
        .await;
    assert!(status.is_success(), "{status}");
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while socket.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "{} is left",
            socket.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs `function` once as job `job` with `event`; its final status.
async fn run_job(tenant: &Api<'_>, job: &str, function: &str, event: Value) -> Value {
    tenant
        .post(
            "jobs",
            json!({"name": job, "function_ref": function, "run_id": 1,
                   "event_json": event.to_string()}),
        )
        .await;
    tenant
        .wait_until(&format!("jobs/{job}"), Duration::from_secs(120), |j| {
            j["phase"] == "Failed" || j["phase"] == "Succeeded"
        })
        .await
}

/// What a successful job returned (its last stdout line).
fn job_result(job: &Value) -> Value {
    assert_eq!(job["phase"], "Succeeded", "{job}");
    serde_json::from_str(job["message"].as_str().unwrap()).unwrap()
}

const SCANNER: &[u8] = br#"
import errno, os, socket

def connect(port, timeout):
    with socket.socket() as s:
        s.settimeout(timeout)
        code = s.connect_ex(("127.0.0.1", port))
        # A connect may pick the very port it dials as its own and meet itself.
        if code == 0 and s.getsockname()[1] == port:
            return errno.ECONNREFUSED
        return code

held = []

def handle(event):
    if not event.get("scan"):
        # The victim listens on a TCP port of its own (in its own namespace).
        if not held:
            held.append(socket.socket())
            held[0].listen()
        return str(held[0].getsockname()[1])
    found = [p for p in range(1, 65536) if connect(p, 0.2) == 0]
    tried = {str(p): errno.errorcode.get(connect(p, 2), "connected") for p in event["ports"]}
    return {"open": found, "tried": tried}
"#;

#[tokio::test]
async fn a_job_scanning_loopback_finds_no_instance_and_none_of_sless_ports() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let victim = Api::new(&server, "scanned");
    deploy(&victim, "target", 128, SCANNER).await;
    let (status, victim_port) = victim.invoke("target", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{victim_port}");
    let victim_port: u16 = victim_port.as_str().unwrap().parse().unwrap();
    // Stand-ins for the broker and any other service on the host's loopback.
    let host_services = [
        std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
        std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
    ];
    let api_port: u16 = server.base.rsplit(':').next().unwrap().parse().unwrap();
    let mut ports = vec![api_port, victim_port];
    ports.extend(host_services.iter().map(|l| l.local_addr().unwrap().port()));

    let attacker = Api::new(&server, "scanner");
    deploy(&attacker, "scan", 128, SCANNER).await;
    let job = run_job(
        &attacker,
        "sweep",
        "scan",
        json!({"scan": true, "ports": ports}),
    )
    .await;
    let outcome = job_result(&job);
    // The one port open in its namespace is its own egress proxy.
    assert_eq!(
        outcome["open"],
        json!([sless_embedded::egress::PROXY_PORT]),
        "open ports seen: {outcome}"
    );
    for port in ports {
        assert_eq!(
            outcome["tried"][port.to_string()],
            "ECONNREFUSED",
            "port {port} (API {api_port}, instance {victim_port}): {outcome}"
        );
    }
    assert_eq!(
        victim.invoke("target", json!({})).await.0,
        StatusCode::OK,
        "the host's services are all still there"
    );
}

const LISTENER: &[u8] = br#"
import os, socket, time

def handle(event):
    s = socket.socket()
    s.listen()
    port = s.getsockname()[1]
    with open(os.path.join(os.environ["HOME"], "port"), "w") as f:
        f.write(str(port))
    time.sleep(event["hold"])
    return port
"#;

/// The port a job process wrote to `port` in its scratch dir, seen through its own
/// mount namespace (`/proc/<pid>/root`).
fn port_written_under(scratch: &Path) -> Option<u16> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let file = entry
                .path()
                .join("root")
                .join(scratch.strip_prefix("/").unwrap())
                .join("port");
            std::fs::read_to_string(file).ok()?.parse().ok()
        })
}

#[tokio::test]
async fn listen_without_bind_in_a_job_is_not_reachable_from_the_host() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let tenant = Api::new(&server, "autobind");
    deploy(&tenant, "listener", 128, LISTENER).await;
    let scratch = server
        .data_dir()
        .join("builds")
        .join(&tenant.user.ns)
        .join("job-hold")
        .join(".scratch");
    let job = {
        let tenant = &tenant;
        let run = run_job(tenant, "hold", "listener", json!({"hold": 8}));
        tokio::pin!(run);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let port = loop {
            if let Some(port) = port_written_under(&scratch) {
                break port;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the job never listened"
            );
            tokio::select! {
                job = &mut run => panic!("the job ended first: {job}"),
                () = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        };
        for host in ["127.0.0.1", "0.0.0.0"] {
            let reached = tokio::time::timeout(
                Duration::from_secs(2),
                tokio::net::TcpStream::connect((host, port)),
            )
            .await;
            assert!(
                !matches!(reached, Ok(Ok(_))),
                "the job's listener on {host}:{port} was reachable from the host"
            );
        }
        (run.await, port)
    };
    assert_eq!(
        job_result(&job.0),
        json!(job.1),
        "the job listened on that port"
    );
}

const FILLER: &[u8] = br#"
import errno, os

def handle(event):
    if not event.get("fill"):
        return "alive"
    chunk = b"x" * (1 << 20)
    written = 0
    try:
        with open(os.path.join(os.environ["HOME"], "fill"), "wb") as f:
            while written < 2048:
                f.write(chunk)
                f.flush()
                written += 1
    except OSError as e:
        return {"error": errno.errorcode[e.errno], "written_mb": written}
    return {"error": None, "written_mb": written}
"#;

#[tokio::test]
async fn two_gigabytes_written_to_scratch_stop_at_the_quota() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let tenant = Api::new(&server, "filler");
    // tmpfs pages count against memory_mb: room for the whole quota.
    deploy(&tenant, "fill", 1024, FILLER).await;
    let job = run_job(&tenant, "disk", "fill", json!({"fill": true})).await;
    let outcome = job_result(&job);
    assert_eq!(outcome["error"], "ENOSPC", "{outcome}");
    let written = outcome["written_mb"].as_u64().unwrap();
    assert!(
        (500..=512).contains(&written),
        "stopped at the 512 MB quota, not at {written} MB"
    );
    let on_disk = tenant_scratch_bytes(&server.data_dir().join("builds").join(&tenant.user.ns));
    assert_eq!(on_disk, 0, "nothing reached the data dir's disk");
    assert_eq!(
        tenant.invoke("fill", json!({})).await,
        (StatusCode::OK, json!("alive")),
        "sless and the function still serve"
    );
}

/// Bytes in regular files under `dir`, as sless's file system holds them.
fn tenant_scratch_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                stack.push(entry.path());
            } else if entry.path().to_string_lossy().contains(".scratch") {
                total += meta.len();
            }
        }
    }
    total
}

/// An npm install hook that tries the host's loopback and records what happened.
fn phoning_package(port: u16) -> String {
    format!(
        r#"{{"name": "fn", "version": "1.0.0", "scripts": {{
  "preinstall": "node -e \"require('net').connect({port}, '127.0.0.1').on('connect', () => {{ require('fs').writeFileSync('reached.txt', 'connected'); process.exit(0) }}).on('error', e => require('fs').writeFileSync('reached.txt', e.code))\""
}}}}"#
    )
}

const SHOW_REACHED: &[u8] = br#"
exports.handle = async () => require('fs').readFileSync(__dirname + '/reached.txt', 'utf8');
"#;

#[tokio::test]
async fn a_dependency_install_cannot_reach_the_hosts_loopback() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let host_service = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = host_service.local_addr().unwrap().port();
    let tenant = Api::new(&server, "phoning");
    let package = phoning_package(port);
    deploy_files(
        &tenant,
        "hook",
        "nodejs20",
        128,
        &[
            ("package.json", package.as_bytes()),
            ("handler.js", SHOW_REACHED),
        ],
    )
    .await;
    let (status, reached) = tenant.invoke("hook", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{reached}");
    assert_eq!(reached, "ECONNREFUSED", "the install hook reached the host");
    assert!(
        tokio::time::timeout(Duration::from_millis(100), host_service.accept())
            .await
            .is_err(),
        "no connection arrived"
    );
}
