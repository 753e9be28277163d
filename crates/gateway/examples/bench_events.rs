//! Bench-only driver for `scripts/bench-events`: event-trigger throughput and latency
//! against a bare consumer, on one private broker in one run.
//!
//! For each concurrency: a bare lapin consumer (prefetch = concurrency, acks at once,
//! calls nothing) drains MESSAGES pre-published messages; then an event trigger of that
//! concurrency drains the same number through a python function that only notes the
//! time; then LATENCY messages are published one at a time, PACE_MS apart, and each
//! call's publish→function-answer time is taken from the body's publish timestamp.
//!
//! Usage: `bench_events [messages] [latency messages] [pace ms] [concurrencies...]`.

#[path = "../tests/common/mod.rs"]
mod common;

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
    with open(os.path.join(os.environ["HOME"], "seen.txt"), "a") as f:
        f.write(json.dumps({"id": event["_amqp"]["message_id"], "n": 1, "ok": True,
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
    let messages = number(0, 2000);
    let latency_messages = number(1, 200);
    let pace = Duration::from_millis(number(2, 5) as u64);
    let concurrencies: Vec<u16> = if args.len() > 3 {
        args[3..].iter().map(|a| a.parse().unwrap()).collect()
    } else {
        vec![1, 8, 32]
    };

    let broker = Broker::start().await;
    let (server, _runner) =
        common::TestServer::platform_with_events(|_| {}, fast(Some(broker.url()))).await;
    let api = Api::new(&server, "bench-events");
    let client = broker.client().await;
    println!(
        "| concurrency | bare consumer msg/s | through sless msg/s | ratio | p50 publish→answer ms | p99 ms |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
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
        api.upload(&format!("functions/{name}"), &[("handler.py", NOOP)])
            .await;
        api.wait_for(
            &format!("functions/{name}"),
            "phase",
            &["Ready"],
            Duration::from_secs(300),
        )
        .await;
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
        // Includes starting the function's instance, as a first message would.
        while calls(&api, &name).len() < messages {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let sless_rate = messages as f64 / started.elapsed().as_secs_f64();
        eprintln!("concurrency {concurrency}: drained, measuring latency");

        for i in 0..latency_messages {
            let body = json!({"t": now()}).to_string();
            client
                .publish(&queue, body.as_bytes(), &format!("latency-{i}"))
                .await;
            tokio::time::sleep(pace).await;
        }
        while calls(&api, &name).len() < messages + latency_messages {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut latencies: Vec<f64> = calls(&api, &name)
            .iter()
            .filter(|c| c.id.starts_with("latency-"))
            .map(|c| (c.end - c.start) * 1000.0)
            .collect();
        latencies.sort_by(f64::total_cmp);
        println!(
            "| {concurrency} | {bare_rate:.0} | {sless_rate:.0} | {:.2} | {:.1} | {:.1} |",
            sless_rate / bare_rate,
            percentile(&latencies, 50.0),
            percentile(&latencies, 99.0)
        );
    }
}
