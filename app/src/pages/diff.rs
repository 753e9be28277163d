//! `/funcs/<ns>/<kind>/<name>/diff?from=<v>&to=<v>`: what changed between two kept
//! versions, per file, with a line diff of changed text files.

use leptos::prelude::*;
use sless_api::VersionResponse;

use super::layout::{PageContext, document};
use super::parts::{KindBadge, Time};
use crate::diff::{DiffBody, FileChange, FileDiff, Hunk, LineTag};
use crate::listing::WorkloadKind;
use crate::routes::{diff_href, function_href};

pub struct DiffPage<'a> {
    pub namespace: &'a str,
    pub kind: WorkloadKind,
    pub name: &'a str,
    pub from: &'a str,
    pub to: &'a str,
    /// The kept versions, newest first.
    pub versions: &'a [VersionResponse],
    pub files: &'a [FileDiff],
}

/// Two version pickers and a button: a GET form, so it works without JavaScript.
#[component]
pub(super) fn DiffPicker(
    action: String,
    versions: Vec<VersionResponse>,
    from: String,
    to: String,
) -> impl IntoView {
    let options = |selected: &str| -> Vec<_> {
        versions
            .iter()
            .map(|v| {
                let label = if v.active {
                    format!("{} (active)", v.version)
                } else {
                    v.version.clone()
                };
                let value = v.version.clone();
                let chosen = v.version == selected;
                view! { <option value=value selected=chosen>{label}</option> }
            })
            .collect()
    };
    let (from_options, to_options) = (options(&from), options(&to));
    view! {
        <form class="diff-picker" method="get" action=action>
            <label>"From " <select name="from">{from_options}</select></label>
            " "
            <label>"to " <select name="to">{to_options}</select></label>
            " "
            <button type="submit" class="button-quiet">"Compare"</button>
        </form>
    }
}

fn line_number(n: Option<usize>) -> String {
    n.map_or_else(String::new, |n| n.to_string())
}

#[component]
fn HunkView(hunk: Hunk) -> impl IntoView {
    let lines: Vec<_> = hunk
        .lines
        .into_iter()
        .map(|line| {
            let (class, sign) = match line.tag {
                LineTag::Added => ("diff-line diff-add", "+"),
                LineTag::Removed => ("diff-line diff-del", "-"),
                LineTag::Context => ("diff-line", " "),
            };
            view! {
                <span class=class>
                    <span class="diff-num" aria-hidden="true">{line_number(line.old)}</span>
                    <span class="diff-num" aria-hidden="true">{line_number(line.new)}</span>
                    <span class="diff-sign">{sign}</span>
                    {line.text}
                    "\n"
                </span>
            }
        })
        .collect();
    view! {
        <span class="diff-hunk">{hunk.header}"\n"</span>
        {lines}
    }
}

#[component]
fn FileDiffView(file: FileDiff, id: String) -> impl IntoView {
    let change = file.change;
    let badge = format!("badge diff-{}", change.as_str().replace(' ', "-"));
    let stat = matches!(file.body, DiffBody::Lines(_)).then(
        || view! { <span class="diff-stat">{format!("+{} −{}", file.added, file.removed)}</span> },
    );
    let size = match (file.from_size, file.to_size) {
        (Some(a), Some(b)) if a != b => format!(
            "{} → {}",
            sless_api::human_bytes(a),
            sless_api::human_bytes(b)
        ),
        (_, Some(size)) | (Some(size), None) => sless_api::human_bytes(size),
        (None, None) => String::new(),
    };
    let body = match file.body {
        DiffBody::None => None,
        DiffBody::Summary(why) => Some(view! { <p class="muted">{why}</p> }.into_any()),
        DiffBody::Lines(hunks) => {
            let hunks: Vec<_> = hunks
                .into_iter()
                .map(|h| view! { <HunkView hunk=h/> })
                .collect();
            Some(
                view! { <div class="code-wrap"><pre class="diff"><code>{hunks}</code></pre></div> }
                    .into_any(),
            )
        }
    };
    view! {
        <section class="file" id=id>
            <h3 class="file-name">
                <span class="file-path">{file.name}</span>
                <span class=badge>{change.as_str()}</span>
                <span class="file-size">{size}</span>
                {stat}
            </h3>
            {body}
        </section>
    }
}

pub async fn render_diff(page: &DiffPage<'_>, ctx: &PageContext) -> String {
    let doc = Owner::new().with(|| {
        let href = function_href(page.namespace, page.kind, page.name);
        let count = |change: FileChange| page.files.iter().filter(|f| f.change == change).count();
        let (added, removed) = page
            .files
            .iter()
            .fold((0, 0), |(a, r), f| (a + f.added, r + f.removed));
        let summary = format!(
            "{} changed, {} added, {} removed, {} unchanged files; +{added} −{removed} lines",
            count(FileChange::Changed),
            count(FileChange::Added),
            count(FileChange::Removed),
            count(FileChange::Unchanged),
        );
        let uploaded = |version: &str| {
            page.versions
                .iter()
                .find(|v| v.version == version)
                .map(|v| view! { " (" <Time at=v.created_at.clone()/> ")" })
        };
        let swap = diff_href(page.namespace, page.kind, page.name, page.to, page.from);
        let toc: Vec<_> = page
            .files
            .iter()
            .enumerate()
            .filter(|(_, f)| f.change != FileChange::Unchanged)
            .map(|(i, f)| {
                view! { <li><a href=format!("#diff-{i}")>{f.name.clone()}</a> " " <span class="muted">{f.change.as_str()}</span></li> }
            })
            .collect();
        let toc = (!toc.is_empty())
            .then(|| view! { <nav class="toc" aria-label="Changed files"><ul>{toc}</ul></nav> });
        let files: Vec<_> = page
            .files
            .iter()
            .enumerate()
            .map(|(i, f)| view! { <FileDiffView file=f.clone() id=format!("diff-{i}")/> })
            .collect();
        let body = view! {
            <p class="crumbs"><a href=format!("{href}#versions")>"← " {page.name.to_string()}</a></p>
            <div class="page-head">
                <h1>{format!("{}: changes", page.name)}</h1>
                <KindBadge kind=page.kind.as_str()/>
            </div>
            <p class="diff-versions">
                "From version " <code>{page.from.to_string()}</code> {uploaded(page.from)}
                " to " <code>{page.to.to_string()}</code> {uploaded(page.to)}
                " · " <a href=swap>"Swap"</a>
            </p>
            <DiffPicker action=format!("{href}/diff") versions=page.versions.to_vec() from=page.from.to_string() to=page.to.to_string()/>
            <p class="diff-summary" role="status">{summary}</p>
            {toc}
            <div class="files">{files}</div>
        };
        document(format!("{} · changes · sless", page.name), ctx, body)
    });
    doc.into_html().await
}
