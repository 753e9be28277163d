//! `sless up` as an ordinary user: the namespaces are made through a user namespace, a
//! function serves, and a job run is cut off from the host's loopback.

mod common;

use std::os::unix::fs::chown;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The ordinary user sless runs as here (`nobody`) when the test runs as root.
const UID: u32 = 65534;

/// `sless up` as [`UID`] (as the current user when that is not root); killed on drop.
struct Unprivileged {
    child: Child,
    base: String,
}

impl Drop for Unprivileged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_unprivileged(data_dir: &Path) -> Unprivileged {
    let sless = env!("CARGO_BIN_EXE_sless");
    // SAFETY: geteuid has no preconditions.
    let mut command = if unsafe { libc::geteuid() } == 0 {
        let parent = data_dir.parent().unwrap();
        std::fs::create_dir_all(data_dir).unwrap();
        chown(parent, Some(UID), Some(UID)).unwrap();
        chown(data_dir, Some(UID), Some(UID)).unwrap();
        let mut command = Command::new("setpriv");
        command.args([
            &format!("--reuid={UID}"),
            &format!("--regid={UID}"),
            "--clear-groups",
            sless,
        ]);
        command
    } else {
        Command::new(sless)
    };
    let mut child = command
        .args(["up", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .env_remove("SLESS_S3_ENDPOINT")
        .env_remove("SLESS_ALLOW_UNSANDBOXED")
        // What an ordinary user's PATH holds: root's pyenv is not readable to it.
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .current_dir("/")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start sless through setpriv");
    let base = common::base_once_up(&mut child);
    Unprivileged { child, base }
}

const HANDLER: &[u8] = br#"
import errno, os, socket

def handle(event):
    scratch = os.statvfs(os.environ["HOME"])
    answer = {"uid": os.getuid(),
              "scratch_mb": scratch.f_blocks * scratch.f_frsize // (1 << 20)}
    if "port" in event:
        with socket.socket() as s:
            s.settimeout(2)
            code = s.connect_ex(("127.0.0.1", event["port"]))
        answer["api"] = errno.errorcode.get(code, "connected")
    return answer
"#;

#[tokio::test]
async fn sless_up_as_an_ordinary_user_serves_functions_in_their_namespaces() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = start_unprivileged(&data);
    let token = common::token(&data, "nobody-user");
    let ns = sless_core::model::namespace_for_sub("nobody-user");
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let api = |path: &str| format!("{}/v1/namespaces/{ns}/{path}", server.base);
    let post = |path: &str, body: Value| {
        client
            .post(api(path))
            .bearer_auth(&token)
            .json(&body)
            .send()
    };
    assert_eq!(
        post(
            "functions",
            json!({"name": "plain", "runtime": "python3.11"})
        )
        .await
        .unwrap()
        .status(),
        201
    );
    assert_eq!(
        post(
            "triggers",
            json!({"name": "plain-http", "type": "http", "function_ref": "plain"})
        )
        .await
        .unwrap()
        .status(),
        201
    );
    common::upload_handler(&client, &api("functions/plain/upload"), &token, HANDLER).await;

    let url = format!("{}/fn/{ns}/plain", server.base);
    let deadline = Instant::now() + Duration::from_secs(120);
    let answer: Value = loop {
        let response = client.post(&url).json(&json!({})).send().await.unwrap();
        if response.status() == 200 {
            break response.json().await.unwrap();
        }
        let function: Value = common::get_json(&client, &api("functions/plain"), &token).await;
        assert!(
            Instant::now() < deadline && function["phase"] != "Failed",
            "the function never served: {function}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // SAFETY: geteuid has no preconditions.
    let uid = match unsafe { libc::geteuid() } {
        0 => UID,
        own => own,
    };
    assert_eq!(answer["uid"], uid, "{answer}");

    let api_port: u16 = server.base.rsplit(':').next().unwrap().parse().unwrap();
    assert_eq!(
        post(
            "jobs",
            json!({"name": "probe", "function_ref": "plain", "run_id": 1,
                   "event_json": json!({"port": api_port}).to_string()})
        )
        .await
        .unwrap()
        .status(),
        201
    );
    let job = loop {
        let job: Value = common::get_json(&client, &api("jobs/probe"), &token).await;
        if job["phase"] == "Succeeded" || job["phase"] == "Failed" {
            break job;
        }
        assert!(Instant::now() < deadline, "the job never finished: {job}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(job["phase"], "Succeeded", "{job}");
    let result: Value = serde_json::from_str(job["message"].as_str().unwrap()).unwrap();
    assert_eq!(
        result["api"], "ECONNREFUSED",
        "the job reached sless's API port: {result}"
    );
    assert_eq!(result["uid"], uid, "{result}");
}
