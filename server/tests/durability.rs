//! `sless up` as a real process: everything created survives SIGKILL and a restart.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

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

fn start(data_dir: &Path) -> Sless {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sless"))
        .args(["up", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .env_remove("SLESS_S3_ENDPOINT")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start sless");
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
    // Keep draining stdout so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Sless { child, base }
}

fn token(data_dir: &Path, sub: &str) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_sless"))
        .args(["token", "--sub", sub, "--data-dir"])
        .arg(data_dir)
        .output()
        .unwrap();
    assert!(output.status.success());
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

#[tokio::test]
async fn state_survives_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let first = start(&data);
    let token = token(&data, "dora");
    let ns = operator::model::namespace_for_sub("dora");
    let client = reqwest::Client::new();
    let api = |base: &str, path: &str| format!("{base}/v1/namespaces/{ns}/{path}");

    let created = client
        .post(api(&first.base, "functions"))
        .bearer_auth(&token)
        .json(&json!({"name": "keeper", "runtime": "python3.11"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    zip.start_file("handler.py", zip::write::SimpleFileOptions::default())
        .unwrap();
    std::io::Write::write_all(&mut zip, b"def handle(e):\n    return 'kept'\n").unwrap();
    let zip = zip.finish().unwrap().into_inner();
    let form = reqwest::multipart::Form::new().part(
        "code",
        reqwest::multipart::Part::bytes(zip).file_name("f.zip"),
    );
    let uploaded = client
        .post(api(&first.base, "functions/keeper/upload"))
        .bearer_auth(&token)
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_eq!(uploaded.status(), 200);
    let trigger = client
        .post(api(&first.base, "triggers"))
        .bearer_auth(&token)
        .json(
            &json!({"name": "every-minute", "type": "cron", "function_ref": "keeper",
                      "schedule": "* * * * *"}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(trigger.status(), 201);

    // SIGKILL: no chance to flush anything on the way out.
    drop(first);
    let second = start(&data);
    let function: Value = client
        .get(api(&second.base, "functions/keeper"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(function["name"], "keeper");
    assert!(function["s3_key"].as_str().is_some(), "{function}");
    let triggers: Value = client
        .get(api(&second.base, "triggers"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(triggers[0]["schedule"], "* * * * *");
    let source: Value = client
        .get(api(&second.base, "functions/keeper/source"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(source[0]["content"], "def handle(e):\n    return 'kept'\n");
}
