//! `/funcs` for an admin: every namespace holding something, and a switcher to any
//! namespace by name (a plain GET form). Others go straight to their own namespace.

use leptos::prelude::*;

use super::layout::{PageContext, document};
use crate::routes::list_href;

pub async fn render_namespaces(namespaces: &[String], ctx: &PageContext) -> String {
    let doc = Owner::new().with(|| {
        let own = ctx.user.as_ref().map(|u| u.namespace.clone()).unwrap_or_default();
        let items: Vec<_> = namespaces
            .iter()
            .map(|ns| view! { <li><a href=list_href(ns)>{ns.clone()}</a></li> })
            .collect();
        let options: Vec<_> = namespaces
            .iter()
            .map(|ns| view! { <option value=ns.clone()></option> })
            .collect();
        let list = if items.is_empty() {
            view! { <p class="muted">"No namespace holds anything yet."</p> }.into_any()
        } else {
            view! { <ul class="namespaces" aria-label="Namespaces">{items}</ul> }.into_any()
        };
        let body = view! {
            <div class="page-head"><h1>"Namespaces"</h1></div>
            <section class="panel" id="switch">
                <form class="cron-check" method="get" action="/funcs">
                    <label>"Go to namespace " <input type="text" name="ns" list="known-namespaces" required maxlength="63" pattern="[a-z0-9]([-a-z0-9]*[a-z0-9])?" spellcheck="false" autocomplete="off"/></label>
                    <datalist id="known-namespaces">{options}</datalist>
                    " "
                    <button type="submit">"Go"</button>
                </form>
                <p class="muted">"Your own: " <a href=list_href(&own)>{own.clone()}</a></p>
            </section>
            <section class="panel">
                <h2>{format!("{} with something in them", namespaces.len())}</h2>
                {list}
            </section>
        };
        document("Namespaces · sless".to_string(), ctx, body)
    });
    doc.into_html().await
}
