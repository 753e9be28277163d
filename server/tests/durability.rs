//! `sless up` as a real process: everything created survives SIGKILL and a restart.

mod common;

use common::{start, token, upload_handler};

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

#[tokio::test]
async fn state_survives_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let first = start(&data);
    let token = token(&data, "dora");
    let ns = sless_core::model::namespace_for_sub("dora");
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
    upload_handler(
        &client,
        &api(&first.base, "functions/keeper/upload"),
        &token,
        b"def handle(e):\n    return 'kept'\n",
    )
    .await;
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
    let function: Value =
        common::get_json(&client, &api(&second.base, "functions/keeper"), &token).await;
    assert_eq!(function["name"], "keeper");
    assert!(function["s3_key"].as_str().is_some(), "{function}");
    let triggers: Value = common::get_json(&client, &api(&second.base, "triggers"), &token).await;
    assert_eq!(triggers[0]["schedule"], "* * * * *");
    let source: Value = common::get_json(
        &client,
        &api(&second.base, "functions/keeper/source"),
        &token,
    )
    .await;
    assert_eq!(source[0]["content"], "def handle(e):\n    return 'kept'\n");
}

async fn wait_for_answer(
    client: &reqwest::Client,
    url: &str,
    within: std::time::Duration,
) -> Value {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Ok(response) = client.post(url).send().await
            && response.status() == 200
        {
            return response.json().await.unwrap();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{url} never answered 200"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn functions_come_back_after_sigkill_without_a_new_upload() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let first = start(&data);
    let token = token(&data, "erin");
    let ns = sless_core::model::namespace_for_sub("erin");
    let client = reqwest::Client::new();
    let api = |base: &str, path: &str| format!("{base}/v1/namespaces/{ns}/{path}");
    for (path, body) in [
        (
            "functions",
            json!({"name": "survivor", "runtime": "python3.11"}),
        ),
        (
            "triggers",
            json!({"name": "survivor-http", "type": "http", "function_ref": "survivor"}),
        ),
        ("services", json!({"name": "always", "runtime": "nodejs20"})),
    ] {
        let response = client
            .post(api(&first.base, path))
            .bearer_auth(&token)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201);
    }
    for (path, file, code) in [
        (
            "functions/survivor/upload",
            "handler.py",
            "def handle(e):\n    return 'still here'\n",
        ),
        (
            "services/always/upload",
            "handler.js",
            "exports.handle = async () => 'always on';\n",
        ),
    ] {
        let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        zip.start_file(file, zip::write::SimpleFileOptions::default())
            .unwrap();
        std::io::Write::write_all(&mut zip, code.as_bytes()).unwrap();
        let form = reqwest::multipart::Form::new().part(
            "code",
            reqwest::multipart::Part::bytes(zip.finish().unwrap().into_inner()).file_name("c.zip"),
        );
        let response = client
            .post(api(&first.base, path))
            .bearer_auth(&token)
            .multipart(form)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
    let limit = std::time::Duration::from_secs(60);
    let function_url = |base: &str| format!("{base}/fn/{ns}/survivor");
    let service_url = |base: &str| format!("{base}/fn/{ns}/always");
    assert_eq!(
        wait_for_answer(&client, &function_url(&first.base), limit).await,
        json!("still here")
    );
    assert_eq!(
        wait_for_answer(&client, &service_url(&first.base), limit).await,
        json!("always on")
    );
    let s3_key = {
        let f: Value =
            common::get_json(&client, &api(&first.base, "functions/survivor"), &token).await;
        f["s3_key"].clone()
    };

    drop(first);
    let second = start(&data);
    assert_eq!(
        wait_for_answer(&client, &function_url(&second.base), limit).await,
        json!("still here")
    );
    assert_eq!(
        wait_for_answer(&client, &service_url(&second.base), limit).await,
        json!("always on")
    );
    let after: Value =
        common::get_json(&client, &api(&second.base, "functions/survivor"), &token).await;
    assert_eq!(after["s3_key"], s3_key, "served from the same upload");
    assert_eq!(after["phase"], "Ready");
}

#[tokio::test]
async fn demo_deploys_the_examples() {
    // As the README runs it: the default, relative data dir under the working directory.
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sless"))
        .args(["up", "--demo", "--listen", "127.0.0.1:0"])
        .current_dir(dir.path())
        .env_remove("SLESS_DATA_DIR")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    let mut urls = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while urls.len() < 3 {
        let line = receiver
            .recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
            .expect("the demo did not print its URLs in time");
        assert!(!line.contains("failed"), "{line}");
        if let Some(url) = line.split_whitespace().find(|w| w.contains("/fn/"))
            && line.starts_with("demo: ")
            && !line.contains("curl")
        {
            urls.push(url.to_string());
        }
    }
    let client = reqwest::Client::new();
    let hello = urls
        .iter()
        .find(|u| u.ends_with("/hello-python"))
        .expect("hello-python URL");
    let answer: Value = wait_for_answer(&client, hello, std::time::Duration::from_secs(30)).await;
    assert_eq!(answer["message"], "hello, world!");
    let clock = urls
        .iter()
        .find(|u| u.ends_with("/clock-service"))
        .expect("clock-service URL");
    let answer = wait_for_answer(&client, clock, std::time::Duration::from_secs(30)).await;
    assert!(answer["now"].is_string(), "{answer}");

    // The printed token command works as printed, and the job's result is shown.
    let (mut console, mut report) = (None, None);
    while console.is_none() || report.is_none() {
        let line = receiver
            .recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
            .expect("the demo did not print its console hint and job result in time");
        if line.starts_with("demo: console ") {
            console = Some(line);
        } else if line.starts_with("demo: report-job ") {
            report = Some(line);
        }
    }
    let report = report.unwrap();
    assert!(
        report.starts_with("demo: report-job Succeeded: "),
        "{report}"
    );
    let console = console.unwrap();
    let funcs = console.split_whitespace().nth(2).unwrap().to_string();
    let command = console
        .split("log in with the token of: ")
        .nth(1)
        .unwrap()
        .trim_end_matches(')');
    let words: Vec<&str> = command.split_whitespace().collect();
    let output = Command::new(words[0])
        .args(&words[1..])
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    assert!(output.status.success(), "{command}: {output:?}");
    let token = String::from_utf8(output.stdout).unwrap().trim().to_string();
    let jobs = funcs.replace("/funcs/", "/v1/namespaces/") + "/jobs/report-job";
    let job: Value = common::get_json(&client, &jobs, &token).await;
    assert_eq!(job["phase"], "Succeeded", "{job}");
    let _ = child.kill();
    let _ = child.wait();
}
