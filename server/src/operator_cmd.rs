//! `sless operator --platform kubernetes`: the REST API and the `/fn` proxy on the
//! CustomResource store, and the controllers, in one process (or apart, with
//! `--components`). `sless crds` prints the CRDs the operator needs.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use clap::{Args, ValueEnum};
use gateway::api::{ApiConfig, AppState};
use gateway::dispatch::Dispatcher;
use gateway::proxy::{Proxy, ProxyConfig};
use operator::{
    Builder, Context, IngressConfig, KubeConfig, KubePodLogs, KubeRoutes, KubeStore,
    KubeWorkloadLogs, LeaderElection, Readiness, S3ContextUrls,
};
use sless_core::auth::{Authenticator, TriggerKey};
use sless_core::s3::{ObjectStore, S3Config};
use tokio::task::JoinHandle;

use crate::serve::Listeners;
use crate::settings::{AuthArgs, EventArgs, QuotaArgs, ReviewArgs, S3Args, ServeArgs};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Platform {
    /// CustomResources, Jobs, Deployments (the embedded platform is `sless up`).
    Kubernetes,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Components {
    /// API, proxy and controllers in one process.
    All,
    /// Only the REST API and the `/fn` proxy.
    Api,
    /// Only the controllers.
    Controllers,
    /// Only the web console, acting through the API at --api-url.
    Console,
    /// Only the event dispatcher (AMQP consumers of event triggers), apart so that a
    /// broker outage never touches the API or the controllers.
    Dispatcher,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BuilderArg {
    /// BuildKit, rootless, daemonless.
    Buildkit,
    /// The maintained kaniko fork (needs root in its pod).
    Kaniko,
}

#[derive(Args, Debug)]
pub struct OperatorArgs {
    #[arg(long, env = "SLESS_PLATFORM", value_enum, default_value_t = Platform::Kubernetes)]
    pub platform: Platform,
    #[arg(long, env = "SLESS_COMPONENTS", value_enum, default_value_t = Components::All)]
    pub components: Components,
    /// Address of the API and the `/fn` proxy.
    #[arg(long, env = "SLESS_LISTEN", default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// Base of the URLs written to status: `<url>/fn/<ns>/<name>`. Without it, http
    /// triggers get an Ingress (see --ingress-host).
    #[arg(long, env = "SLESS_EXTERNAL_URL")]
    pub external_url: Option<String>,
    /// Registry (and path) builds push to: `<registry>/sless-<ns>-<name>:<tag>`.
    #[arg(long, env = "SLESS_REGISTRY")]
    pub registry: Option<String>,
    /// A kubernetes.io/dockerconfigjson Secret in the operator's namespace that can
    /// push: mounted only by the push step of builds, never where tenant code runs.
    #[arg(long, env = "SLESS_REGISTRY_SECRET")]
    pub registry_secret: Option<String>,
    /// A pull-only dockerconfigjson Secret in the operator's namespace: the pods'
    /// imagePullSecret and the build step's credential for private base images.
    #[arg(long, env = "SLESS_REGISTRY_PULL_SECRET")]
    pub registry_pull_secret: Option<String>,
    /// Push and pull over plain HTTP (a registry inside the cluster).
    #[arg(long, env = "SLESS_INSECURE_REGISTRY", default_value_t = false)]
    pub insecure_registry: bool,
    /// The namespace the operator runs in (the Deployment sets it from the pod).
    #[arg(long, env = "SLESS_OPERATOR_NAMESPACE", default_value = "sless-system")]
    pub operator_namespace: String,
    /// The operator's service account (the Deployment sets it from the pod): bound to
    /// the secrets role in each namespace a registry secret is copied into.
    #[arg(long, env = "SLESS_SERVICE_ACCOUNT", default_value = "sless-operator")]
    pub service_account: String,
    #[arg(long, env = "SLESS_BUILDER", value_enum, default_value_t = BuilderArg::Buildkit)]
    pub builder: BuilderArg,
    /// Run build pods in user namespaces (`hostUsers: false`): needs Kubernetes 1.30+
    /// with the UserNamespacesSupport feature and a runtime that supports it.
    #[arg(long, env = "SLESS_BUILD_USER_NAMESPACES", default_value_t = false, action = clap::ArgAction::Set)]
    pub build_user_namespaces: bool,
    /// An external BuildKit daemon (`tcp://buildkitd.buildkit:1234`): build pods run
    /// `buildctl --addr` against it, unprivileged, instead of a rootless BuildKit each.
    #[arg(long, env = "SLESS_BUILDKIT_ADDR")]
    pub buildkit_addr: Option<String>,
    #[arg(long, env = "SLESS_BUILDKIT_IMAGE", default_value = operator::BUILDKIT_IMAGE)]
    pub buildkit_image: String,
    #[arg(long, env = "SLESS_KANIKO_IMAGE", default_value = operator::KANIKO_IMAGE)]
    pub kaniko_image: String,
    /// Fetches build contexts and fires cron triggers.
    #[arg(long, env = "SLESS_CURL_IMAGE", default_value = operator::CURL_IMAGE)]
    pub curl_image: String,
    /// Pushes built images (the only step that holds the push credential).
    #[arg(long, env = "SLESS_CRANE_IMAGE", default_value = operator::CRANE_IMAGE)]
    pub crane_image: String,
    /// For the Service DNS names the proxy and cron triggers call.
    #[arg(long, env = "SLESS_CLUSTER_DOMAIN", default_value = "cluster.local")]
    pub cluster_domain: String,
    /// `SERVICE_HOST:PORT=HOST:PORT`, comma-separated: calls to that function Service
    /// dial the given address instead (an operator outside the cluster, tests).
    #[arg(long, env = "SLESS_CONNECT_TO", value_delimiter = ',', value_parser = parse_connect_to, hide = true)]
    pub connect_to: Vec<(String, String)>,
    /// Ingress class of http-trigger Ingresses (only without --external-url).
    #[arg(long, env = "SLESS_INGRESS_CLASS")]
    pub ingress_class: Option<String>,
    /// Host of http-trigger Ingresses and of their URLs (only without --external-url).
    #[arg(long, env = "SLESS_INGRESS_HOST")]
    pub ingress_host: Option<String>,
    /// Namespace of the ingress controller, allowed by every deploy namespace's
    /// NetworkPolicy to call functions (e.g. ingress-nginx).
    #[arg(long, env = "SLESS_INGRESS_NAMESPACE")]
    pub ingress_namespace: Option<String>,
    /// MiB of memory the pods of one deploy namespace may request and be limited to
    /// together (its ResourceQuota), as `sless up --max-running-memory-mb`.
    #[arg(long, env = "SLESS_MAX_RUNNING_MEMORY_MB", default_value_t = sless_core::quota::DEFAULT_MAX_RUNNING_MEMORY_MB)]
    pub max_running_memory_mb: u64,
    /// Registry prefix of the runtime base images named in build contexts; default:
    /// the registry builds push to, where `scripts/images` puts them.
    #[arg(long, env = "SLESS_BASE_IMAGE_PREFIX")]
    pub base_image_prefix: Option<String>,
    /// Largest accepted zip, in MiB.
    #[arg(long, env = "SLESS_MAX_UPLOAD_MB", default_value_t = 50)]
    pub max_upload_mb: u64,
    /// Largest request body `/fn` forwards, in MiB (413 above).
    #[arg(long, env = "SLESS_MAX_INVOKE_BODY_MB", default_value_t = 256)]
    pub max_invoke_body_mb: u64,
    /// The REST API the console calls (with --components console).
    #[arg(
        long,
        env = "SLESS_API_URL",
        default_value = "http://sless-operator.sless-system.svc:8080"
    )]
    pub api_url: String,
    /// Run the controllers only while holding a Lease in the operator namespace, so two
    /// replicas never both reconcile.
    #[arg(long, env = "SLESS_LEADER_ELECTION", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_election: bool,
    #[arg(long, env = "SLESS_LEASE_NAME", default_value = "sless-operator")]
    pub lease_name: String,
    /// A standby takes over this long after the leader stopped renewing.
    #[arg(long, env = "SLESS_LEASE_DURATION_SECS", default_value_t = 15)]
    pub lease_duration_secs: u64,
    /// Seconds without calls after which a workload is scaled down to its
    /// min_instances (0 for functions by default), as `sless up --scale-to-zero-after`.
    #[arg(long, env = "SLESS_SCALE_TO_ZERO_AFTER", value_name = "SECONDS",
          default_value_t = operator::autoscale::DEFAULT_SCALE_TO_ZERO_AFTER.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..))]
    pub scale_to_zero_after: u64,
    /// The install's secret for the tokens that prove a cron fire to `/fn` (each
    /// tenant's is an HMAC of it); the data plane and the controllers need the same one.
    #[arg(long, env = "SLESS_TRIGGER_KEY", hide_env_values = true)]
    pub trigger_key: Option<String>,
    /// Where cron pods call `/fn`; default: the data plane's Service,
    /// `http://sless-operator.<operator namespace>.svc.<cluster domain>:8080`.
    #[arg(long, env = "SLESS_DATA_PLANE_URL")]
    pub data_plane_url: Option<String>,
    /// Console sessions (with --components console); an emptyDir is enough.
    #[arg(long, env = "SLESS_DATA_DIR", default_value = "/var/lib/sless")]
    pub data_dir: std::path::PathBuf,
    #[command(flatten)]
    pub auth: AuthArgs,
    #[command(flatten)]
    pub s3: S3Args,
    #[command(flatten)]
    pub events: EventArgs,
    #[command(flatten)]
    pub serve: ServeArgs,
    #[command(flatten)]
    pub quotas: QuotaArgs,
    #[command(flatten)]
    pub review: ReviewArgs,
}

impl OperatorArgs {
    /// Where builds find the runtime base images: the flag, else the registry.
    fn base_image_prefix(&self) -> String {
        self.base_image_prefix
            .clone()
            .or_else(|| self.registry.clone())
            .unwrap_or_else(|| "sless".into())
    }

    /// The install's trigger key, which the API and the controllers cannot run without.
    fn trigger_key(&self) -> anyhow::Result<TriggerKey> {
        let key = self.trigger_key.as_deref().context(
            "cron triggers call /fn with a token only the install's key makes: set \
             SLESS_TRIGGER_KEY (the same for the API and the controllers; in the Secret \
             sless-operator), e.g. to the output of: head -c 32 /dev/urandom | base64",
        )?;
        TriggerKey::new(key).context("SLESS_TRIGGER_KEY")
    }

    fn kube_config(&self) -> anyhow::Result<KubeConfig> {
        let registry = self.registry.clone().context(
            "the controllers need a registry to push builds to: set SLESS_REGISTRY \
             (e.g. registry.example.com/sless)",
        )?;
        let mut config = KubeConfig::new(registry);
        config.trigger_key = self.trigger_key()?;
        config.data_plane_url = self.data_plane_url.clone();
        config.build_user_namespaces = self.build_user_namespaces;
        config.buildkit_addr = self.buildkit_addr.clone();
        anyhow::ensure!(
            self.buildkit_addr.is_none() || self.builder == BuilderArg::Buildkit,
            "SLESS_BUILDKIT_ADDR is a BuildKit daemon: it needs SLESS_BUILDER=buildkit"
        );
        config.build_endpoints = self.build_endpoints();
        config.registry_secret = self.registry_secret.clone();
        config.registry_pull_secret = self.registry_pull_secret.clone();
        config.insecure_registry = self.insecure_registry;
        config.job_runs_kept = self.quotas.job_runs_kept();
        config.operator_namespace = self.operator_namespace.clone();
        config.service_account = self.service_account.clone();
        config.builder = match self.builder {
            BuilderArg::Buildkit => Builder::BuildKit,
            BuilderArg::Kaniko => Builder::Kaniko,
        };
        config.images.buildkit = self.buildkit_image.clone();
        config.images.kaniko = self.kaniko_image.clone();
        config.images.curl = self.curl_image.clone();
        config.images.crane = self.crane_image.clone();
        for image in [
            &config.images.buildkit,
            &config.images.kaniko,
            &config.images.curl,
            &config.images.crane,
        ] {
            anyhow::ensure!(
                operator::manifests::is_pinned(image),
                "image {image:?} must carry a version tag or digest (never :latest)"
            );
        }
        config.cluster_domain = self.cluster_domain.clone();
        config.external_url = self.external_url.clone();
        config.ingress = IngressConfig {
            class: self.ingress_class.clone(),
            host: self.ingress_host.clone(),
            namespace: self.ingress_namespace.clone(),
        };
        let quotas = self.quotas.quotas();
        config.tenant_quota = operator::manifests::TenantQuota {
            max_running_memory_mb: self.max_running_memory_mb,
            max_workloads: quotas.max_workloads,
            max_triggers: quotas.max_triggers,
        };
        config.scale_to_zero_after = Duration::from_secs(self.scale_to_zero_after);
        Ok(config)
    }

    /// What every build pod must reach: S3 (AWS's when no endpoint is set), the
    /// registry it pushes to, the base images' registry and an external daemon.
    fn build_endpoints(&self) -> Vec<String> {
        let scheme = if self.insecure_registry {
            "http://"
        } else {
            ""
        };
        let mut endpoints = vec![
            self.s3
                .s3_endpoint
                .clone()
                .unwrap_or_else(|| "https://s3.amazonaws.com".into()),
        ];
        for registry in [self.registry.clone(), Some(self.base_image_prefix())] {
            let Some(registry) = registry else { continue };
            let host = operator::manifests::build::registry_host(&registry);
            let endpoint = format!("{scheme}{host}");
            if !endpoints.contains(&endpoint) {
                endpoints.push(endpoint);
            }
        }
        endpoints.extend(self.buildkit_addr.clone());
        endpoints
    }

    /// An external S3 endpoint, or AWS's own when none is given.
    fn s3_config(&self) -> S3Config {
        let s3 = &self.s3;
        S3Config {
            endpoint: s3.s3_endpoint.clone(),
            region: s3.s3_region.clone(),
            bucket: s3.s3_bucket.clone(),
            access_key_id: s3.s3_access_key_id.clone(),
            secret_access_key: s3.s3_secret_access_key.clone(),
            force_path_style: s3.s3_path_style,
        }
    }

    fn authenticator(&self) -> anyhow::Result<Authenticator> {
        let a = &self.auth;
        anyhow::ensure!(
            a.jwt_hs256_secret.is_some()
                || a.jwt_public_key_file.is_some()
                || a.jwks_url.is_some()
                || a.insecure_skip_jwt_verify,
            "configure how tokens are verified: SLESS_JWKS_URL, SLESS_JWT_PUBLIC_KEY_FILE or \
             SLESS_JWT_HS256_SECRET (there is no data dir key in Kubernetes mode)"
        );
        // A key source is set, so no data dir is read.
        let config = a.config(Path::new("/nonexistent"))?;
        Ok(Authenticator::new(config)?)
    }
}

fn parse_connect_to(value: &str) -> Result<(String, String), String> {
    let (from, to) = value
        .split_once('=')
        .ok_or_else(|| format!("{value:?} is not SERVICE_HOST:PORT=HOST:PORT"))?;
    for address in [from, to] {
        let port = address
            .rsplit_once(':')
            .map(|(_, port)| port.parse::<u16>());
        if !matches!(port, Some(Ok(_))) {
            return Err(format!("{address:?} is not HOST:PORT"));
        }
    }
    Ok((from.to_string(), to.to_string()))
}

/// The CRDs, as `kubectl apply -f -` takes them.
pub fn print_crds() -> anyhow::Result<()> {
    print!("{}", operator::crds::crds_yaml()?);
    Ok(())
}

/// The store and a `/fn` proxy whose routes follow it (kept current by the returned
/// tasks), for the API and for the dispatcher.
async fn routed_proxy(
    args: &OperatorArgs,
    client: &operator::KubeClient,
    readiness: &Readiness,
    trigger_key: Option<TriggerKey>,
) -> anyhow::Result<(
    Arc<KubeStore>,
    Arc<Proxy>,
    Arc<KubeRoutes>,
    Vec<JoinHandle<()>>,
)> {
    operator::controller::check_crds(client).await?;
    let store = Arc::new(KubeStore::new(client.clone()));
    // Watches keep the route table current with changes made by the controllers.
    let mut tasks = store.spawn_watchers(readiness);
    let routes = KubeRoutes::connecting_to(
        args.cluster_domain.clone(),
        args.connect_to.iter().cloned().collect(),
    );
    tasks.push(routes.spawn(store.clone(), Duration::from_secs(60)));
    tasks.push(routes.watch_endpoints(client.clone()));
    let proxy = Arc::new(Proxy::new(
        routes.clone(),
        ProxyConfig {
            max_body_bytes: args.max_invoke_body_mb * 1024 * 1024,
            // The console may be served on the same host (an Ingress in front).
            console_cookie: Some(crate::console::SESSION_COOKIE.to_owned()),
            trigger_key,
            ..ProxyConfig::default()
        },
    ));
    Ok((store, proxy, routes, tasks))
}

/// The event dispatcher alone: it reads triggers and functions, writes the status of
/// event triggers, and calls functions through their Services. One replica consumes
/// at a time (its own Lease).
async fn run_dispatcher(args: &OperatorArgs) -> anyhow::Result<()> {
    let client = operator::connect().await?;
    let readiness = Readiness::default();
    let (store, proxy, _, _tasks) = routed_proxy(args, &client, &readiness, None).await?;
    let listener = listen(args.listen, &args.serve).await?;
    let probes_task = crate::serve::serve(listener, probes(readiness), &args.serve);
    let dispatch = async {
        let election = args.leader_election.then(|| {
            LeaderElection::new(
                client.clone(),
                &args.operator_namespace,
                &format!("{}-dispatcher", args.lease_name),
                &leader_identity(),
                Duration::from_secs(args.lease_duration_secs),
            )
        });
        if let Some(election) = &election {
            election.acquire().await;
        }
        tracing::info!(
            broker = args.events.amqp_url.is_some(),
            "event dispatcher running"
        );
        let _dispatcher = Dispatcher::start(store, proxy, args.events.config());
        match &election {
            Some(election) => Err(election.hold().await),
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        result = probes_task => result,
        result = dispatch => result,
    }
}

/// The console alone: stateless but for its sessions, it needs no cluster access.
async fn run_console(args: &OperatorArgs) -> anyhow::Result<()> {
    let auth = Arc::new(args.authenticator()?);
    let public_url = args
        .external_url
        .clone()
        .unwrap_or_else(|| format!("http://{}", args.listen));
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("creating {}", args.data_dir.display()))?;
    let config = crate::console::ConsoleConfig {
        api_endpoint: args.api_url.trim_end_matches('/').to_string(),
        secure_cookies: public_url.starts_with("https://"),
        public_url: public_url.trim_end_matches('/').to_string(),
        data_dir: args.data_dir.clone(),
        inline_sources: app::console::ConsoleOptions::default().inline_sources,
        max_upload_bytes: args.max_upload_mb * 1024 * 1024,
    };
    let app = crate::console::router(config, auth, None)
        .await?
        .merge(probes(Readiness::default()))
        .layer(tower_http::trace::TraceLayer::new_for_http());
    let listener = listen(args.listen, &args.serve).await?;
    tracing::info!(address = %args.listen, api = %args.api_url, "console listening");
    crate::serve::serve(listener, app, &args.serve).await
}

/// `/healthz` (the process runs) and `/readyz` (every watched kind was listed once).
fn probes(readiness: Readiness) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || async move { ready_answer(&readiness) }),
        )
}

fn ready_answer(readiness: &Readiness) -> Response {
    match readiness.check() {
        Ok(()) => "ready".into_response(),
        Err(waiting) => (StatusCode::SERVICE_UNAVAILABLE, waiting).into_response(),
    }
}

/// The API's own `/readyz` checks its store; this puts the first lists in front of it.
fn gate_readyz(app: Router, readiness: Readiness) -> Router {
    app.layer(axum::middleware::from_fn(
        move |request: Request, next: Next| {
            let readiness = readiness.clone();
            async move {
                if request.uri().path() == "/readyz" && readiness.check().is_err() {
                    return ready_answer(&readiness);
                }
                next.run(request).await
            }
        },
    ))
}

/// Unique per process, readable in `kubectl get lease`: the pod name and the pid.
fn leader_identity() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "sless".into());
    format!("{host}-{}", std::process::id())
}

async fn listen(address: SocketAddr, args: &ServeArgs) -> anyhow::Result<Listeners> {
    let main = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen on {address}"))?;
    Listeners::new(main, args).await
}

pub async fn run(args: OperatorArgs) -> anyhow::Result<()> {
    let Platform::Kubernetes = args.platform;
    // Held to the end: dropping it sends the spans still queued.
    let _traces =
        gateway::proxy::export_traces_from_env().context("starting the OTLP trace export")?;
    match args.components {
        Components::Console => return run_console(&args).await,
        Components::Dispatcher => return run_dispatcher(&args).await,
        Components::All | Components::Api | Components::Controllers => {}
    }
    let api = args.components != Components::Controllers;
    let controllers = args.components != Components::Api;
    // Fail on configuration before touching the cluster.
    let kube_config = controllers.then(|| args.kube_config()).transpose()?;
    let auth = api.then(|| args.authenticator()).transpose()?;
    let trigger_key = api.then(|| args.trigger_key()).transpose()?;

    let client = operator::connect().await?;
    let objects = ObjectStore::connect(&args.s3_config()).await?;
    objects
        .ensure_bucket()
        .await
        .context("preparing the S3 bucket")?;
    let pod_logs = Arc::new(KubePodLogs::new(client.clone()));
    let readiness = Readiness::default();

    let api_task = async {
        let Some(auth) = auth else {
            // The probes of the deployment manifests work for every component.
            let listener = listen(args.listen, &args.serve).await?;
            tracing::info!(address = %args.listen, "health probes listening");
            return crate::serve::serve(listener, probes(readiness.clone()), &args.serve).await;
        };
        let (store, proxy, routes, mut tasks) =
            routed_proxy(&args, &client, &readiness, trigger_key).await?;
        // The calls this replica holds and has in flight, for the autoscaler.
        let pod = operator::autoscale::Pod {
            name: std::env::var("SLESS_POD_NAME")
                .or_else(|_| std::env::var("HOSTNAME"))
                .unwrap_or_else(|_| format!("pid-{}", std::process::id())),
            uid: std::env::var("SLESS_POD_UID").ok(),
        };
        tasks.push(operator::autoscale::publish_load(
            routes,
            client.clone(),
            &args.operator_namespace,
            pod,
        ));
        // Job runs are made by the controllers; their records come from the runs'
        // status, so every replica of the data plane has them.
        tasks.push(operator::job_records::spawn(
            store.clone(),
            proxy.trigger_calls(),
        ));
        let mut config = ApiConfig {
            base_image_prefix: args.base_image_prefix(),
            code_review: args.review.reviewer()?,
            keep_versions: args.quotas.keep_versions(),
            egress_host_names: false,
            ..ApiConfig::default()
        };
        config.upload_limits.max_zip_bytes = args.max_upload_mb * 1024 * 1024;
        config.external_url = args.external_url.clone();
        config.quotas = args.quotas.quotas();
        let state = Arc::new(AppState::new(
            store,
            objects.clone(),
            Arc::new(auth),
            Arc::new(KubeWorkloadLogs::new(client.clone(), pod_logs.clone())),
            proxy.clone(),
            config,
        ));
        let app = gateway::api::router(state)
            .layer(tower_http::trace::TraceLayer::new_for_http())
            .merge(gateway::proxy::router(proxy.clone()));
        let app = gateway::serve::App::with_proxy(gate_readyz(app, readiness.clone()), proxy);
        let listener = listen(args.listen, &args.serve).await?;
        tracing::info!(address = %args.listen, "API and /fn proxy listening");
        crate::serve::serve(listener, app, &args.serve).await
    };

    let election = args.leader_election.then(|| {
        LeaderElection::new(
            client.clone(),
            &args.operator_namespace,
            &args.lease_name,
            &leader_identity(),
            Duration::from_secs(args.lease_duration_secs),
        )
    });
    let controller_task = async {
        let Some(config) = kube_config else {
            return std::future::pending().await;
        };
        let ctx = Context::new(
            client.clone(),
            config,
            Arc::new(S3ContextUrls::new(objects.clone())),
            pod_logs.clone(),
        );
        let Some(election) = &election else {
            return operator::run_controllers(ctx, readiness.clone()).await;
        };
        // A replica that loses the lease stops its controllers only (the API and /fn
        // in the same process keep serving) and stands by for its next turn.
        loop {
            election.acquire().await;
            tokio::select! {
                result = operator::run_controllers(ctx.clone(), readiness.clone()) => return result,
                lost = election.hold() => {
                    tracing::error!(error = %lost, "controllers stopped; standing by for the lease");
                }
            }
        }
    };

    // Whichever part stops first (a signal, or an error) stops the process.
    let result = tokio::select! {
        result = api_task => result,
        result = controller_task => result,
    };
    if let Some(election) = &election {
        let _ = tokio::time::timeout(Duration::from_secs(2), election.release()).await;
    }
    result
}
