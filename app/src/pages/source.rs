//! `/funcs/<ns>/source/<name>`: the files of the latest upload, highlighted.

use std::sync::Arc;

use leptos::prelude::*;

use super::layout::{PageContext, document};
use super::parts::{KindBadge, phase_class, short_time};
use super::splice::{PageBody, Splicer};
use crate::highlight::{FileBody, RenderedFile};
use crate::listing::WorkloadKind;
use crate::source_cache::RenderedSource;

pub struct SourcePage<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub kind: WorkloadKind,
    pub runtime: &'a str,
    pub phase: crate::listing::Phase,
    pub last_built_at: Option<&'a str>,
    /// None before the first upload.
    pub files: Option<&'a RenderedSource>,
    /// A kept version shown instead of the latest upload.
    pub version: Option<&'a str>,
}

/// One highlighted file; its HTML is spliced in from the cache, not copied.
#[component]
pub(super) fn SourceFile(file: Arc<RenderedFile>, id: String) -> impl IntoView {
    let notices: Vec<_> = file
        .notices
        .iter()
        .map(|n| view! { <p class="notice" role="note">{n.clone()}</p> })
        .collect();
    let (body, syntax) = match &file.body {
        FileBody::Binary => (
            view! { <p class="muted">"Binary file, not shown."</p> }.into_any(),
            None,
        ),
        FileBody::Empty => (
            view! { <p class="muted">"Empty file."</p> }.into_any(),
            None,
        ),
        FileBody::Code {
            html,
            gutter,
            syntax,
            ..
        } => (
            view! {
                <div class="code-wrap">
                    <pre class="gutter" aria-hidden="true">{gutter.clone()}</pre>
                    <pre class="hl-code"><code inner_html=Splicer::current().marker(html)></code></pre>
                </div>
            }
            .into_any(),
            Some(syntax.clone()),
        ),
    };
    let syntax = syntax.map(|s| view! { <span class="file-syntax">{s}</span> });
    view! {
        <section class="file" id=id>
            <h3 class="file-name">
                <span class="file-path">{file.name.clone()}</span>
                <span class="file-size">{sless_api::human_bytes(file.size)}</span>
                {syntax}
            </h3>
            {notices}
            {body}
        </section>
    }
}

/// One section per file; `id_prefix` keeps ids unique when several entries share a page.
#[component]
pub(super) fn SourceFiles(files: RenderedSource, id_prefix: String) -> impl IntoView {
    if files.is_empty() {
        return view! { <p class="muted">"The upload holds no files."</p> }.into_any();
    }
    let sections: Vec<_> = files
        .into_iter()
        .enumerate()
        .map(|(i, file)| view! { <SourceFile file=file id=format!("{id_prefix}file-{i}")/> })
        .collect();
    view! { <div class="files">{sections}</div> }.into_any()
}

pub async fn render_source(page: &SourcePage<'_>, ctx: &PageContext) -> PageBody {
    // Actions (ServerAction) live in a reactive owner, even on the server.
    let (doc, splicer) = Owner::new().with(|| {
        let splicer = Splicer::provide(&ctx.nonce);
        let back = format!("/funcs/{}", page.namespace);
        let built = page
            .last_built_at
            .map(|at| view! { <span class="muted">"built " {short_time(at)}</span> });
        let body = match page.files {
            None => view! {
                <p class="muted">"No code uploaded yet: upload a zip to "
                    <code>{format!("/v1/namespaces/{}/{}s/{}/upload", page.namespace, page.kind.as_str(), page.name)}</code>
                    "."
                </p>
            }
            .into_any(),
            Some(files) => {
                let toc = (files.len() > 1).then(|| {
                    let items: Vec<_> = files
                        .iter()
                        .enumerate()
                        .map(|(i, f)| {
                            let href = format!("#file-{i}");
                            view! { <li><a href=href>{f.name.clone()}</a></li> }
                        })
                        .collect();
                    view! { <nav class="toc" aria-label="Files"><ul>{items}</ul></nav> }
                });
                view! { {toc} <SourceFiles files=files.clone() id_prefix=String::new()/> }.into_any()
            }
        };
        let view = view! {
            <p class="crumbs"><a href=back>"← " {page.namespace.to_string()}</a></p>
            <div class="page-head">
                <h1>{page.name.to_string()}</h1>
                <KindBadge kind=page.kind.as_str()/>
                <span class="runtime">{page.runtime.to_string()}</span>
                <span class=phase_class(page.phase)>{page.phase.as_str()}</span>
                {built}
                {page.version.map(|v| view! { <span class="muted">"version " <code>{v.to_string()}</code></span> })}
            </div>
            {body}
        };
        (document(
            format!("{} · source · sless", page.name),
            ctx,
            view,
        ), splicer)
    });
    splicer.finish(doc.into_html().await)
}
