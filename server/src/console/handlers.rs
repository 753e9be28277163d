//! Thin handlers: parse the request, call the `app` crate's actions and pages, answer.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use app::console::FunctionKey;
use app::listing::{
    ListQuery, Selection, View, WorkloadKind, cursor_page, numbered_page, render_json, render_text,
};
use app::pages::{CreatePage, Flash, FunctionPage, ListPage, LoginPage, PageContext, SourcePage};
use axum::Form;
use axum::body::Body;
use axum::extract::rejection::FormRejection;
use axum::extract::{Extension, FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use serde::Deserialize;
use sless_client::client::{Client, Followed, LogFilter};
use tower_sessions::Session;

use super::ConsoleState;
use super::auth::{self, Caller, Via, safe_next};
use super::csrf;
use super::error::ConsoleError;
use super::headers::{Nonce, wants_html};
use super::session::{self, SessionUser};

type Shared = State<Arc<ConsoleState>>;

/// The caller when there is one (pages that also serve anonymous visitors).
pub struct MaybeCaller(Option<Caller>);

impl FromRequestParts<Arc<ConsoleState>> for MaybeCaller {
    type Rejection = ConsoleError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<ConsoleState>,
    ) -> Result<Self, Self::Rejection> {
        Ok(MaybeCaller(auth::resolve(state, parts).await?))
    }
}

fn check_name(what: &str, value: &str) -> Result<(), ConsoleError> {
    sless_core::model::validate_name(what, value).map_err(|e| ConsoleError::NotFound(e.to_string()))
}

fn query<T: serde::de::DeserializeOwned>(uri: &Uri) -> Result<T, ConsoleError> {
    Query::<T>::try_from_uri(uri)
        .map(|Query(q)| q)
        .map_err(|e| ConsoleError::BadRequest(e.body_text()))
}

fn form<T>(form: Result<Form<T>, FormRejection>) -> Result<T, ConsoleError> {
    form.map(|Form(f)| f)
        .map_err(|e| ConsoleError::BadRequest(e.body_text()))
}

/// What the list answers with: a page for browsers, JSON on request, text for curl.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Html,
    Json,
    Text,
}

impl Format {
    fn negotiate(headers: &HeaderMap, format: Option<&str>) -> Self {
        match format.map(str::to_ascii_lowercase).as_deref() {
            Some("json") => return Format::Json,
            Some("text" | "txt" | "plain") => return Format::Text,
            Some("html") => return Format::Html,
            _ => {}
        }
        if wants_html(headers) {
            return Format::Html;
        }
        let json = headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.contains("application/json"));
        if json { Format::Json } else { Format::Text }
    }
}

/// A page as the response body, its shared parts sent as they are (not joined).
fn html_response(page: app::pages::PageBody) -> Response {
    let mut parts = page.into_parts();
    let body = if parts.len() <= 1 {
        Body::from(parts.pop().unwrap_or_default())
    } else {
        Body::from_stream(futures::stream::iter(
            parts.into_iter().map(Ok::<_, std::convert::Infallible>),
        ))
    };
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response()
}

/// `Server-Timing`: data fetching (API round-trips) apart from rendering.
fn timed(mut response: Response, fetch: Duration, render: Duration) -> Response {
    let value = format!(
        "fetch;dur={:.3}, render;dur={:.3}",
        fetch.as_secs_f64() * 1000.0,
        render.as_secs_f64() * 1000.0
    );
    if let Ok(value) = HeaderValue::from_str(&value) {
        response.headers_mut().insert("server-timing", value);
    }
    response
}

/// A page from `render` (a future: nothing runs before it is awaited), with the fetch
/// time before it and its render time in `Server-Timing`.
async fn timed_page(
    fetch: Duration,
    render: impl Future<Output = app::pages::PageBody>,
) -> Response {
    let rendering = Instant::now();
    let html = render.await;
    timed(html_response(html), fetch, rendering.elapsed())
}

async fn page_context(caller: &Caller, nonce: &Nonce) -> Result<PageContext, ConsoleError> {
    let mut ctx = PageContext {
        nonce: nonce.0.clone(),
        user: Some(caller.badge()),
        ..Default::default()
    };
    if caller.via == Via::Session
        && let Some(session) = &caller.session
    {
        ctx.csrf = Some(csrf::token(session).await?);
        ctx.flash = session::take_flash(session).await?;
    }
    Ok(ctx)
}

/// Query strings that may ask for a format (`?format=json|text|html`).
pub trait AsksFormat {
    fn format(&self) -> Option<&str>;
}

impl AsksFormat for ListQuery {
    fn format(&self) -> Option<&str> {
        self.format.as_deref()
    }
}

/// What every namespace view starts with: the caller, allowed on the checked namespace
/// (`{ns}` of the route), the parsed query, a client acting there as the caller, the
/// answer's format and the response's nonce.
pub struct NamespaceView<Q> {
    namespace: String,
    query: Q,
    format: Format,
    client: Client,
    caller: Caller,
    nonce: Nonce,
}

impl<Q> FromRequestParts<Arc<ConsoleState>> for NamespaceView<Q>
where
    Q: serde::de::DeserializeOwned + AsksFormat + Send,
{
    type Rejection = ConsoleError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<ConsoleState>,
    ) -> Result<Self, Self::Rejection> {
        let caller = Caller::from_request_parts(parts, state).await?;
        let Path(params) = Path::<HashMap<String, String>>::from_request_parts(parts, state)
            .await
            .map_err(|e| ConsoleError::NotFound(e.body_text()))?;
        let namespace = params.get("ns").cloned().unwrap_or_default();
        check_name("namespace", &namespace)?;
        caller.authorize(&namespace)?;
        let query: Q = query(&parts.uri)?;
        let format = Format::negotiate(&parts.headers, query.format());
        let nonce = parts
            .extensions
            .get::<Nonce>()
            .cloned()
            .ok_or_else(|| ConsoleError::Internal("no CSP nonce for this response".into()))?;
        Ok(NamespaceView {
            client: state.console.client(&caller.token, &namespace),
            namespace,
            query,
            format,
            caller,
            nonce,
        })
    }
}

pub async fn root() -> Redirect {
    Redirect::to("/funcs")
}

#[derive(Deserialize)]
pub struct HomeQuery {
    /// The namespace switcher's choice.
    ns: Option<String>,
}

/// `/funcs`: the caller's own namespace; for an admin the namespaces and a switcher.
/// `?ns=` goes to that namespace, if the caller may see it.
pub async fn home(
    State(state): Shared,
    Extension(nonce): Extension<Nonce>,
    uri: Uri,
    caller: Caller,
) -> Result<Response, ConsoleError> {
    let home_query: HomeQuery = query(&uri)?;
    if let Some(ns) = home_query.ns.as_deref().map(str::trim) {
        check_name("namespace", ns)?;
        caller.authorize(ns)?;
        return Ok(Redirect::to(&app::routes::list_href(ns)).into_response());
    }
    if !caller.principal.admin {
        return Ok(Redirect::to(&format!("/funcs/{}", caller.principal.namespace)).into_response());
    }
    let namespaces = state.console.namespaces(&caller.token).await?;
    let ctx = page_context(&caller, &nonce).await?;
    Ok(Html(app::pages::render_namespaces(&namespaces, &ctx).await).into_response())
}

/// The address of the text or JSON page after `after`: the same selection and format.
fn next_href(path: &str, query: &ListQuery, limit: usize, after: &str) -> String {
    let next = ListQuery {
        page: None,
        limit: Some(limit.to_string()),
        after: Some(after.to_string()),
        ..query.clone()
    };
    // Plain strings: encoding cannot fail.
    let query = serde_urlencoded::to_string(&next).unwrap_or_default();
    format!("{path}?{query}")
}

/// `/funcs/<ns>`: the list, as a page, JSON or text.
pub async fn list(
    State(state): Shared,
    view: NamespaceView<ListQuery>,
) -> Result<Response, ConsoleError> {
    let NamespaceView {
        namespace,
        query: list_query,
        format,
        client,
        caller,
        nonce,
    } = view;
    let view_path = app::routes::list_href(&namespace);
    let selection = Selection::from_query(&list_query);
    let paging = list_query
        .paging()
        .map_err(|e| ConsoleError::BadRequest(e.to_string()))?;

    let started = Instant::now();
    let listing = state.console.listing(&client).await?;
    let entries = selection.apply(&listing);
    let mut next_page = None;
    let (response, fetch, render) = match format {
        Format::Text | Format::Json => {
            let fetch = started.elapsed();
            let rendering = Instant::now();
            let (entries, next) = match &paging.cursor {
                Some(cursor) => {
                    let page = cursor_page(entries, cursor, selection.sort)
                        .map_err(|e| ConsoleError::BadRequest(e.to_string()))?;
                    next_page = page
                        .next
                        .as_deref()
                        .map(|after| next_href(&view_path, &list_query, cursor.limit, after));
                    (page.items, page.next)
                }
                None => (entries, None),
            };
            let (content_type, body) = if format == Format::Json {
                ("application/json", render_json(&listing, entries, next))
            } else {
                ("text/plain; charset=utf-8", render_text(&entries))
            };
            let render = rendering.elapsed();
            let response = ([(header::CONTENT_TYPE, content_type)], body).into_response();
            (response, fetch, render)
        }
        Format::Html => {
            let (entries, nav) = numbered_page(entries, paging.page);
            // The table shows no source: it needs none fetched.
            let sources = match selection.view {
                View::Cards => state.console.inline_sources(&client, &entries).await,
                View::Table => HashMap::new(),
            };
            let ctx = page_context(&caller, &nonce).await?;
            let fetch = started.elapsed();
            let rendering = Instant::now();
            let html = app::pages::render_list(
                &ListPage {
                    listing: &listing,
                    selection: &selection,
                    entries: &entries,
                    nav,
                    sources: &sources,
                    public_url: &state.public_url,
                },
                &ctx,
            )
            .await;
            let render = rendering.elapsed();
            (html_response(html), fetch, render)
        }
    };
    let mut response = timed(response, fetch, render);
    response
        .headers_mut()
        .insert(header::VARY, HeaderValue::from_static("Accept"));
    if let Some(href) = next_page
        && let Ok(link) = HeaderValue::from_str(&format!("<{href}>; rel=\"next\""))
    {
        response.headers_mut().insert(header::LINK, link);
    }
    Ok(response)
}

#[derive(Deserialize)]
pub struct FunctionQuery {
    format: Option<String>,
    follow: Option<String>,
    /// Only this call's log lines.
    request_id: Option<String>,
    /// Only log lines with this text.
    q: Option<String>,
    /// The confirmation step of deleting.
    delete: Option<String>,
    /// A saved event to load into the invoke form.
    event: Option<String>,
    /// A cron schedule to preview the next runs of.
    cron: Option<String>,
}

impl FunctionQuery {
    fn log_filter(&self) -> LogFilter {
        let given = |v: &Option<String>| v.clone().filter(|v| !v.trim().is_empty());
        LogFilter {
            tail: app::function::LOG_LINES,
            request_id: given(&self.request_id),
            search: given(&self.q),
        }
    }
}

impl AsksFormat for FunctionQuery {
    fn format(&self) -> Option<&str> {
        self.format.as_deref()
    }
}

/// A text or JSON answer (pages are built by their handlers).
fn data_response(
    format: Format,
    text: impl FnOnce() -> String,
    json: impl FnOnce() -> String,
) -> Response {
    let (content_type, body) = match format {
        Format::Json => ("application/json", json()),
        _ => ("text/plain; charset=utf-8", text()),
    };
    let mut response = ([(header::CONTENT_TYPE, content_type)], body).into_response();
    response
        .headers_mut()
        .insert(header::VARY, HeaderValue::from_static("Accept"));
    response
}

/// `/funcs/<ns>/<kind>/<name>`: one Function or Service, as a page, JSON or text.
pub async fn function(
    State(state): Shared,
    Path((_, kind, name)): Path<(String, String, String)>,
    view: NamespaceView<FunctionQuery>,
) -> Result<Response, ConsoleError> {
    let NamespaceView {
        namespace,
        query: function_query,
        format,
        client,
        caller,
        nonce,
    } = view;
    let kind = WorkloadKind::from_name(&kind).ok_or_else(|| {
        ConsoleError::NotFound(format!(
            "{kind:?} is not a kind: expected function or service"
        ))
    })?;
    check_name("name", &name)?;
    let started = Instant::now();
    let logs = function_query.log_filter();
    let view = state
        .console
        .function(&client, kind, &name, &logs, chrono::Utc::now())
        .await?;
    if format != Format::Html {
        return Ok(data_response(
            format,
            || app::function::render_text(&view),
            || app::function::render_json(&view),
        ));
    }
    let ctx = page_context(&caller, &nonce).await?;
    let key = FunctionKey {
        namespace: namespace.clone(),
        kind,
        name: name.clone(),
    };
    let events = state.console.saved_events(&key).await?;
    let now = chrono::Utc::now();
    let cron_preview = function_query
        .cron
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty() && s.len() <= 128)
        .map(|schedule| {
            let runs = app::forms::next_runs(schedule, now, app::forms::PREVIEW_RUNS)
                .map_err(|e| e.to_string());
            (schedule.to_string(), runs)
        });
    let page = FunctionPage {
        namespace: &namespace,
        view: &view,
        follow: function_query.follow.is_some(),
        invocation: ctx.flash.as_ref().and_then(|f| f.invocation.as_ref()),
        logs: &logs,
        events: &events,
        loaded_event: function_query.event.as_deref(),
        confirm_delete: function_query.delete.is_some(),
        cron_preview,
        max_upload_mb: state.max_upload_bytes / (1024 * 1024),
    };
    let fetch = started.elapsed();
    Ok(timed_page(fetch, app::pages::render_function(&page, &ctx)).await)
}

/// `/funcs/<ns>/new`: the create form.
pub async fn create_page(
    State(state): Shared,
    view: NamespaceView<FormatQuery>,
) -> Result<Response, ConsoleError> {
    let ctx = page_context(&view.caller, &view.nonce).await?;
    let page = CreatePage {
        namespace: &view.namespace,
        max_upload_mb: state.max_upload_bytes / (1024 * 1024),
    };
    Ok(Html(app::pages::render_create(&page, &ctx).await).into_response())
}

/// `/funcs/<ns>/<kind>/<name>/logs/live`: the function's new log lines as Server-Sent
/// Events (`line` events of the API's JSON line, `lagged` when some went by), for the
/// page's optional live tail; the filter of the page applies.
pub async fn live_logs(
    Path((_, kind, name)): Path<(String, String, String)>,
    view: NamespaceView<FunctionQuery>,
) -> Result<Response, ConsoleError> {
    let kind = WorkloadKind::from_name(&kind).ok_or_else(|| {
        ConsoleError::NotFound(format!(
            "{kind:?} is not a kind: expected function or service"
        ))
    })?;
    check_name("name", &name)?;
    let mut filter = view.query.log_filter();
    // The page already shows the lines there were.
    filter.tail = 0;
    let stream = view
        .client
        .follow_logs(kind.into(), &name, &filter)
        .await
        .map_err(app::console::ViewError::from)?;
    let events = futures::StreamExt::map(stream, |followed| {
        let event = match followed {
            Ok(Followed::Line(line)) => Event::default().event("line").json_data(line),
            Ok(Followed::Missed(n)) => Ok(Event::default().event("lagged").data(n.to_string())),
            // The API's stream broke: the page's script reconnects.
            Err(e) => Ok(Event::default().event("ended").data(e.to_string())),
        };
        event.map_err(|e| std::io::Error::other(e.to_string()))
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}

#[derive(Deserialize)]
pub struct FormatQuery {
    format: Option<String>,
}

impl AsksFormat for FormatQuery {
    fn format(&self) -> Option<&str> {
        self.format.as_deref()
    }
}

/// `/funcs/<ns>/jobs`: the jobs, as a page, JSON or text.
pub async fn jobs(
    State(state): Shared,
    view: NamespaceView<FormatQuery>,
) -> Result<Response, ConsoleError> {
    let jobs = state.console.jobs(&view.client).await?;
    if view.format != Format::Html {
        return Ok(data_response(
            view.format,
            || app::pages::jobs_text(&jobs),
            || serde_json::to_string_pretty(&jobs).unwrap_or_default(),
        ));
    }
    let ctx = page_context(&view.caller, &view.nonce).await?;
    Ok(Html(app::pages::render_jobs(&view.namespace, &jobs, &ctx).await).into_response())
}

#[derive(Deserialize)]
pub struct JobQuery {
    format: Option<String>,
    /// A run to open, with its log tail.
    run: Option<i64>,
}

impl AsksFormat for JobQuery {
    fn format(&self) -> Option<&str> {
        self.format.as_deref()
    }
}

/// `/funcs/<ns>/jobs/<name>[?run=N]`: one job with its result, log tail, runs and
/// "Run again".
pub async fn job(
    State(state): Shared,
    Path((_, name)): Path<(String, String)>,
    view: NamespaceView<JobQuery>,
) -> Result<Response, ConsoleError> {
    check_name("name", &name)?;
    let page = state
        .console
        .job(&view.client, &name, view.query.run)
        .await?;
    if view.format != Format::Html {
        return Ok(data_response(
            view.format,
            || app::pages::job_text(&page),
            || serde_json::to_string_pretty(&page.job).unwrap_or_default(),
        ));
    }
    let ctx = page_context(&view.caller, &view.nonce).await?;
    Ok(html_response(
        app::pages::render_job(&view.namespace, &page, &ctx).await,
    ))
}

#[derive(Deserialize)]
pub struct SourceQuery {
    kind: Option<String>,
    /// A kept version instead of the latest upload.
    version: Option<String>,
}

/// `/funcs/<ns>/source/<name>?kind=function|service`.
pub async fn source(
    State(state): Shared,
    Path((namespace, name)): Path<(String, String)>,
    Extension(nonce): Extension<Nonce>,
    uri: Uri,
    caller: Caller,
) -> Result<Response, ConsoleError> {
    check_name("namespace", &namespace)?;
    caller.authorize(&namespace)?;
    check_name("name", &name)?;
    let source_query: SourceQuery = query(&uri)?;
    let kind = match source_query.kind.as_deref() {
        None | Some("") => WorkloadKind::Function,
        Some(kind) => WorkloadKind::parse(kind).ok_or_else(|| {
            ConsoleError::BadRequest(format!("kind={kind:?}: expected function or service"))
        })?,
    };
    let client = state.console.client(&caller.token, &namespace);
    let started = Instant::now();
    let workload = state.console.workload(&client, kind, &name).await?;
    let version = source_query.version.filter(|v| !v.is_empty());
    let files = match (&version, &workload.s3_key) {
        (Some(version), _) => {
            if !sless_api::keys::is_version(version) {
                return Err(ConsoleError::BadRequest(format!(
                    "version={version:?}: expected a version stamp as the Versions panel lists them"
                )));
            }
            Some(
                state
                    .console
                    .version_source(&client, kind, &namespace, &name, version)
                    .await?,
            )
        }
        (None, Some(key)) => Some(state.console.source(&client, kind, &name, key).await?),
        (None, None) => None,
    };
    let ctx = page_context(&caller, &nonce).await?;
    let page = SourcePage {
        namespace: &namespace,
        name: &name,
        kind,
        runtime: &workload.runtime,
        phase: workload.phase,
        last_built_at: workload.last_built_at.as_deref(),
        files: files.as_ref(),
        version: version.as_deref(),
    };
    let fetch = started.elapsed();
    Ok(timed_page(fetch, app::pages::render_source(&page, &ctx)).await)
}

#[derive(Deserialize)]
pub struct DiffQuery {
    from: Option<String>,
    to: Option<String>,
}

/// `/funcs/<ns>/<kind>/<name>/diff?from=<version>&to=<version>`: what changed.
pub async fn diff(
    State(state): Shared,
    Path((namespace, kind, name)): Path<(String, String, String)>,
    Extension(nonce): Extension<Nonce>,
    uri: Uri,
    caller: Caller,
) -> Result<Response, ConsoleError> {
    check_name("namespace", &namespace)?;
    caller.authorize(&namespace)?;
    let kind = WorkloadKind::from_name(&kind).ok_or_else(|| {
        ConsoleError::NotFound(format!(
            "{kind:?} is not a kind: expected function or service"
        ))
    })?;
    check_name("name", &name)?;
    let diff_query: DiffQuery = query(&uri)?;
    let version = |field: &str, value: Option<String>| {
        value
            .filter(|v| sless_api::keys::is_version(v))
            .ok_or_else(|| {
                ConsoleError::BadRequest(format!(
                    "{field}: expected a version stamp as the Versions panel lists them \
                     (pick two there)"
                ))
            })
    };
    let from = version("from", diff_query.from)?;
    let to = version("to", diff_query.to)?;
    let client = state.console.client(&caller.token, &namespace);
    let started = Instant::now();
    let diff = state
        .console
        .version_diff(&client, kind, &name, &from, &to)
        .await?;
    let ctx = page_context(&caller, &nonce).await?;
    let page = app::pages::DiffPage {
        namespace: &namespace,
        kind,
        name: &name,
        from: &from,
        to: &to,
        versions: &diff.versions,
        files: &diff.files,
    };
    let fetch = started.elapsed();
    let rendering = Instant::now();
    let html = app::pages::render_diff(&page, &ctx).await;
    Ok(timed(
        Html(html).into_response(),
        fetch,
        rendering.elapsed(),
    ))
}

#[derive(Deserialize)]
pub struct LoginQuery {
    next: Option<String>,
    /// Set by the logout action's redirect: the page says it worked.
    bye: Option<String>,
}

#[derive(Deserialize)]
pub struct LoginForm {
    token: Option<String>,
    csrf_token: Option<String>,
    next: Option<String>,
}

/// Verifies the token, starts the session, and sends the user on (the login token has
/// served its purpose).
async fn establish(
    state: &ConsoleState,
    session: &Session,
    token: &str,
    next: Option<&str>,
) -> Result<Response, ConsoleError> {
    let principal = auth::verify(&state.auth, token).await?;
    let home = format!("/funcs/{}", principal.namespace);
    session::log_in(
        session,
        SessionUser {
            token: token.to_string(),
            namespace: principal.namespace,
            admin: principal.admin,
        },
    )
    .await?;
    csrf::rotate(session).await?;
    let mut response = Redirect::to(next.and_then(safe_next).unwrap_or(&home)).into_response();
    if let Some(removal) = csrf::login_cookie(None, state.secure_cookies) {
        response.headers_mut().append(header::SET_COOKIE, removal);
    }
    Ok(response)
}

/// The login form; stores nothing on the server (see [`csrf::login_token`]).
/// What the login form says besides asking for a token.
struct LoginState<'a> {
    next: Option<&'a str>,
    /// Why the last attempt failed.
    error: Option<&'a str>,
    /// A notice of its own (else the session's flash).
    flash: Option<Flash>,
}

async fn login_form(
    state: &ConsoleState,
    headers: &HeaderMap,
    session: &Session,
    nonce: &Nonce,
    page: LoginState<'_>,
    status: StatusCode,
) -> Result<Response, ConsoleError> {
    let LoginState { next, error, flash } = page;
    let flash = match flash {
        Some(flash) => Some(flash),
        None => session::take_flash(session).await?,
    };
    let (token, new) = csrf::login_token(headers);
    let ctx = PageContext {
        nonce: nonce.0.clone(),
        csrf: Some(token.clone()),
        user: None,
        flash,
        refresh: None,
    };
    let html = app::pages::render_login(
        &LoginPage {
            next: next.and_then(safe_next),
            error,
        },
        &ctx,
    )
    .await;
    let mut response = (status, Html(html)).into_response();
    if new && let Some(cookie) = csrf::login_cookie(Some(&token), state.secure_cookies) {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    Ok(response)
}

/// `GET /login`: the form. A token in the address never logs in: a link would log a
/// browser into someone else's account (login CSRF).
pub async fn login_page(
    State(state): Shared,
    Extension(nonce): Extension<Nonce>,
    uri: Uri,
    headers: HeaderMap,
    session: Session,
    MaybeCaller(caller): MaybeCaller,
) -> Result<Response, ConsoleError> {
    let login_query: LoginQuery = query(&uri)?;
    let next = login_query.next.as_deref().and_then(safe_next);
    if let Some(caller) = caller.filter(|c| c.via == Via::Session) {
        let home = format!("/funcs/{}", caller.principal.namespace);
        return Ok(Redirect::to(next.unwrap_or(&home)).into_response());
    }
    let bye = login_query
        .bye
        .is_some()
        .then(|| Flash::ok("You are logged out."));
    login_form(
        &state,
        &headers,
        &session,
        &nonce,
        LoginState {
            next,
            error: None,
            flash: bye,
        },
        StatusCode::OK,
    )
    .await
}

/// `POST /login`: the pasted token, with the login form's CSRF token.
pub async fn login(
    State(state): Shared,
    Extension(nonce): Extension<Nonce>,
    headers: HeaderMap,
    session: Session,
    submitted: Result<Form<LoginForm>, FormRejection>,
) -> Result<Response, ConsoleError> {
    let submitted = form(submitted)?;
    csrf::verify_login(&headers, submitted.csrf_token.as_deref())?;
    let next = submitted.next.as_deref();
    let token = submitted.token.as_deref().map(str::trim).unwrap_or("");
    if token.is_empty() {
        return login_form(
            &state,
            &headers,
            &session,
            &nonce,
            LoginState {
                next,
                error: Some("Paste a token first."),
                flash: None,
            },
            StatusCode::BAD_REQUEST,
        )
        .await;
    }
    match establish(&state, &session, token, next).await {
        Ok(response) => Ok(response),
        Err(ConsoleError::Unauthorized(reason)) => {
            let error = format!("That token did not work: {reason}");
            login_form(
                &state,
                &headers,
                &session,
                &nonce,
                LoginState {
                    next,
                    error: Some(&error),
                    flash: None,
                },
                StatusCode::UNAUTHORIZED,
            )
            .await
        }
        Err(other) => Err(other),
    }
}
