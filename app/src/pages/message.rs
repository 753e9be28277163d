//! Error and notice pages (403, 404, upstream trouble): never a blank page.

use leptos::prelude::*;

use super::layout::{PageContext, document};

pub async fn render_message(status: u16, title: &str, text: &str, ctx: &PageContext) -> String {
    // Actions (ServerAction) live in a reactive owner, even on the server.
    let doc = Owner::new().with(|| {
        let home = ctx
            .user
            .as_ref()
            .map(|u| format!("/funcs/{}", u.namespace))
            .unwrap_or_else(|| "/login".to_string());
        let home_label = if ctx.user.is_some() {
            "Back to your functions"
        } else {
            "Log in"
        };
        let body = view! {
            <section class="message-page">
                <p class="status-code">{status.to_string()}</p>
                <h1>{title.to_string()}</h1>
                <p>{text.to_string()}</p>
                <p><a href=home>{home_label}</a></p>
            </section>
        };
        document(format!("{title} · sless"), ctx, body)
    });
    doc.into_html().await
}
