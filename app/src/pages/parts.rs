//! The small parts several pages show: badges, times, limits, a trigger with its
//! start/stop form and a workload's `/fn` address.

use leptos::prelude::*;

use super::layout::CsrfField;
use crate::actions::SetTrigger;
use crate::listing::{Phase, TriggerView};

/// `128 MB`, and the timeout as people say it.
pub(super) fn limits(memory_mb: u32, timeout_sec: u32) -> (String, String) {
    let timeout = if timeout_sec == 0 {
        "no limit".to_string()
    } else {
        format!("{timeout_sec} s")
    };
    (format!("{memory_mb} MB"), timeout)
}

/// `1000` → `1 core`, `250` → `0.25 core`: how people say CPU.
pub(super) fn cpu(millis: u32) -> String {
    let cores = f64::from(millis) / 1000.0;
    let unit = if millis == 1000 { "core" } else { "cores" };
    format!("{cores} {unit}")
}

/// `2026-04-20T12:34:56Z` → `2026-04-20 12:34 UTC` (any offset shown in UTC); anything
/// else as given.
pub(super) fn short_time(rfc3339: &str) -> String {
    chrono::DateTime::parse_from_rfc3339(rfc3339).map_or_else(
        |_| rfc3339.to_string(),
        |at| {
            at.with_timezone(&chrono::Utc)
                .format("%Y-%m-%d %H:%M UTC")
                .to_string()
        },
    )
}

/// The CSS classes of a phase badge.
pub(super) fn phase_class(phase: Phase) -> String {
    format!("phase phase-{}", phase.as_str().to_ascii_lowercase())
}

/// The kind as one word, the same as `sless ls` and the JSON `kind`.
#[component]
pub fn KindBadge(kind: &'static str) -> impl IntoView {
    view! { <span class=format!("badge badge-{kind}")>{kind}</span> }
}

#[component]
pub fn PhaseBadge(phase: Phase) -> impl IntoView {
    view! { <span class=phase_class(phase)>{phase.as_str()}</span> }
}

/// Warm (instances running, how many) or cold (scaled to zero: the next call starts
/// one), with the scaling's bounds in the tooltip; nothing where it is not counted.
#[component]
pub fn Warmth(instances: Option<u32>, min: u32, max: u32) -> impl IntoView {
    instances.map(|running| {
        let bounds = format!("{min}–{max} instances");
        if running == 0 {
            let title = format!("No instance running ({bounds}): the next call starts one");
            view! { <span class="state state-off warmth" title=title>"cold"</span> }.into_any()
        } else {
            let title = format!(
                "{running} instance{} running ({bounds})",
                if running == 1 { "" } else { "s" }
            );
            view! { <span class="state state-on warmth" title=title>{format!("warm · {running}")}</span> }
                .into_any()
        }
    })
}

/// Start ▶ / stop ■ of one trigger: a server function posted by a plain form.
#[component]
pub fn TriggerToggle(
    namespace: String,
    trigger: String,
    enabled: bool,
    csrf: Option<String>,
) -> impl IntoView {
    let (target, button, verb) = if enabled {
        ("false", "■ Stop", "stop")
    } else {
        ("true", "▶ Start", "start")
    };
    let aria = format!("{verb} trigger {trigger}");
    csrf.map(|csrf| {
        view! {
            <ActionForm action={ServerAction::<SetTrigger>::new()} attr:class="toggle">
                <CsrfField csrf=Some(csrf)/>
                <input type="hidden" name="namespace" value=namespace/>
                <input type="hidden" name="trigger" value=trigger/>
                <input type="hidden" name="enabled" value=target/>
                <button type="submit" class=format!("button-{verb}") aria-label=aria>{button}</button>
            </ActionForm>
        }
    })
}

/// One trigger: its label, name, state, an event trigger's counters, anything the page adds (`children`), its note
/// and the start/stop button.
#[component]
pub fn TriggerItem(
    trigger: TriggerView,
    namespace: String,
    csrf: Option<String>,
    #[prop(optional)] children: Option<Children>,
) -> impl IntoView {
    let (state_class, state_text) = if trigger.enabled {
        ("state state-on", "on")
    } else {
        ("state state-off", "stopped")
    };
    let note = trigger
        .message
        .clone()
        .map(|m| view! { <span class="trigger-note">{m}</span> });
    let counters = trigger
        .counters
        .clone()
        .map(|c| view! { <span class="trigger-counters">{c}</span> });
    view! {
        <li class="trigger" id=format!("trigger-{}", trigger.name)>
            <span class="trigger-label" title=trigger.name.clone()>{trigger.label()}</span>
            <span class="trigger-name">{trigger.name.clone()}</span>
            <span class=state_class>{state_text}</span>
            {counters}
            {children.map(|c| c())}
            {note}
            <TriggerToggle namespace=namespace trigger=trigger.name.clone() enabled=trigger.enabled csrf=csrf/>
        </li>
    }
}

/// The address `/fn` serves it at: wraps on narrow screens rather than being cut, and is
/// greyed with a "stopped" note when its http trigger is stopped.
#[component]
pub fn WorkloadUrl(url: String, stopped: bool) -> impl IntoView {
    let class = if stopped { "url url-stopped" } else { "url" };
    let note =
        stopped.then(|| view! { <span class="state state-off">"stopped: calls get 503"</span> });
    view! { <code class=class>{url}</code> {note} }
}

/// A timestamp shown short, in UTC, with the exact one in `datetime`.
#[component]
pub fn Time(at: String) -> impl IntoView {
    let shown = short_time(&at);
    view! { <time datetime=at>{shown}</time> }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_shown_short_in_utc() {
        assert_eq!(short_time("2026-04-20T12:34:56Z"), "2026-04-20 12:34 UTC");
        assert_eq!(
            short_time("2026-04-20T14:34:56.5+02:00"),
            "2026-04-20 12:34 UTC"
        );
        assert_eq!(short_time("yesterday"), "yesterday");
    }
}
