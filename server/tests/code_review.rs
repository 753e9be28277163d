//! The pre-build code review through the shipped binary, configured the way an operator
//! configures it: `sless up` with the original system's `LLM_*` variables and `sless
//! deploy` printing a refusal as its one `error:` line; the console showing the reason;
//! off by default even with an endpoint set; and `sless operator` (Kubernetes mode, the
//! API server emulated over HTTP) refusing the same way. The model is a chat-completions
//! server on a loopback port that the test runs and that records what it was sent.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use common::kube_cluster::{FUNCTIONS, cluster, eventually, wait_ready};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sless_core::model::{build_namespace, namespace_for_sub};

const MINER: &str = "import subprocess\n\ndef handle(event):\n    subprocess.Popen(['xmrig', '-o', 'pool.minexmr.com:4444'])\n    return {}\n";
const CLEAN: &str = "def handle(event):\n    return {'hello': 'world'}\n";
const MINER_REASON: &str = "handler.py starts the xmrig Monero miner";

/// How the model answers.
#[derive(Clone)]
enum Answer {
    Safe,
    Refuse(&'static str),
    SleepThenSafe(Duration),
}

#[derive(Default)]
struct ModelState {
    answer: Mutex<Option<Answer>>,
    /// Each request's body and its Authorization header.
    requests: Mutex<Vec<(Value, Option<String>)>>,
}

/// A chat-completions endpoint on a loopback port, served from its own runtime so that
/// the blocking CLI runs of a test never starve it.
struct Model {
    url: String,
    state: Arc<ModelState>,
    runtime: Option<tokio::runtime::Runtime>,
}

/// Stopped without blocking: a test may drop it on an async runtime's thread.
impl Drop for Model {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Model {
    fn start(answer: Answer) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let state = Arc::new(ModelState::default());
        *state.answer.lock().unwrap() = Some(answer);
        let app = axum::Router::new()
            .route("/v1/chat/completions", axum::routing::post(complete))
            .with_state(state.clone());
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let url = format!(
            "http://{}/v1/chat/completions",
            listener.local_addr().unwrap()
        );
        runtime.spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self {
            url,
            state,
            runtime: Some(runtime),
        }
    }

    fn answer(&self, answer: Answer) {
        *self.state.answer.lock().unwrap() = Some(answer);
    }

    fn requests(&self) -> Vec<(Value, Option<String>)> {
        self.state.requests.lock().unwrap().clone()
    }
}

async fn complete(
    State(state): State<Arc<ModelState>>,
    headers: HeaderMap,
    Json(request): Json<Value>,
) -> Json<Value> {
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    state.requests.lock().unwrap().push((request, bearer));
    let answer = state.answer.lock().unwrap().clone().unwrap();
    let content = match answer {
        Answer::Safe => json!({"safe": true}).to_string(),
        Answer::Refuse(reason) => json!({"safe": false, "reason": reason}).to_string(),
        Answer::SleepThenSafe(wait) => {
            tokio::time::sleep(wait).await;
            json!({"safe": true}).to_string()
        }
    };
    Json(json!({
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                     "finish_reason": "stop"}],
    }))
}

/// One run of the `sless` CLI.
struct Run {
    ok: bool,
    stderr: String,
}

fn sless_cli(server: &common::Sless, token: &str, home: &Path, args: &[&str]) -> Run {
    let output = Command::new(env!("CARGO_BIN_EXE_sless"))
        .args(args)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("SLESS_ENDPOINT", &server.base)
        .env("SLESS_API_TOKEN", token)
        .stdin(Stdio::null())
        .output()
        .expect("run sless");
    Run {
        ok: output.status.success(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn write_handler(dir: &Path, code: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("handler.py"), code).unwrap();
}

fn get_text(url: &str, token: &str) -> String {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let response = reqwest::Client::new()
            .get(url)
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{url}");
        response.text().await.unwrap()
    })
}

#[test]
fn sless_deploy_prints_the_refusal_and_a_slow_model_never_blocks_it() {
    let model = Model::start(Answer::Refuse(MINER_REASON));
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // The original system's names, as its operators have them set.
    let server = common::start_with_env(
        &data,
        &[
            ("LLM_ENABLED", "true"),
            ("LLM_ENDPOINT", &model.url),
            ("LLM_API_KEY", "sk-original"),
            ("LLM_TIMEOUT", "1"),
        ],
    );
    let token = common::token(&data, "review-cli");
    let ns = namespace_for_sub("review-cli");
    let home = dir.path().join("home");
    let code = dir.path().join("code");
    write_handler(&code, MINER);
    let code_arg = code.display().to_string();
    let deploy = [
        "deploy",
        &code_arg,
        "--name",
        "miner",
        "--runtime",
        "python3.11",
    ];

    let run = sless_cli(&server, &token, &home, &deploy);
    assert!(!run.ok, "a refused deploy must fail:\n{}", run.stderr);
    let errors: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.starts_with("error: "))
        .collect();
    assert_eq!(errors.len(), 1, "{}", run.stderr);
    assert_eq!(run.stderr.lines().last(), Some(errors[0]));
    assert!(
        errors[0].contains(&format!("code review refused this upload: {MINER_REASON}")),
        "{}",
        run.stderr
    );
    let requests = model.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].1.as_deref(), Some("Bearer sk-original"));

    // The console's page of the function: the reason in its status and its build log.
    let page = get_text(
        &format!("{}/funcs/{ns}/function/miner", server.base),
        &token,
    );
    assert!(
        page.contains(&format!(
            "the last upload was refused: code review refused this upload: {MINER_REASON}"
        )),
        "{page}"
    );
    assert!(
        page.contains(&format!(
            "review: code review refused this upload: {MINER_REASON}"
        )),
        "{page}"
    );

    // A model slower than LLM_TIMEOUT: the deploy goes on and the build log says why.
    model.answer(Answer::SleepThenSafe(Duration::from_secs(5)));
    write_handler(&code, CLEAN);
    let started = Instant::now();
    let run = sless_cli(&server, &token, &home, &deploy);
    assert!(run.ok, "{}", run.stderr);
    let log = get_text(
        &format!(
            "{}/v1/namespaces/{ns}/functions/miner/build-log",
            server.base
        ),
        &token,
    );
    assert!(
        log.contains("review: code review unavailable: no answer within 1 s"),
        "{log}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(model.requests().len(), 2);
}

#[test]
fn off_by_default_even_with_an_endpoint_set() {
    let model = Model::start(Answer::Refuse(MINER_REASON));
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = common::start_with_env(
        &data,
        &[
            ("LLM_ENDPOINT", &model.url),
            ("SLESS_LLM_ENDPOINT", &model.url),
        ],
    );
    let token = common::token(&data, "review-off");
    let ns = namespace_for_sub("review-off");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = reqwest::Client::new();
        let functions = format!("{}/v1/namespaces/{ns}/functions", server.base);
        let created = client
            .post(&functions)
            .bearer_auth(&token)
            .json(&json!({"name": "f", "runtime": "python3.11"}))
            .send()
            .await
            .unwrap();
        assert!(created.status().is_success());
        common::upload_handler(
            &client,
            &format!("{functions}/f/upload"),
            &token,
            MINER.as_bytes(),
        )
        .await;
    });
    assert!(model.requests().is_empty(), "disabled, nothing is asked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_refuses_the_same_way_in_kubernetes_mode() {
    let model = tokio::task::spawn_blocking(|| Model::start(Answer::Refuse(MINER_REASON)))
        .await
        .unwrap();
    let cluster = cluster().await;
    let operator = cluster.operator_with_env(
        "operator",
        &[],
        &[
            ("SLESS_LLM_ENABLED", "true"),
            ("SLESS_LLM_ENDPOINT", &model.url),
            ("SLESS_LLM_API_KEY", "sk-from-secret"),
        ],
    );
    wait_ready(&operator).await;
    let sub = "review-kube";
    let ns = namespace_for_sub(sub);
    let token =
        sless_core::auth::issue_hs256(common::kube_cluster::SECRET.as_bytes(), sub, 600).unwrap();
    let http = reqwest::Client::new();
    let functions = format!("{}/v1/namespaces/{ns}/functions", operator.base);
    let created = http
        .post(&functions)
        .bearer_auth(&token)
        .json(&json!({"name": "miner", "runtime": "python3.11"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    // Reconciled once (Pending, no code yet), as a user finds it before an upload.
    eventually(&operator, "the new function Pending", || {
        cluster
            .get(FUNCTIONS, "functions", &ns, "miner")
            .filter(|f| f["status"]["phase"] == "Pending")
    })
    .await;
    let upload = |code: &'static str| {
        let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        zip.start_file("handler.py", zip::write::SimpleFileOptions::default())
            .unwrap();
        std::io::Write::write_all(&mut zip, code.as_bytes()).unwrap();
        let form = reqwest::multipart::Form::new().part(
            "code",
            reqwest::multipart::Part::bytes(zip.finish().unwrap().into_inner()).file_name("f.zip"),
        );
        http.post(format!("{functions}/miner/upload"))
            .bearer_auth(&token)
            .multipart(form)
            .send()
    };

    let refused = upload(MINER).await.unwrap();
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(
        body["error"],
        format!("code review refused this upload: {MINER_REASON}")
    );
    assert_eq!(
        model.requests()[0].1.as_deref(),
        Some("Bearer sk-from-secret")
    );
    // The controller reports the function Pending again and keeps the reason.
    let function = eventually(&operator, "the refused function back to Pending", || {
        cluster
            .get(FUNCTIONS, "functions", &ns, "miner")
            .filter(|f| f["status"]["phase"] == "Pending")
    })
    .await;
    assert!(function["spec"]["s3Key"].is_null(), "{function}");
    assert!(
        function["status"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(MINER_REASON)),
        "{function}"
    );
    assert!(
        cluster
            .names("batch/v1", "jobs", &build_namespace(&ns))
            .is_empty(),
        "a refused upload builds nothing"
    );

    model.answer(Answer::Safe);
    let stored = upload(CLEAN).await.unwrap();
    assert_eq!(stored.status(), StatusCode::OK);
    let body: Value = stored.json().await.unwrap();
    assert_eq!(body["phase"], "Building", "{body}");
    eventually(&operator, "the build Job", || {
        Some(cluster.names("batch/v1", "jobs", &build_namespace(&ns))).filter(|j| !j.is_empty())
    })
    .await;
    assert_eq!(model.requests().len(), 2);
}
