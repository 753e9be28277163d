//! `/funcs/<ns>`: Functions and Services in one list.

use std::collections::HashMap;

use leptos::prelude::*;

use super::layout::{PageContext, document};
use super::parts::{KindBadge, Time, TriggerItem, Warmth, WorkloadUrl, limits, phase_class};
use super::source::SourceFiles;
use super::splice::{PageBody, Splicer};
use crate::listing::{
    Counts, Entry, Listing, PHASES, PageNav, Phase, Selection, SortKey, View, WorkloadKind,
};
use crate::routes::{function_href, list_href, source_href};
use crate::source_cache::RenderedSource;

/// What the list page shows.
pub struct ListPage<'a> {
    pub listing: &'a Listing,
    pub selection: &'a Selection,
    /// The page's entries of the filtered, sorted ones.
    pub entries: &'a [&'a Entry],
    /// Which page of them it is.
    pub nav: PageNav,
    /// Highlighted sources of the first entries (by name); the others link to their page.
    pub sources: &'a HashMap<String, Result<RenderedSource, String>>,
    /// Base URL for the empty state's examples (the API and `/fn` live there).
    pub public_url: &'a str,
}

/// The highlighted source of an entry, when the page inlines it.
type Source = Option<Result<RenderedSource, String>>;

#[component]
fn SourceDetails(entry: Entry, namespace: String, source: Source) -> impl IntoView {
    let href = source_href(&namespace, entry.kind, &entry.name);
    let summary = match &source {
        Some(Ok(files)) => format!(
            "Source ({} file{})",
            files.len(),
            if files.len() == 1 { "" } else { "s" }
        ),
        _ => "Source".to_string(),
    };
    let body = match (&entry.s3_key, source) {
        (None, _) => view! { <p class="muted">"No code uploaded yet."</p> }.into_any(),
        (Some(_), Some(Ok(files))) => {
            view! { <SourceFiles files=files id_prefix=format!("{}-", entry.name)/> }.into_any()
        }
        (Some(_), Some(Err(e))) => view! {
            <p class="flash flash-error">"Could not load the source: " {e}</p>
        }
        .into_any(),
        (Some(_), None) => view! {
            <p class="muted">"Open the source page to see the files of the latest upload."</p>
        }
        .into_any(),
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

/// One Function or Service of the list.
#[component]
fn EntryCard(
    entry: Entry,
    namespace: String,
    csrf: Option<String>,
    source: Source,
) -> impl IntoView {
    let (memory, timeout) = limits(entry.memory_mb, entry.timeout_sec);
    let failed = entry.phase == Phase::Failed;
    let message = entry.message.clone().map(|m| {
        if failed {
            // The error line stays in sight however long the reason is.
            let error = crate::function::error_lines(&m)
                .map(|lines| view! { <p class="error-line">{lines}</p> });
            view! {
                {error}
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
        view! {
            <dt>"URL"</dt>
            <dd class="url-cell"><WorkloadUrl url=url.to_string() stopped=entry.stopped()/></dd>
        }
    });
    let built = match &entry.last_built_at {
        Some(at) => view! { <Time at=at.clone()/> }.into_any(),
        None => view! { <span class="muted">"never"</span> }.into_any(),
    };
    let triggers = if entry.triggers.is_empty() {
        view! { <p class="muted triggers-none">"No triggers."</p> }.into_any()
    } else {
        let items: Vec<_> = entry
            .triggers
            .iter()
            .map(|t| {
                view! { <TriggerItem trigger=t.clone() namespace=namespace.clone() csrf=csrf.clone()/> }
            })
            .collect();
        view! { <ul class="triggers" aria-label="Triggers">{items}</ul> }.into_any()
    };
    view! {
        <li class="entry" id=format!("entry-{}", entry.name)>
            <div class="entry-head">
                <h2 class="entry-name">
                    <a href=function_href(&namespace, entry.kind, &entry.name)>{entry.name.clone()}</a>
                </h2>
                <KindBadge kind=entry.kind.as_str()/>
                <span class="runtime">{entry.runtime.clone()}</span>
                <span class=phase_class(entry.phase) title=entry.message.clone()>{entry.phase.as_str()}</span>
                <Warmth instances=entry.instances min=entry.min_instances max=entry.max_instances/>
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
            <SourceDetails entry=entry.clone() namespace=namespace.clone() source=source/>
        </li>
    }
}

#[component]
fn KindCounts(counts: Counts) -> impl IntoView {
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
                <KindBadge kind="function"/>
                " "
                {plural(counts.functions, "function", "functions")}
            </li>
            <li class="count-kind">
                <KindBadge kind="service"/>
                " "
                {plural(counts.services, "service", "services")}
            </li>
            {phases}
        </ul>
    }
}

#[component]
fn Filters(selection: Selection, namespace: String) -> impl IntoView {
    let kind_options: Vec<_> = [
        ("", "All kinds"),
        ("function", "function"),
        ("service", "service"),
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
    let view_field = (selection.view == View::Table)
        .then(|| view! { <input type="hidden" name="view" value="table"/> });
    view! {
        <form method="get" class="filters" role="search">
            {view_field}
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

/// One row per entry: the compact view of a long list.
#[component]
fn EntryTable(entries: Vec<Entry>, namespace: String) -> impl IntoView {
    let rows: Vec<_> = entries
        .into_iter()
        .map(|e| {
            let triggers = if e.triggers.is_empty() {
                "-".to_string()
            } else {
                e.triggers
                    .iter()
                    .map(|t| t.text_label())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let url = e.display_url().map(|url| {
                view! { <WorkloadUrl url=url.to_string() stopped=e.stopped()/> }
            });
            let built = e.last_built_at.clone().map(|at| view! { <Time at=at/> });
            view! {
                <tr id=format!("entry-{}", e.name)>
                    <th scope="row">
                        <a href=function_href(&namespace, e.kind, &e.name)>{e.name.clone()}</a>
                    </th>
                    <td><KindBadge kind=e.kind.as_str()/></td>
                    <td>{e.runtime.clone()}</td>
                    <td><span class=phase_class(e.phase) title=e.message.clone()>{e.phase.as_str()}</span></td>
                    <td>{triggers}</td>
                    <td title="running / min-max">
                        {e.instances_text()} " "
                        <Warmth instances=e.instances min=e.min_instances max=e.max_instances/>
                    </td>
                    <td class="url-cell">{url}</td>
                    <td>{built}</td>
                </tr>
            }
        })
        .collect();
    view! {
        <div class="table-wrap">
        <table class="entries-table">
            <thead>
                <tr>
                    <th scope="col">"Name"</th>
                    <th scope="col">"Kind"</th>
                    <th scope="col">"Runtime"</th>
                    <th scope="col">"Phase"</th>
                    <th scope="col">"Triggers"</th>
                    <th scope="col">"Instances"</th>
                    <th scope="col">"URL"</th>
                    <th scope="col">"Last built"</th>
                </tr>
            </thead>
            <tbody>{rows}</tbody>
        </table>
        </div>
    }
}

/// The address of page `number` of this selection.
fn page_href(namespace: &str, selection: &Selection, number: usize) -> String {
    let mut query = selection.to_query_string();
    if number > 1 {
        if !query.is_empty() {
            query.push('&');
        }
        query.push_str(&format!("page={number}"));
    }
    if query.is_empty() {
        list_href(namespace)
    } else {
        format!("{}?{query}", list_href(namespace))
    }
}

/// Previous / next and where this page is; nothing when there is one page.
#[component]
fn PageLinks(nav: PageNav, namespace: String, selection: Selection) -> impl IntoView {
    (nav.pages > 1 || nav.number > 1).then(|| {
        let link = |number: usize, label: &'static str, rel: &'static str| {
            view! { <a href=page_href(&namespace, &selection, number) rel=rel>{label}</a> }
        };
        let prev =
            (nav.number > 1).then(|| link((nav.number - 1).min(nav.pages), "← Previous", "prev"));
        let next = (nav.number < nav.pages).then(|| link(nav.number + 1, "Next →", "next"));
        let first = (nav.number > 2).then(|| link(1, "First", "first"));
        let last = (nav.number + 1 < nav.pages).then(|| link(nav.pages, "Last", "last"));
        let at = format!("Page {} of {}", nav.number, nav.pages);
        view! {
            <nav class="pages" aria-label="Pages">
                {first} {prev} <span class="page-at">{at}</span> {next} {last}
            </nav>
        }
    })
}

/// Cards ⇄ table, keeping the selection (and page 1: the pages are the same size).
#[component]
fn ViewSwitch(namespace: String, selection: Selection) -> impl IntoView {
    let other = match selection.view {
        View::Cards => View::Table,
        View::Table => View::Cards,
    };
    let label = match other {
        View::Cards => "Cards",
        View::Table => "Table",
    };
    let href = page_href(
        &namespace,
        &Selection {
            view: other,
            ..selection
        },
        1,
    );
    view! { <a class="view-switch button-link" href=href>{label}</a> }
}

#[component]
fn EmptyState(namespace: String, public_url: String) -> impl IntoView {
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
pub async fn render_list(page: &ListPage<'_>, ctx: &PageContext) -> PageBody {
    // Actions (ServerAction) live in a reactive owner, even on the server.
    let (doc, splicer) = Owner::new().with(|| {
        let splicer = Splicer::provide(&ctx.nonce);
        let namespace = page.listing.namespace.clone();
        let counts = Counts::of(page.listing);
        let body = if page.listing.entries.is_empty() {
            view! { <EmptyState namespace=namespace.clone() public_url=page.public_url.to_string()/> }
                .into_any()
        } else {
            let nav = page.nav;
            let shown = if nav.matching == 0 {
                String::new()
            } else if page.entries.is_empty() {
                format!("Page {} is past the last page ({}).", nav.number, nav.pages)
            } else {
                let from = (nav.number - 1) * nav.size + 1;
                let to = from + page.entries.len() - 1;
                let range = if nav.pages > 1 {
                    format!("{from}–{to} of ")
                } else {
                    String::new()
                };
                let entries = if counts.total == 1 { "entry" } else { "entries" };
                match (page.selection.is_filtered(), range.is_empty()) {
                    (true, true) => format!("Showing {} of {}.", nav.matching, counts.total),
                    (true, false) => format!(
                        "Showing {range}{} matching ({} in all).",
                        nav.matching, counts.total
                    ),
                    (false, true) => format!("{} {entries}.", counts.total),
                    (false, false) => format!("Showing {range}{} {entries}.", counts.total),
                }
            };
            let list = if nav.matching == 0 {
                view! { <p class="muted">"Nothing matches the filter."</p> }.into_any()
            } else if page.selection.view == View::Table {
                let entries = page.entries.iter().map(|e| (*e).clone()).collect();
                view! { <EntryTable entries=entries namespace=namespace.clone()/> }.into_any()
            } else {
                let items: Vec<_> = page
                    .entries
                    .iter()
                    .map(|e| {
                        view! {
                            <EntryCard
                                entry=(*e).clone()
                                namespace=namespace.clone()
                                csrf=ctx.csrf.clone()
                                source=page.sources.get(&e.name).cloned()
                            />
                        }
                    })
                    .collect();
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
                <Filters selection=page.selection.clone() namespace=namespace.clone()/>
                <div class="list-bar">
                    <p class="showing" role="status">{shown}</p>
                    <ViewSwitch namespace=namespace.clone() selection=page.selection.clone()/>
                </div>
                {list}
                <PageLinks nav=nav namespace=namespace.clone() selection=page.selection.clone()/>
                {orphans}
            }
            .into_any()
        };
        let head = view! {
            <div class="page-head">
                <h1>"Functions " <span class="ns">{namespace.clone()}</span></h1>
                <KindCounts counts=counts/>
                <a class="button-link" href=crate::routes::new_href(&namespace)>"+ New"</a>
            </div>
            {body}
        };
        (document(format!("{namespace} · sless"), ctx, head), splicer)
    });
    splicer.finish(doc.into_html().await)
}
