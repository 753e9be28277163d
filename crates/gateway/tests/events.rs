//! Event triggers against a real RabbitMQ: every message is one call through the `/fn`
//! call path, acked on 2xx, retried with the attempt count in the message, then
//! dead-lettered; stop and start in place; concurrency.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::api::Api;
use common::events::*;
use gateway::dispatch::DispatchConfig;
use lapin::BasicProperties;
use lapin::options::{
    BasicGetOptions, BasicPublishOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use reqwest::StatusCode;
use serde_json::json;
use sless_core::model::Kind;
use tokio::sync::broadcast::error::RecvError;

/// Counts the store's writes of one trigger from now on (a lagging subscriber counts
/// every change it missed as one).
fn trigger_writes(server: &common::TestServer, namespace: &str, name: &str) -> Arc<AtomicUsize> {
    let writes = Arc::new(AtomicUsize::new(0));
    let mut changes = server.store.subscribe();
    let (counted, namespace, name) = (writes.clone(), namespace.to_owned(), name.to_owned());
    tokio::spawn(async move {
        loop {
            let n = match changes.recv().await {
                Ok(c) if c.kind == Kind::Trigger && c.namespace == namespace && c.name == name => 1,
                Ok(_) => 0,
                Err(RecvError::Lagged(missed)) => missed as usize,
                Err(RecvError::Closed) => return,
            };
            counted.fetch_add(n, Ordering::Relaxed);
        }
    });
    writes
}

#[tokio::test]
async fn a_thousand_messages_are_each_delivered_once_and_acked() {
    let world = world().await;
    let (server, client) = (&world.server, &world.client);
    let api = Api::new(server, "events-bulk");
    deploy(&api, "bulk", "bulk-orders", json!({"concurrency": 16})).await;
    let status_writes = trigger_writes(server, &api.user.ns, "bulk");
    let draining = Instant::now();

    let ids = ids("bulk", 1000);
    for id in &ids {
        client
            .publish(
                "bulk-orders",
                json!({"order": id}).to_string().as_bytes(),
                id,
            )
            .await;
    }
    let calls = wait_calls(&api, "bulk", Duration::from_secs(300), |c| c.len() >= 1000).await;
    let per_id = successes(&calls);
    assert_eq!(per_id.len(), 1000, "every message reached the function");
    assert!(
        per_id.values().all(|&n| n == 1),
        "none twice without a failure"
    );
    assert!(calls.iter().all(|c| c.attempt == 1 && !c.redelivered));
    let trigger = api
        .wait_until("triggers/bulk", Duration::from_secs(10), |t| {
            t["delivered"] == 1000
        })
        .await;
    assert_eq!(trigger["failed"], 0, "{trigger}");
    assert_eq!(trigger["concurrency"], 16);
    assert_eq!(trigger["max_retries"], 5, "the default is shown");
    assert!(trigger["last_message_time"].is_string(), "{trigger}");
    // Counts are written once per poll (100 ms here), not per message or per write the
    // dispatcher's own write wakes it for; a few more for the state changes.
    let polls = draining.elapsed().as_millis() / 100;
    let writes = status_writes.load(Ordering::Relaxed);
    assert!(
        writes as u128 <= polls + 5,
        "{writes} status writes in {polls} polls"
    );
    assert_eq!(client.depth("bulk-orders").await, 0, "all acked");
    assert_eq!(client.depth("bulk-orders.dead").await, 0);

    // The calls went the `/fn` way: recorded like any other invocation.
    let invocations = api.get("functions/bulk/invocations?tail=1").await;
    assert_eq!(invocations["stats"]["count"], 1000, "{invocations}");
    assert_eq!(invocations["invocations"][0]["method"], "POST");
    assert_eq!(invocations["invocations"][0]["trigger"], "event");
    assert_eq!(invocations["invocations"][0]["trigger_name"], "bulk");
    // An event-only function is not public: `/fn` refuses it, and nobody outside can
    // forge the trigger's header.
    let response = server
        .client
        .post(api.fn_url("bulk"))
        .header("x-sless-amqp", "e30=")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body = response.text().await.unwrap();
    assert!(body.contains("no http trigger"), "{body}");

    // Nothing was held unacked either (acks go out in groups while a backlog waits):
    // the messages of a stopped consumer not acked would be back in the queue.
    stop_trigger(&api, "bulk").await;
    assert_eq!(client.depth("bulk-orders").await, 0, "none left unacked");
}

#[tokio::test]
async fn a_message_failing_twice_succeeds_on_its_third_attempt() {
    let world = world().await;
    let (server, client) = (&world.server, &world.client);
    let api = Api::new(server, "events-flaky");
    deploy(&api, "flaky", "flaky-orders", json!({"concurrency": 4})).await;

    let ids = ids("flaky", 20);
    for id in &ids {
        client
            .publish(
                "flaky-orders",
                json!({"mode": "fail-twice"}).to_string().as_bytes(),
                id,
            )
            .await;
    }
    let calls = wait_calls(&api, "flaky", Duration::from_secs(120), |c| {
        successes(c).len() == 20
    })
    .await;
    let per_id = successes(&calls);
    assert!(per_id.values().all(|&n| n == 1), "{per_id:?}");
    for id in &ids {
        let mut attempts: Vec<u64> = calls
            .iter()
            .filter(|c| &c.id == id)
            .map(|c| c.attempt)
            .collect();
        attempts.sort();
        assert_eq!(attempts, [1, 2, 3], "{id}: the count the function saw");
    }
    let trigger = api
        .wait_until("triggers/flaky", Duration::from_secs(10), |t| {
            t["delivered"] == 20 && t["failed"] == 40
        })
        .await;
    assert_eq!(trigger["dead_lettered"], 0, "{trigger}");
    assert_eq!(client.depth("flaky-orders").await, 0);
    for waited in ["50ms", "100ms"] {
        let queue = format!("flaky-orders.retry.{waited}");
        assert_eq!(client.depth(&queue).await, 0, "{queue}");
    }
    assert_eq!(client.depth("flaky-orders.dead").await, 0);
}

/// The broker expires messages only at the head of a queue: a message waiting long for
/// its retry must not hold back one that waits short, so each wait has its own queue.
#[tokio::test]
async fn a_long_retry_wait_does_not_hold_back_a_short_one() {
    let broker = shared_broker().await;
    let config = DispatchConfig {
        retry_base: Duration::from_millis(100),
        retry_max: Duration::from_secs(60),
        ..fast(Some(broker.url()))
    };
    let server = platform_with(config).await;
    let client = broker.client().await;
    let api = Api::new(&server, "events-waits");
    deploy(&api, "waits", "waits-orders", json!({"max_retries": 10})).await;

    // Failed 8 times before: its 9th attempt fails and waits 100 ms × 2^8 = 25.6 s.
    let mut headers = FieldTable::default();
    headers.insert("x-sless-attempts".into(), AMQPValue::LongUInt(8));
    let properties = BasicProperties::default()
        .with_delivery_mode(2)
        .with_message_id("slow".into())
        .with_headers(headers);
    let body = json!({"mode": "fail"}).to_string();
    let confirm = client
        .channel
        .basic_publish(
            "".into(),
            "waits-orders".into(),
            BasicPublishOptions::default(),
            body.as_bytes(),
            properties,
        )
        .await
        .unwrap()
        .await
        .unwrap();
    assert!(confirm.is_ack());
    wait_calls(&api, "waits", Duration::from_secs(30), |c| c.len() == 1).await;
    let waiting = "waits-orders.retry.25600ms";
    api.wait_until("triggers/waits", Duration::from_secs(10), |t| {
        t["failed"] == 1
    })
    .await;
    assert_eq!(client.depth(waiting).await, 1, "the slow one waits");

    // Behind it: fails twice (waits 100 ms, then 200 ms), then succeeds.
    client
        .publish(
            "waits-orders",
            json!({"mode": "fail-twice"}).to_string().as_bytes(),
            "quick",
        )
        .await;
    let calls = wait_calls(&api, "waits", Duration::from_secs(20), |c| {
        c.iter().any(|c| c.id == "quick" && c.ok)
    })
    .await;
    let order: Vec<(&str, u64)> = calls.iter().map(|c| (c.id.as_str(), c.attempt)).collect();
    assert_eq!(
        order,
        [("slow", 9), ("quick", 1), ("quick", 2), ("quick", 3)],
        "the quick one's retries came back while the slow one still waits"
    );
    assert_eq!(client.depth(waiting).await, 1);
    // Declaring them again with the arguments sless gives a retry queue succeeds only
    // if those are theirs (the broker refuses a differing declare).
    for (queue, ttl) in [("waits-orders.retry.100ms", 100), (waiting, 25_600)] {
        let mut arguments = FieldTable::default();
        arguments.insert(
            "x-dead-letter-exchange".into(),
            AMQPValue::LongString("".into()),
        );
        arguments.insert(
            "x-dead-letter-routing-key".into(),
            AMQPValue::LongString("waits-orders".into()),
        );
        arguments.insert("x-message-ttl".into(), AMQPValue::LongLongInt(ttl));
        let declared = broker
            .client()
            .await
            .channel
            .queue_declare(queue.into(), QueueDeclareOptions::durable(), arguments)
            .await;
        assert!(declared.is_ok(), "{queue}: {declared:?}");
    }
}

/// A queue that exists with other arguments (PRECONDITION_FAILED on every declare):
/// the status says what to do, restarts back off (1 s, 2 s, 4 s …) instead of one per
/// pass, and the trigger consumes once the queue is fixed.
#[tokio::test]
async fn a_queue_with_other_arguments_is_said_and_retried_with_backoff() {
    let broker = shared_broker().await;
    let config = DispatchConfig {
        reconnect_max: Duration::from_secs(30),
        ..fast(Some(broker.url()))
    };
    let server = platform_with(config).await;
    let client = broker.client().await;
    let mut arguments = FieldTable::default();
    arguments.insert("x-max-length".into(), AMQPValue::LongLongInt(5));
    client
        .channel
        .queue_declare(
            "clash-orders".into(),
            QueueDeclareOptions::durable(),
            arguments,
        )
        .await
        .unwrap();

    let api = Api::new(&server, "events-clash");
    create(&api, "clash", "clash-orders", json!({})).await;
    // The third failure in a row waits 4 s: the waits grew, no restart per pass.
    let trigger = api
        .wait_until("triggers/clash", Duration::from_secs(180), |t| {
            t["message"]
                .as_str()
                .is_some_and(|m| m.ends_with("retrying in 4 s"))
        })
        .await;
    let message = trigger["message"].as_str().unwrap();
    assert_eq!(trigger["active"], false);
    for said in [
        "queue \"clash-orders\" exists with different arguments",
        "x-max-length",
        "delete it so that sless declares it (durable, without arguments), or use another queue",
    ] {
        assert!(message.contains(said), "{said:?} missing from {message}");
    }

    client
        .channel
        .queue_delete("clash-orders".into(), QueueDeleteOptions::default())
        .await
        .unwrap();
    api.wait_until("triggers/clash", Duration::from_secs(30), |t| {
        t["active"] == true && t["message"].is_null()
    })
    .await;
}

#[tokio::test]
async fn a_message_always_failing_ends_in_the_dead_letter_queue() {
    let world = world().await;
    let (server, client) = (&world.server, &world.client);
    let api = Api::new(server, "events-dead");
    deploy(&api, "doomed", "doomed-orders", json!({"max_retries": 2})).await;

    for id in ids("doomed", 5) {
        client
            .publish(
                "doomed-orders",
                json!({"mode": "fail"}).to_string().as_bytes(),
                &id,
            )
            .await;
    }
    api.wait_until("triggers/doomed", Duration::from_secs(120), |t| {
        t["dead_lettered"] == 5
    })
    .await;
    let calls = calls(&api, "doomed");
    assert_eq!(calls.len(), 15, "1 attempt + max_retries 2, per message");
    assert_eq!(
        client.depth("doomed-orders").await,
        0,
        "the main queue is empty"
    );
    for waited in ["50ms", "100ms"] {
        let queue = format!("doomed-orders.retry.{waited}");
        assert_eq!(client.depth(&queue).await, 0, "{queue}");
    }
    assert_eq!(client.depth("doomed-orders.dead").await, 5);
    let dead = client
        .channel
        .basic_get("doomed-orders.dead".into(), BasicGetOptions::default())
        .await
        .unwrap()
        .expect("a dead letter");
    let headers = dead.properties.headers().clone().unwrap();
    let header = |name: &str| headers.inner().get(name).cloned();
    match header("x-sless-error") {
        Some(AMQPValue::LongString(error)) => {
            let error = String::from_utf8_lossy(error.as_bytes()).to_string();
            assert!(error.contains("attempt 3 fails"), "{error}");
        }
        other => panic!("no error header: {other:?}"),
    }
    assert_eq!(header("x-sless-attempts"), Some(AMQPValue::LongUInt(3)));
    assert!(
        dead.properties.message_id().is_some(),
        "properties are kept"
    );
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&dead.data).unwrap(),
        json!({"mode": "fail"}),
        "the body as published"
    );
    let trigger = api.get("triggers/doomed").await;
    assert_eq!(trigger["failed"], 15, "{trigger}");
}

#[tokio::test]
async fn stopping_the_trigger_leaves_the_rest_in_the_queue_until_started() {
    let world = world().await;
    let (server, client) = (&world.server, &world.client);
    let api = Api::new(server, "events-stop");
    deploy(&api, "paced", "paced-orders", json!({})).await;

    let ids = ids("paced", 60);
    for id in &ids {
        client
            .publish(
                "paced-orders",
                json!({"sleep": 0.05}).to_string().as_bytes(),
                id,
            )
            .await;
    }
    wait_calls(&api, "paced", Duration::from_secs(60), |c| c.len() >= 5).await;
    stop_trigger(&api, "paced").await;
    let stopped = calls(&api, "paced").len();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        calls(&api, "paced").len(),
        stopped,
        "no call after the stop"
    );
    assert!(stopped < 60, "stopped mid-stream");
    let waiting = client.depth("paced-orders").await as usize;
    assert_eq!(waiting + stopped, 60, "the rest stays in the queue");

    api.send(
        reqwest::Method::PATCH,
        "triggers/paced",
        Some(json!({"enabled": true})),
    )
    .await;
    let calls = wait_calls(&api, "paced", Duration::from_secs(60), |c| {
        successes(c).len() == 60
    })
    .await;
    assert_eq!(calls.len(), 60, "each message once");
    assert_eq!(client.depth("paced-orders").await, 0);
}

#[tokio::test]
async fn concurrency_runs_that_many_calls_at_once() {
    let world = world().await;
    let (server, client) = (&world.server, &world.client);
    let api = Api::new(server, "events-wide");
    deploy(&api, "wide", "wide-orders", json!({"concurrency": 8})).await;

    let started = Instant::now();
    for id in ids("wide", 80) {
        client
            .publish(
                "wide-orders",
                json!({"sleep": 0.1}).to_string().as_bytes(),
                &id,
            )
            .await;
    }
    let calls = wait_calls(&api, "wide", Duration::from_secs(60), |c| c.len() >= 80).await;
    println!(
        "80 messages of 100 ms at concurrency 8: {:?}",
        started.elapsed()
    );
    // The most calls running at one moment.
    let most = calls
        .iter()
        .map(|c| {
            calls
                .iter()
                .filter(|o| o.start <= c.start && c.start < o.end)
                .count()
        })
        .max()
        .unwrap();
    assert!(most > 1, "calls overlapped");
    assert!(most <= 8, "never more than the concurrency: {most}");
    assert_eq!(successes(&calls).len(), 80);
}

#[tokio::test]
async fn the_next_messages_are_prefetched_while_calls_run() {
    let world = world().await;
    let (server, client) = (&world.server, &world.client);
    let api = Api::new(server, "events-ahead");
    deploy(&api, "ahead", "ahead-orders", json!({"concurrency": 2})).await;

    let published = Instant::now();
    for id in ids("ahead", 20) {
        let slow = json!({"sleep": 5}).to_string();
        client.publish("ahead-orders", slow.as_bytes(), &id).await;
    }
    // Before any call can end: two running and two more in hand, not on the broker.
    let mut depth = client.depth("ahead-orders").await;
    while depth > 16 && published.elapsed() < Duration::from_secs(4) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        depth = client.depth("ahead-orders").await;
    }
    assert_eq!(depth, 16, "twice the concurrency taken from the queue");
}

#[tokio::test]
async fn without_a_broker_event_triggers_say_so() {
    let server = platform(None).await;
    let api = Api::new(&server, "events-none");
    api.post(
        "functions",
        json!({"name": "idle", "runtime": "python3.11"}),
    )
    .await;
    api.post(
        "triggers",
        json!({"name": "idle", "type": "event", "function_ref": "idle", "queue": "q"}),
    )
    .await;
    let trigger = api
        .wait_until("triggers/idle", Duration::from_secs(10), |t| {
            t["message"].is_string()
        })
        .await;
    assert_eq!(trigger["active"], false);
    assert_eq!(trigger["message"], gateway::dispatch::NO_BROKER);
}

#[tokio::test]
async fn bad_event_trigger_fields_are_refused_with_the_rule() {
    let server = platform(None).await;
    let api = Api::new(&server, "events-bad");
    let base = json!({"name": "t", "type": "event", "function_ref": "f", "queue": "q"});
    let cases = [
        (json!({"concurrency": 0}), "concurrency"),
        (json!({"concurrency": 65}), "concurrency"),
        (json!({"concurrency": "8"}), "concurrency"),
        (json!({"concurrency": -1}), "concurrency"),
        (json!({"max_retries": 101}), "max_retries"),
        (json!({"queue": "amq.gen-1"}), "reserved"),
        (json!({"queue": "x".repeat(300)}), "too long"),
        (json!({"queue": ""}), "queue"),
        (
            json!({"type": "http", "concurrency": 2}),
            "event triggers only",
        ),
        (
            json!({"type": "cron", "schedule": "* * * * *", "max_retries": 1}),
            "event triggers only",
        ),
    ];
    for (change, said) in cases {
        let mut body = base.clone();
        body.as_object_mut()
            .unwrap()
            .extend(change.as_object().unwrap().clone());
        let (status, answer) = api
            .send(reqwest::Method::POST, "triggers", Some(body))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{change}: {answer}");
        assert!(answer.to_string().contains(said), "{change}: {answer}");
    }
}
