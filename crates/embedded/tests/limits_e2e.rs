//! CPU and process limits against real processes: a fork bomb and a 10,000-thread
//! attempt stop at the pids limit (logged, recorded, sless unharmed), a spinning
//! function gets about its `cpu_millis`, and the fields are checked at the API.

#[path = "../../gateway/tests/common/mod.rs"]
mod common;

use std::time::Duration;

use common::api::Api;
use common::*;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Forks (or starts threads) until refused, keeps them alive meanwhile, and reports
/// how many it got; `die` then ends the instance.
const GREEDY: &[u8] = br#"
import os, threading, time

def forks():
    children, refused = [], None
    for _ in range(1000):
        try:
            pid = os.fork()
        except OSError as e:
            refused = e.strerror
            break
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        children.append(pid)
    for pid in children:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    return len(children), refused

def threads():
    stop = threading.Event()
    started, refused = [], None
    for _ in range(10000):
        t = threading.Thread(target=stop.wait)
        try:
            t.start()
        except RuntimeError as e:
            refused = str(e)
            break
        started.append(t)
    stop.set()
    for t in started:
        t.join()
    return len(started), refused

def handle(event):
    what = event.get("what")
    if what is None:
        return "calm"
    count, refused = forks() if what == "forks" else threads()
    if event.get("die"):
        os._exit(3)
    return {"count": count, "refused": refused}
"#;

async fn deploy(tenant: &Api<'_>, name: &str, extra: Value, handler: &[u8]) {
    let mut spec = json!({"name": name, "runtime": "python3.11", "timeout_sec": 60});
    spec.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    tenant.deploy_spec(spec, &[("handler.py", handler)]).await;
}

#[tokio::test]
async fn a_fork_bomb_and_ten_thousand_threads_stop_at_the_pids_limit() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let tenant = Api::new(&server, "forky");
    // Room for 255 Python processes: the memory limit must not end it first.
    deploy(&tenant, "greedy", json!({"memory_mb": 2048}), GREEDY).await;

    for what in ["forks", "threads"] {
        let (status, body) = tenant.invoke("greedy", json!({"what": what})).await;
        let logs = tenant.get("functions/greedy/logs?tail=20").await;
        assert_eq!(status, StatusCode::OK, "{what}: {body} {logs}");
        let count = body["count"].as_u64().unwrap();
        assert!(
            (10..256).contains(&count),
            "{what}: {count} started before the limit refused: {body}"
        );
        assert!(body["refused"].is_string(), "{what} was refused: {body}");
    }
    let logs = tenant
        .wait_until(
            "functions/greedy/logs?tail=50",
            Duration::from_secs(10),
            |logs| logs.to_string().contains("pids limit 256 reached"),
        )
        .await;
    assert!(
        logs.to_string()
            .contains("pids limit 256 reached: fork/thread creation failed"),
        "{logs}"
    );
    assert_eq!(
        tenant.invoke("greedy", json!({})).await,
        (StatusCode::OK, json!("calm")),
        "the instance still serves"
    );
    let health = server
        .client
        .get(server.url("/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), StatusCode::OK, "sless survives");

    // An instance that dies after hitting the limit says so in its restart line.
    let (status, _) = tenant
        .invoke("greedy", json!({"what": "forks", "die": true}))
        .await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    tenant
        .wait_until(
            "functions/greedy/logs?tail=50",
            Duration::from_secs(30),
            |logs| {
                let text = logs.to_string();
                text.contains("exited with pids limit 256 reached") && text.contains("restarting")
            },
        )
        .await;

    // A job run that fails after hitting the limit is recorded with it.
    tenant
        .post(
            "jobs",
            json!({"name": "bomb", "function_ref": "greedy", "run_id": 1,
                   "event_json": "{\"what\": \"forks\", \"die\": true}"}),
        )
        .await;
    let job = tenant
        .wait_until("jobs/bomb", Duration::from_secs(60), |j| {
            j["phase"] == "Failed" || j["phase"] == "Succeeded"
        })
        .await;
    assert_eq!(job["phase"], "Failed", "{job}");
    let message = job["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("pids limit 256 reached"), "{job}");
    assert!(
        job["log_tail"]
            .as_str()
            .unwrap_or_default()
            .contains("[sless] pids limit 256 reached"),
        "{job}"
    );
}

/// Spins for `seconds` of wall time; answers the share of one core it got.
const SPINNER: &[u8] = br#"
import time

def handle(event):
    wall = time.monotonic()
    cpu = time.process_time()
    while time.monotonic() - wall < event.get("seconds", 2):
        pass
    return (time.process_time() - cpu) / (time.monotonic() - wall)
"#;

#[tokio::test]
async fn a_spinning_function_gets_its_cpu_millis() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let tenant = Api::new(&server, "spinny");
    deploy(&tenant, "slow", json!({"cpu_millis": 200}), SPINNER).await;
    deploy(&tenant, "fast", json!({}), SPINNER).await;

    // Both spin at once, so a busy machine slows both alike.
    let ((status, slow), (fast_status, fast)) = tokio::join!(
        tenant.invoke("slow", json!({"seconds": 2})),
        tenant.invoke("fast", json!({"seconds": 2})),
    );
    assert_eq!((status, fast_status), (StatusCode::OK, StatusCode::OK));
    let (slow, fast) = (slow.as_f64().unwrap(), fast.as_f64().unwrap());
    // The cap is the feature: at most about 20% of a core. A loaded machine may give
    // less than the quota, so the lower bound only says it ran at all.
    assert!(
        (0.02..0.35).contains(&slow),
        "cpu_millis 200 should get at most about 20% of a core, got {:.0}%",
        slow * 100.0
    );
    // The default, one core, is not throttled to that.
    assert!(
        fast > slow * 1.5,
        "one core is not capped at 20%: got {fast:.2} of a core beside {slow:.2}"
    );
}

#[tokio::test]
async fn cpu_millis_and_disk_mb_are_checked_and_defaulted() {
    let server = TestServer::start().await;
    let tenant = Api::new(&server, "fields");
    for (field, value, rule) in [
        ("cpu_millis", 49, "between 50 and 16000"),
        ("cpu_millis", 16_001, "between 50 and 16000"),
        ("cpu_millis", 0, "between 50 and 16000"),
        ("disk_mb", 15, "between 16 and 65536"),
        ("disk_mb", 100_000, "between 16 and 65536"),
    ] {
        let body = json!({"name": "f", "runtime": "python3.11", field: value});
        let (status, error) = tenant
            .send(reqwest::Method::POST, "functions", Some(body))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{field}={value}: {error}");
        let text = error["error"].as_str().unwrap_or_default();
        assert!(
            text.starts_with(&format!("{field}: {value}")) && text.contains(rule),
            "{error}"
        );
        let job = json!({"name": "j", "function_ref": "f", field: value});
        let (status, error) = tenant.send(reqwest::Method::POST, "jobs", Some(job)).await;
        assert_eq!(
            status,
            StatusCode::BAD_REQUEST,
            "job {field}={value}: {error}"
        );
    }
    let (status, error) = tenant
        .send(
            reqwest::Method::POST,
            "functions",
            Some(json!({"name": "f", "runtime": "python3.11", "cpu_millis": "lots"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");

    let created = tenant
        .post("functions", json!({"name": "f", "runtime": "python3.11"}))
        .await;
    assert_eq!(
        (created["cpu_millis"].clone(), created["disk_mb"].clone()),
        (json!(1000), json!(512))
    );
    let (status, replaced) = tenant
        .send(
            reqwest::Method::PUT,
            "functions/f",
            Some(
                json!({"runtime": "python3.11", "entrypoint": "handler.handle",
                        "memory_mb": 128, "cpu_millis": 250, "disk_mb": 64}),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{replaced}");
    assert_eq!(
        (replaced["cpu_millis"].clone(), replaced["disk_mb"].clone()),
        (json!(250), json!(64))
    );
    assert_eq!(tenant.get("functions/f").await["cpu_millis"], 250);
    // A PUT that leaves them out (a client from before the fields) gets the defaults.
    let (status, replaced) = tenant
        .send(
            reqwest::Method::PUT,
            "functions/f",
            Some(
                json!({"runtime": "python3.11", "entrypoint": "handler.handle",
                        "memory_mb": 128}),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{replaced}");
    assert_eq!(
        (replaced["cpu_millis"].clone(), replaced["disk_mb"].clone()),
        (json!(1000), json!(512))
    );
    let job = tenant
        .post(
            "jobs",
            json!({"name": "j", "function_ref": "f", "cpu_millis": 500}),
        )
        .await;
    assert_eq!(
        (job["cpu_millis"].clone(), job["disk_mb"].clone()),
        (json!(500), Value::Null)
    );
}

/// Fills its scratch (HOME): `one` grows a single file, `many` writes 4 MB files, up to
/// 2 GB in all; answers how far it got and what stopped it.
const FILLER: &[u8] = br#"
import os

def handle(event):
    what = event.get("what")
    if what is None:
        return sorted(os.listdir(os.environ["HOME"]))
    chunk = b"x" * (1 << 20)
    written, error = 0, None
    try:
        if what == "one":
            with open(os.path.join(os.environ["HOME"], "big"), "wb") as f:
                while written < 2048:
                    f.write(chunk)
                    f.flush()
                    written += 1
        else:
            while written < 2048:
                with open(os.path.join(os.environ["HOME"], f"part-{written}"), "wb") as f:
                    for _ in range(4):
                        f.write(chunk)
                written += 4
    except OSError as e:
        error = e.strerror
    return {"written_mb": written, "error": error}
"#;

#[tokio::test]
async fn scratch_stops_at_disk_mb() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let tenant = Api::new(&server, "filler");
    deploy(
        &tenant,
        "filler",
        json!({"disk_mb": 64, "memory_mb": 256}),
        FILLER,
    )
    .await;
    let scratch = server
        .data_dir()
        .join("builds")
        .join(&tenant.user.ns)
        .join("function-filler/.scratch");

    // One file cannot grow past the limit: the write fails, the instance lives on.
    let (status, body) = tenant.invoke("filler", json!({"what": "one"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["error"], "File too large", "{body}");
    assert!(body["written_mb"].as_u64().unwrap() <= 64, "{body}");
    assert!(std::fs::metadata(scratch.join("big")).unwrap().len() <= 64 << 20);
    std::fs::remove_file(scratch.join("big")).unwrap();

    // Many files: the instance is stopped soon past the limit, long before 2 GB, and
    // restarts with an empty scratch.
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sampler = {
        let (scratch, peak) = (scratch.clone(), peak.clone());
        tokio::spawn(async move {
            loop {
                let used = du(&scratch);
                peak.fetch_max(used, std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let (status, body) = tenant.invoke("filler", json!({"what": "many"})).await;
    sampler.abort();
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    let peak_mb = peak.load(std::sync::atomic::Ordering::Relaxed) >> 20;
    assert!(
        (64..512).contains(&peak_mb),
        "the scratch peaked at {peak_mb} MB"
    );
    let logs = tenant
        .wait_until(
            "functions/filler/logs?tail=50",
            Duration::from_secs(30),
            |logs| logs.to_string().contains("its scratch emptied"),
        )
        .await;
    let text = logs.to_string();
    assert!(
        text.contains("exited with scratch full: ") && text.contains("over disk_mb (64 MB)"),
        "{logs}"
    );
    assert_eq!(
        tenant.invoke("filler", json!({})).await,
        (StatusCode::OK, json!([])),
        "the restarted instance serves with an empty scratch"
    );
}

/// Bytes allocated under `dir`, as `du` counts them.
fn du(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.blocks() * 512)
                .sum()
        })
        .unwrap_or(0)
}
