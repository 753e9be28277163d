//! `/funcs/<ns>/jobs` and `/funcs/<ns>/jobs/<name>`: jobs (they run once per `run_id`),
//! with their phase, last run, result and log tail, and "Run again".

use std::sync::Arc;

use leptos::prelude::*;
use sless_api::{JobPhase, JobResponse};

use super::layout::{CsrfField, PageContext, document};
use super::parts::{KindBadge, Time};
use super::source::SourceFile;
use super::splice::{PageBody, Splicer};
use crate::actions::RunJob;
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

pub async fn render_job(namespace: &str, job: &JobResponse, ctx: &PageContext) -> PageBody {
    // Actions (ServerAction) live in a reactive owner, even on the server.
    let (doc, splicer) = Owner::new().with(|| {
        let splicer = Splicer::provide(&ctx.nonce);
        let result = job
            .message
            .as_deref()
            .map(|message| match render_json_text("result", message) {
                Some(file) => {
                    let file = Arc::new(file);
                    view! { <SourceFile file=file id="job-result".to_string()/> }.into_any()
                }
                None => {
                    view! { <pre class="output job-message">{message.to_string()}</pre> }
                        .into_any()
                }
            });
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
            <section class="panel" id="run"><h2>"Run again"</h2>{form}</section>
        };
        (document(format!("{} · job · sless", job.name), ctx, view), splicer)
    });
    splicer.finish(doc.into_html().await)
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
