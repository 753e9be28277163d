//! `/funcs/<ns>/<kind>/<name>`: one Function or Service with its calls, logs, build log,
//! an invoke form and its settings.

use std::sync::Arc;

use leptos::prelude::*;
use leptos::server_fn::ServerFn as _;

use super::diff::DiffPicker;
use super::layout::{CsrfField, PageContext, document};
use super::parts::{KindBadge, PhaseBadge, Time, TriggerItem, Warmth, WorkloadUrl, cpu, limits};
use super::source::SourceFile;
use super::splice::{PageBody, Splicer};
use crate::actions::{
    AddTrigger, ChangeEnv, Delete, DeleteEvent, Invoke, RemoveTrigger, Rollback, SaveSettings,
    Upload,
};
use crate::console::SavedEvent;
use crate::function::{
    CallSummary, FunctionView, InvokeOutcome, Minute, TriggerRuns, error_lines, version_label,
};
use crate::highlight::render_json_text;
use crate::listing::{Phase, url_encode};
use crate::routes::{diff_href, function_href, source_href};
use sless_api::LogLineResponse;
use sless_client::client::LogFilter;

pub struct FunctionPage<'a> {
    pub namespace: &'a str,
    pub view: &'a FunctionView,
    /// `?follow=1`: refresh every few seconds while Building.
    pub follow: bool,
    /// The answer of the invoke form just posted.
    pub invocation: Option<&'a InvokeOutcome>,
    /// Which log lines the page shows (`?request_id=`, `?q=`).
    pub logs: &'a LogFilter,
    /// The function's saved test events.
    pub events: &'a [SavedEvent],
    /// `?event=<name>`: the saved event loaded into the invoke form.
    pub loaded_event: Option<&'a str>,
    /// `?delete=1`: the confirmation step of deleting, naming what goes.
    pub confirm_delete: bool,
    /// `?cron=<schedule>`: the schedule previewed, with its next runs or why it is none.
    pub cron_preview: Option<(String, Result<Vec<String>, String>)>,
    /// The API's upload limit, said next to the file input.
    pub max_upload_mb: u64,
}

/// The hidden fields that say which workload a form acts on.
#[component]
fn Target(namespace: String, kind: &'static str, name: String) -> impl IntoView {
    view! {
        <input type="hidden" name="namespace" value=namespace/>
        <input type="hidden" name="kind" value=kind/>
        <input type="hidden" name="name" value=name/>
    }
}

fn millis(value: Option<f64>) -> String {
    value.map_or_else(|| "–".into(), |ms| format!("{ms:.1} ms"))
}

/// Calls (bars) and errors (red bars over them) per minute of the last hour, as SVG.
#[component]
fn CallChart(per_minute: Vec<Minute>) -> impl IntoView {
    const HEIGHT: u32 = 48;
    let peak = per_minute.iter().map(|m| m.calls).max().unwrap_or(0).max(1);
    let scale = |n: u32| (n * HEIGHT).div_ceil(peak);
    let bars: Vec<_> = per_minute
        .iter()
        .enumerate()
        .filter(|(_, m)| m.calls > 0)
        .map(|(i, m)| {
            let x = (i * 5).to_string();
            let (calls, errors) = (scale(m.calls), scale(m.errors));
            let title = format!("{} calls, {} errors", m.calls, m.errors);
            view! {
                <g>
                    <title>{title}</title>
                    <rect class="bar-calls" x=x.clone() y=(HEIGHT - calls).to_string() width="4" height=calls.to_string()></rect>
                    <rect class="bar-errors" x=x y=(HEIGHT - errors).to_string() width="4" height=errors.to_string()></rect>
                </g>
            }
        })
        .collect();
    let total: u32 = per_minute.iter().map(|m| m.calls).sum();
    let label = format!("Calls per minute over the last hour: {total} calls");
    view! {
        <svg class="chart" viewBox=format!("0 0 300 {HEIGHT}") role="img" aria-label=label preserveAspectRatio="none">
            <line class="chart-axis" x1="0" y1=HEIGHT.to_string() x2="300" y2=HEIGHT.to_string()></line>
            {bars}
        </svg>
    }
}

#[component]
fn Calls(calls: CallSummary, href: String) -> impl IntoView {
    let rate = calls
        .error_rate
        .map_or_else(|| "–".into(), |r| format!("{r:.1} %"));
    let rows: Vec<_> = calls
        .recent
        .iter()
        .map(|c| {
            let class = if c.status >= 500 {
                "status status-bad"
            } else {
                "status"
            };
            let lines = format!("{href}?request_id={}#logs", url_encode(&c.request_id));
            view! {
                <tr>
                    <td><Time at=c.time.clone()/></td>
                    <td><a href=lines title="This call's log lines">{c.request_id.clone()}</a></td>
                    <td>{c.trigger.clone()}</td>
                    <td>{c.method.clone()}</td>
                    <td class="path">{c.path.clone()}</td>
                    <td class=class>{c.status.to_string()}</td>
                    <td class="num">
                        {format!("{:.1} ms", c.duration_ms)}
                        {c.cold.then(|| view! { " " <span class="badge badge-cold" title="It waited for an instance to start">"cold"</span> })}
                    </td>
                    <td class="version">{c.version.clone().unwrap_or_else(|| "–".into())}</td>
                </tr>
            }
        })
        .collect();
    let table = if rows.is_empty() {
        view! { <p class="muted">"No calls yet: invoke it below or call its URL."</p> }.into_any()
    } else {
        view! {
            <div class="table-wrap">
                <table class="calls">
                    <thead><tr><th>"Time"</th><th>"Call"</th><th>"Via"</th><th>"Method"</th><th>"Path"</th><th>"Status"</th><th>"Duration"</th><th>"Version"</th></tr></thead>
                    <tbody>{rows}</tbody>
                </table>
            </div>
        }
        .into_any()
    };
    view! {
        <section class="panel" id="calls" aria-labelledby="calls-title">
            <h2 id="calls-title">"Calls"</h2>
            <dl class="stats">
                <div><dt>"Total"</dt><dd class="calls-total">{calls.totals.count.to_string()}</dd></div>
                <div><dt>"Errors"</dt><dd>{calls.totals.errors.to_string()}</dd></div>
                <div><dt>"Error rate"</dt><dd>{rate}</dd></div>
                <div><dt>"Last hour"</dt><dd>{calls.last_hour_calls.to_string()}</dd></div>
                <div><dt>"p50"</dt><dd>{millis(calls.p50_ms)}</dd></div>
                <div><dt>"p95"</dt><dd>{millis(calls.p95_ms)}</dd></div>
            </dl>
            <CallChart per_minute=calls.per_minute.clone()/>
            {table}
        </section>
    }
}

/// What the invoke form shows: what was typed last (kept by the flash), else a loaded
/// saved event.
#[derive(Clone, Debug, Default)]
struct InvokeTyped {
    method: Option<String>,
    path: Option<String>,
    body: Option<String>,
    event_name: Option<String>,
}

#[component]
fn InvokeForm(
    namespace: String,
    name: String,
    kind: &'static str,
    csrf: Option<String>,
    typed: InvokeTyped,
) -> impl IntoView {
    let method = typed.method.unwrap_or_else(|| "POST".into());
    let methods: Vec<_> = ["POST", "GET", "PUT", "PATCH", "DELETE"]
        .into_iter()
        .map(|m| view! { <option value=m selected=method == m>{m}</option> })
        .collect();
    let body = typed.body.unwrap_or_else(|| "{}".into());
    let save_action = crate::actions::SaveEvent::url();
    view! {
        <ActionForm action={ServerAction::<Invoke>::new()} attr:class="invoke">
            <CsrfField csrf=csrf/>
            <Target namespace=namespace kind=kind name=name/>
            <div class="invoke-line">
                <label>"Method" <select name="method">{methods}</select></label>
                <label class="grow">"Path" <input type="text" name="path" placeholder="/" spellcheck="false" value=typed.path.unwrap_or_default()/></label>
            </div>
            <label for="invoke-body">"JSON body"</label>
            <textarea id="invoke-body" name="body" rows="4" spellcheck="false">{body}</textarea>
            <div class="form-row">
                <button type="submit">"Invoke"</button>
                <label class="grow">"Save the body as " <input type="text" name="event_name" maxlength="64" placeholder="a name" value=typed.event_name.unwrap_or_default()/></label>
                <button type="submit" class="button-quiet" formaction=save_action>"Save event"</button>
            </div>
        </ActionForm>
    }
}

/// The saved test events: load one into the form (a link), or delete it.
#[component]
fn SavedEvents(
    events: Vec<SavedEvent>,
    href: String,
    namespace: String,
    kind: &'static str,
    name: String,
    csrf: Option<String>,
) -> impl IntoView {
    if events.is_empty() {
        return view! { <p class="muted">"No saved events: type a body and save it under a name."</p> }
            .into_any();
    }
    let rows: Vec<_> = events
        .into_iter()
        .map(|e| {
            let load = format!("{href}?event={}#invoke", url_encode(&e.name));
            let (namespace, name, csrf) = (namespace.clone(), name.clone(), csrf.clone());
            let label = format!("Delete the saved event {}", e.name);
            let event_name = e.name.clone();
            view! {
                <li>
                    <a href=load title="Load into the form">{e.name.clone()}</a>
                    <ActionForm action={ServerAction::<DeleteEvent>::new()} attr:class="inline">
                        <CsrfField csrf=csrf/>
                        <Target namespace=namespace kind=kind name=name/>
                        <input type="hidden" name="event_name" value=event_name/>
                        <button type="submit" class="button-quiet" aria-label=label>"Delete"</button>
                    </ActionForm>
                </li>
            }
        })
        .collect();
    view! { <ul class="saved-events" aria-label="Saved events">{rows}</ul> }.into_any()
}

#[component]
fn Invocation(outcome: InvokeOutcome) -> impl IntoView {
    let class = if outcome.status >= 500 {
        "status status-bad"
    } else {
        "status"
    };
    let headers: Vec<_> = outcome
        .headers
        .iter()
        .map(|(k, v)| view! { <li><code>{format!("{k}: {v}")}</code></li> })
        .collect();
    let highlighted = outcome
        .json
        .then(|| render_json_text("response body", &outcome.body))
        .flatten();
    let body = match highlighted {
        Some(file) => {
            view! { <SourceFile file=Arc::new(file) id="invoke-body-hl".to_string()/> }.into_any()
        }
        None => view! { <pre class="output">{outcome.body.clone()}</pre> }.into_any(),
    };
    view! {
        <div class="invocation" id="invocation" role="status">
            <p>
                {format!("{} {} → ", outcome.method, outcome.path)}
                <span class=class>{outcome.status.to_string()}</span>
                {format!(" in {:.1} ms", outcome.duration_ms)}
            </p>
            <details class="headers"><summary>"Headers"</summary><ul>{headers}</ul></details>
            {body}
        </div>
    }
}

/// The query of a function page showing `filter`'s lines (the page itself when none).
fn logs_query(filter: &LogFilter) -> String {
    let mut query = Vec::new();
    if let Some(id) = &filter.request_id {
        query.push(format!("request_id={}", url_encode(id)));
    }
    if let Some(text) = &filter.search {
        query.push(format!("q={}", url_encode(text)));
    }
    if query.is_empty() {
        String::new()
    } else {
        format!("?{}", query.join("&"))
    }
}

#[component]
fn LogLineView(line: LogLineResponse, href: String) -> impl IntoView {
    let class = format!("log-line log-{}", line.stream);
    let call = line.request_id.clone().map(|id| {
        let only = format!("{href}?request_id={}#logs", url_encode(&id));
        view! { <a class="log-call" href=only title="Only this call's lines">{format!("[{id}]")}</a>" " }
    });
    view! {
        <span class=class>
            <span class="log-meta" title=version_label(&line.version)>{format!("{} {} ", line.time, line.stream)}</span>
            {call}
            {line.line}
            "\n"
        </span>
    }
}

#[component]
fn Logs(view: FunctionView, href: String, follow: bool, filter: LogFilter) -> impl IntoView {
    let lines: Vec<_> = view
        .logs
        .iter()
        .map(|l| view! { <LogLineView line=l.clone() href=href.clone()/> })
        .collect();
    let filtered = filter.request_id.is_some() || filter.search.is_some();
    let body = if lines.is_empty() {
        let none = if filtered {
            "No lines match."
        } else {
            "No output yet."
        };
        view! { <p class="muted">{none}</p> }.into_any()
    } else {
        view! { <pre class="logs" id="log-lines">{lines}</pre> }.into_any()
    };
    let query = logs_query(&filter);
    let refresh = format!("{href}{query}#logs");
    let live = format!("{href}/logs/live{query}");
    let follow_link = (view.workload.phase == Phase::Building && !follow)
        .then(|| view! { <a href=format!("{href}?follow=1#logs")>"Follow while it builds"</a> });
    let all = filtered.then(|| view! { <a href=format!("{href}#logs")>"All lines"</a> });
    view! {
        <section class="panel" id="logs" aria-labelledby="logs-title" data-live=live>
            <h2 id="logs-title">"Logs"</h2>
            <form class="log-filter" method="get" action=format!("{href}#logs")>
                <label>"Call "<input name="request_id" value=filter.request_id.clone().unwrap_or_default() placeholder="request id" maxlength="64" pattern="[A-Za-z0-9._-]{1,64}"/></label>
                " "
                <label>"Text "<input name="q" type="search" value=filter.search.clone().unwrap_or_default() maxlength="256"/></label>
                " "
                <button type="submit" class="button-quiet">"Filter"</button>
            </form>
            <p class="panel-links"><a href=refresh>"Refresh"</a> " " {all} " " {follow_link}</p>
            {body}
        </section>
    }
}

#[component]
fn BuildLog(log: Option<String>, failed: bool) -> impl IntoView {
    let Some(log) = log else {
        return view! {
            <section class="panel" id="build"><h2>"Build log"</h2><p class="muted">"Not built yet."</p></section>
        }
        .into_any();
    };
    view! {
        <section class="panel" id="build" aria-labelledby="build-title">
            <h2 id="build-title">"Build log"</h2>
            <details class="build-log" open=failed>
                <summary>{format!("Whole log ({} lines)", log.lines().count())}</summary>
                <pre class="output">{log}</pre>
            </details>
        </section>
    }
    .into_any()
}

/// Which workload a part of the page acts on, and the session's CSRF token.
#[derive(Clone, Debug)]
struct Acting {
    namespace: String,
    kind: &'static str,
    name: String,
    csrf: Option<String>,
}

/// The CSRF token and which workload: the hidden fields of every form of the page.
#[component]
fn Hidden(acting: Acting) -> impl IntoView {
    view! {
        <CsrfField csrf=acting.csrf/>
        <Target namespace=acting.namespace kind=acting.kind name=acting.name/>
    }
}

#[component]
fn TriggerRow(trigger: TriggerRuns, acting: Acting) -> impl IntoView {
    let t = trigger.trigger;
    let runs = (t.trigger_type == "cron").then(|| {
        let last = t.last_run.clone().map_or_else(
            || view! { <span>"never"</span> }.into_any(),
            |at| view! { <Time at=at/> }.into_any(),
        );
        let next = trigger.next_run.clone().map_or_else(
            || view! { <span>"–"</span> }.into_any(),
            |at| view! { <Time at=at/> }.into_any(),
        );
        view! { <span class="runs">"last " {last} ", next " {next}</span> }
    });
    let trigger_name = t.name.clone();
    let Acting {
        namespace,
        kind,
        name,
        csrf,
    } = acting;
    let (toggle_namespace, toggle_csrf) = (namespace.clone(), csrf.clone());
    let remove = csrf.map(|csrf| {
        let label = format!("Remove trigger {trigger_name}");
        view! {
            <ActionForm action={ServerAction::<RemoveTrigger>::new()} attr:class="inline">
                <CsrfField csrf=Some(csrf)/>
                <Target namespace=namespace kind=kind name=name/>
                <input type="hidden" name="trigger" value=trigger_name/>
                <button type="submit" class="button-quiet" aria-label=label>"Remove"</button>
            </ActionForm>
        }
    });
    view! {
        <TriggerItem trigger=t namespace=toggle_namespace csrf=toggle_csrf>
            {runs}
            {remove}
        </TriggerItem>
    }
}

/// A number field showing the current value, or what was typed when a save failed.
#[component]
fn NumberField(
    label: &'static str,
    field: &'static str,
    current: u32,
    typed: Option<String>,
    min: u32,
    max: u32,
) -> impl IntoView {
    view! {
        <label>{label} " " <input type="number" name=field min=min.to_string() max=max.to_string() value=typed.unwrap_or_else(|| current.to_string())/></label>
    }
}

#[component]
fn Settings(
    workload: sless_api::WorkloadResponse,
    acting: Acting,
    typed: Option<crate::forms::KeptForm>,
) -> impl IntoView {
    use sless_api::validation as v;
    let w = workload;
    let (memory, timeout) = limits(w.memory_mb, w.timeout_sec);
    let cpu = cpu(w.cpu_millis);
    let disk = format!("{} MB", w.disk_mb);
    let running = w
        .instances
        .map(|n| format!("{n} running; "))
        .unwrap_or_default();
    let instances = format!(
        "{running}{}–{}, another past {} calls in flight each",
        w.min_instances, w.max_instances, w.target_concurrency
    );
    let typed = typed.unwrap_or_default();
    let get = |field: &str| typed.get(field).cloned();
    let open = get("memory_mb").is_some();
    let entrypoint = get("entrypoint").unwrap_or(w.entrypoint.clone());
    let (memory_mb, cpu_millis, disk_mb, timeout_sec) = (
        get("memory_mb"),
        get("cpu_millis"),
        get("disk_mb"),
        get("timeout_sec"),
    );
    let (current_memory, current_cpu, current_disk, current_timeout) =
        (w.memory_mb, w.cpu_millis, w.disk_mb, w.timeout_sec);
    let (min_instances, max_instances, target_concurrency) = (
        get("min_instances"),
        get("max_instances"),
        get("target_concurrency"),
    );
    let (current_min, current_max, current_target) =
        (w.min_instances, w.max_instances, w.target_concurrency);
    let Acting {
        namespace,
        kind,
        name,
        csrf,
    } = acting;
    let form = csrf.map(|csrf| {
        view! {
            <details class="edit" open=open>
                <summary>"Edit"</summary>
                <ActionForm action={ServerAction::<SaveSettings>::new()} attr:class="settings-form">
                    <CsrfField csrf=Some(csrf)/>
                    <Target namespace=namespace kind=kind name=name/>
                    <label>"Entrypoint " <input type="text" name="entrypoint" value=entrypoint spellcheck="false"/></label>
                    <div class="form-row">
                        <NumberField label="Memory (MB)" field="memory_mb" current=current_memory typed=memory_mb min=v::MEMORY_MB_MIN max=v::MEMORY_MB_MAX/>
                        <NumberField label="CPU (1000 = 1 core)" field="cpu_millis" current=current_cpu typed=cpu_millis min=v::CPU_MILLIS_MIN max=v::CPU_MILLIS_MAX/>
                        <NumberField label="Disk (MB)" field="disk_mb" current=current_disk typed=disk_mb min=v::DISK_MB_MIN max=v::DISK_MB_MAX/>
                        <NumberField label="Timeout (s, 0 = none)" field="timeout_sec" current=current_timeout typed=timeout_sec min=0 max=v::MAX_TIMEOUT_SEC/>
                    </div>
                    <div class="form-row">
                        <NumberField label="Min instances" field="min_instances" current=current_min typed=min_instances min=0 max=v::MAX_INSTANCES/>
                        <NumberField label="Max instances" field="max_instances" current=current_max typed=max_instances min=1 max=v::MAX_INSTANCES/>
                        <NumberField label="Calls per instance" field="target_concurrency" current=current_target typed=target_concurrency min=1 max=v::MAX_TARGET_CONCURRENCY/>
                    </div>
                    <button type="submit">"Save settings"</button>
                </ActionForm>
            </details>
        }
    });
    view! {
        <section class="panel" id="settings" aria-labelledby="settings-title">
            <h2 id="settings-title">"Settings"</h2>
            <dl class="meta">
                <dt>"Entrypoint"</dt><dd><code>{w.entrypoint.clone()}</code></dd>
                <dt>"Memory"</dt><dd>{memory}</dd>
                <dt>"CPU"</dt><dd>{cpu}</dd>
                <dt>"Disk"</dt><dd>{disk}</dd>
                <dt>"Timeout"</dt><dd>{timeout}</dd>
                <dt>"Instances"</dt><dd>{instances}</dd>
                <dt>"Egress"</dt><dd>{w.egress.to_string()}</dd>
            </dl>
            {form}
        </section>
    }
}

/// The kept versions, newest first; any but the active one can be rolled back to.
#[component]
fn Versions(versions: Vec<sless_api::VersionResponse>, acting: Acting) -> impl IntoView {
    let signed_in = acting.csrf.is_some();
    let kind = sless_api::WorkloadKind::from_name(acting.kind)
        .unwrap_or(sless_api::WorkloadKind::Function);
    let source = source_href(&acting.namespace, kind, &acting.name);
    // Each version's changes from the one kept before it.
    let older: Vec<Option<String>> = versions
        .iter()
        .skip(1)
        .map(|v| Some(v.version.clone()))
        .chain(std::iter::once(None))
        .collect();
    let picker = (versions.len() > 1).then(|| {
        let action = format!(
            "{}/diff",
            function_href(&acting.namespace, kind, &acting.name)
        );
        let (from, to) = (versions[1].version.clone(), versions[0].version.clone());
        view! {
            <h3>"Compare two versions"</h3>
            <DiffPicker action=action versions=versions.clone() from=from to=to/>
        }
    });
    let rows: Vec<_> = versions
        .into_iter()
        .zip(older)
        .map(|(v, older)| {
            let changes = older.map(|older| {
                let href = diff_href(&acting.namespace, kind, &acting.name, &older, &v.version);
                let label = format!("Changes from version {older} to {}", v.version);
                view! { " " <a class="diff-link" href=href aria-label=label>"changes"</a> }
            });
            let by = v.uploaded_by.clone().unwrap_or_else(|| "–".into());
            let size = v
                .size
                .map_or_else(|| "–".to_string(), |s| format!("{} KB", s.div_ceil(1024)));
            let sha = v
                .sha256
                .as_deref()
                .map_or_else(|| "–".to_string(), |s| s.chars().take(12).collect());
            let action = if v.active {
                view! { <span class="badge">"active"</span> }.into_any()
            } else if signed_in {
                let label = format!("Roll back to version {}", v.version);
                let (hidden, version) = (acting.clone(), v.version.clone());
                view! {
                    <ActionForm action={ServerAction::<Rollback>::new()} attr:class="inline">
                        <Hidden acting=hidden/>
                        <input type="hidden" name="version" value=version/>
                        <button type="submit" class="button-quiet" aria-label=label>"Roll back to this version"</button>
                    </ActionForm>
                }
                .into_any()
            } else {
                view! { <span></span> }.into_any()
            };
            view! {
                <tr>
                    <td><a href=format!("{source}&version={}", url_encode(&v.version))><code>{v.version.clone()}</code></a>{changes}</td>
                    <td><Time at=v.created_at.clone()/></td>
                    <td>{by}</td>
                    <td>{size}</td>
                    <td><code>{sha}</code></td>
                    <td>{action}</td>
                </tr>
            }
        })
        .collect();
    let body = if rows.is_empty() {
        view! { <p class="muted">"No code uploaded yet."</p> }.into_any()
    } else {
        view! {
            <div class="table-wrap">
                <table class="versions">
                    <thead><tr><th>"Version"</th><th>"Uploaded"</th><th>"By"</th><th>"Size"</th><th>"sha256"</th><th></th></tr></thead>
                    <tbody>{rows}</tbody>
                </table>
            </div>
        }
        .into_any()
    };
    view! {
        <section class="panel" id="versions" aria-labelledby="versions-title">
            <h2 id="versions-title">"Versions"</h2>
            {body}
            {picker}
        </section>
    }
}

/// Env var names only: a value is never shown, only replaced (typed again) or removed.
#[component]
fn Env(names: Vec<String>, acting: Acting, typed_name: Option<String>) -> impl IntoView {
    let signed_in = acting.csrf.is_some();
    let rows: Vec<_> = names
        .into_iter()
        .map(|var| {
            let label = format!("Remove {var}");
            let hidden = acting.clone();
            let shown = var.clone();
            let remove = signed_in.then(|| {
                view! {
                    <ActionForm action={ServerAction::<ChangeEnv>::new()} attr:class="inline">
                        <Hidden acting=hidden/>
                        <input type="hidden" name="env_name" value=var/>
                        <input type="hidden" name="remove" value="1"/>
                        <button type="submit" class="button-quiet" aria-label=label>"Remove"</button>
                    </ActionForm>
                }
            });
            view! { <li><code class="env-name">{shown}</code> " " <span class="muted">"value hidden"</span> {remove}</li> }
        })
        .collect();
    let list = if rows.is_empty() {
        view! { <p class="muted">"No env vars."</p> }.into_any()
    } else {
        view! { <ul class="env" aria-label="Env vars">{rows}</ul> }.into_any()
    };
    let form = signed_in.then(|| {
        view! {
            <ActionForm action={ServerAction::<ChangeEnv>::new()} attr:class="settings-form">
                <Hidden acting=acting/>
                <div class="form-row">
                    <label>"Name " <input type="text" name="env_name" required maxlength="256" pattern="[A-Za-z_][A-Za-z0-9_]*" spellcheck="false" autocomplete="off" value=typed_name.unwrap_or_default()/></label>
                    <label class="grow">"Value " <input type="password" name="env_value" autocomplete="new-password" spellcheck="false"/></label>
                    <button type="submit">"Set"</button>
                </div>
                <p class="hint muted">"Setting a name that exists replaces its value."</p>
            </ActionForm>
        }
    });
    view! {
        <section class="panel" id="env" aria-labelledby="env-title">
            <h2 id="env-title">"Env vars"</h2>
            {list}
            {form}
        </section>
    }
}

#[component]
fn Triggers(
    triggers: Vec<TriggerRuns>,
    acting: Acting,
    href: String,
    typed: Option<crate::forms::KeptForm>,
    preview: Option<(String, Result<Vec<String>, String>)>,
    /// Why the add form just posted was refused, shown beside it.
    error: Option<String>,
) -> impl IntoView {
    let list = if triggers.is_empty() {
        view! { <p class="muted">"No triggers."</p> }.into_any()
    } else {
        let rows: Vec<_> = triggers
            .into_iter()
            .map(|t| view! { <TriggerRow trigger=t acting=acting.clone()/> })
            .collect();
        view! { <ul class="triggers" aria-label="Triggers">{rows}</ul> }.into_any()
    };
    let typed = typed.unwrap_or_default();
    let get = |field: &str| typed.get(field).cloned();
    let (typed_trigger, typed_queue, typed_concurrency, typed_retries) = (
        get("trigger").unwrap_or_default(),
        get("queue").unwrap_or_default(),
        get("concurrency").unwrap_or_default(),
        get("max_retries").unwrap_or_default(),
    );
    // The field the API's message names ("queue: ...") is marked invalid.
    let invalid_field = error
        .as_deref()
        .and_then(|e| e.split_once(": "))
        .map(|(field, _)| field.to_string());
    let invalid = move |field: &str| (invalid_field.as_deref() == Some(field)).then_some("true");
    let error = error.map(|e| view! { <p class="flash flash-error" id="trigger-error">{e}</p> });
    let schedule = preview
        .as_ref()
        .map(|(s, _)| s.clone())
        .or_else(|| get("schedule"))
        .unwrap_or_default();
    let trigger_type = get("trigger_type").unwrap_or_else(|| {
        if preview.is_some() {
            "cron".into()
        } else {
            "http".into()
        }
    });
    let types: Vec<_> = ["http", "cron", "event"]
        .into_iter()
        .map(|t| view! { <option value=t selected=trigger_type == t>{t}</option> })
        .collect();
    let preview = preview.map(|(schedule, runs)| match runs {
        Ok(runs) => {
            let items: Vec<_> = runs
                .into_iter()
                .map(|at| view! { <li><Time at=at/></li> })
                .collect();
            view! {
                <div class="cron-preview" id="cron-preview" role="status">
                    <p>{format!("Next runs of {schedule} (UTC):")}</p>
                    <ol>{items}</ol>
                </div>
            }
            .into_any()
        }
        Err(why) => view! { <p class="flash flash-error" role="alert" id="cron-preview">{why}</p> }
            .into_any(),
    });
    use sless_api::validation as v;
    let default_name = format!("{}-", acting.name);
    let check = format!("{href}#triggers");
    let preview_schedule = schedule.clone();
    let form = acting.csrf.is_some().then(|| {
        view! {
            <h3>"Add a trigger"</h3>
            <form class="cron-check" method="get" action=check>
                <label>"Cron schedule " <input type="text" name="cron" value=preview_schedule placeholder="*/5 * * * *" spellcheck="false" maxlength="128"/></label>
                " "
                <button type="submit" class="button-quiet">"Preview next runs"</button>
            </form>
            {preview}
            {error}
            <ActionForm action={ServerAction::<AddTrigger>::new()} attr:class="settings-form" attr:id="add-trigger">
                <Hidden acting=acting.clone()/>
                <div class="form-row">
                    <label>"Name " <input type="text" name="trigger" required maxlength="63" pattern="[a-z0-9]([-a-z0-9]*[a-z0-9])?" placeholder=default_name value=typed_trigger spellcheck="false" autocomplete="off" aria-invalid=invalid("trigger")/></label>
                    <label>"Type " <select name="trigger_type">{types}</select></label>
                </div>
                <label class="grow">"Schedule (cron) " <input type="text" name="schedule" value=schedule placeholder="*/5 * * * *" spellcheck="false" maxlength="128" aria-invalid=invalid("schedule")/></label>
                <fieldset class="event-fields">
                    <legend>"Event (RabbitMQ queue)"</legend>
                    <div class="form-row">
                        <label class="grow">"Queue " <input type="text" name="queue" value=typed_queue spellcheck="false" maxlength=v::MAX_QUEUE_LEN.to_string() placeholder="orders" aria-invalid=invalid("queue")/></label>
                        <label>"Messages at once " <input type="number" name="concurrency" min="1" max=v::MAX_EVENT_CONCURRENCY.to_string() placeholder="1" value=typed_concurrency aria-invalid=invalid("concurrency")/></label>
                        <label>"Retries " <input type="number" name="max_retries" min="0" max=v::MAX_EVENT_RETRIES.to_string() placeholder="5" value=typed_retries aria-invalid=invalid("max_retries")/></label>
                    </div>
                    <p class="hint muted">"sless declares the queue (durable) if missing; after the retries a message goes to " <code>"<queue>.dead"</code> "."</p>
                </fieldset>
                <button type="submit">"Add trigger"</button>
            </ActionForm>
        }
    });
    view! {
        <section class="panel" id="triggers" aria-labelledby="triggers-title">
            <h2 id="triggers-title">"Triggers"</h2>
            {list}
            {form}
        </section>
    }
}

/// A new version of the code; the page then follows its build.
#[component]
fn UploadForm(acting: Acting, max_upload_mb: u64) -> impl IntoView {
    acting.csrf.clone().map(|csrf| {
        let label = format!("A .zip of the code (up to {max_upload_mb} MiB)");
        view! {
            <section class="panel" id="upload" aria-labelledby="upload-title">
                <h2 id="upload-title">"Upload a new version"</h2>
                <ActionForm action={ServerAction::<Upload>::new()} attr:class="settings-form" attr:enctype="multipart/form-data">
                    <CsrfField csrf=Some(csrf)/>
                    <Target namespace=acting.namespace.clone() kind=acting.kind name=acting.name.clone()/>
                    <div class="form-row">
                        <label class="grow">{label} " " <input type="file" name="code" required accept=".zip,application/zip"/></label>
                        <button type="submit">"Upload"</button>
                    </div>
                </ActionForm>
            </section>
        }
    })
}

/// Deleting: a link to the confirmation step, which names everything that goes.
#[component]
fn DeletePanel(
    acting: Acting,
    href: String,
    confirm: bool,
    triggers: Vec<String>,
    events: usize,
) -> impl IntoView {
    let csrf = acting.csrf.clone()?;
    let kind = acting.kind;
    let name = acting.name.clone();
    if !confirm {
        return Some(
            view! {
                <section class="panel danger" id="delete" aria-labelledby="delete-title">
                    <h2 id="delete-title">"Delete"</h2>
                    <p><a class="button-danger" href=format!("{href}?delete=1#delete")>{format!("Delete {kind} {name}…")}</a></p>
                </section>
            }
            .into_any(),
        );
    }
    let mut goes = vec![
        format!("the {kind} {name} and its instances"),
        "its uploaded code and build log".to_string(),
    ];
    if !triggers.is_empty() {
        goes.push(format!("its triggers: {}", triggers.join(", ")));
    }
    if events > 0 {
        goes.push(format!("its {events} saved test events"));
    }
    let items: Vec<_> = goes.into_iter().map(|g| view! { <li>{g}</li> }).collect();
    Some(
        view! {
            <section class="panel danger" id="delete" aria-labelledby="delete-title">
                <h2 id="delete-title">{format!("Delete {kind} {name}?")}</h2>
                <p>"This deletes, for good:"</p>
                <ul class="deletes">{items}</ul>
                <ActionForm action={ServerAction::<Delete>::new()} attr:class="settings-form">
                    <CsrfField csrf=Some(csrf)/>
                    <Target namespace=acting.namespace.clone() kind=kind name=name.clone()/>
                    <input type="hidden" name="confirm" value=name.clone()/>
                    <div class="form-row">
                        <button type="submit" class="button-danger">{format!("Yes, delete {name}")}</button>
                        <a href=format!("{href}#delete")>"Cancel"</a>
                    </div>
                </ActionForm>
            </section>
        }
        .into_any(),
    )
}

pub async fn render_function(page: &FunctionPage<'_>, ctx: &PageContext) -> PageBody {
    // Actions (ServerAction) live in a reactive owner, even on the server.
    let (doc, splicer) = Owner::new().with(|| {
        let splicer = Splicer::provide(&ctx.nonce);
        let view = page.view;
        let w = &view.workload;
        let href = function_href(page.namespace, w.kind, &w.name);
        let acting = Acting {
            namespace: page.namespace.to_string(),
            kind: w.kind.as_str(),
            name: w.name.clone(),
            csrf: ctx.csrf.clone(),
        };
        let stopped = view.stopped();
        let url = view
            .url()
            .map(|url| view! { <p class="url-line"><WorkloadUrl url=url.to_string() stopped=stopped/></p> });
        let failed = w.phase == Phase::Failed;
        // A failure shows its error lines first, in sight on a phone; the whole log is below.
        let message = w.message.as_deref().map(|m| match error_lines(m).filter(|_| failed) {
            Some(lines) => view! {
                <p class="error-line" role="alert">{lines}</p>
                <p class="panel-links"><a href="#build">"The whole build log"</a></p>
            }
            .into_any(),
            None => view! { <pre class="message muted">{m.to_string()}</pre> }.into_any(),
        });
        let invocation = page
            .invocation
            .map(|o| view! { <Invocation outcome=o.clone()/> });
        let kept = ctx.flash.as_ref().and_then(|f| f.form.clone());
        let loaded = page
            .loaded_event
            .and_then(|n| page.events.iter().find(|e| e.name == n));
        let typed = match (&kept, loaded) {
            (Some(kept), _) if kept.contains_key("body") => InvokeTyped {
                method: kept.get("method").cloned(),
                path: kept.get("path").cloned(),
                body: kept.get("body").cloned(),
                event_name: kept.get("event_name").cloned(),
            },
            (_, Some(event)) => InvokeTyped {
                body: Some(event.body.clone()),
                event_name: Some(event.name.clone()),
                ..InvokeTyped::default()
            },
            _ => InvokeTyped::default(),
        };
        let trigger_names: Vec<String> = view.triggers.iter().map(|t| t.trigger.name.clone()).collect();
        let env_names: Vec<String> = w.env_vars.keys().cloned().collect();
        let typed_env = kept.as_ref().and_then(|k| k.get("env_name").cloned());
        let trigger_error = ctx
            .flash
            .as_ref()
            .filter(|f| f.kind == super::layout::FlashKind::Error)
            .filter(|_| kept.as_ref().is_some_and(|k| k.contains_key("trigger_type")))
            .map(|f| f.text.clone());
        let body = view! {
            <p class="crumbs"><a href=format!("/funcs/{}", url_encode(page.namespace))>"← " {page.namespace.to_string()}</a></p>
            <div class="page-head">
                <h1>{w.name.clone()}</h1>
                <KindBadge kind=w.kind.as_str()/>
                <span class="runtime">{w.runtime.clone()}</span>
                <PhaseBadge phase=w.phase/>
                <Warmth instances=w.instances min=w.min_instances max=w.max_instances/>
            </div>
            {url}
            {message}
            <Calls calls=view.calls.clone() href=href.clone()/>
            <section class="panel" id="invoke" aria-labelledby="invoke-title">
                <h2 id="invoke-title">"Invoke"</h2>
                <p class="muted">"Calls it through /fn like any caller; the call shows up above."</p>
                <InvokeForm namespace=page.namespace.to_string() name=w.name.clone() kind=w.kind.as_str() csrf=ctx.csrf.clone() typed=typed/>
                {invocation}
                <h3>"Saved events"</h3>
                <SavedEvents events=page.events.to_vec() href=href.clone() namespace=page.namespace.to_string() kind=w.kind.as_str() name=w.name.clone() csrf=ctx.csrf.clone()/>
            </section>
            <Logs view=view.clone() href=href.clone() follow=page.follow filter=page.logs.clone()/>
            <UploadForm acting=acting.clone() max_upload_mb=page.max_upload_mb/>
            <BuildLog log=view.build_log.clone() failed=failed/>
            <Versions versions=view.versions.clone() acting=acting.clone()/>
            <Settings workload=w.clone() acting=acting.clone() typed=kept.clone()/>
            <Env names=env_names acting=acting.clone() typed_name=typed_env/>
            <Triggers triggers=view.triggers.clone() acting=acting.clone() href=href.clone() typed=kept.clone() preview=page.cron_preview.clone() error=trigger_error/>
            <p class="source-link"><a href=source_href(page.namespace, w.kind, &w.name)>"Source of the latest upload"</a></p>
            <DeletePanel acting=acting href=href.clone() confirm=page.confirm_delete triggers=trigger_names events=page.events.len()/>
        };
        let mut ctx = ctx.clone();
        if page.follow && w.phase == Phase::Building {
            ctx.refresh = Some(3);
        }
        (document(format!("{} · sless", w.name), &ctx, body), splicer)
    });
    splicer.finish(doc.into_html().await)
}
