//! One event trigger's consumer: its own channel (prefetch = the trigger's
//! concurrency), its queue and the two sless declares beside it, and one call to the
//! function per message.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use base64::Engine;
use futures::StreamExt;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions,
    BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Connection, ErrorKind};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::timeout;

use super::{Counters, Target};
use crate::proxy::{Caller, MAX_TRIGGER_ANSWER_READ, Proxy, TRIGGER_HEADER, TRIGGER_NAME_HEADER};
use sless_core::metrics::metrics;

/// Failed attempts of a message so far (absent: none), kept in the message.
pub const ATTEMPTS_HEADER: &str = "x-sless-attempts";
/// Why a dead-lettered message failed last.
pub const ERROR_HEADER: &str = "x-sless-error";
/// Longest error text kept in [`ERROR_HEADER`].
const MAX_ERROR_LEN: usize = 1024;
/// The broker's reply code to a declare that differs from the queue's.
const PRECONDITION_FAILED: u16 = 406;
/// Above this, the `_amqp` header leaves the message headers out (HTTP servers cap
/// header sizes; the runtimes' at 64 KB).
const MAX_PROPERTIES_LEN: usize = 16 * 1024;
/// How long a stopping consumer waits for the broker to confirm its cancel and close.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

#[derive(Clone, Debug)]
pub(super) enum ConsumerState {
    Starting,
    Consuming,
    Failed(String),
}

pub(super) struct Consumer {
    pub target: Target,
    pub proxy: Arc<Proxy>,
    pub counters: Arc<Counters>,
    pub state: Arc<Mutex<ConsumerState>>,
    pub retry_base: Duration,
    pub retry_max: Duration,
}

/// Where a retry waits `delay`: one queue per delay, since the broker only expires
/// messages at the head of a queue (a long wait there would hold back short ones).
/// Its TTL elapsed, the broker dead-letters the message back into `queue`.
pub fn retry_queue(queue: &str, delay: Duration) -> String {
    let ms = delay.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{queue}.retry.{}s", ms / 1000)
    } else {
        format!("{queue}.retry.{ms}ms")
    }
}

fn retry_arguments(queue: &str, delay: Duration) -> FieldTable {
    let mut arguments = FieldTable::default();
    arguments.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString("".into()),
    );
    arguments.insert(
        "x-dead-letter-routing-key".into(),
        AMQPValue::LongString(queue.into()),
    );
    let ttl = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
    arguments.insert("x-message-ttl".into(), AMQPValue::LongLongInt(ttl));
    arguments
}

pub fn dead_queue(queue: &str) -> String {
    format!("{queue}.dead")
}

impl Consumer {
    fn set_state(&self, state: ConsumerState) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = state;
    }

    /// Consumes until stopped or the channel fails; messages in hand finish first.
    pub async fn run(self, connection: Arc<Connection>, mut stop: watch::Receiver<bool>) {
        let this = Arc::new(self);
        if let Err(e) = this.clone().consume(&connection, &mut stop).await {
            tracing::warn!(trigger = %this.target.trigger, error = %e, "event consumer stopped");
            this.set_state(ConsumerState::Failed(e));
        }
    }

    async fn consume(
        self: Arc<Self>,
        connection: &Connection,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<(), String> {
        let target = &self.target;
        let queue = target.queue.as_str();
        let failed = |what: &str, e: lapin::Error| format!("{what} on queue {queue:?}: {e}");
        let channel = connection
            .create_channel()
            .await
            .map_err(|e| failed("cannot open a channel", e))?;
        channel
            .basic_qos(target.concurrency, BasicQosOptions::default())
            .await
            .map_err(|e| failed("cannot set the prefetch", e))?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(|e| failed("cannot enable publisher confirms", e))?;
        declare(&channel, queue, FieldTable::default()).await?;
        declare(&channel, &dead_queue(queue), FieldTable::default()).await?;
        for delay in self.retry_delays() {
            declare(
                &channel,
                &retry_queue(queue, delay),
                retry_arguments(queue, delay),
            )
            .await?;
        }
        let tag = format!("sless-{}-{}", target.namespace, target.trigger);
        let mut deliveries = channel
            .basic_consume(
                queue.into(),
                tag.as_str().into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(|e| failed("cannot consume", e))?;
        self.set_state(ConsumerState::Consuming);

        let mut in_hand = JoinSet::new();
        let outcome = loop {
            tokio::select! {
                _ = stop.changed() => break Ok(()),
                delivery = deliveries.next() => match delivery {
                    Some(Ok(delivery)) => {
                        in_hand.spawn(self.clone().handle(channel.clone(), delivery));
                    }
                    Some(Err(e)) => break Err(failed("consumer failed", e)),
                    None => break Err(format!("the broker cancelled the consumer of queue {queue:?}")),
                },
                Some(_) = in_hand.join_next(), if !in_hand.is_empty() => {}
            }
        };
        // No new message from here; those in hand are answered and acked, the
        // rest goes back to the queue when the channel closes.
        // Bounded: on a connection that just died an answer may never come.
        let _ = timeout(
            SHUTDOWN_WAIT,
            channel.basic_cancel(tag.as_str().into(), BasicCancelOptions::default()),
        )
        .await;
        while in_hand.join_next().await.is_some() {}
        let _ = timeout(SHUTDOWN_WAIT, channel.close(200, "trigger stopped".into())).await;
        outcome
    }

    /// One message: call the function; 2xx acks it, otherwise it is re-published for
    /// a later attempt or to the dead-letter queue, then acked.
    async fn handle(self: Arc<Self>, channel: Channel, delivery: Delivery) {
        let failed_before = attempts(&delivery.properties);
        let outcome = self.call(&delivery, failed_before + 1).await;
        let counters = &self.counters;
        counters.touch();
        let count = |counter: &AtomicU64, outcome: &'static str| {
            counter.fetch_add(1, Ordering::Relaxed);
            metrics().event_message(&self.target.namespace, &self.target.trigger, outcome);
        };
        let settled = match outcome {
            Ok(()) => {
                count(&counters.delivered, "delivered");
                Ok(())
            }
            Err(error) => {
                count(&counters.failed, "failed");
                let attempt = failed_before + 1;
                let dead = attempt > self.target.max_retries;
                let republished = if dead {
                    self.dead_letter(&channel, &delivery, attempt, &error).await
                } else {
                    self.retry_later(&channel, &delivery, attempt).await
                };
                if dead && republished.is_ok() {
                    count(&counters.dead_lettered, "dead_lettered");
                }
                republished
            }
        };
        let acked = match settled {
            Ok(()) => delivery.acker.ack(BasicAckOptions::default()).await,
            Err(e) => {
                tracing::warn!(trigger = %self.target.trigger, error = %e, "message put back");
                let requeue = BasicNackOptions {
                    requeue: true,
                    ..BasicNackOptions::default()
                };
                delivery.acker.nack(requeue).await
            }
        };
        if let Err(e) = acked {
            // The channel is gone: the broker delivers the message again.
            tracing::debug!(trigger = %self.target.trigger, error = %e, "message not settled");
        }
    }

    /// The function's call through the proxy; the error is what the function (or the
    /// proxy) said.
    async fn call(&self, delivery: &Delivery, attempt: u32) -> Result<(), String> {
        let target = &self.target;
        let properties = amqp_json(&target.queue, delivery, attempt);
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(format!("/fn/{}/{}/", target.namespace, target.function))
            .header(TRIGGER_HEADER, encode_header(&properties))
            .header(TRIGGER_NAME_HEADER, target.trigger.as_str());
        if let Some(content_type) = delivery.properties.content_type() {
            request = request.header(header::CONTENT_TYPE, content_type.as_str());
        }
        let request = request
            .body(Body::from(delivery.data.clone()))
            .map_err(|e| format!("cannot build the call: {e}"))?;
        let response = self.proxy.call(request, Caller::Event).await;
        let status = response.status();
        // Read to the end either way: the proxy records a streamed answer when it ends.
        let body = axum::body::to_bytes(response.into_body(), MAX_TRIGGER_ANSWER_READ).await;
        if status.is_success() {
            return Ok(());
        }
        let text = body
            .map(|b| String::from_utf8_lossy(&b).trim().to_string())
            .unwrap_or_default();
        Err(answer_error(status, &text))
    }

    /// The distinct waits of retries 1..=max_retries, shortest first.
    fn retry_delays(&self) -> Vec<Duration> {
        let mut delays: Vec<Duration> = (1..=self.target.max_retries)
            .map(|attempt| backoff(self.retry_base, self.retry_max, attempt))
            .collect();
        delays.dedup();
        delays
    }

    async fn retry_later(
        &self,
        channel: &Channel,
        delivery: &Delivery,
        attempt: u32,
    ) -> Result<(), String> {
        let delay = backoff(self.retry_base, self.retry_max, attempt);
        let mut headers = headers_of(&delivery.properties);
        headers.insert(ATTEMPTS_HEADER.into(), AMQPValue::LongUInt(attempt));
        let properties = forwarded(&delivery.properties, headers);
        publish(
            channel,
            &retry_queue(&self.target.queue, delay),
            delivery,
            properties,
        )
        .await
    }

    async fn dead_letter(
        &self,
        channel: &Channel,
        delivery: &Delivery,
        attempt: u32,
        error: &str,
    ) -> Result<(), String> {
        let mut headers = headers_of(&delivery.properties);
        headers.insert(ATTEMPTS_HEADER.into(), AMQPValue::LongUInt(attempt));
        headers.insert(
            ERROR_HEADER.into(),
            AMQPValue::LongString(truncate(error, MAX_ERROR_LEN).into()),
        );
        let properties = forwarded(&delivery.properties, headers);
        publish(
            channel,
            &dead_queue(&self.target.queue),
            delivery,
            properties,
        )
        .await
    }
}

/// Declares a durable queue with `arguments`; one that exists otherwise (the broker's
/// PRECONDITION_FAILED) is said with what to do about it.
async fn declare(channel: &Channel, queue: &str, arguments: FieldTable) -> Result<(), String> {
    let shape = if arguments.inner().is_empty() {
        "durable, without arguments".to_string()
    } else {
        let names: Vec<&str> = arguments.inner().keys().map(|k| k.as_str()).collect();
        format!("durable, with {}", names.join(", "))
    };
    let declared = channel
        .queue_declare(queue.into(), QueueDeclareOptions::durable(), arguments)
        .await;
    declared.map(|_| ()).map_err(|e| match e.kind() {
        ErrorKind::ProtocolError(amqp) if amqp.get_id() == PRECONDITION_FAILED => {
            let said = amqp.get_message().as_str();
            let why = said.strip_prefix("PRECONDITION_FAILED - ").unwrap_or(said);
            format!(
                "queue {queue:?} exists with different arguments: {why}; delete it so that \
                 sless declares it ({shape}), or use another queue"
            )
        }
        _ => format!("cannot declare queue {queue:?}: {e}"),
    })
}

/// Publishes to a queue through the default exchange and waits for the broker's
/// confirm: only then may the original be acked.
async fn publish(
    channel: &Channel,
    queue: &str,
    delivery: &Delivery,
    properties: BasicProperties,
) -> Result<(), String> {
    let confirm = channel
        .basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            &delivery.data,
            properties,
        )
        .await
        .map_err(|e| format!("cannot publish to {queue:?}: {e}"))?
        .await
        .map_err(|e| format!("cannot publish to {queue:?}: {e}"))?;
    if confirm.is_nack() {
        return Err(format!("the broker refused the message for {queue:?}"));
    }
    Ok(())
}

/// `retry_base × 2^(attempt-1)`, at most `retry_max`.
pub(super) fn backoff(base: Duration, max: Duration, attempt: u32) -> Duration {
    let factor = 2u32.saturating_pow(attempt.saturating_sub(1));
    base.saturating_mul(factor).min(max)
}

fn attempts(properties: &BasicProperties) -> u32 {
    let value = properties
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get(ATTEMPTS_HEADER).cloned());
    match value {
        Some(AMQPValue::LongUInt(n)) => n,
        Some(other) => json_of(&other)
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0),
        None => 0,
    }
}

fn headers_of(properties: &BasicProperties) -> FieldTable {
    properties.headers().clone().unwrap_or_default()
}

/// The original's properties with new headers, persistent, and without its own
/// expiration (a retry waits its queue's TTL; a dead letter keeps forever).
fn forwarded(original: &BasicProperties, headers: FieldTable) -> BasicProperties {
    let mut properties = BasicProperties::default()
        .with_headers(headers)
        .with_delivery_mode(2);
    let strings = [
        (
            original.content_type(),
            BasicProperties::with_content_type as fn(_, _) -> _,
        ),
        (
            original.content_encoding(),
            BasicProperties::with_content_encoding,
        ),
        (
            original.correlation_id(),
            BasicProperties::with_correlation_id,
        ),
        (original.reply_to(), BasicProperties::with_reply_to),
        (original.message_id(), BasicProperties::with_message_id),
        (original.kind(), BasicProperties::with_type),
        (original.app_id(), BasicProperties::with_app_id),
    ];
    for (value, set) in strings {
        if let Some(value) = value {
            properties = set(properties, value.clone());
        }
    }
    if let Some(timestamp) = original.timestamp() {
        properties = properties.with_timestamp(*timestamp);
    }
    if let Some(priority) = original.priority() {
        properties = properties.with_priority(*priority);
    }
    properties
}

fn answer_error(status: StatusCode, text: &str) -> String {
    if text.is_empty() {
        format!("the function answered {}", status.as_u16())
    } else {
        format!(
            "the function answered {}: {}",
            status.as_u16(),
            truncate(text, MAX_ERROR_LEN)
        )
    }
}

fn truncate(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn short(value: &Option<ShortString>) -> Value {
    value
        .as_ref()
        .map_or(Value::Null, |s| Value::String(s.to_string()))
}

/// What the function gets under `_amqp`.
fn amqp_json(queue: &str, delivery: &Delivery, attempt: u32) -> Value {
    let properties = &delivery.properties;
    json!({
        "queue": queue,
        "exchange": delivery.exchange.as_str(),
        "routing_key": delivery.routing_key.as_str(),
        "message_id": short(properties.message_id()),
        "correlation_id": short(properties.correlation_id()),
        "content_type": short(properties.content_type()),
        "timestamp": properties.timestamp(),
        "headers": properties.headers().as_ref().map_or(json!({}), table_json),
        "redelivered": delivery.redelivered,
        "delivery_count": attempt,
    })
}

/// Base64 of the JSON: any header text survives HTTP unchanged.
fn encode_header(properties: &Value) -> String {
    let mut text = properties.to_string();
    if text.len() > MAX_PROPERTIES_LEN {
        let mut smaller = properties.clone();
        smaller["headers"] = json!({});
        smaller["headers_omitted"] = json!(true);
        text = smaller.to_string();
    }
    base64::engine::general_purpose::STANDARD.encode(text)
}

fn table_json(table: &FieldTable) -> Value {
    Value::Object(
        table
            .inner()
            .iter()
            .map(|(k, v)| (k.to_string(), json_of(v)))
            .collect(),
    )
}

fn long_string(s: &LongString) -> Value {
    Value::String(String::from_utf8_lossy(s.as_bytes()).into_owned())
}

fn json_of(value: &AMQPValue) -> Value {
    match value {
        AMQPValue::Boolean(b) => json!(b),
        AMQPValue::ShortShortInt(n) => json!(n),
        AMQPValue::ShortShortUInt(n) => json!(n),
        AMQPValue::ShortInt(n) => json!(n),
        AMQPValue::ShortUInt(n) => json!(n),
        AMQPValue::LongInt(n) => json!(n),
        AMQPValue::LongUInt(n) => json!(n),
        AMQPValue::LongLongInt(n) => json!(n),
        AMQPValue::Float(n) => json!(n),
        AMQPValue::Double(n) => json!(n),
        AMQPValue::DecimalValue(d) => {
            json!(f64::from(d.value) / 10f64.powi(i32::from(d.scale)))
        }
        AMQPValue::ShortString(s) => json!(s.as_str()),
        AMQPValue::LongString(s) => long_string(s),
        AMQPValue::FieldArray(a) => Value::Array(a.as_slice().iter().map(json_of).collect()),
        AMQPValue::Timestamp(t) => json!(t),
        AMQPValue::FieldTable(t) => table_json(t),
        AMQPValue::ByteArray(b) => {
            json!(base64::engine::general_purpose::STANDARD.encode(b.as_slice()))
        }
        AMQPValue::Void => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let base = Duration::from_secs(1);
        let max = Duration::from_secs(10);
        let delays: Vec<u64> = (1..=6).map(|a| backoff(base, max, a).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 10, 10]);
        assert_eq!(backoff(base, max, u32::MAX), max);
    }

    #[test]
    fn retry_queues_are_named_by_their_delay() {
        assert_eq!(retry_queue("q", Duration::from_secs(300)), "q.retry.300s");
        assert_eq!(retry_queue("q", Duration::from_millis(50)), "q.retry.50ms");
    }

    #[test]
    fn headers_become_json() {
        let mut table = FieldTable::default();
        table.insert("n".into(), AMQPValue::LongInt(-3));
        table.insert("s".into(), AMQPValue::LongString("ü".into()));
        table.insert("b".into(), AMQPValue::ByteArray(vec![0xff, 0].into()));
        assert_eq!(table_json(&table), json!({"n": -3, "s": "ü", "b": "/wA="}));
        let mut properties = BasicProperties::default();
        assert_eq!(attempts(&properties), 0);
        let mut headers = FieldTable::default();
        headers.insert(ATTEMPTS_HEADER.into(), AMQPValue::LongLongInt(3));
        properties = properties.with_headers(headers);
        assert_eq!(attempts(&properties), 3);
    }

    #[test]
    fn errors_are_cut_on_characters() {
        assert_eq!(truncate("aé", 2), "a");
        assert_eq!(
            answer_error(StatusCode::BAD_GATEWAY, ""),
            "the function answered 502"
        );
    }
}
