//! The web console's wiring: routes, sessions, CSRF, security headers and static files
//! around the pages and actions of the `app` crate. The console acts through the REST
//! API with the user's own token, so it can run next to the API (`sless up`) or apart.

mod actions;
mod assets;
mod auth;
mod csrf;
mod error;
mod events;
mod handlers;
mod headers;
mod invoke;
mod session;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use app::console::{Console, ConsoleOptions};
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use gateway::proxy::Proxy;
use sless_core::auth::Authenticator;

/// The session cookie's name: the `/fn` proxy keeps it from functions.
pub use session::COOKIE_NAME as SESSION_COOKIE;

/// Where the console finds the API and how it sets cookies.
#[derive(Clone, Debug)]
pub struct ConsoleConfig {
    /// The REST API (the console's own process in `sless up`).
    pub api_endpoint: String,
    /// The base URL users reach the API and `/fn` at (shown in examples).
    pub public_url: String,
    /// Sessions live in `<data_dir>/sessions.db` (they survive a restart).
    pub data_dir: PathBuf,
    /// `Secure` on the session cookie: set when users reach the console over https.
    pub secure_cookies: bool,
    /// How many entries of the list page carry their highlighted source inline.
    pub inline_sources: usize,
    /// The API's upload limit: a zip posted to the console larger than this is not read.
    pub max_upload_bytes: u64,
}

impl ConsoleConfig {
    /// The embedded server's console: the API on the listen address over loopback.
    /// `secure_cookies` overrides the cookie flag, which defaults to whether the public
    /// URL is https.
    pub fn embedded(
        data_dir: &Path,
        listen: SocketAddr,
        public_url: &str,
        secure_cookies: Option<bool>,
        max_upload_bytes: u64,
    ) -> Self {
        let mut loopback = listen;
        if loopback.ip().is_unspecified() {
            loopback.set_ip(if listen.is_ipv4() {
                [127, 0, 0, 1].into()
            } else {
                std::net::Ipv6Addr::LOCALHOST.into()
            });
        }
        let secure_cookies = secure_cookies.unwrap_or(public_url.starts_with("https://"));
        ConsoleConfig {
            api_endpoint: format!("http://{loopback}"),
            public_url: public_url.trim_end_matches('/').to_string(),
            data_dir: data_dir.to_path_buf(),
            secure_cookies,
            inline_sources: ConsoleOptions::default().inline_sources,
            max_upload_bytes,
        }
    }
}

/// What every console handler can reach.
pub struct ConsoleState {
    pub auth: Arc<Authenticator>,
    pub console: Arc<Console>,
    pub public_url: String,
    /// `Secure` on cookies the handlers set themselves.
    pub secure_cookies: bool,
    /// The largest zip a form may post (the API's own limit).
    pub max_upload_bytes: u64,
}

/// The console's routes: `/funcs/...`, `/login`, the actions (Leptos server functions
/// under `/console/...`), the stylesheet and static files, each response with the
/// security headers and a fresh CSP nonce.
pub async fn router(
    config: ConsoleConfig,
    auth: Arc<Authenticator>,
    proxy: Option<Arc<Proxy>>,
) -> anyhow::Result<Router> {
    let mut console = Console::new(ConsoleOptions {
        api_endpoint: config.api_endpoint.clone(),
        inline_sources: config.inline_sources,
        ..ConsoleOptions::default()
    })?;
    // In the process that serves `/fn` the Invoke form calls in process (recorded as the
    // console's); a console on its own calls over HTTP.
    if let Some(proxy) = proxy {
        console = console.with_invoker(Arc::new(invoke::ProxyInvoker(proxy)));
    }
    let sessions = session::layer(&config).await?;
    let console = console.with_saved_events(Arc::new(
        events::SqliteEvents::open(&config.data_dir).await?,
    ));
    let state = Arc::new(ConsoleState {
        auth,
        console: Arc::new(console),
        public_url: config.public_url.clone(),
        secure_cookies: config.secure_cookies,
        max_upload_bytes: config.max_upload_bytes,
    });
    // A multipart form carries a zip up to the API's limit, plus its few text fields.
    let action_limit = usize::try_from(config.max_upload_bytes)
        .unwrap_or(usize::MAX)
        .saturating_add(2 * 1024 * 1024);
    let pages = Router::new()
        .route("/", get(handlers::root))
        .route("/funcs", get(handlers::home))
        .route("/funcs/", get(handlers::home))
        .route("/funcs/{ns}", get(handlers::list))
        .route("/funcs/{ns}/", get(handlers::list))
        .route("/funcs/{ns}/source/{name}", get(handlers::source))
        .route("/funcs/{ns}/new", get(handlers::create_page))
        .route("/funcs/{ns}/jobs", get(handlers::jobs))
        .route("/funcs/{ns}/jobs/{name}", get(handlers::job))
        .route("/funcs/{ns}/{kind}/{name}", get(handlers::function))
        .route("/funcs/{ns}/{kind}/{name}/diff", get(handlers::diff))
        .route(
            "/funcs/{ns}/{kind}/{name}/logs/live",
            get(handlers::live_logs),
        )
        .route("/login", get(handlers::login_page).post(handlers::login))
        .route(
            "/console/{*action}",
            post(actions::handle).layer(DefaultBodyLimit::max(action_limit)),
        )
        .with_state(state)
        .layer(axum::middleware::from_fn(headers::secure))
        .layer(sessions);
    // Static files need no session (no cookie lookups for every stylesheet request).
    let files = assets::router().layer(axum::middleware::from_fn(headers::secure));
    Ok(pages
        .merge(files)
        .layer(gateway::api::compression())
        .layer(axum::middleware::from_fn(gateway::request_id::layer))
        .layer(tower_http::trace::TraceLayer::new_for_http()))
}
