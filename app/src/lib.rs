//! The web console: a Leptos app rendered on the server only (no wasm target exists, so
//! no hydration bundle). Pages and their parts are `#[component]`s; titles go through
//! `leptos_meta`; the actions (trigger start/stop, invoke, run a job again, log out) are
//! `#[server]` functions ([`actions`]) served by `leptos_axum` and posted by
//! `<ActionForm>`s, which without JavaScript are plain form posts answered with a
//! redirect back and a flash. The `server` crate wires them into axum with sessions, one
//! auth + CSRF check for every action, and the security headers.
//!
//! Some parts stay plain axum on purpose:
//! - the page routes and the text/plain and `?format=json` answers of the same URLs:
//!   content negotiation per URL is not what Leptos routing does, and curl gets a few
//!   hundred bytes without a reactive owner or a view tree;
//! - highlighted source is spliced into the response as shared cached HTML
//!   ([`pages::PageBody`]) instead of being copied into each page: a 5,000-line file is
//!   ~6 MB of classed HTML, and the benchmarks showed the copy was most of the cost;
//! - login sets the session itself, before there is a session to check a CSRF token of.
//!
//! The modules, each using only those listed after it:
//! - [`pages`]: the documents, from components in `pages/` (layout, parts, one file a page);
//! - [`actions`]: the `#[server]` functions the pages' forms post to;
//! - [`console`]: fetching through the REST API into views, the lifecycle, and the
//!   action errors;
//! - [`forms`]: the lifecycle forms read into API requests under the API's own rules;
//! - [`function`]: one Function or Service's page data and its text/JSON answers;
//! - [`source_cache`], [`highlight`]: highlighted source, rendered once and shared;
//! - [`diff`]: the changes between two versions' files;
//! - [`routes`]: the pages' addresses;
//! - [`listing`]: a namespace's list, its filters and its text/JSON answers;
//! - [`setup`]: once-per-process setup.

pub mod actions;
pub mod console;
pub mod diff;
pub mod forms;
pub mod function;
pub mod highlight;
pub mod listing;
pub mod pages;
pub mod routes;
pub mod setup;
pub mod source_cache;
