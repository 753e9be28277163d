//! `sless_trigger`: http, cron or event; `enabled` starts and stops it in place.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sless_api::validation::{
    parse_trigger_type, validate_event_options, validate_name, validate_schedule,
};
use sless_api::{DEFAULT_EVENT_CONCURRENCY, DEFAULT_EVENT_RETRIES};
use sless_api::{TriggerRequest, TriggerResponse};
use sless_client::client::{Client, Kind, TriggerWait};
use tf_provider::schema::AttributeConstraint::{Computed, Optional, OptionalComputed, Required};
use tf_provider::schema::{AttributeType, Schema};
use tf_provider::value::{Value, ValueEmpty};
use tf_provider::{AttributePath, Diagnostics, Resource};

use crate::common::{
    POLL_INTERVAL, Shared, attribute, block, check, client, function_setting, is_not_found,
    plan_function, report, text, to_u32,
};

/// How long apply waits for the platform to start or stop what a trigger calls.
const SETTLE_WAIT: Duration = Duration::from_secs(60);

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TriggerState {
    id: Value<String>,
    name: Value<String>,
    #[serde(rename = "type")]
    trigger_type: Value<String>,
    function: Value<String>,
    function_ref: Value<String>,
    schedule: Value<String>,
    queue: Value<String>,
    enabled: Value<bool>,
    concurrency: Value<i64>,
    max_retries: Value<i64>,
    url: Value<String>,
    trigger_url: Value<String>,
    active: Value<bool>,
}

pub struct TriggerResource {
    client: Shared,
}

impl TriggerResource {
    pub fn new(client: Shared) -> Self {
        Self { client }
    }
}

fn request(state: &TriggerState) -> TriggerRequest {
    TriggerRequest {
        name: state.name.as_ref_option().cloned(),
        trigger_type: state.trigger_type.as_ref_option().cloned(),
        function_ref: state.function.as_ref_option().cloned(),
        schedule: state.schedule.as_ref_option().cloned(),
        queue: state.queue.as_ref_option().cloned(),
        enabled: state.enabled.as_ref_option().copied(),
        // Validated (not negative) before any plan.
        concurrency: state
            .concurrency
            .as_ref_option()
            .and_then(|&n| n.try_into().ok()),
        max_retries: state
            .max_retries
            .as_ref_option()
            .and_then(|&n| n.try_into().ok()),
        resource_version: None,
    }
}

fn fill(state: &mut TriggerState, trigger: &TriggerResponse) {
    state.id = Value::Value(trigger.name.clone());
    state.name = Value::Value(trigger.name.clone());
    state.trigger_type = Value::Value(trigger.trigger_type.clone());
    state.function = Value::Value(trigger.function_ref.clone());
    state.function_ref = state.function.clone();
    state.schedule = trigger.schedule.clone().into();
    state.queue = trigger.queue.clone().into();
    state.enabled = Value::Value(trigger.enabled);
    state.concurrency = trigger.concurrency.map(i64::from).into();
    state.max_retries = trigger.max_retries.map(i64::from).into();
    state.url = trigger.url.clone().into();
    state.trigger_url = state.url.clone();
    state.active = Value::Value(trigger.active);
}

/// Settings as the plan has them, for a new trigger or a changed one.
fn plan_settings(diags: &mut Diagnostics, proposed: &mut TriggerState, config: &TriggerState) {
    proposed.id = proposed.name.clone();
    plan_function(
        diags,
        (&mut proposed.function, &mut proposed.function_ref),
        (&config.function, &config.function_ref),
    );
    // Left out, it is on (Terraform would propose the last value instead).
    if config.enabled.is_null() {
        proposed.enabled = Value::Value(true);
    }
    plan_event_defaults(proposed, config);
}

/// What the platform reports, known after apply.
fn unknown_results(state: &mut TriggerState) {
    state.url = Value::Unknown;
    state.trigger_url = Value::Unknown;
    state.active = Value::Unknown;
}

/// What is planned for `concurrency` and `max_retries` left out of the configuration:
/// the API's defaults for an event trigger, nothing for the others (Terraform would
/// propose the last value instead).
fn plan_event_defaults(proposed: &mut TriggerState, config: &TriggerState) {
    let event = match &config.trigger_type {
        Value::Value(kind) => Some(kind == "event"),
        _ => None,
    };
    for (planned, configured, default) in [
        (
            &mut proposed.concurrency,
            &config.concurrency,
            DEFAULT_EVENT_CONCURRENCY,
        ),
        (
            &mut proposed.max_retries,
            &config.max_retries,
            DEFAULT_EVENT_RETRIES,
        ),
    ] {
        if configured.is_null() {
            *planned = match event {
                Some(true) => Value::Value(default.into()),
                Some(false) => Value::Null,
                None => Value::Unknown,
            };
        }
    }
}

/// `concurrency` and `max_retries` by the API's own rule ([`validate_event_options`]),
/// once the type is known. The other fields are checked on their own: stand-ins that
/// pass keep its answer to these two.
fn check_event_fields(diags: &mut Diagnostics, config: &TriggerState) {
    if config.concurrency.is_null() && config.max_retries.is_null() {
        return;
    }
    let Value::Value(kind) = &config.trigger_type else {
        return;
    };
    let Ok(trigger_type) = parse_trigger_type("type", kind) else {
        return;
    };
    let concurrency = to_u32(diags, "concurrency", &config.concurrency);
    let max_retries = to_u32(diags, "max_retries", &config.max_retries);
    check(
        diags,
        validate_event_options(trigger_type, concurrency, max_retries),
    );
}

/// Waits until the platform has acted on `enabled` (the function started or stopped),
/// so the next call sees the new state; answers the trigger as it then is.
async fn settle(diags: &mut Diagnostics, client: &Client, name: &str) -> Option<TriggerResponse> {
    match client
        .wait_for_trigger(name, SETTLE_WAIT, POLL_INTERVAL)
        .await
    {
        Ok(TriggerWait::Settled(trigger)) => Some(trigger),
        Ok(TriggerWait::NotBuilt(trigger, phase)) => {
            diags.root_warning(
                format!(
                    "trigger {name} is enabled but {} is {phase}",
                    trigger.function_ref
                ),
                "it calls nothing until the function is Ready; its message tells why (sless describe)",
            );
            Some(trigger)
        }
        Ok(TriggerWait::TimedOut(trigger)) => {
            diags.root_warning(
                format!(
                    "trigger {name} has not settled after {} s",
                    SETTLE_WAIT.as_secs()
                ),
                trigger.message.clone().unwrap_or_default(),
            );
            Some(trigger)
        }
        Err(e) => {
            report(diags, format!("reading trigger {name}"), &e);
            None
        }
    }
}

#[async_trait]
impl Resource for TriggerResource {
    type State<'a> = TriggerState;
    type PrivateState<'a> = ValueEmpty;
    type ProviderMetaState<'a> = ValueEmpty;

    fn schema(&self, _diags: &mut Diagnostics) -> Option<Schema> {
        use AttributeType::{Bool, Number, String};
        Some(Schema {
            version: 1,
            block: block(
                "Calls a function over HTTP, on a cron schedule or for queue messages.",
                HashMap::from([
                    ("id".into(), attribute(String, Computed, "The name.")),
                    (
                        "name".into(),
                        attribute(
                            String,
                            Required,
                            "DNS-1123 label; changing it replaces the trigger.",
                        ),
                    ),
                    (
                        "type".into(),
                        attribute(
                            String,
                            Required,
                            "http, cron or event; changing it replaces the trigger.",
                        ),
                    ),
                    (
                        "function".into(),
                        attribute(
                            String,
                            OptionalComputed,
                            "Name of the function it calls (or set function_ref).",
                        ),
                    ),
                    (
                        "function_ref".into(),
                        attribute(
                            String,
                            OptionalComputed,
                            "The same as function, under the original provider's name.",
                        ),
                    ),
                    (
                        "schedule".into(),
                        attribute(String, Optional, "5-field cron schedule (type cron)."),
                    ),
                    (
                        "queue".into(),
                        attribute(String, Optional, "Queue name (type event)."),
                    ),
                    (
                        "enabled".into(),
                        attribute(
                            Bool,
                            OptionalComputed,
                            "false stops it in place: /fn answers 503, cron stops firing (default true).",
                        ),
                    ),
                    (
                        "concurrency".into(),
                        attribute(
                            Number,
                            OptionalComputed,
                            "Event triggers: messages handled at once, 1-64 (default 1).",
                        ),
                    ),
                    (
                        "max_retries".into(),
                        attribute(
                            Number,
                            OptionalComputed,
                            "Event triggers: retries of a failed message before <queue>.dead, 0-100 (default 5).",
                        ),
                    ),
                    (
                        "url".into(),
                        attribute(
                            String,
                            Computed,
                            "Where an http trigger's function answers.",
                        ),
                    ),
                    (
                        "trigger_url".into(),
                        attribute(
                            String,
                            Computed,
                            "The same as url, under the original provider's name.",
                        ),
                    ),
                    (
                        "active".into(),
                        attribute(Bool, Computed, "Whether the platform runs it now."),
                    ),
                ]),
            ),
        })
    }

    async fn validate<'a>(&self, diags: &mut Diagnostics, config: Self::State<'a>) -> Option<()> {
        if let Value::Value(name) = &config.name {
            check(diags, validate_name("name", name));
        }
        match function_setting(diags, &config.function, &config.function_ref) {
            (field, Value::Value(function)) => check(diags, validate_name(field, function)),
            (_, Value::Null) => diags.error_short(
                "set the function it calls: function (or function_ref)",
                AttributePath::new("function"),
            ),
            (_, Value::Unknown) => {}
        }
        if let Value::Value(kind) = &config.trigger_type {
            check(diags, parse_trigger_type("type", kind).map(|_| ()));
            if kind == "cron" && config.schedule.is_null() {
                diags.error_short(
                    "a cron trigger needs a schedule",
                    AttributePath::new("schedule"),
                );
            }
            if kind == "event" && config.queue.is_null() {
                diags.error_short(
                    "an event trigger needs a queue",
                    AttributePath::new("queue"),
                );
            }
        }
        if let Value::Value(schedule) = &config.schedule {
            check(diags, validate_schedule("schedule", schedule));
        }
        check_event_fields(diags, &config);
        Some(())
    }

    async fn read<'a>(
        &self,
        diags: &mut Diagnostics,
        mut state: Self::State<'a>,
        private: Self::PrivateState<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        let client = client(&self.client, diags)?;
        match client.get_trigger(text(&state.name)).await {
            Ok(trigger) => fill(&mut state, &trigger),
            Err(e) if is_not_found(&e) => return None,
            Err(e) => report(diags, format!("reading trigger {}", text(&state.name)), &e),
        }
        Some((state, private))
    }

    async fn plan_create<'a>(
        &self,
        diags: &mut Diagnostics,
        mut proposed: Self::State<'a>,
        config: Self::State<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        plan_settings(diags, &mut proposed, &config);
        unknown_results(&mut proposed);
        Some((proposed, ValueEmpty::default()))
    }

    async fn plan_update<'a>(
        &self,
        diags: &mut Diagnostics,
        prior: Self::State<'a>,
        mut proposed: Self::State<'a>,
        config: Self::State<'a>,
        private: Self::PrivateState<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>, Vec<AttributePath>)> {
        plan_settings(diags, &mut proposed, &config);
        let mut replace = Vec::new();
        for (attribute, changed) in [
            ("name", proposed.name != prior.name),
            ("type", proposed.trigger_type != prior.trigger_type),
        ] {
            if changed {
                replace.push(AttributePath::new(attribute));
            }
        }
        if proposed != prior {
            unknown_results(&mut proposed);
        }
        Some((proposed, private, replace))
    }

    async fn plan_destroy<'a>(
        &self,
        _diags: &mut Diagnostics,
        _prior: Self::State<'a>,
        private: Self::PrivateState<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<Self::PrivateState<'a>> {
        Some(private)
    }

    async fn create<'a>(
        &self,
        diags: &mut Diagnostics,
        mut planned: Self::State<'a>,
        _config: Self::State<'a>,
        private: Self::PrivateState<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        let client = client(&self.client, diags)?;
        let name = text(&planned.name).to_string();
        if let Err(e) = client.create_trigger(&request(&planned)).await {
            report(diags, format!("creating trigger {name}"), &e);
            return None;
        }
        if let Some(trigger) = settle(diags, &client, &name).await {
            fill(&mut planned, &trigger);
        }
        Some((planned, private))
    }

    async fn update<'a>(
        &self,
        diags: &mut Diagnostics,
        prior: Self::State<'a>,
        mut planned: Self::State<'a>,
        _config: Self::State<'a>,
        private: Self::PrivateState<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        let client = client(&self.client, diags)?;
        let name = text(&planned.name).to_string();
        let spec_changed = planned.function != prior.function
            || planned.schedule != prior.schedule
            || planned.queue != prior.queue
            || planned.concurrency != prior.concurrency
            || planned.max_retries != prior.max_retries;
        let result = if spec_changed {
            let body = TriggerRequest {
                name: None,
                ..request(&planned)
            };
            client.replace_trigger(&name, &body).await
        } else {
            client
                .set_trigger_enabled(
                    &name,
                    planned.enabled.as_ref_option().copied().unwrap_or(true),
                )
                .await
        };
        if let Err(e) = result {
            report(diags, format!("updating trigger {name}"), &e);
            return None;
        }
        if let Some(trigger) = settle(diags, &client, &name).await {
            fill(&mut planned, &trigger);
        }
        Some((planned, private))
    }

    async fn destroy<'a>(
        &self,
        diags: &mut Diagnostics,
        prior: Self::State<'a>,
        _private: Self::PrivateState<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<()> {
        let client = client(&self.client, diags)?;
        let name = text(&prior.name);
        match client.delete(Kind::Trigger, name).await {
            Ok(()) => {}
            Err(e) if is_not_found(&e) => return Some(()),
            Err(e) => {
                report(diags, format!("deleting trigger {name}"), &e);
                return None;
            }
        }
        // Gone from the API means its function no longer runs for it.
        let deadline = Instant::now() + SETTLE_WAIT;
        loop {
            match client.get_trigger(name).await {
                Err(e) if is_not_found(&e) => return Some(()),
                _ if Instant::now() >= deadline => {
                    diags.root_error_short(format!(
                        "trigger {name} is still there after {} s",
                        SETTLE_WAIT.as_secs()
                    ));
                    return None;
                }
                _ => tokio::time::sleep(POLL_INTERVAL).await,
            }
        }
    }

    async fn import<'a>(
        &self,
        diags: &mut Diagnostics,
        id: String,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        let client = client(&self.client, diags)?;
        match client.get_trigger(&id).await {
            Ok(trigger) => {
                let mut state = TriggerState::default();
                fill(&mut state, &trigger);
                Some((state, ValueEmpty::default()))
            }
            Err(e) => {
                report(diags, format!("importing trigger {id}"), &e);
                None
            }
        }
    }
}
