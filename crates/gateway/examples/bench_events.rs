//! Bench-only driver for `scripts/bench-events`: event-trigger throughput and latency
//! against a bare consumer, on one private broker in one run.
//!
//! For each concurrency: a bare lapin consumer (prefetch = concurrency, acks at once,
//! calls nothing) drains MESSAGES pre-published messages; then the python function that
//! only notes the time is called through `/fn` by wrk with that many connections for
//! FN_SECS (its own calls/s, and it is warm from here on); then an event trigger of that
//! concurrency drains MESSAGES through it; then LATENCY messages are published one at a
//! time, PACE_MS apart, and each call's publish→function-answer time is taken from the
//! body's publish timestamp.
//!
//! Usage: `bench_events [messages] [latency messages] [pace ms] [fn secs]
//! [concurrencies...]`.

#[path = "../tests/common/mod.rs"]
mod common;

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::api::Api;
use common::broker::Broker;
use common::events::{calls, fast};
use futures::StreamExt;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use serde_json::json;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The "no-op" function: notes publish and answer times, nothing else.
const NOOP: &[u8] = br#"
import json, os, time

def handle(event):
    amqp = event.get("_amqp") or {"message_id": "fn"}
    with open(os.path.join(os.environ["HOME"], "seen.txt"), "a") as f:
        f.write(json.dumps({"id": amqp["message_id"], "n": 1, "ok": True,
                            "start": event.get("t", 0), "end": time.time(),
                            "redelivered": False}) + "\n")
    return "ok"
"#;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((p / 100.0) * (sorted.len() - 1) as f64).round() as usize]
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

async fn bare(broker: &Broker, queue: &str, messages: usize, prefetch: u16) -> f64 {
    let client = broker.client().await;
    client.declare(queue).await;
    client.publish(queue, b"{}", "warm").await;
    for i in 0..messages {
        client.publish(queue, b"{}", &i.to_string()).await;
    }
    let connection = lapin::Connection::connect(&broker.url(), Default::default())
        .await
        .unwrap();
    let channel = connection.create_channel().await.unwrap();
    channel
        .basic_qos(prefetch, BasicQosOptions::default())
        .await
        .unwrap();
    let mut consumer = channel
        .basic_consume(
            queue.into(),
            "bare".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let first = consumer.next().await.unwrap().unwrap();
    first.ack(BasicAckOptions::default()).await.unwrap();
    let started = Instant::now();
    for _ in 0..messages {
        let delivery = consumer.next().await.unwrap().unwrap();
        delivery.ack(BasicAckOptions::default()).await.unwrap();
    }
    messages as f64 / started.elapsed().as_secs_f64()
}

/// Lines the function noted past a point of its file, read as they come: a poll must
/// not re-read the thousands of lines of the `/fn` run.
struct Seen {
    path: PathBuf,
    read: u64,
    lines: usize,
}

impl Seen {
    /// From the file's end now.
    fn from_end(path: PathBuf) -> Self {
        let read = std::fs::metadata(&path).map_or(0, |m| m.len());
        Self {
            path,
            read,
            lines: 0,
        }
    }

    fn lines(&mut self) -> usize {
        if let Ok(mut file) = std::fs::File::open(&self.path) {
            let mut new = Vec::new();
            file.seek(SeekFrom::Start(self.read)).unwrap();
            file.read_to_end(&mut new).unwrap();
            // Whole lines only: a line being written is counted on the next look.
            let whole = new.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
            self.lines += new[..whole].iter().filter(|b| **b == b'\n').count();
            self.read += whole as u64;
        }
        self.lines
    }

    async fn until(&mut self, lines: usize) {
        while self.lines() < lines {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn seen_file(api: &Api<'_>, name: &str) -> PathBuf {
    api.server
        .data_dir()
        .join("builds")
        .join(&api.user.ns)
        .join(format!("function-{name}"))
        .join(".scratch/seen.txt")
}

/// The function's own calls/s through `/fn` at `connections`, measured by wrk (one
/// thread) posting what the messages carry.
fn fn_rate(url: &str, connections: u16, secs: u64, dir: &Path) -> f64 {
    let script = dir.join("post.lua");
    std::fs::write(
        &script,
        "wrk.method = \"POST\"\nwrk.body = \"{}\"\n\
         wrk.headers[\"Content-Type\"] = \"application/json\"\n",
    )
    .unwrap();
    let out = Command::new("wrk")
        .args([
            "-t1",
            &format!("-c{connections}"),
            &format!("-d{secs}s"),
            "-s",
        ])
        .arg(&script)
        .arg(url)
        .output()
        .expect("wrk runs (apt-get install wrk)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && !text.contains("Non-2xx") && !text.contains("Socket errors"),
        "wrk failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no Requests/sec in wrk's output: {text}"))
}

#[tokio::main]
async fn main() {
    // Past the limit the run is dropped, and with it the broker: nothing is left behind.
    let limit = std::env::var("BENCH_TIMEOUT_SECS").map_or(1800, |s| s.parse().unwrap());
    tokio::time::timeout(Duration::from_secs(limit), run())
        .await
        .expect("the benchmark took longer than BENCH_TIMEOUT_SECS");
}

async fn run() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize, default: usize| args.get(i).map_or(default, |a| a.parse().unwrap());
    let messages = number(0, 5000);
    let latency_messages = number(1, 200);
    let pace = Duration::from_millis(number(2, 5) as u64);
    let fn_secs = number(3, 3) as u64;
    let concurrencies: Vec<u16> = if args.len() > 4 {
        args[4..].iter().map(|a| a.parse().unwrap()).collect()
    } else {
        vec![1, 8, 32]
    };

    let broker = Broker::start().await;
    let (server, _runner) =
        common::TestServer::platform_with_events(|_| {}, fast(Some(broker.url()))).await;
    let api = Api::new(&server, "bench-events");
    let client = broker.client().await;
    let scratch = tempfile::tempdir().unwrap();
    println!(
        "| concurrency | bare consumer msg/s | /fn calls/s | through sless msg/s | × lower | p50 publish→answer ms | p99 ms |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for concurrency in concurrencies {
        let bare_rate = bare(
            &broker,
            &format!("bare-{concurrency}"),
            messages,
            concurrency,
        )
        .await;

        eprintln!("concurrency {concurrency}: bare consumer done");
        let name = format!("noop-{concurrency}");
        let queue = format!("bench-{concurrency}");
        api.post(
            "functions",
            json!({"name": name, "runtime": "python3.11", "timeout_sec": 10}),
        )
        .await;
        api.post(
            "triggers",
            json!({"name": name, "type": "event", "function_ref": name, "queue": queue,
                   "concurrency": concurrency, "enabled": false}),
        )
        .await;
        // Without one, /fn does not call a function only an event trigger runs.
        api.post(
            "triggers",
            json!({"name": format!("{name}-http"), "type": "http", "function_ref": name}),
        )
        .await;
        api.upload(&format!("functions/{name}"), &[("handler.py", NOOP)])
            .await;
        api.wait_for(
            &format!("functions/{name}"),
            "phase",
            &["Ready"],
            Duration::from_secs(300),
        )
        .await;
        let fn_url: String = server.url(&format!("/fn/{}/{name}/", api.user.ns));
        let warm = server.client.post(&fn_url).body("{}").send().await.unwrap();
        assert!(warm.status().is_success(), "{}", warm.text().await.unwrap());
        let dir = scratch.path().to_path_buf();
        let fn_calls =
            tokio::task::spawn_blocking(move || fn_rate(&fn_url, concurrency, fn_secs, &dir))
                .await
                .unwrap();
        eprintln!("concurrency {concurrency}: /fn done");
        let mut seen = Seen::from_end(seen_file(&api, &name));
        // Published before the trigger consumes: unless the queue exists, the broker
        // drops them.
        client.declare(&queue).await;
        for i in 0..messages {
            client.publish(&queue, b"{}", &format!("drain-{i}")).await;
        }
        let started = Instant::now();
        api.send(
            reqwest::Method::PATCH,
            &format!("triggers/{name}"),
            Some(json!({"enabled": true})),
        )
        .await;
        // Includes starting the consumer; the function's instance is warm from /fn.
        seen.until(messages).await;
        let sless_rate = messages as f64 / started.elapsed().as_secs_f64();
        eprintln!("concurrency {concurrency}: drained, measuring latency");

        for i in 0..latency_messages {
            let body = json!({"t": now()}).to_string();
            client
                .publish(&queue, body.as_bytes(), &format!("latency-{i}"))
                .await;
            tokio::time::sleep(pace).await;
        }
        seen.until(messages + latency_messages).await;
        let mut latencies: Vec<f64> = calls(&api, &name)
            .iter()
            .filter(|c| c.id.starts_with("latency-"))
            .map(|c| (c.end - c.start) * 1000.0)
            .collect();
        latencies.sort_by(f64::total_cmp);
        println!(
            "| {concurrency} | {bare_rate:.0} | {fn_calls:.0} | {sless_rate:.0} | {:.2} | {:.1} | {:.1} |",
            sless_rate / bare_rate.min(fn_calls),
            percentile(&latencies, 50.0),
            percentile(&latencies, 99.0)
        );
    }
}
