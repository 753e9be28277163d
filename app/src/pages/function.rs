//! `/funcs/<ns>/<kind>/<name>`: one Function or Service with its calls, logs, build log,
//! an invoke form and its settings.

use std::sync::Arc;

use leptos::prelude::*;

use super::layout::{CsrfField, PageContext, document};
use super::parts::{KindBadge, PhaseBadge, Time, TriggerItem, WorkloadUrl, cpu, limits};
use super::source::SourceFile;
use super::splice::{PageBody, Splicer};
use crate::actions::Invoke;
use crate::function::{
    CallSummary, FunctionView, InvokeOutcome, Minute, TriggerRuns, error_lines, version_label,
};
use crate::highlight::render_json_text;
use crate::listing::{Phase, url_encode};
use crate::routes::{function_href, source_href};
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
                    <td class="num">{format!("{:.1} ms", c.duration_ms)}</td>
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
                    <thead><tr><th>"Time"</th><th>"Call"</th><th>"Via"</th><th>"Method"</th><th>"Path"</th><th>"Status"</th><th>"Duration"</th></tr></thead>
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

#[component]
fn InvokeForm(
    namespace: String,
    name: String,
    kind: &'static str,
    csrf: Option<String>,
) -> impl IntoView {
    let methods: Vec<_> = ["POST", "GET", "PUT", "PATCH", "DELETE"]
        .into_iter()
        .map(|m| view! { <option value=m>{m}</option> })
        .collect();
    view! {
        <ActionForm action={ServerAction::<Invoke>::new()} attr:class="invoke">
            <CsrfField csrf=csrf/>
            <input type="hidden" name="namespace" value=namespace/>
            <input type="hidden" name="kind" value=kind/>
            <input type="hidden" name="name" value=name/>
            <div class="invoke-line">
                <label>"Method" <select name="method">{methods}</select></label>
                <label class="grow">"Path" <input type="text" name="path" placeholder="/" spellcheck="false"/></label>
            </div>
            <label for="invoke-body">"JSON body"</label>
            <textarea id="invoke-body" name="body" rows="4" spellcheck="false">"{}"</textarea>
            <button type="submit">"Invoke"</button>
        </ActionForm>
    }
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

#[component]
fn TriggerRow(trigger: TriggerRuns, namespace: String, csrf: Option<String>) -> impl IntoView {
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
    view! {
        <TriggerItem trigger=t namespace=namespace csrf=csrf>
            {runs}
        </TriggerItem>
    }
}

#[component]
fn Settings(view: FunctionView, namespace: String, csrf: Option<String>) -> impl IntoView {
    let w = &view.workload;
    let (memory, timeout) = limits(w.memory_mb, w.timeout_sec);
    let cpu = cpu(w.cpu_millis);
    let disk = format!("{} MB", w.disk_mb);
    let instances = format!(
        "{}–{}, another past {} calls in flight each",
        w.min_instances, w.max_instances, w.target_concurrency
    );
    let env = if w.env_vars.is_empty() {
        "none".to_string()
    } else {
        w.env_vars.keys().cloned().collect::<Vec<_>>().join(", ")
    };
    let triggers = if view.triggers.is_empty() {
        view! { <p class="muted">"No triggers."</p> }.into_any()
    } else {
        let rows: Vec<_> = view
            .triggers
            .iter()
            .map(|t| view! { <TriggerRow trigger=t.clone() namespace=namespace.clone() csrf=csrf.clone()/> })
            .collect();
        view! { <ul class="triggers" aria-label="Triggers">{rows}</ul> }.into_any()
    };
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
                <dt>"Env vars"</dt><dd class="env" title="Values are not shown">{env}</dd>
            </dl>
            <h3>"Triggers"</h3>
            {triggers}
        </section>
    }
}

pub async fn render_function(page: &FunctionPage<'_>, ctx: &PageContext) -> PageBody {
    // Actions (ServerAction) live in a reactive owner, even on the server.
    let (doc, splicer) = Owner::new().with(|| {
        let splicer = Splicer::provide(&ctx.nonce);
        let view = page.view;
        let w = &view.workload;
        let href = function_href(page.namespace, w.kind, &w.name);
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
        let body = view! {
            <p class="crumbs"><a href=format!("/funcs/{}", url_encode(page.namespace))>"← " {page.namespace.to_string()}</a></p>
            <div class="page-head">
                <h1>{w.name.clone()}</h1>
                <KindBadge kind=w.kind.as_str()/>
                <span class="runtime">{w.runtime.clone()}</span>
                <PhaseBadge phase=w.phase/>
            </div>
            {url}
            {message}
            <Calls calls=view.calls.clone() href=href.clone()/>
            <section class="panel" id="invoke" aria-labelledby="invoke-title">
                <h2 id="invoke-title">"Invoke"</h2>
                <p class="muted">"Calls it through /fn like any caller; the call shows up above."</p>
                <InvokeForm namespace=page.namespace.to_string() name=w.name.clone() kind=w.kind.as_str() csrf=ctx.csrf.clone()/>
                {invocation}
            </section>
            <Logs view=view.clone() href=href.clone() follow=page.follow filter=page.logs.clone()/>
            <BuildLog log=view.build_log.clone() failed=failed/>
            <Settings view=view.clone() namespace=page.namespace.to_string() csrf=ctx.csrf.clone()/>
            <p class="source-link"><a href=source_href(page.namespace, w.kind, &w.name)>"Source of the latest upload"</a></p>
        };
        let mut ctx = ctx.clone();
        if page.follow && w.phase == Phase::Building {
            ctx.refresh = Some(3);
        }
        (document(format!("{} · sless", w.name), &ctx, body), splicer)
    });
    splicer.finish(doc.into_html().await)
}
