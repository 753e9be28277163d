//! `/funcs/<ns>/new`: create a Function or Service in one form, its zip optional. After
//! a refused post the form comes back as typed (env values excepted) with the flash
//! naming the field.

use leptos::prelude::*;
use sless_api::Runtime;
use sless_api::validation::{MAX_TIMEOUT_SEC, MEMORY_MB_MAX, MEMORY_MB_MIN};

use super::layout::{CsrfField, PageContext, document};
use crate::actions::Create;
use crate::routes::list_href;

pub struct CreatePage<'a> {
    pub namespace: &'a str,
    /// The API's upload limit, said next to the file input.
    pub max_upload_mb: u64,
}

pub async fn render_create(page: &CreatePage<'_>, ctx: &PageContext) -> String {
    let doc = Owner::new().with(|| {
        let typed = |field: &str| ctx.typed(field).unwrap_or_default();
        let (name, entrypoint, memory, timeout) = (
            typed("name"),
            typed("entrypoint"),
            typed("memory_mb"),
            typed("timeout_sec"),
        );
        let namespace = page.namespace.to_string();
        let csrf = ctx.csrf.clone();
        let upload_label = format!("Code: a .zip, optional (up to {} MiB)", page.max_upload_mb);
        let kind = ctx.typed("kind").unwrap_or_else(|| "function".into());
        let runtime = ctx.typed("runtime").unwrap_or_else(|| "python3.11".into());
        let kinds: Vec<_> = [
            ("function", "Function: called on demand"),
            ("service", "Service: always on"),
        ]
        .into_iter()
        .map(|(value, label)| {
            let checked = kind == value;
            view! { <label class="choice"><input type="radio" name="kind" value=value checked=checked/>" " {label}</label> }
        })
        .collect();
        let runtimes: Vec<_> = Runtime::ALL
            .into_iter()
            .map(|r| {
                let selected = runtime == r.as_str();
                view! { <option value=r.as_str() selected=selected>{r.as_str()}</option> }
            })
            .collect();
        let title = format!("New · {namespace} · sless");
        let hint = format!("Lowercase letters, digits and '-'; its address is /fn/{namespace}/<name>.");
        let env_note = ctx
            .flash
            .as_ref()
            .is_some_and(|f| f.form.is_some())
            .then(|| view! { <p class="muted">"Env values are not kept after an error: type them again."</p> });
        let body = view! {
            <p class="crumbs"><a href=list_href(&namespace)>"← " {namespace.clone()}</a></p>
            <div class="page-head"><h1>"New function or service"</h1></div>
            <section class="panel" id="create">
                <ActionForm action={ServerAction::<Create>::new()} attr:class="settings-form" attr:enctype="multipart/form-data">
                    <CsrfField csrf=csrf/>
                    <input type="hidden" name="namespace" value=namespace.clone()/>
                    <fieldset><legend>"Kind"</legend>{kinds}</fieldset>
                    <label>"Name" <input type="text" name="name" required maxlength="63" pattern="[a-z0-9]([-a-z0-9]*[a-z0-9])?" value=name spellcheck="false" autocomplete="off"/></label>
                    <p class="hint muted">{hint}</p>
                    <label>"Runtime" <select name="runtime">{runtimes}</select></label>
                    <label>"Entrypoint" <input type="text" name="entrypoint" placeholder="handler.handle" value=entrypoint spellcheck="false"/></label>
                    <div class="form-row">
                        <label>"Memory (MB)" <input type="number" name="memory_mb" min=MEMORY_MB_MIN.to_string() max=MEMORY_MB_MAX.to_string() placeholder="128" value=memory/></label>
                        <label>"Timeout (s, 0 = none)" <input type="number" name="timeout_sec" min="0" max=MAX_TIMEOUT_SEC.to_string() placeholder="0" value=timeout/></label>
                    </div>
                    <label for="create-env">"Env vars (NAME=value, one a line)"</label>
                    <textarea id="create-env" name="env" rows="3" spellcheck="false" autocomplete="off"></textarea>
                    {env_note}
                    <label>{upload_label} <input type="file" name="code" accept=".zip,application/zip"/></label>
                    <button type="submit">"Create"</button>
                </ActionForm>
            </section>
        };
        document(title, ctx, body)
    });
    doc.into_html().await
}
