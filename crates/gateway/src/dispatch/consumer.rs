//! One event trigger's consumer: its own channel, its queue and the two sless
//! declares beside it, and one call to the function per message, `concurrency` at
//! once. The prefetch is twice that: the next messages are in hand when a call ends,
//! so the function is not left waiting for the broker's round trip.

use std::any::Any;
use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, Method, Request, StatusCode, Uri, header};
use base64::Engine;
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions,
    BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Connection, ErrorKind};
use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use tokio::sync::watch;
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
        let at_once = usize::from(target.concurrency);
        channel
            .basic_qos(
                target.concurrency.saturating_mul(2),
                BasicQosOptions::default(),
            )
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
        let each = Arc::new(PerMessage::of(target)?);
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

        // Polled by this task, not spawned: a spawn per message wakes another worker
        // thread, and on two cores those wake-ups cost more than the call's own work.
        let mut in_hand = FuturesUnordered::new();
        // Prefetched, waiting for a call to end.
        let mut waiting = VecDeque::new();
        let mut acks = Acks::default();
        let handle = |delivery| {
            let handled = self.clone().handle(channel.clone(), each.clone(), delivery);
            AssertUnwindSafe(handled).catch_unwind()
        };
        let outcome = loop {
            tokio::select! {
                _ = stop.changed() => break Ok(()),
                delivery = deliveries.next() => match delivery {
                    Some(Ok(delivery)) => {
                        acks.delivered(delivery.delivery_tag);
                        if in_hand.len() < at_once {
                            in_hand.push(handle(delivery));
                        } else {
                            waiting.push_back(delivery);
                        }
                    }
                    Some(Err(e)) => break Err(failed("consumer failed", e)),
                    None => break Err(format!("the broker cancelled the consumer of queue {queue:?}")),
                },
                Some(handled) = in_hand.next(), if !in_hand.is_empty() => {
                    acks.handled(&channel, handled);
                    // Whatever else finished meanwhile goes out in the same ack.
                    while let Some(Some(handled)) = in_hand.next().now_or_never() {
                        acks.handled(&channel, handled);
                    }
                    while in_hand.len() < at_once && let Some(delivery) = waiting.pop_front() {
                        in_hand.push(handle(delivery));
                    }
                    // While a backlog waits, acks go out a quarter of the concurrency
                    // at a time (the prefetch has that much room to spare): fewer
                    // frames for lapin's I/O thread and the broker. Otherwise at once.
                    if waiting.is_empty() || acks.done() >= at_once.div_ceil(4) {
                        acks.flush(&channel);
                    }
                }
                Some(()) = acks.sending.next(), if !acks.sending.is_empty() => {}
            }
        };
        // No new message from here; those in hand are answered and acked, the
        // rest (the waiting ones too) goes back to the queue when the channel closes.
        // Bounded: on a connection that just died an answer may never come.
        let _ = timeout(
            SHUTDOWN_WAIT,
            channel.basic_cancel(tag.as_str().into(), BasicCancelOptions::default()),
        )
        .await;
        while let Some(handled) = in_hand.next().await {
            acks.handled(&channel, handled);
            acks.flush(&channel);
        }
        // Acks before the close, or the broker delivers those messages again.
        let _ = timeout(SHUTDOWN_WAIT, async {
            while acks.sending.next().await.is_some() {}
        })
        .await;
        let _ = timeout(SHUTDOWN_WAIT, channel.close(200, "trigger stopped".into())).await;
        outcome
    }

    /// One message: call the function; 2xx acks it, otherwise it is re-published for
    /// a later attempt or to the dead-letter queue, then acked. Acking is the loop's
    /// ([`Acks`]); this says what to do with the delivery's tag.
    async fn handle(
        self: Arc<Self>,
        channel: Channel,
        each: Arc<PerMessage>,
        mut delivery: Delivery,
    ) -> (u64, Settle) {
        let failed_before = attempts(&delivery.properties);
        // Shared by the call and a re-publish, not copied.
        let data = Bytes::from(std::mem::take(&mut delivery.data));
        let outcome = self
            .call(&each, &delivery, data.clone(), failed_before + 1)
            .await;
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
                    self.dead_letter(&channel, &delivery, &data, attempt, &error)
                        .await
                } else {
                    self.retry_later(&channel, &delivery, &data, attempt).await
                };
                if dead && republished.is_ok() {
                    count(&counters.dead_lettered, "dead_lettered");
                }
                republished
            }
        };
        let settle = match settled {
            Ok(()) => Settle::Ack,
            Err(e) => {
                tracing::warn!(trigger = %self.target.trigger, error = %e, "message put back");
                Settle::Requeue
            }
        };
        (delivery.delivery_tag, settle)
    }

    /// The function's call through the proxy; the error is what the function (or the
    /// proxy) said.
    async fn call(
        &self,
        each: &PerMessage,
        delivery: &Delivery,
        data: Bytes,
        attempt: u32,
    ) -> Result<(), String> {
        let properties = AmqpJson::of(&self.target.queue, delivery, attempt).encode();
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(each.uri.clone())
            .header(TRIGGER_HEADER, properties)
            .header(TRIGGER_NAME_HEADER, each.trigger.clone());
        if let Some(content_type) = delivery.properties.content_type() {
            request = request.header(header::CONTENT_TYPE, content_type.as_str());
        }
        let request = request
            .body(Body::from(data))
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
        data: &[u8],
        attempt: u32,
    ) -> Result<(), String> {
        let delay = backoff(self.retry_base, self.retry_max, attempt);
        let mut headers = headers_of(&delivery.properties);
        headers.insert(ATTEMPTS_HEADER.into(), AMQPValue::LongUInt(attempt));
        let properties = forwarded(&delivery.properties, headers);
        publish(
            channel,
            &retry_queue(&self.target.queue, delay),
            data,
            properties,
        )
        .await
    }

    async fn dead_letter(
        &self,
        channel: &Channel,
        delivery: &Delivery,
        data: &[u8],
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
        publish(channel, &dead_queue(&self.target.queue), data, properties).await
    }
}

/// What the handling of each message of a consumer uses, made once.
struct PerMessage {
    uri: Uri,
    trigger: HeaderValue,
}

impl PerMessage {
    fn of(target: &Target) -> Result<Self, String> {
        let bad = |e: &dyn std::fmt::Display| format!("cannot build the call: {e}");
        let uri = format!("/fn/{}/{}/", target.namespace, target.function);
        Ok(Self {
            uri: Uri::try_from(uri).map_err(|e| bad(&e))?,
            trigger: HeaderValue::try_from(target.trigger.as_str()).map_err(|e| bad(&e))?,
        })
    }
}

/// What becomes of a handled delivery.
enum Settle {
    /// Answered 2xx, or its copy is confirmed in a retry or dead-letter queue.
    Ack,
    /// Its copy could not be published: back to the queue.
    Requeue,
}

/// Where a delivery in hand stands.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Held {
    InHand,
    /// Handled, its ack not sent yet.
    Done,
    /// Handled and settled with the broker (acked alone, or requeued).
    Sent,
}

/// The channel's deliveries in hand, oldest first. A run of handled ones from the
/// oldest is acked with one `multiple` ack up to its last tag (AMQP acks every unacked
/// tag up to it, so only when all of them are handled); a handled one behind a message
/// still in hand is acked alone at once, so a slow message holds back no prefetch slot.
#[derive(Default)]
struct Acks {
    tags: Tags,
    /// Acks and nacks on their way to the broker.
    sending: FuturesUnordered<BoxFuture<'static, ()>>,
}

impl Acks {
    fn delivered(&mut self, tag: u64) {
        self.tags.delivered(tag);
    }

    fn handled(&mut self, channel: &Channel, handled: Result<(u64, Settle), Box<dyn Any + Send>>) {
        match handled {
            Ok((tag, Settle::Ack)) => self.tags.set(tag, Held::Done),
            Ok((tag, Settle::Requeue)) => {
                self.tags.set(tag, Held::Sent);
                let channel = channel.clone();
                let options = BasicNackOptions {
                    requeue: true,
                    multiple: false,
                };
                self.sending.push(
                    async move { unsettled(tag, channel.basic_nack(tag, options).await) }.boxed(),
                );
            }
            // Its message stays unacked: the broker delivers it again once the channel
            // closes.
            Err(_) => tracing::error!("an event message's handler panicked"),
        }
    }

    /// Handled deliveries whose ack is not sent yet.
    fn done(&self) -> usize {
        self.tags
            .0
            .iter()
            .filter(|(_, held)| *held == Held::Done)
            .count()
    }

    /// Sends the acks that handled deliveries wait for.
    fn flush(&mut self, channel: &Channel) {
        let (upto, alone) = self.tags.due();
        let multiple = upto.map(|tag| (tag, true));
        for (tag, multiple) in multiple
            .into_iter()
            .chain(alone.into_iter().map(|t| (t, false)))
        {
            let channel = channel.clone();
            let options = BasicAckOptions { multiple };
            self.sending
                .push(async move { unsettled(tag, channel.basic_ack(tag, options).await) }.boxed());
        }
    }
}

/// Delivery tags in hand, oldest first (the broker's tags grow with each delivery on a
/// channel), with where each stands.
#[derive(Default)]
struct Tags(VecDeque<(u64, Held)>);

impl Tags {
    fn delivered(&mut self, tag: u64) {
        self.0.push_back((tag, Held::InHand));
    }

    fn set(&mut self, tag: u64, held: Held) {
        if let Ok(at) = self.0.binary_search_by_key(&tag, |(t, _)| *t) {
            self.0[at].1 = held;
        }
    }

    /// The acks due now: a `multiple` one up to the last of the handled run from the
    /// oldest, and single ones for handled tags behind a delivery still in hand. They
    /// count as sent from here.
    fn due(&mut self) -> (Option<u64>, Vec<u64>) {
        let mut upto = None;
        while let Some((tag, held)) = self.0.front().copied()
            && held != Held::InHand
        {
            self.0.pop_front();
            if held == Held::Done {
                upto = Some(tag);
            }
        }
        let alone = self
            .0
            .iter_mut()
            .filter(|(_, held)| *held == Held::Done)
            .map(|(tag, held)| {
                *held = Held::Sent;
                *tag
            })
            .collect();
        (upto, alone)
    }
}

fn unsettled(tag: u64, sent: lapin::Result<()>) {
    if let Err(e) = sent {
        // The channel is gone: the broker delivers the message again.
        tracing::debug!(tag, error = %e, "message not settled");
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
    data: &[u8],
    properties: BasicProperties,
) -> Result<(), String> {
    let confirm = channel
        .basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            data,
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
        Some(other) => serde_json::to_value(Amqp(&other))
            .ok()
            .and_then(|v| v.as_u64())
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

/// What the function gets under `_amqp`, written straight from the delivery.
#[derive(Serialize)]
struct AmqpJson<'a> {
    queue: &'a str,
    exchange: &'a str,
    routing_key: &'a str,
    message_id: Option<&'a str>,
    correlation_id: Option<&'a str>,
    content_type: Option<&'a str>,
    timestamp: Option<u64>,
    headers: Table<'a>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    headers_omitted: bool,
    redelivered: bool,
    delivery_count: u32,
}

impl<'a> AmqpJson<'a> {
    fn of(queue: &'a str, delivery: &'a Delivery, attempt: u32) -> Self {
        let mut json = Self::of_properties(queue, &delivery.properties, attempt);
        json.exchange = delivery.exchange.as_str();
        json.routing_key = delivery.routing_key.as_str();
        json.redelivered = delivery.redelivered;
        json
    }

    /// Without the delivery's own fields (exchange, routing key, redelivered).
    fn of_properties(queue: &'a str, properties: &'a BasicProperties, attempt: u32) -> Self {
        let short = |s: &'a Option<ShortString>| s.as_ref().map(ShortString::as_str);
        Self {
            queue,
            exchange: "",
            routing_key: "",
            message_id: short(properties.message_id()),
            correlation_id: short(properties.correlation_id()),
            content_type: short(properties.content_type()),
            timestamp: *properties.timestamp(),
            headers: Table(properties.headers().as_ref()),
            headers_omitted: false,
            redelivered: false,
            delivery_count: attempt,
        }
    }

    /// Base64 of the JSON: any header text survives HTTP unchanged.
    fn encode(mut self) -> String {
        let mut text = serde_json::to_vec(&self).expect("AMQP properties encode as JSON");
        if text.len() > MAX_PROPERTIES_LEN {
            self.headers = Table(None);
            self.headers_omitted = true;
            text = serde_json::to_vec(&self).expect("AMQP properties encode as JSON");
        }
        base64::engine::general_purpose::STANDARD.encode(text)
    }
}

/// Message headers as a JSON object (`{}` for none).
struct Table<'a>(Option<&'a FieldTable>);

impl Serialize for Table<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Some(table) = self.0 else {
            return serializer.serialize_map(Some(0))?.end();
        };
        let mut map = serializer.serialize_map(Some(table.inner().len()))?;
        for (key, value) in table.inner() {
            map.serialize_entry(key.as_str(), &Amqp(value))?;
        }
        map.end()
    }
}

/// One AMQP field value as JSON: numbers, strings (bytes as base64), arrays, objects.
struct Amqp<'a>(&'a AMQPValue);

impl Serialize for Amqp<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            AMQPValue::Boolean(b) => serializer.serialize_bool(*b),
            AMQPValue::ShortShortInt(n) => serializer.serialize_i8(*n),
            AMQPValue::ShortShortUInt(n) => serializer.serialize_u8(*n),
            AMQPValue::ShortInt(n) => serializer.serialize_i16(*n),
            AMQPValue::ShortUInt(n) => serializer.serialize_u16(*n),
            AMQPValue::LongInt(n) => serializer.serialize_i32(*n),
            AMQPValue::LongUInt(n) => serializer.serialize_u32(*n),
            AMQPValue::LongLongInt(n) => serializer.serialize_i64(*n),
            AMQPValue::Float(n) => serializer.serialize_f32(*n),
            AMQPValue::Double(n) => serializer.serialize_f64(*n),
            AMQPValue::DecimalValue(d) => {
                serializer.serialize_f64(f64::from(d.value) / 10f64.powi(i32::from(d.scale)))
            }
            AMQPValue::ShortString(s) => serializer.serialize_str(s.as_str()),
            AMQPValue::LongString(s) => {
                serializer.serialize_str(&String::from_utf8_lossy(s.as_bytes()))
            }
            AMQPValue::FieldArray(a) => serializer.collect_seq(a.as_slice().iter().map(Amqp)),
            AMQPValue::Timestamp(t) => serializer.serialize_u64(*t),
            AMQPValue::FieldTable(t) => Table(Some(t)).serialize(serializer),
            AMQPValue::ByteArray(b) => serializer
                .serialize_str(&base64::engine::general_purpose::STANDARD.encode(b.as_slice())),
            AMQPValue::Void => serializer.serialize_unit(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        assert_eq!(
            serde_json::to_value(Table(Some(&table))).unwrap(),
            json!({"n": -3, "s": "ü", "b": "/wA="})
        );
        let mut properties = BasicProperties::default();
        assert_eq!(attempts(&properties), 0);
        let mut headers = FieldTable::default();
        headers.insert(ATTEMPTS_HEADER.into(), AMQPValue::LongLongInt(3));
        properties = properties.with_headers(headers);
        assert_eq!(attempts(&properties), 3);
    }

    fn decoded(encoded: &str) -> serde_json::Value {
        let text = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap();
        serde_json::from_slice(&text).unwrap()
    }

    #[test]
    fn properties_become_the_amqp_json() {
        let mut headers = FieldTable::default();
        headers.insert("k".into(), AMQPValue::LongString("v".into()));
        let properties = BasicProperties::default()
            .with_message_id("m1".into())
            .with_timestamp(7)
            .with_headers(headers);
        let json = decoded(&AmqpJson::of_properties("q", &properties, 2).encode());
        assert_eq!(
            json,
            json!({"queue": "q", "exchange": "", "routing_key": "", "message_id": "m1",
                   "correlation_id": null, "content_type": null, "timestamp": 7,
                   "headers": {"k": "v"}, "redelivered": false, "delivery_count": 2})
        );

        let mut big = FieldTable::default();
        big.insert(
            "big".into(),
            AMQPValue::LongString("x".repeat(20_000).into()),
        );
        let properties = BasicProperties::default().with_headers(big);
        let json = decoded(&AmqpJson::of_properties("q", &properties, 1).encode());
        assert_eq!(json["headers"], json!({}));
        assert_eq!(json["headers_omitted"], true);
    }

    #[test]
    fn acks_cover_handled_runs_and_never_an_unhandled_tag() {
        let mut tags = Tags::default();
        for tag in 1..=5 {
            tags.delivered(tag);
        }
        // 1 in hand: 2 and 3 cannot be acked up to, but are acked alone.
        tags.set(2, Held::Done);
        tags.set(3, Held::Done);
        assert_eq!(tags.due(), (None, vec![2, 3]));
        assert_eq!(tags.due(), (None, vec![]));
        // 4 was requeued (settled), 1 is done: one multiple ack up to 1 covers it alone
        // (2 and 3 are acked, 4 requeued).
        tags.set(4, Held::Sent);
        tags.set(1, Held::Done);
        assert_eq!(tags.due(), (Some(1), vec![]));
        tags.delivered(6);
        tags.set(6, Held::Done);
        tags.set(5, Held::Done);
        assert_eq!(tags.due(), (Some(6), vec![]));
        assert_eq!(tags.due(), (None, vec![]));
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
