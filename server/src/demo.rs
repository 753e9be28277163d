//! `sless up --demo`: deploys `examples/` through the platform's own API.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

struct Example {
    kind: &'static str,
    name: &'static str,
    runtime: &'static str,
    files: &'static [(&'static str, &'static str)],
}

const EXAMPLES: [Example; 4] = [
    Example {
        kind: "functions",
        name: "hello-python",
        runtime: "python3.11",
        files: &[(
            "handler.py",
            include_str!("../../examples/hello-python/handler.py"),
        )],
    },
    Example {
        kind: "functions",
        name: "greeter-node",
        runtime: "nodejs20",
        files: &[(
            "handler.js",
            include_str!("../../examples/greeter-node/handler.js"),
        )],
    },
    Example {
        kind: "jobs",
        name: "report-job",
        runtime: "python3.11",
        files: &[(
            "handler.py",
            include_str!("../../examples/report-job/handler.py"),
        )],
    },
    Example {
        kind: "services",
        name: "clock-service",
        runtime: "nodejs20",
        files: &[(
            "handler.js",
            include_str!("../../examples/clock-service/handler.js"),
        )],
    },
];

pub const DEMO_SUBJECT: &str = "demo";

fn zip(files: &[(&str, &str)]) -> anyhow::Result<Vec<u8>> {
    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (path, content) in files {
        writer.start_file(*path, zip::write::SimpleFileOptions::default())?;
        writer.write_all(content.as_bytes())?;
    }
    Ok(writer.finish()?.into_inner())
}

struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
    ns: String,
}

impl Client {
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let url = format!("{}/v1/namespaces/{}/{path}", self.base, self.ns);
        let mut request = self.http.request(method, &url).bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("calling {url}"))?;
        let status = response.status();
        let value: Value = response.json().await.unwrap_or(Value::Null);
        // An earlier demo run already created it: deploy the code again.
        if !status.is_success() && status != reqwest::StatusCode::CONFLICT {
            bail!("{url}: {status}: {value}");
        }
        Ok(value)
    }

    async fn upload(&self, kind: &str, name: &str, zip: Vec<u8>) -> anyhow::Result<()> {
        let url = format!(
            "{}/v1/namespaces/{}/{kind}/{name}/upload",
            self.base, self.ns
        );
        let form = reqwest::multipart::Form::new().part(
            "code",
            reqwest::multipart::Part::bytes(zip).file_name(format!("{name}.zip")),
        );
        let response = self
            .http
            .post(&url)
            .bearer_auth(&self.token)
            .multipart(form)
            .send()
            .await?;
        if !response.status().is_success() {
            bail!(
                "{url}: {}: {}",
                response.status(),
                response.text().await.unwrap_or_default()
            );
        }
        Ok(())
    }
}

/// `token_command` prints the demo user's token, for the hints shown at the end.
pub async fn deploy(base: String, token: String, token_command: String) -> anyhow::Result<()> {
    let client = Client {
        http: reqwest::Client::new(),
        base,
        token,
        ns: sless_core::model::namespace_for_sub(DEMO_SUBJECT),
    };
    use reqwest::Method as M;
    client.send(M::POST, "ensure", None).await?;
    for example in &EXAMPLES {
        let mut body = json!({"name": example.name, "runtime": example.runtime});
        if example.kind == "jobs" {
            body["event_json"] = json!("{\"numbers\": [1, 2, 3]}");
        }
        client.send(M::POST, example.kind, Some(body)).await?;
    }
    for (name, function, schedule) in [
        ("hello-python-http", "hello-python", None),
        ("greeter-node-http", "greeter-node", None),
        ("greeter-node-cron", "greeter-node", Some("*/5 * * * *")),
    ] {
        let body = match schedule {
            None => json!({"name": name, "type": "http", "function_ref": function}),
            Some(schedule) => json!({"name": name, "type": "cron", "function_ref": function,
                                     "schedule": schedule}),
        };
        client.send(M::POST, "triggers", Some(body)).await?;
    }
    // Code last: the functions see their triggers from their first build on.
    for example in &EXAMPLES {
        client
            .upload(example.kind, example.name, zip(example.files)?)
            .await?;
    }
    client
        .send(M::PATCH, "jobs/report-job", Some(json!({"run_id": 1})))
        .await?;

    println!("demo: deploying examples/ into namespace {}", client.ns);
    let deadline = Instant::now() + Duration::from_secs(120);
    for example in EXAMPLES.iter().filter(|e| e.kind != "jobs") {
        loop {
            let value = client
                .send(M::GET, &format!("{}/{}", example.kind, example.name), None)
                .await?;
            match value["phase"].as_str() {
                Some("Ready") => {
                    println!(
                        "demo: {:<14} {}",
                        example.name,
                        value["url"].as_str().unwrap_or("-")
                    );
                    break;
                }
                Some("Failed") => {
                    println!("demo: {} failed: {}", example.name, value["message"]);
                    break;
                }
                _ if Instant::now() > deadline => bail!("{} did not become Ready", example.name),
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
    println!(
        "demo: try  curl -s -X POST -d '{{\"name\":\"you\"}}' {}/fn/{}/hello-python",
        client.base, client.ns
    );
    println!(
        "demo: console {}/funcs/{}  (log in with the token of: {token_command})",
        client.base, client.ns
    );
    loop {
        let job = client.send(M::GET, "jobs/report-job", None).await?;
        match job["phase"].as_str() {
            Some(phase @ ("Succeeded" | "Failed")) => {
                let message = job["message"].as_str().unwrap_or("-");
                println!("demo: report-job {phase}: {message}");
                break;
            }
            _ if Instant::now() > deadline => {
                println!("demo: report-job is still running; see GET .../jobs/report-job");
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    Ok(())
}
