//! The cron scheduler: 5-field schedules of enabled cron triggers, each fire a POST to
//! the function's instance, recorded as the trigger's `last_schedule_time`.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::Shared;
use sless_core::logs::Stream;
use sless_core::model::{Trigger, TriggerType};
use sless_core::store::{Object, StoreExt, modify_status};

pub(super) async fn schedule(shared: Arc<Shared>) {
    let scale = i32::try_from(shared.config.cron_time_scale.max(1)).unwrap_or(1);
    let started = Utc::now();
    let clock = move || started + (Utc::now() - started) * scale;
    // Per trigger: its schedule and the scheduler time it was last looked at.
    let mut checked: HashMap<(String, String), (String, DateTime<Utc>)> = HashMap::new();
    let mut tick = tokio::time::interval(shared.config.cron_tick);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        let now = clock();
        let triggers = match shared.store.list_typed::<Trigger>(None).await {
            Ok(triggers) => triggers,
            Err(e) => {
                tracing::warn!(error = %e, "cron: cannot list triggers");
                continue;
            }
        };
        let mut seen = HashSet::new();
        for trigger in triggers {
            let spec = &trigger.spec;
            let (TriggerType::Cron, true, Some(schedule)) =
                (spec.trigger_type, spec.enabled, spec.schedule.clone())
            else {
                continue;
            };
            let Ok(cron) = schedule.parse::<croner::Cron>() else {
                continue;
            };
            let key = (trigger.meta.namespace.clone(), trigger.meta.name.clone());
            seen.insert(key.clone());
            // A new, re-enabled or rescheduled trigger starts from now: no burst of
            // the fires it missed while it was off.
            let entry = checked.entry(key).or_insert((schedule.clone(), now));
            if entry.0 != schedule {
                *entry = (schedule, now);
                continue;
            }
            if let Ok(next) = cron.find_next_occurrence(&entry.1, false)
                && next <= now
            {
                entry.1 = now;
                tokio::spawn(fire(shared.clone(), trigger, next));
            }
        }
        checked.retain(|key, _| seen.contains(key));
    }
}

/// The cron call to the instance on `socket`.
async fn post(
    socket: &Arc<Path>,
    trigger: &str,
    timeout: Duration,
    body: &serde_json::Value,
) -> reqwest::Result<reqwest::Response> {
    reqwest::Client::builder()
        .unix_socket(socket.clone())
        .build()?
        .post("http://localhost/")
        .header("x-sless-trigger", trigger)
        .timeout(timeout)
        .json(body)
        .send()
        .await
}

async fn fire(shared: Arc<Shared>, trigger: Object<Trigger>, scheduled: DateTime<Utc>) {
    let ns = &trigger.meta.namespace;
    let function = &trigger.spec.function_ref;
    let name = &trigger.meta.name;
    sless_core::metrics::metrics().cron_fire(ns, name);
    let outcome = match shared.endpoint(ns, function) {
        None => "skipped: the function is not running".to_string(),
        Some(endpoint) => {
            let body = serde_json::json!({
                "trigger": name,
                "type": "cron",
                "schedule": trigger.spec.schedule,
                "scheduled_time": scheduled.to_rfc3339(),
            });
            let timeout = endpoint.timeout.unwrap_or(Duration::from_secs(900));
            match post(&endpoint.socket, name, timeout, &body).await {
                Ok(response) => format!("answered {}", response.status().as_u16()),
                Err(e) => format!("failed: {e}"),
            }
        }
    };
    shared.logs.push(
        ns,
        function,
        Stream::Stderr,
        "-",
        &format!("[sless] cron trigger {name:?} fired: {outcome}"),
    );
    let fired_at = Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    if let Err(e) = modify_status::<Trigger, _>(&*shared.store, ns, name, |t| {
        t.status.last_schedule_time = Some(fired_at.clone());
    })
    .await
    {
        tracing::debug!(trigger = %name, error = %e, "last_schedule_time not written");
    }
}
