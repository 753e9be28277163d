//! `/login`: paste a token.

use leptos::prelude::*;

use super::layout::{CsrfField, PageContext, document};

pub struct LoginPage<'a> {
    /// Where to go after logging in (already checked to be a console path).
    pub next: Option<&'a str>,
    /// Why the last attempt failed.
    pub error: Option<&'a str>,
}

pub async fn render_login(page: &LoginPage<'_>, ctx: &PageContext) -> String {
    // Actions (ServerAction) live in a reactive owner, even on the server.
    let doc = Owner::new().with(|| {
        let error = page
            .error
            .map(|e| view! { <p class="flash flash-error" role="alert" id="login-error">{e.to_string()}</p> });
        let next = page
            .next
            .map(|n| view! { <input type="hidden" name="next" value=n.to_string()/> });
        let described = page.error.map(|_| "login-error");
        let body = view! {
            <section class="login">
                <h1>"Log in"</h1>
                <p>"Paste your sless token (a JWT). It stays on the server, in your session; the browser only gets a session cookie."</p>
                {error}
                <form method="post" action="/login" class="login-form">
                    <CsrfField csrf=ctx.csrf.clone()/>
                    {next}
                    <label for="token">"Token"</label>
                    <input
                        id="token"
                        name="token"
                        type="password"
                        autocomplete="off"
                        spellcheck="false"
                        required=true
                        aria-describedby=described
                    />
                    <button type="submit">"Log in"</button>
                </form>
                <p class="muted">
                    "Embedded mode: " <code>"sless token --sub <you>"</code> " prints one. "
                    "With curl, send " <code>"Authorization: Bearer <token>"</code> " instead."
                </p>
            </section>
        };
        document("Log in · sless".to_string(), ctx, body)
    });
    doc.into_html().await
}
