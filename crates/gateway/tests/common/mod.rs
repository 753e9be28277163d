//! A real API server on a loopback port, backed by a real SQLite file (or by
//! `KubeStore` over an in-memory Kubernetes API) and a real S3-protocol endpoint, for
//! HTTP-level tests.
#![allow(dead_code)]

#[path = "../../../../operator/tests/kube_common/mod.rs"]
pub mod kube_common;

pub mod api;
pub mod broker;
pub mod events;

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;

use gateway::api::{ApiConfig, AppState};
use gateway::proxy::{CallFlusher, ProxyConfig, Retention};
use operator::KubeStore;
use sless_core::auth::{AuthConfig, Authenticator, KeySource, issue_hs256};
use sless_core::calls::CallArchive;
use sless_core::s3::ObjectStore;
use sless_core::store::Store;
use sless_embedded::s3::EmbeddedS3;
use sless_embedded::sqlite::SqliteStore;
use tempfile::TempDir;

pub const SECRET: &[u8] = b"test-secret-0123456789abcdef0123";
pub const ADMIN_SUB: &str = "the-admin";

pub struct TestServer {
    pub base: String,
    pub store: Arc<dyn Store>,
    pub objects: ObjectStore,
    pub proxy: Arc<gateway::proxy::Proxy>,
    /// Where the proxy saves its call records, as `sless up` does (SQLite only).
    pub archive: Option<Arc<dyn CallArchive>>,
    pub client: reqwest::Client,
    _s3: EmbeddedS3,
    /// Taken by [`TestServer::restart`].
    dir: Option<TempDir>,
    server: tokio::task::JoinHandle<()>,
    dispatcher: Option<gateway::dispatch::Dispatcher>,
    flusher: Option<CallFlusher>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// The store behind the API.
#[derive(Clone, Copy, Debug)]
pub enum StoreKind {
    /// `SqliteStore` in the server's temporary directory (embedded mode).
    Sqlite,
    /// `KubeStore` (the CustomResources) over an in-memory Kubernetes API.
    Kube,
}

/// Tweaks of the embedded runner for one test.
pub type RunnerTweak = fn(&mut sless_embedded::RunnerConfig);

impl TestServer {
    /// The whole embedded platform: API, runner with real processes, `/fn` proxy.
    pub async fn platform(tweak: RunnerTweak) -> (Self, sless_embedded::LocalRunner) {
        Self::platform_with(ApiConfig::default(), tweak).await
    }

    /// [`TestServer::platform`] with the API configured.
    pub async fn platform_with(
        config: ApiConfig,
        tweak: RunnerTweak,
    ) -> (Self, sless_embedded::LocalRunner) {
        let (server, runner) = Self::launch(
            StoreKind::Sqlite,
            config,
            KeySource::Hs256Secret(SECRET.to_vec()),
            Some(tweak),
        )
        .await;
        (server, runner.expect("the platform runs a runner"))
    }

    /// [`TestServer::platform`] with the event dispatcher, as `sless up --amqp-url`.
    pub async fn platform_with_events(
        tweak: RunnerTweak,
        events: gateway::dispatch::DispatchConfig,
    ) -> (Self, sless_embedded::LocalRunner) {
        let (mut server, runner) = Self::platform(tweak).await;
        server.dispatcher = Some(gateway::dispatch::Dispatcher::start(
            server.store.clone(),
            server.proxy.clone(),
            events,
        ));
        (server, runner)
    }

    /// Stops the dispatcher, as a crash of `sless up` would (messages in hand are
    /// neither answered nor acked).
    pub fn stop_events(&mut self) {
        self.dispatcher = None;
    }

    pub async fn start() -> Self {
        Self::start_with(
            ApiConfig::default(),
            KeySource::Hs256Secret(SECRET.to_vec()),
        )
        .await
    }

    /// The API alone: nothing runs, every `/fn` name is unknown.
    pub async fn start_with(config: ApiConfig, key: KeySource) -> Self {
        Self::launch(StoreKind::Sqlite, config, key, None).await.0
    }

    /// [`TestServer::start`] on the given store.
    pub async fn start_on(kind: StoreKind) -> Self {
        Self::start_on_with(kind, ApiConfig::default()).await
    }

    /// [`TestServer::start_with`] on the given store.
    pub async fn start_on_with(kind: StoreKind, config: ApiConfig) -> Self {
        Self::launch(kind, config, KeySource::Hs256Secret(SECRET.to_vec()), None)
            .await
            .0
    }

    /// Stops the platform as `sless up` stops (its call records saved) and starts it
    /// again on the same data dir, the proxy keeping `call_records`.
    pub async fn restart(
        mut self,
        runner: sless_embedded::LocalRunner,
        tweak: RunnerTweak,
        call_records: Retention,
    ) -> (Self, sless_embedded::LocalRunner) {
        if let Some(flusher) = self.flusher.take() {
            flusher.stop().await;
        }
        drop(runner);
        let dir = self.dir.take().expect("a server restarts once");
        drop(self);
        let (server, runner) = Self::launch_in(
            dir,
            StoreKind::Sqlite,
            ApiConfig::default(),
            KeySource::Hs256Secret(SECRET.to_vec()),
            Some(tweak),
            call_records,
        )
        .await;
        (server, runner.expect("the platform runs a runner"))
    }

    async fn launch(
        kind: StoreKind,
        config: ApiConfig,
        key: KeySource,
        runner_tweak: Option<RunnerTweak>,
    ) -> (Self, Option<sless_embedded::LocalRunner>) {
        let dir = tempfile::tempdir().unwrap();
        Self::launch_in(dir, kind, config, key, runner_tweak, Retention::DEFAULT).await
    }

    async fn launch_in(
        dir: TempDir,
        kind: StoreKind,
        config: ApiConfig,
        key: KeySource,
        runner_tweak: Option<RunnerTweak>,
        call_records: Retention,
    ) -> (Self, Option<sless_embedded::LocalRunner>) {
        let (store, archive): (Arc<dyn Store>, Option<Arc<dyn CallArchive>>) = match kind {
            StoreKind::Sqlite => {
                let sqlite = Arc::new(SqliteStore::open(dir.path()).await.unwrap());
                (sqlite.clone(), Some(sqlite))
            }
            StoreKind::Kube => (
                Arc::new(KubeStore::new(kube_common::fake_client().await)),
                None,
            ),
        };
        let s3 = EmbeddedS3::start(
            &dir.path().join("objects"),
            SocketAddr::from(([127, 0, 0, 1], 0)),
        )
        .await
        .unwrap();
        let objects = ObjectStore::connect(&s3.config("sless")).await.unwrap();
        objects.ensure_bucket().await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());

        let runner = runner_tweak.map(|tweak| {
            let mut runner_config =
                sless_embedded::RunnerConfig::new(dir.path().to_path_buf(), base.clone());
            tweak(&mut runner_config);
            sless_embedded::LocalRunner::start(store.clone(), objects.clone(), runner_config)
                .unwrap()
        });
        let (routes, logs): (
            Arc<dyn sless_core::routes::RouteTable>,
            Arc<dyn sless_core::logs::WorkloadLogs>,
        ) = match &runner {
            Some(runner) => (Arc::new(runner.clone()), Arc::new(runner.clone())),
            None => (
                Arc::new(NoRoutes),
                Arc::new(sless_core::logs::LogBook::new(100)),
            ),
        };
        let proxy = Arc::new(gateway::proxy::Proxy::new(
            routes,
            ProxyConfig {
                call_records,
                ..ProxyConfig::default()
            },
        ));
        let flusher = match &archive {
            Some(archive) => Some(proxy.keep_calls_in(archive.clone()).await.unwrap()),
            None => None,
        };
        if let Some(runner) = &runner {
            runner.call_triggers_through(proxy.trigger_calls());
        }
        let state = Arc::new(AppState::new(
            store.clone(),
            objects.clone(),
            Arc::new(test_authenticator(key)),
            logs,
            proxy.clone(),
            config,
        ));
        let app = gateway::api::router(state).merge(gateway::proxy::router(proxy.clone()));
        // Served as `sless` serves it: the proxy's fast path first.
        let app = gateway::serve::App::with_proxy(app, proxy.clone());
        let server = tokio::spawn(async move {
            gateway::serve::serve(
                listener,
                app,
                std::num::NonZeroUsize::new(2).unwrap(),
                gateway::serve::Limits::default(),
                std::future::pending(),
            )
            .await
            .unwrap();
        });
        let server = TestServer {
            base,
            store,
            objects,
            proxy,
            archive,
            client: reqwest::Client::new(),
            _s3: s3,
            dir: Some(dir),
            server,
            dispatcher: None,
            flusher,
        };
        (server, runner)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The data dir: the store, the uploads, the builds.
    pub fn data_dir(&self) -> &std::path::Path {
        self.dir.as_ref().expect("not restarted").path()
    }
}

/// The API-only server runs nothing: every name is unknown to its proxy.
struct NoRoutes;

impl sless_core::routes::RouteTable for NoRoutes {
    fn route(&self, _namespace: &str, _name: &str) -> sless_core::routes::Route {
        sless_core::routes::Route::Unknown
    }
}

fn test_authenticator(key: KeySource) -> Authenticator {
    Authenticator::new(AuthConfig {
        key,
        admin_subjects: vec![ADMIN_SUB.to_string()],
        issuer: None,
        audience: None,
        leeway_sec: 0,
    })
    .unwrap()
}

/// A user: their token and the namespace it may act on.
pub struct User {
    pub token: String,
    pub ns: String,
}

pub fn user(sub: &str) -> User {
    User {
        token: issue_hs256(SECRET, sub, 3600).unwrap(),
        ns: sless_core::model::namespace_for_sub(sub),
    }
}

pub fn admin() -> User {
    User {
        token: issue_hs256(SECRET, ADMIN_SUB, 3600).unwrap(),
        ns: sless_core::model::namespace_for_sub(ADMIN_SUB),
    }
}

/// A zip of (path, content) pairs.
pub fn zip_of(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default();
    for (path, content) in files {
        writer.start_file(*path, options).unwrap();
        writer.write_all(content).unwrap();
    }
    writer.finish().unwrap().into_inner()
}

pub fn code_form(zip: Vec<u8>) -> reqwest::multipart::Form {
    reqwest::multipart::Form::new().part(
        "code",
        reqwest::multipart::Part::bytes(zip).file_name("code.zip"),
    )
}

/// Files of a tar.gz, in order.
pub fn untar(bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
    use std::io::Read;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes));
    archive
        .entries()
        .unwrap()
        .map(|entry| {
            let mut entry = entry.unwrap();
            let path = entry.path().unwrap().to_string_lossy().into_owned();
            let mut data = Vec::new();
            entry.read_to_end(&mut data).unwrap();
            (path, data)
        })
        .collect()
}
