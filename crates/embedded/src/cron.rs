//! The cron scheduler: 5-field schedules of enabled cron triggers, each fire a POST
//! through the proxy (routed, timed and recorded like every call), kept as the
//! trigger's `last_schedule_time`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::Shared;
use sless_core::logs::Stream;
use sless_core::model::{Trigger, TriggerType};
use sless_core::routes::TriggerCall;
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

async fn fire(shared: Arc<Shared>, trigger: Object<Trigger>, scheduled: DateTime<Utc>) {
    let ns = &trigger.meta.namespace;
    let function = &trigger.spec.function_ref;
    let name = &trigger.meta.name;
    sless_core::metrics::metrics().cron_fire(ns, name);
    let body = serde_json::json!({
        "trigger": name,
        "type": "cron",
        "schedule": trigger.spec.schedule,
        "scheduled_time": scheduled.to_rfc3339(),
    });
    let outcome = match shared.trigger_calls.get() {
        None => "skipped: sless does not take calls yet".to_string(),
        Some(calls) => match calls
            .call_for_trigger(TriggerCall {
                namespace: ns.clone(),
                function: function.clone(),
                trigger: name.clone(),
                body: body.to_string().into_bytes(),
            })
            .await
        {
            Ok(answer) => format!(
                "answered {} (request id {})",
                answer.status, answer.request_id
            ),
            Err(e) => format!("failed: {e}"),
        },
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
