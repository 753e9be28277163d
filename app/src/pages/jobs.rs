//! `/funcs/<ns>/jobs` and `/funcs/<ns>/jobs/<name>`: jobs (they run once per `run_id`),
//! with their phase, last run, result and log tail, the runs they keep (`?run=N` opens
//! one), and "Run again".

use std::sync::Arc;

use leptos::prelude::*;
use sless_api::text::first_line_cut;
use sless_api::{JobPhase, JobResponse, JobRunResponse, human_duration_ms};

use super::layout::{CsrfField, PageContext, document};
use super::parts::{KindBadge, Time};
use super::source::SourceFile;
use super::splice::{PageBody, Splicer};
use crate::actions::RunJob;
use crate::console::JobPage;
use crate::highlight::render_json_text;
use crate::listing::url_encode;
use crate::routes::job_href;

#[component]
fn JobPhaseBadge(phase: JobPhase) -> impl IntoView {
    let class = format!("phase phase-{}", phase.as_str().to_ascii_lowercase());
    view! { <span class=class>{phase.as_str()}</span> }
}

#[component]
fn MaybeTime(at: Option<String>) -> impl IntoView {
    match at {
        Some(at) => view! { <Time at=at/> }.into_any(),
        None => view! { <span class="muted">"–"</span> }.into_any(),
    }
}

/// A result longer than this is cut in the runs table.
const RESULT_CHARS: usize = 80;

fn duration(ms: Option<u64>) -> String {
    ms.map_or_else(|| "–".into(), human_duration_ms)
}

/// The result as highlighted JSON, or as it is.
fn result_view(message: &str, id: &str) -> AnyView {
    match render_json_text("result", message) {
        Some(file) => {
            let file = Arc::new(file);
            view! { <SourceFile file=file id=id.to_string()/> }.into_any()
        }
        None => view! { <pre class="output job-message">{message.to_string()}</pre> }.into_any(),
    }
}

#[component]
fn RunRow(run: JobRunResponse, href: String) -> impl IntoView {
    let result = first_line_cut(run.message.as_deref().unwrap_or_default(), RESULT_CHARS);
    view! {
        <tr id=format!("run-{}", run.run_id)>
            <td class="num"><a href=href>{run.run_id.to_string()}</a></td>
            <td><JobPhaseBadge phase=run.phase/></td>
            <td><MaybeTime at=run.start_time.clone()/></td>
            <td class="num">{duration(run.duration_ms)}</td>
            <td><code>{result}</code></td>
        </tr>
    }
}

/// The run opened with `?run=N`: its event, result and log tail.
#[component]
fn OpenRun(run: JobRunResponse) -> impl IntoView {
    let result = run
        .message
        .as_deref()
        .map(|message| result_view(message, "run-result"));
    let log = run.log_tail.clone().map_or_else(
        || view! { <p class="muted">"No output."</p> }.into_any(),
        |tail| view! { <pre class="logs">{tail}</pre> }.into_any(),
    );
    view! {
        <section class="panel" id="open-run">
            <h2>"Run " {run.run_id.to_string()} " " <JobPhaseBadge phase=run.phase/></h2>
            <dl class="meta">
                <dt>"Request id"</dt><dd><code>{run.request_id.clone().unwrap_or_default()}</code></dd>
                <dt>"Started"</dt><dd><MaybeTime at=run.start_time.clone()/></dd>
                <dt>"Duration"</dt><dd>{duration(run.duration_ms)}</dd>
                <dt>"Event"</dt><dd><code>{run.event_json.clone()}</code></dd>
            </dl>
            <h3>"Result"</h3>{result}
            <h3>"Log tail"</h3>{log}
        </section>
    }
}

/// What the job runs: its function, else its own code.
fn target(job: &JobResponse) -> String {
    match (&job.function_ref, &job.runtime) {
        (Some(function), _) => format!("function {function}"),
        (None, Some(runtime)) => format!("own code ({runtime})"),
        (None, None) => "own code".into(),
    }
}

#[component]
fn JobRow(job: JobResponse, namespace: String) -> impl IntoView {
    view! {
        <tr id=format!("job-{}", job.name)>
            <td><a href=job_href(&namespace, &job.name)>{job.name.clone()}</a></td>
            <td><JobPhaseBadge phase=job.phase/></td>
            <td class="num">{job.run_id.to_string()}</td>
            <td><MaybeTime at=job.start_time.clone()/></td>
            <td><MaybeTime at=job.completion_time.clone()/></td>
            <td>{target(&job)}</td>
        </tr>
    }
}

pub async fn render_jobs(namespace: &str, jobs: &[JobResponse], ctx: &PageContext) -> String {
    // Actions (ServerAction) live in a reactive owner, even on the server.
    let doc = Owner::new().with(|| {
        let body = if jobs.is_empty() {
            view! {
                <p class="muted">"No jobs yet. " <code>"sless job run <name> --function <fn>"</code> " starts one."</p>
            }
            .into_any()
        } else {
            let rows: Vec<_> = jobs
                .iter()
                .map(|j| view! { <JobRow job=j.clone() namespace=namespace.to_string()/> })
                .collect();
            view! {
                <div class="table-wrap">
                    <table class="jobs">
                        <thead><tr><th>"Job"</th><th>"Phase"</th><th>"Run"</th><th>"Started"</th><th>"Finished"</th><th>"Runs"</th></tr></thead>
                        <tbody>{rows}</tbody>
                    </table>
                </div>
            }
            .into_any()
        };
        let view = view! {
            <p class="crumbs"><a href=format!("/funcs/{}", url_encode(namespace))>"← " {namespace.to_string()}</a></p>
            <div class="page-head"><h1>"Jobs " <span class="ns">{namespace.to_string()}</span></h1></div>
            {body}
        };
        document(format!("Jobs · {namespace} · sless"), ctx, view)
    });
    doc.into_html().await
}

pub async fn render_job(namespace: &str, page: &JobPage, ctx: &PageContext) -> PageBody {
    let job = &page.job;
    // Actions (ServerAction) live in a reactive owner, even on the server.
    let (doc, splicer) = Owner::new().with(|| {
        let splicer = Splicer::provide(&ctx.nonce);
        let result = job
            .message
            .as_deref()
            .map(|message| result_view(message, "job-result"));
        let runs = if page.runs.is_empty() {
            view! { <p class="muted">"No runs yet."</p> }.into_any()
        } else {
            let base = job_href(namespace, &job.name);
            let rows: Vec<_> = page
                .runs
                .iter()
                .map(|r| {
                    let href = format!("{base}?run={}#open-run", r.run_id);
                    view! { <RunRow run=r.clone() href=href/> }
                })
                .collect();
            view! {
                <div class="table-wrap">
                    <table class="runs">
                        <thead><tr><th>"Run"</th><th>"Phase"</th><th>"Started"</th><th>"Duration"</th><th>"Result"</th></tr></thead>
                        <tbody>{rows}</tbody>
                    </table>
                </div>
            }
            .into_any()
        };
        let open = page.run.clone().map(|run| view! { <OpenRun run=run/> });
        let log = job.log_tail.clone().map_or_else(
            || view! { <p class="muted">"No output yet."</p> }.into_any(),
            |tail| view! { <pre class="logs">{tail}</pre> }.into_any(),
        );
        let (ns, name) = (namespace.to_string(), job.name.clone());
        let last_event = job.event_json.clone();
        let form = ctx.csrf.clone().map(|csrf| {
            view! {
                <ActionForm action={ServerAction::<RunJob>::new()} attr:class="run-again">
                    <CsrfField csrf=Some(csrf)/>
                    <input type="hidden" name="namespace" value=ns/>
                    <input type="hidden" name="job" value=name/>
                    <label for="event">"Event JSON (empty: the same as last run)"</label>
                    <textarea id="event" name="event" rows="3" spellcheck="false" placeholder=last_event></textarea>
                    <button type="submit">"Run again"</button>
                </ActionForm>
            }
        });
        let view = view! {
            <p class="crumbs"><a href=format!("/funcs/{}/jobs", url_encode(namespace))>"← Jobs"</a></p>
            <div class="page-head">
                <h1>{job.name.clone()}</h1>
                <KindBadge kind="job"/>
                <JobPhaseBadge phase=job.phase/>
            </div>
            <dl class="meta">
                <dt>"Run"</dt><dd class="run-id">{job.run_id.to_string()}</dd>
                <dt>"Runs"</dt><dd>{target(job)}</dd>
                <dt>"Started"</dt><dd><MaybeTime at=job.start_time.clone()/></dd>
                <dt>"Finished"</dt><dd><MaybeTime at=job.completion_time.clone()/></dd>
                <dt>"Event"</dt><dd><code>{job.event_json.clone()}</code></dd>
            </dl>
            <section class="panel" id="result"><h2>"Result"</h2>{result}</section>
            <section class="panel" id="job-log"><h2>"Log tail"</h2>{log}</section>
            <section class="panel" id="runs"><h2>"Runs"</h2>{runs}</section>
            {open}
            <section class="panel" id="run"><h2>"Run again"</h2>{form}</section>
        };
        (document(format!("{} · job · sless", job.name), ctx, view), splicer)
    });
    splicer.finish(doc.into_html().await)
}

/// One job as text for curl: its line, its latest result, its runs (newest first) and
/// the run opened with `?run=N` with its log tail.
pub fn job_text(page: &JobPage) -> String {
    let job = &page.job;
    let mut out = jobs_text(std::slice::from_ref(job));
    let result = job.message.as_deref().unwrap_or("-");
    out.push_str(&format!(
        "\nresult: {result}\n\nRUN  PHASE  STARTED  DURATION  RESULT\n"
    ));
    for r in &page.runs {
        out.push_str(&format!(
            "{}  {}  {}  {}  {}\n",
            r.run_id,
            r.phase,
            r.start_time.as_deref().unwrap_or("-"),
            r.duration_ms.map_or_else(|| "-".into(), human_duration_ms),
            first_line_cut(r.message.as_deref().unwrap_or("-"), RESULT_CHARS)
        ));
    }
    if let Some(run) = &page.run {
        out.push_str(&format!(
            "\nrun {} ({}), request id {}\nevent: {}\nresult: {}\nlog tail:\n{}\n",
            run.run_id,
            run.phase,
            run.request_id.as_deref().unwrap_or("-"),
            run.event_json,
            run.message.as_deref().unwrap_or("-"),
            run.log_tail.as_deref().unwrap_or_default()
        ));
    }
    out
}

/// The jobs as text for curl: one line each.
pub fn jobs_text(jobs: &[JobResponse]) -> String {
    let mut out = String::from("NAME  PHASE  RUN  STARTED  FINISHED\n");
    for j in jobs {
        out.push_str(&format!(
            "{}  {}  {}  {}  {}\n",
            j.name,
            j.phase,
            j.run_id,
            j.start_time.as_deref().unwrap_or("-"),
            j.completion_time.as_deref().unwrap_or("-")
        ));
    }
    out
}
