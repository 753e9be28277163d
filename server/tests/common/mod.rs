//! `sless up` as a real process on a random loopback port, for the binary's tests.
#![allow(dead_code)]

pub mod authz;
pub mod kube_cluster;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A running `sless up`; killed (SIGKILL) when dropped.
pub struct Sless {
    child: Child,
    pub base: String,
}

impl Drop for Sless {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Sless {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

pub fn start(data_dir: &Path) -> Sless {
    start_with_env(data_dir, &[])
}

/// `sless up` with extra environment variables (its `SLESS_*` settings).
pub fn start_with_env(data_dir: &Path, env: &[(&str, &str)]) -> Sless {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sless"))
        .args(["up", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .env_remove("SLESS_S3_ENDPOINT")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start sless");
    let base = base_once_up(&mut child);
    Sless { child, base }
}

/// The base URL `sless up` prints once it listens; its stdout is drained from then on
/// so the child never blocks on a full pipe.
pub fn base_once_up(child: &mut Child) -> String {
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let base = loop {
        let line = lines
            .next()
            .expect("sless exited before it was up")
            .unwrap();
        if let Some(rest) = line.strip_prefix("sless is up on ") {
            break rest.trim().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    base
}

/// A token signed with the data dir's key.
pub fn token(data_dir: &Path, sub: &str) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_sless"))
        .args(["token", "--sub", sub, "--data-dir"])
        .arg(data_dir)
        .output()
        .unwrap();
    assert!(output.status.success());
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

/// `GET url` with the token; the answer's JSON.
pub async fn get_json(client: &reqwest::Client, url: &str, token: &str) -> serde_json::Value {
    client
        .get(url)
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Uploads `handler.py` (zipped) as the code at `upload_url`, as `sless deploy` would.
pub async fn upload_handler(
    client: &reqwest::Client,
    upload_url: &str,
    token: &str,
    handler: &[u8],
) {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    zip.start_file("handler.py", zip::write::SimpleFileOptions::default())
        .unwrap();
    std::io::Write::write_all(&mut zip, handler).unwrap();
    let form = reqwest::multipart::Form::new().part(
        "code",
        reqwest::multipart::Part::bytes(zip.finish().unwrap().into_inner()).file_name("f.zip"),
    );
    let uploaded = client
        .post(upload_url)
        .bearer_auth(token)
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_eq!(uploaded.status(), 200, "{}", uploaded.text().await.unwrap());
}
