//! The document around every page: head, header bar with the user and logout, flash.

use futures::StreamExt;
use leptos::prelude::*;
use leptos_meta::{ServerMetaContext, ServerMetaContextOutput, Title, provide_meta_context};

/// Per-request facts every page needs.
#[derive(Clone, Debug, Default)]
pub struct PageContext {
    /// The Content-Security-Policy nonce of this response.
    pub nonce: String,
    /// The session's CSRF token; None without a session (then no forms are shown).
    pub csrf: Option<String>,
    pub user: Option<UserBadge>,
    pub flash: Option<Flash>,
    /// Reload the page every this many seconds (a build being followed).
    pub refresh: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserBadge {
    pub namespace: String,
    pub admin: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FlashKind {
    Ok,
    Error,
}

/// A one-time message shown after a redirect (kept in the session).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Flash {
    pub kind: FlashKind,
    pub text: String,
    /// The answer of the invoke form, shown on the function page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocation: Option<crate::function::InvokeOutcome>,
    /// What the user typed into the form posted (no secrets), shown in it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub form: Option<crate::forms::KeptForm>,
}

impl Flash {
    pub fn ok(text: impl Into<String>) -> Self {
        Flash {
            kind: FlashKind::Ok,
            text: text.into(),
            invocation: None,
            form: None,
        }
    }

    pub fn error(text: impl Into<String>) -> Self {
        Flash {
            kind: FlashKind::Error,
            text: text.into(),
            invocation: None,
            form: None,
        }
    }
}

/// The one-time message of the last action, if any.
#[component]
fn FlashMessage(flash: Option<Flash>) -> impl IntoView {
    flash.map(|flash| {
        let (class, role) = match flash.kind {
            FlashKind::Ok => ("flash flash-ok", "status"),
            FlashKind::Error => ("flash flash-error", "alert"),
        };
        view! { <p class=class role=role id="flash">{flash.text}</p> }
    })
}

/// The session's CSRF token, checked once for every action by the server.
#[component]
pub fn CsrfField(csrf: Option<String>) -> impl IntoView {
    view! { <input type="hidden" name="csrf_token" value=csrf.unwrap_or_default()/> }
}

/// The bar on top: the console's name, the user's namespace, Jobs and Log out.
#[component]
fn HeaderBar(user: Option<UserBadge>, csrf: Option<String>) -> impl IntoView {
    let user = user.map(|user| {
        let home = format!("/funcs/{}", user.namespace);
        let jobs = format!("/funcs/{}/jobs", user.namespace);
        let admin = user.admin.then(|| {
            view! { <span class="badge badge-admin">admin</span> <a href="/funcs" title="Switch to another namespace">"Namespaces"</a> }
        });
        view! {
            <div class="user">
                <a class="user-ns" href=home title="Your functions and services">{user.namespace}</a>
                <a href=jobs>"Jobs"</a>
                {admin}
                <ActionForm action={ServerAction::<crate::actions::Logout>::new()} attr:class="logout">
                    <CsrfField csrf=csrf/>
                    <button type="submit" class="button-quiet">"Log out"</button>
                </ActionForm>
            </div>
        }
    });
    view! {
        <header class="topbar">
            <a class="brand" href="/funcs">
                <img src="/favicon.svg" alt="" width="24" height="24"/>
                <span>"sless console"</span>
            </a>
            {user}
        </header>
    }
}

/// A rendered document whose `<title>` (set with leptos_meta's `<Title>`) still has to
/// go into its head: [`Document::into_html`].
pub(super) struct Document {
    html: String,
    meta: ServerMetaContextOutput,
}

impl Document {
    pub(super) async fn into_html(self) -> String {
        let Document { html, meta } = self;
        let chunks: Vec<String> = meta
            .inject_meta_context(futures::stream::iter([html]))
            .await
            .collect()
            .await;
        chunks.concat()
    }
}

/// A whole HTML document around `body`. Call it inside the page's reactive owner.
pub(super) fn document(title: String, ctx: &PageContext, body: impl IntoView) -> Document {
    let (meta, output) = ServerMetaContext::new();
    provide_context(meta);
    provide_meta_context();
    let nonce = ctx.nonce.clone();
    let page = view! {
        <html lang="en">
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                <meta name="color-scheme" content="light dark"/>
                {ctx.refresh.map(|s| view! { <meta http-equiv="refresh" content=s.to_string()/> })}
                <Title text=title/>
                <link rel="icon" href="/favicon.svg" type="image/svg+xml"/>
                <link rel="stylesheet" href="/style/console.css"/>
                <link rel="stylesheet" href="/style/highlight.css"/>
                <script nonce=nonce src="/public/console.js" defer></script>
            </head>
            <body>
                <a class="skip" href="#main">"Skip to content"</a>
                <HeaderBar user=ctx.user.clone() csrf=ctx.csrf.clone()/>
                <main id="main"><FlashMessage flash=ctx.flash.clone()/> {body}</main>
            </body>
        </html>
    };
    let mut html = String::from("<!DOCTYPE html>");
    html.push_str(&page.to_html());
    Document { html, meta: output }
}

impl PageContext {
    /// A field the user typed into the form just posted, if the flash kept it.
    pub fn typed(&self, field: &str) -> Option<String> {
        self.flash.as_ref()?.form.as_ref()?.get(field).cloned()
    }
}
