//! Event triggers end to end: a real broker ([`super::broker`]), the embedded platform
//! with the dispatcher, a python function that notes every call in a file.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use gateway::dispatch::DispatchConfig;
use serde_json::{Value, json};
use tokio::sync::Mutex;

use super::TestServer;
use super::api::Api;
use super::broker::{Broker, Client};

/// Notes each call (message id, attempt, outcome, start and end) in `$HOME/seen.txt`,
/// then fails or succeeds as the message asks.
pub const HANDLER: &[u8] = include_bytes!("../fixtures/event_handler.py");

/// One broker per test binary, shared by the tests running at the same time and
/// stopped when the last of them ends.
pub async fn shared_broker() -> Arc<Broker> {
    static SHARED: Mutex<Weak<Broker>> = Mutex::const_new(Weak::new());
    let mut shared = SHARED.lock().await;
    if let Some(broker) = shared.upgrade() {
        return broker;
    }
    let broker = Arc::new(Broker::start().await);
    *shared = Arc::downgrade(&broker);
    broker
}

/// Short retries and polls, so a test sees several attempts in well under a second.
pub fn fast(url: Option<String>) -> DispatchConfig {
    DispatchConfig {
        retry_base: Duration::from_millis(50),
        retry_max: Duration::from_millis(400),
        reconnect_max: Duration::from_secs(1),
        poll_every: Duration::from_millis(100),
        ..DispatchConfig::new(url)
    }
}

pub async fn platform(url: Option<String>) -> TestServer {
    platform_with(fast(url)).await
}

pub async fn platform_with(config: DispatchConfig) -> TestServer {
    TestServer::platform_with_events(|_| {}, config).await.0
}

/// What most tests need: the shared broker, a platform consuming from it, and a
/// publishing client.
pub struct World {
    pub server: TestServer,
    pub client: Client,
    _broker: Arc<Broker>,
}

pub async fn world() -> World {
    let broker = shared_broker().await;
    World {
        server: platform(Some(broker.url())).await,
        client: broker.client().await,
        _broker: broker,
    }
}

/// A function fed by an event trigger on `queue` (with `extra` trigger fields), its
/// code uploaded.
pub async fn create(api: &Api<'_>, name: &str, queue: &str, extra: Value) {
    api.post(
        "functions",
        json!({"name": name, "runtime": "python3.11", "timeout_sec": 10}),
    )
    .await;
    let mut trigger = json!({"name": name, "type": "event", "function_ref": name, "queue": queue});
    trigger
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    api.post("triggers", trigger).await;
    api.upload(&format!("functions/{name}"), &[("handler.py", HANDLER)])
        .await;
}

/// [`create`], then until the trigger consumes.
pub async fn deploy(api: &Api<'_>, name: &str, queue: &str, extra: Value) {
    create(api, name, queue, extra).await;
    api.wait_until(&format!("triggers/{name}"), Duration::from_secs(180), |t| {
        t["active"] == true
    })
    .await;
}

/// Disables the trigger `name` and waits until it is inactive: its consumer cancelled,
/// the messages in hand answered and its channel closed.
pub async fn stop_trigger(api: &Api<'_>, name: &str) {
    let path = format!("triggers/{name}");
    api.send(
        reqwest::Method::PATCH,
        &path,
        Some(json!({"enabled": false})),
    )
    .await;
    api.wait_until(&path, Duration::from_secs(10), |t| t["active"] == false)
        .await;
}

/// One call the handler noted.
#[derive(Debug, Clone)]
pub struct Call {
    pub id: String,
    pub attempt: u64,
    pub ok: bool,
    pub start: f64,
    pub end: f64,
    pub redelivered: bool,
}

/// Every call of function `name` so far, in order.
pub fn calls(api: &Api<'_>, name: &str) -> Vec<Call> {
    let path = api
        .server
        .data_dir()
        .join("builds")
        .join(&api.user.ns)
        .join(format!("function-{name}"))
        .join(".scratch/seen.txt");
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line).unwrap();
            Call {
                id: v["id"].as_str().unwrap().to_string(),
                attempt: v["n"].as_u64().unwrap(),
                ok: v["ok"].as_bool().unwrap(),
                start: v["start"].as_f64().unwrap(),
                end: v["end"].as_f64().unwrap(),
                redelivered: v["redelivered"].as_bool().unwrap(),
            }
        })
        .collect()
}

/// Successful calls per message id.
pub fn successes(calls: &[Call]) -> BTreeMap<String, usize> {
    let mut per_id = BTreeMap::new();
    for call in calls.iter().filter(|c| c.ok) {
        *per_id.entry(call.id.clone()).or_default() += 1;
    }
    per_id
}

/// Waits until `done` holds for the function's calls; panics after `within`.
pub async fn wait_calls(
    api: &Api<'_>,
    name: &str,
    within: Duration,
    done: impl Fn(&[Call]) -> bool,
) -> Vec<Call> {
    let deadline = Instant::now() + within;
    loop {
        let calls = calls(api, name);
        if done(&calls) {
            return calls;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: the calls never reached the wanted state ({} calls, {} ok)",
            calls.len(),
            calls.iter().filter(|c| c.ok).count()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn ids(prefix: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{prefix}-{i:04}")).collect()
}
