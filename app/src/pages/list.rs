//! `/funcs/<ns>`: Functions and Services in one list.

use std::collections::HashMap;

use leptos::prelude::*;

use super::layout::{PageContext, csrf_field, document};
use super::source::files_view;
use super::splice::{PageBody, Splicer};
use super::{limits, phase_class, short_time, source_href};
use crate::listing::{
    Counts, Entry, Listing, PHASES, Phase, Selection, SortKey, TriggerView, WorkloadKind,
};
use crate::source_cache::RenderedSource;

/// What the list page shows.
pub struct ListPage<'a> {
    pub listing: &'a Listing,
    pub selection: &'a Selection,
    /// The filtered, sorted entries.
    pub entries: &'a [&'a Entry],
    /// Highlighted sources of the first entries (by name); the others link to their page.
    pub sources: &'a HashMap<String, Result<RenderedSource, String>>,
    /// Base URL for the empty state's examples (the API and `/fn` live there).
    pub public_url: &'a str,
}

struct Forms {
    namespace: String,
    csrf: Option<String>,
    back: String,
}

fn trigger_view(trigger: &TriggerView, forms: &Forms) -> impl IntoView + use<> {
    let label = trigger.label();
    let (state_class, state_text) = if trigger.enabled {
        ("state state-on", "on")
    } else {
        ("state state-off", "off")
    };
    let form = forms.csrf.as_ref().map(|_| {
        let (target, button, verb) = if trigger.enabled {
            ("false", "■ Stop", "Stop")
        } else {
            ("true", "▶ Start", "Start")
        };
        let action = format!("/funcs/{}/triggers", forms.namespace);
        let aria = format!("{verb} trigger {}", trigger.name);
        view! {
            <form method="post" action=action class="toggle">
                {csrf_field(&forms.csrf)}
                <input type="hidden" name="trigger" value=trigger.name.clone()/>
                <input type="hidden" name="enabled" value=target/>
                <input type="hidden" name="back" value=forms.back.clone()/>
                <button type="submit" class=format!("button-{}", verb.to_lowercase()) aria-label=aria>
                    {button}
                </button>
            </form>
        }
    });
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
            <span class="trigger-label" title=trigger.name.clone()>{label}</span>
            <span class="trigger-name">{trigger.name.clone()}</span>
            <span class=state_class>{state_text}</span>
            {counters}
            {note}
            {form}
        </li>
    }
}

fn source_view(
    entry: &Entry,
    namespace: &str,
    sources: &HashMap<String, Result<RenderedSource, String>>,
    splicer: &Splicer,
) -> impl IntoView + use<> {
    let href = source_href(namespace, entry.kind, &entry.name);
    let body = match (&entry.s3_key, sources.get(&entry.name)) {
        (None, _) => view! { <p class="muted">"No code uploaded yet."</p> }.into_any(),
        (Some(_), Some(Ok(files))) => {
            files_view(files, &format!("{}-", entry.name), splicer).into_any()
        }
        (Some(_), Some(Err(e))) => view! {
            <p class="flash flash-error">"Could not load the source: " {e.clone()}</p>
        }
        .into_any(),
        (Some(_), None) => view! {
            <p class="muted">"Open the source page to see the files of the latest upload."</p>
        }
        .into_any(),
    };
    let summary = match sources.get(&entry.name) {
        Some(Ok(files)) => format!(
            "Source ({} file{})",
            files.len(),
            if files.len() == 1 { "" } else { "s" }
        ),
        _ => "Source".to_string(),
    };
    view! {
        <details class="source">
            <summary>{summary}</summary>
            <div class="source-body">
                {body}
                <p class="source-link"><a href=href>"Open the source page"</a></p>
            </div>
        </details>
    }
}

fn entry_view(
    entry: &Entry,
    forms: &Forms,
    sources: &HashMap<String, Result<RenderedSource, String>>,
    splicer: &Splicer,
) -> impl IntoView + use<> {
    let (memory, timeout) = limits(entry.memory_mb, entry.timeout_sec);
    let badge_class = match entry.kind {
        WorkloadKind::Function => "badge badge-job",
        WorkloadKind::Service => "badge badge-always-on",
    };
    let failed = entry.phase == Phase::Failed;
    let message = entry.message.clone().map(|m| {
        if failed {
            view! {
                <details class="message">
                    <summary>"Why it failed"</summary>
                    <pre>{m}</pre>
                </details>
            }
            .into_any()
        } else {
            view! { <p class="message muted">{m}</p> }.into_any()
        }
    });
    let url = entry.display_url().map(|url| {
        let aria = format!("URL of {}", entry.name);
        view! {
            <dt>"URL"</dt>
            <dd class="url-cell">
                <input class="url" type="text" readonly=true value=url.to_string() aria-label=aria/>
            </dd>
        }
    });
    let built = match &entry.last_built_at {
        Some(at) => view! { <time datetime=at.clone()>{short_time(at)}</time> }.into_any(),
        None => view! { <span class="muted">"never"</span> }.into_any(),
    };
    let triggers = if entry.triggers.is_empty() {
        view! { <p class="muted triggers-none">"No triggers."</p> }.into_any()
    } else {
        let items: Vec<_> = entry
            .triggers
            .iter()
            .map(|t| trigger_view(t, forms))
            .collect();
        view! { <ul class="triggers" aria-label="Triggers">{items}</ul> }.into_any()
    };
    view! {
        <li class="entry" id=format!("entry-{}", entry.name)>
            <div class="entry-head">
                <h2 class="entry-name">
                    <a href=source_href(&forms.namespace, entry.kind, &entry.name)>{entry.name.clone()}</a>
                </h2>
                <span class=badge_class title=entry.kind.as_str()>{entry.badge}</span>
                <span class="runtime">{entry.runtime.clone()}</span>
                <span class=phase_class(entry.phase) title=entry.message.clone()>{entry.phase.as_str()}</span>
            </div>
            {message}
            <dl class="meta">
                {url}
                <dt>"Last built"</dt>
                <dd>{built}</dd>
                <dt>"Memory"</dt>
                <dd>{memory}</dd>
                <dt>"Timeout"</dt>
                <dd>{timeout}</dd>
            </dl>
            {triggers}
            {source_view(entry, &forms.namespace, sources, splicer)}
        </li>
    }
}

fn counts_view(counts: &Counts) -> impl IntoView + use<> {
    let plural =
        |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let phases: Vec<_> = counts
        .phases
        .iter()
        .map(|(phase, n)| {
            view! {
                <li><span class=phase_class(*phase)>{phase.as_str()}</span> " " {n.to_string()}</li>
            }
        })
        .collect();
    view! {
        <ul class="counts" aria-label="Counts">
            <li class="count-kind">
                <span class="badge badge-job">"job"</span>
                " "
                {plural(counts.functions, "function", "functions")}
            </li>
            <li class="count-kind">
                <span class="badge badge-always-on">"always-on"</span>
                " "
                {plural(counts.services, "service", "services")}
            </li>
            {phases}
        </ul>
    }
}

fn filters_view(selection: &Selection, namespace: &str) -> impl IntoView + use<> {
    let kind_options: Vec<_> = [
        ("", "All kinds"),
        ("function", "job (Function)"),
        ("service", "always-on (Service)"),
    ]
    .into_iter()
    .map(|(value, label)| {
        let selected = selection.kind.map(WorkloadKind::as_str).unwrap_or("") == value;
        view! { <option value=value selected=selected>{label}</option> }
    })
    .collect();
    let phase_options: Vec<_> = std::iter::once("")
        .chain(PHASES.map(Phase::as_str))
        .map(|value| {
            let selected = selection.phase.map_or("", Phase::as_str) == value;
            let label = if value.is_empty() {
                "All phases"
            } else {
                value
            };
            view! { <option value=value selected=selected>{label}</option> }
        })
        .collect();
    let sort_options: Vec<_> = SortKey::ALL
        .into_iter()
        .map(|key| {
            let selected = selection.sort == key;
            view! { <option value=key.as_str() selected=selected>{key.title()}</option> }
        })
        .collect();
    let reset = format!("/funcs/{namespace}");
    view! {
        <form method="get" class="filters" role="search">
            <label>
                <span>"Search"</span>
                <input type="search" name="q" value=selection.text.clone() placeholder="name or runtime"/>
            </label>
            <label>
                <span>"Kind"</span>
                <select name="kind">{kind_options}</select>
            </label>
            <label>
                <span>"Phase"</span>
                <select name="phase">{phase_options}</select>
            </label>
            <label>
                <span>"Sort by"</span>
                <select name="sort">{sort_options}</select>
            </label>
            <div class="filter-actions">
                <button type="submit">"Apply"</button>
                <a href=reset class="button-link">"Reset"</a>
            </div>
        </form>
    }
}

fn empty_view(namespace: &str, public_url: &str) -> impl IntoView + use<> {
    let example = format!(
        "API={public_url}/v1/namespaces/{namespace}\n\
         AUTH=\"Authorization: Bearer $TOKEN\"   # your token (sless token --sub <you>)\n\
         curl -H \"$AUTH\" -H 'content-type: application/json' \\\n  \
         -d '{{\"name\":\"hello\",\"runtime\":\"python3.11\"}}' $API/functions\n\
         curl -H \"$AUTH\" -H 'content-type: application/json' \\\n  \
         -d '{{\"name\":\"hello-http\",\"type\":\"http\",\"function_ref\":\"hello\"}}' $API/triggers\n\
         printf 'def handle(event):\\n    return {{\"hello\": \"world\"}}\\n' > handler.py\n\
         python3 -m zipfile -c hello.zip handler.py\n\
         curl -H \"$AUTH\" -F code=@hello.zip $API/functions/hello/upload\n\
         curl -X POST {public_url}/fn/{namespace}/hello\n"
    );
    view! {
        <section class="empty">
            <h2>"Nothing deployed yet"</h2>
            <p>
                "Deploy a first function: create it, give it an HTTP trigger, upload a zip with its code, call it. "
                "It shows up here as soon as it exists."
            </p>
            <pre class="example"><code>{example}</code></pre>
        </section>
    }
}

/// The whole list page.
pub fn render_list(page: &ListPage<'_>, ctx: &PageContext) -> PageBody {
    let splicer = Splicer::new(&ctx.nonce);
    let namespace = page.listing.namespace.clone();
    let counts = Counts::of(page.listing);
    let forms = Forms {
        namespace: namespace.clone(),
        csrf: ctx.csrf.clone(),
        back: page.selection.to_query_string(),
    };
    let body = if page.listing.entries.is_empty() {
        empty_view(&namespace, page.public_url).into_any()
    } else {
        let shown = if page.selection.is_filtered() {
            format!("Showing {} of {}.", page.entries.len(), counts.total)
        } else {
            format!(
                "{} entr{}.",
                counts.total,
                if counts.total == 1 { "y" } else { "ies" }
            )
        };
        let items: Vec<_> = page
            .entries
            .iter()
            .map(|e| entry_view(e, &forms, page.sources, &splicer))
            .collect();
        let list = if items.is_empty() {
            view! { <p class="muted">"Nothing matches the filter."</p> }.into_any()
        } else {
            view! { <ul class="entries">{items}</ul> }.into_any()
        };
        let orphans = (!page.listing.orphan_triggers.is_empty()).then(|| {
            let items: Vec<_> = page
                .listing
                .orphan_triggers
                .iter()
                .map(|t| {
                    let target = format!("{} → {} (missing)", t.name, t.function_ref);
                    view! { <li>{target}</li> }
                })
                .collect();
            view! {
                <section class="orphans">
                    <h2>"Triggers without a function"</h2>
                    <ul>{items}</ul>
                </section>
            }
        });
        view! {
            {filters_view(page.selection, &namespace)}
            <p class="showing" role="status">{shown}</p>
            {list}
            {orphans}
        }
        .into_any()
    };
    let head = view! {
        <div class="page-head">
            <h1>"Functions " <span class="ns">{namespace.clone()}</span></h1>
            {counts_view(&counts)}
        </div>
        {body}
    };
    splicer.finish(document(format!("{namespace} · sless"), ctx, head))
}
