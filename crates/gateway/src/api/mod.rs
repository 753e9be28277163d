//! The REST API of docs/spec.md §5 on axum. Handlers are thin: parse, call the store / upload
//! pipeline, map errors through [`ApiError`].

mod code;
mod convert;
mod error;
mod extract;
mod jobs;
mod triggers;
pub mod versions;
mod workloads;

use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, extract::Path};

pub use error::ApiError;

use crate::proxy::Proxy;
use extract::Authorized;
use sless_api::{Egress, EgressRule, NamespaceResponse};
use sless_core::auth::Authenticator;
use sless_core::logs::WorkloadLogs;
use sless_core::model::{Function, Kind, Service, ValidationError};
use sless_core::quota::{Quota, QuotaStore, Quotas, Slots};
use sless_core::review::Reviewer;
use sless_core::s3::ObjectStore;
use sless_core::store::{Object, Resource, Store, StoreError, StoreExt, WorkloadResource};
use sless_core::upload::UploadLimits;

#[derive(Clone, Debug)]
pub struct ApiConfig {
    pub upload_limits: UploadLimits,
    /// Registry prefix of the runtime base images in generated Dockerfiles.
    pub base_image_prefix: String,
    /// Larger source files are cut (with a flag) in source listings.
    pub max_source_file_bytes: usize,
    /// One source listing holds at most this much content; later files are cut.
    pub max_source_answer_bytes: usize,
    /// Base of the URLs in status (`<external_url>/fn/<ns>/<name>`), when known: an http
    /// trigger created for a Ready function answers with its URL at once.
    pub external_url: Option<String>,
    /// Objects per namespace and uploads in flight (the runner enforces running memory).
    pub quotas: Quotas,
    /// Where uploads and build contexts are spooled while they are checked and stored
    /// (`sless up`: `<data dir>/spool`).
    pub spool_dir: PathBuf,
    /// The pre-build code review, when enabled (docs/spec.md §4).
    pub code_review: Option<Arc<Reviewer>>,
    /// Versions kept per function or service (`--keep-versions`); older ones are pruned.
    pub keep_versions: usize,
    /// Whether `egress` lists may name hosts: the embedded proxy checks names, while
    /// Kubernetes enforces egress with NetworkPolicy, which knows only addresses.
    pub egress_host_names: bool,
}

impl ApiConfig {
    /// Refuses an `egress` list that names a host where names cannot be enforced.
    pub fn check_egress(&self, egress: Option<&Egress>) -> Result<(), ValidationError> {
        let Some(Egress::Allow(rules)) = egress else {
            return Ok(());
        };
        match rules
            .iter()
            .find(|rule| matches!(rule, EgressRule::Host { .. }))
        {
            Some(host) if !self.egress_host_names => Err(ValidationError::new(
                "egress",
                format!(
                    "{host} names a host, which a Kubernetes NetworkPolicy cannot enforce: \
                     list its addresses (an IP or CIDR, with a port) instead"
                ),
            )),
            _ => Ok(()),
        }
    }
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            upload_limits: UploadLimits::default(),
            base_image_prefix: "sless".into(),
            max_source_file_bytes: 1024 * 1024,
            max_source_answer_bytes: 2 * 1024 * 1024,
            external_url: None,
            quotas: Quotas::default(),
            spool_dir: std::env::temp_dir(),
            code_review: None,
            keep_versions: sless_core::versions::DEFAULT_KEEP_VERSIONS,
            egress_host_names: true,
        }
    }
}

pub struct AppState {
    /// Creates pass the namespace's quotas ([`QuotaStore`]).
    pub store: Arc<dyn Store>,
    pub objects: ObjectStore,
    pub auth: Arc<Authenticator>,
    pub logs: Arc<dyn WorkloadLogs>,
    /// The `/fn` proxy, for the invocation history it records.
    pub proxy: Arc<Proxy>,
    pub config: ApiConfig,
    /// Uploads in flight per namespace.
    pub uploads: Arc<Slots>,
    pub log_followers: Arc<Slots>,
}

impl AppState {
    /// The API's state over `store`, which it writes through the quotas of `config`.
    pub fn new(
        store: Arc<dyn Store>,
        objects: ObjectStore,
        auth: Arc<Authenticator>,
        logs: Arc<dyn WorkloadLogs>,
        proxy: Arc<Proxy>,
        config: ApiConfig,
    ) -> Self {
        Self {
            store: Arc::new(QuotaStore::new(store, config.quotas.clone())),
            objects,
            auth,
            logs,
            proxy,
            uploads: Slots::new(Quota::UploadsInFlight, config.quotas.max_uploads_in_flight),
            log_followers: Slots::new(Quota::LogFollowers, config.quotas.max_log_followers),
            config,
        }
    }
}

impl AppState {
    /// A workload as the API answers it, with its instances running now.
    fn workload<R: WorkloadResource>(&self, object: &Object<R>) -> sless_api::WorkloadResponse {
        let instances = self
            .proxy
            .instances(&object.meta.namespace, &object.meta.name);
        convert::workload_response(object, instances)
    }
}

/// `/v1` routes plus `/healthz` and `/readyz`.
pub fn router(state: Arc<AppState>) -> Router {
    let upload_body_limit =
        (state.config.upload_limits.max_zip_bytes + code::MULTIPART_FRAMING_BYTES) as usize;
    let uploads = Router::new()
        .route(
            "/v1/namespaces/{ns}/functions/{name}/upload",
            post(workloads::upload::<Function>),
        )
        .route(
            "/v1/namespaces/{ns}/services/{name}/upload",
            post(workloads::upload::<Service>),
        )
        .route("/v1/namespaces/{ns}/jobs/{name}/upload", post(jobs::upload))
        .layer(DefaultBodyLimit::max(upload_body_limit))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            code::refuse_oversize,
        ));

    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .route("/v1/namespaces", get(list_namespaces))
        .route("/v1/namespaces/{ns}/ensure", post(ensure_namespace))
        .merge(workload_routes::<Function>())
        .merge(workload_routes::<Service>())
        .route(
            "/v1/namespaces/{ns}/triggers",
            get(triggers::list).post(triggers::create),
        )
        .route(
            "/v1/namespaces/{ns}/triggers/{name}",
            get(triggers::get)
                .put(triggers::replace)
                .patch(triggers::patch)
                .delete(triggers::delete),
        )
        .route(
            "/v1/namespaces/{ns}/jobs",
            get(jobs::list).post(jobs::create),
        )
        .route(
            "/v1/namespaces/{ns}/jobs/{name}",
            get(jobs::get)
                .put(jobs::replace)
                .patch(jobs::patch)
                .delete(jobs::delete),
        )
        .route("/v1/namespaces/{ns}/jobs/{name}/runs", get(jobs::runs))
        .route(
            "/v1/namespaces/{ns}/jobs/{name}/runs/{run_id}",
            get(jobs::run),
        )
        .merge(uploads)
        .fallback(unknown_route)
        .layer(compression())
        .layer(axum::middleware::from_fn(crate::request_id::layer))
        .with_state(state)
}

/// gzip or brotli for text answers when the client accepts them (listings, logs, the
/// console's pages), at a level that costs little CPU; event streams and images stay
/// as they are. `/fn` answers are the function's own and never pass through here.
pub fn compression() -> tower_http::compression::CompressionLayer {
    tower_http::compression::CompressionLayer::new()
        .no_deflate()
        .no_zstd()
        .quality(tower_http::compression::CompressionLevel::Precise(4))
}

/// The routes Functions and Services share, under `/v1/namespaces/{ns}/<kind path>`
/// (uploads apart: they carry their own body limit).
fn workload_routes<R: WorkloadResource>() -> Router<Arc<AppState>> {
    let base = format!("/v1/namespaces/{{ns}}/{}", R::KIND.path());
    Router::new()
        .route(
            &base,
            get(workloads::list::<R>).post(workloads::create::<R>),
        )
        .route(
            &format!("{base}/{{name}}"),
            get(workloads::get::<R>)
                .put(workloads::replace::<R>)
                .delete(workloads::delete::<R>),
        )
        .route(
            &format!("{base}/{{name}}/source"),
            get(workloads::source::<R>),
        )
        .route(
            &format!("{base}/{{name}}/versions"),
            get(versions::list::<R>),
        )
        .route(
            &format!("{base}/{{name}}/versions/{{version}}/source"),
            get(versions::source::<R>),
        )
        .route(
            &format!("{base}/{{name}}/rollback"),
            post(versions::rollback::<R>),
        )
        .route(&format!("{base}/{{name}}/logs"), get(workloads::logs::<R>))
        .route(
            &format!("{base}/{{name}}/build-log"),
            get(workloads::build_log::<R>),
        )
        .route(
            &format!("{base}/{{name}}/invocations"),
            get(workloads::invocations::<R>),
        )
        .route(
            &format!("{base}/{{name}}/invocations/{{request_id}}"),
            get(workloads::invocation::<R>),
        )
}

/// Prometheus metrics (OpenMetrics text) of every tenant: admin tokens only.
async fn metrics_text(
    State(state): State<Arc<AppState>>,
    headers: axum::http::HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    let header = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let principal = state
        .auth
        .authenticate(Authenticator::bearer(header)?)
        .await?;
    principal.require_admin("the metrics")?;
    Ok(metrics_response())
}

/// `GET /v1/namespaces`: every namespace holding an object, for an admin (the console's
/// namespace switcher).
async fn list_namespaces(
    State(state): State<Arc<AppState>>,
    headers: axum::http::HeaderMap,
) -> Result<Json<sless_api::NamespaceListResponse>, ApiError> {
    let header = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let principal = state
        .auth
        .authenticate(Authenticator::bearer(header)?)
        .await?;
    principal.require_admin("the list of namespaces")?;
    let mut namespaces = std::collections::BTreeSet::new();
    for kind in Kind::ALL {
        for object in state.store.list(kind, None).await? {
            namespaces.insert(object.meta.namespace);
        }
    }
    Ok(Json(sless_api::NamespaceListResponse {
        namespaces: namespaces.into_iter().collect(),
    }))
}

/// The scrape answer, also served unauthenticated on `--metrics-listen`.
pub fn metrics_response() -> impl IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        sless_core::metrics::metrics().encode(),
    )
}

async fn healthz() -> &'static str {
    "ok"
}

/// Ready when the store answers.
async fn readyz(State(state): State<Arc<AppState>>) -> Result<&'static str, ApiError> {
    state.store.list(Kind::Function, Some("readyz")).await?;
    Ok("ready")
}

async fn unknown_route() -> ApiError {
    ApiError::NotFound("no such route; the API lives under /v1/namespaces/{ns}/...".into())
}

async fn ensure_namespace(
    State(state): State<Arc<AppState>>,
    auth: Authorized,
    Path(_): Path<String>,
) -> Result<(StatusCode, Json<NamespaceResponse>), ApiError> {
    let created = state.store.ensure_namespace(&auth.namespace).await?;
    let (status, word) = if created {
        (StatusCode::CREATED, "created")
    } else {
        (StatusCode::OK, "exists")
    };
    Ok((
        status,
        Json(NamespaceResponse {
            namespace: auth.namespace,
            status: word.into(),
        }),
    ))
}

async fn load<R: Resource>(
    state: &AppState,
    namespace: &str,
    name: &str,
) -> Result<Object<R>, ApiError> {
    state
        .store
        .get_typed::<R>(namespace, name)
        .await?
        .ok_or_else(|| not_found(R::KIND, namespace, name))
}

/// A list in name order, which cursors count on whatever order the store keeps.
fn by_name<T>(items: impl Iterator<Item = T>, name: impl Fn(&T) -> &str) -> Vec<T> {
    let mut items: Vec<T> = items.collect();
    items.sort_by(|a, b| name(a).cmp(name(b)));
    items
}

fn not_found(kind: Kind, namespace: &str, name: &str) -> ApiError {
    StoreError::NotFound {
        kind,
        namespace: namespace.to_string(),
        name: name.to_string(),
    }
    .into()
}
