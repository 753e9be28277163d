use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use gateway::api::{ApiConfig, AppState};
use gateway::dispatch::Dispatcher;
use gateway::proxy::{Proxy, ProxyConfig, Retention};
use sless_core::auth::Authenticator;
use sless_core::s3::ObjectStore;
use sless_embedded::s3::EmbeddedS3;
use sless_embedded::sqlite::SqliteStore;
use sless_embedded::{LocalRunner, RunnerConfig};

use crate::settings::{
    AuthArgs, DEFAULT_DATA_DIR, EventArgs, QuotaArgs, ReviewArgs, S3Args, ServeArgs, parse_age,
};

#[derive(Args, Debug)]
pub struct UpArgs {
    /// Where state lives: the SQLite store, uploaded objects, the signing key.
    #[arg(long, env = "SLESS_DATA_DIR", default_value = DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
    /// One address for the API, the /fn proxy and the console.
    #[arg(long, env = "SLESS_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Largest accepted zip, in MiB.
    #[arg(long, env = "SLESS_MAX_UPLOAD_MB", default_value_t = 50)]
    pub max_upload_mb: u64,
    /// Registry prefix of the runtime base images named in build contexts.
    #[arg(long, env = "SLESS_BASE_IMAGE_PREFIX", default_value = "sless")]
    pub base_image_prefix: String,
    /// Base of the URLs shown for functions; default: http://<listen address>.
    #[arg(long, env = "SLESS_EXTERNAL_URL")]
    pub external_url: Option<String>,
    /// Largest request body `/fn` forwards, in MiB (413 above).
    #[arg(long, env = "SLESS_MAX_INVOKE_BODY_MB", default_value_t = 256)]
    pub max_invoke_body_mb: u64,
    /// Deploy the examples (a Python and a Node function, a job, a service) at start.
    #[arg(long)]
    pub demo: bool,
    /// MiB of `memory_mb` one namespace's running instances and job runs may add up
    /// to; an instance past it does not start and its status says why.
    #[arg(long, env = "SLESS_MAX_RUNNING_MEMORY_MB", default_value_t = 8192)]
    pub max_running_memory_mb: u64,
    /// Seconds without a call after which a function instance stops, down to its
    /// `min_instances`; the next call starts one and waits for it.
    #[arg(long, env = "SLESS_SCALE_TO_ZERO_AFTER", value_name = "SECONDS",
          default_value_t = sless_embedded::DEFAULT_SCALE_TO_ZERO_AFTER.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub scale_to_zero_after: u64,
    /// Run functions even on a kernel without Landlock, where nothing confines them.
    #[arg(long, env = "SLESS_ALLOW_UNSANDBOXED")]
    pub allow_unsandboxed: bool,
    /// Processes and threads per function instance, job run and dependency install
    /// (a cgroup's pids limit); 0 = no limit.
    #[arg(long, env = "SLESS_MAX_PIDS", default_value_t = sless_embedded::DEFAULT_MAX_PIDS)]
    pub max_pids: u32,
    /// `Secure` on the console's session cookie (true/false); default: whether the
    /// external URL is https.
    #[arg(long, env = "SLESS_SECURE_COOKIES")]
    pub secure_cookies: Option<bool>,
    /// Calls each function's records keep (`GET .../invocations`), newest; kept across
    /// restarts in the data dir.
    #[arg(long, env = "SLESS_CALL_RECORDS_KEPT",
          default_value_t = Retention::DEFAULT.max_count as u64,
          value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub call_records_kept: u64,
    /// How long call records are kept: "7d", "12h", "30m" or "90s"; default 7d.
    #[arg(long, env = "SLESS_CALL_RECORDS_MAX_AGE", value_parser = parse_age)]
    pub call_records_max_age: Option<std::time::Duration>,
    /// Test only: scheduler seconds per real second (cron on an accelerated clock).
    #[arg(
        long,
        env = "SLESS_TEST_CRON_TIME_SCALE",
        default_value_t = 1,
        hide = true
    )]
    pub test_cron_time_scale: u32,
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

pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    // Held to the end: dropping it sends the spans still queued.
    let _traces =
        gateway::proxy::export_traces_from_env().context("starting the OTLP trace export")?;
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("creating the data dir {}", args.data_dir.display()))?;
    let data_dir = std::fs::canonicalize(&args.data_dir)
        .with_context(|| format!("resolving the data dir {}", args.data_dir.display()))?;
    let auth_config = args.auth.config(&data_dir)?;
    let auth = Arc::new(Authenticator::new(auth_config)?);
    let store = Arc::new(SqliteStore::open(&data_dir).await?);

    // Keep the embedded endpoint alive for as long as the server runs.
    let (s3_config, _embedded_s3) = match args.s3.external() {
        Some(config) => (config, None),
        None => {
            let embedded = EmbeddedS3::start(
                &data_dir.join("objects"),
                SocketAddr::from(([127, 0, 0, 1], 0)),
            )
            .await?;
            (embedded.config(&args.s3.s3_bucket), Some(embedded))
        }
    };
    let objects = ObjectStore::connect(&s3_config).await?;
    objects
        .ensure_bucket()
        .await
        .context("preparing the S3 bucket")?;

    let mut config = ApiConfig {
        base_image_prefix: args.base_image_prefix.clone(),
        quotas: args.quotas.quotas(),
        spool_dir: spool_dir(&data_dir)?,
        code_review: args.review.reviewer()?,
        keep_versions: args.quotas.keep_versions(),
        ..ApiConfig::default()
    };
    config.upload_limits.max_zip_bytes = args.max_upload_mb * 1024 * 1024;

    // Bind first: the runner writes URLs with the real port (--listen may say :0).
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {}; is another sless running?",
                args.listen
            )
        })?;
    let listeners = crate::serve::Listeners::new(listener, &args.serve).await?;
    let address = listeners.local_addr()?;
    let external_url = args
        .external_url
        .clone()
        .unwrap_or_else(|| format!("http://{address}"));

    config.external_url = Some(external_url.clone());
    let mut runner_config = RunnerConfig::new(data_dir.clone(), external_url.clone());
    runner_config.limits = config.upload_limits.clone();
    runner_config.allow_unsandboxed = args.allow_unsandboxed;
    runner_config.max_running_memory_mb = args.max_running_memory_mb;
    runner_config.max_pids = args.max_pids;
    runner_config.scale_to_zero_after = std::time::Duration::from_secs(args.scale_to_zero_after);
    runner_config.job_runs_kept = args.quotas.job_runs_kept();
    if args.test_cron_time_scale != 1 {
        let scale = args.test_cron_time_scale;
        tracing::warn!(scale, "cron runs on an accelerated clock (test only)");
        runner_config.cron_time_scale = scale;
    }
    let runner = LocalRunner::start(store.clone(), objects.clone(), runner_config)
        .context("starting the runner")?;
    let proxy = Arc::new(Proxy::new(
        Arc::new(runner.clone()),
        ProxyConfig {
            max_body_bytes: args.max_invoke_body_mb * 1024 * 1024,
            console_cookie: Some(crate::console::SESSION_COOKIE.to_owned()),
            call_records: args.call_records(),
            ..ProxyConfig::default()
        },
    ));
    // Before serving: listings right after a restart show the calls before it.
    let flusher = proxy
        .keep_calls_in(store.clone())
        .await
        .context("loading the call records")?;
    runner.call_triggers_through(proxy.trigger_calls());
    // Event triggers consume while the server runs.
    let _dispatcher = Dispatcher::start(store.clone(), proxy.clone(), args.events.config());
    let state = Arc::new(AppState::new(
        store,
        objects,
        auth,
        Arc::new(runner),
        proxy.clone(),
        config,
    ));
    let console = crate::console::ConsoleConfig::embedded(
        &data_dir,
        address,
        &external_url,
        args.secure_cookies,
        args.max_upload_mb * 1024 * 1024,
    );
    let console = crate::console::router(console, state.auth.clone(), Some(proxy.clone())).await?;
    let app = gateway::api::router(state)
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .merge(gateway::proxy::router(proxy.clone()))
        .merge(console);
    let app = gateway::serve::App::with_proxy(app, proxy);

    println!("sless is up on http://{address}");
    println!("  API:       http://{address}/v1/namespaces/<namespace>/...");
    println!("  functions: {external_url}/fn/<namespace>/<name>");
    println!("  console:   http://{address}/funcs");
    println!("  data dir:  {}", data_dir.display());
    if args.events.amqp_url.is_none() {
        println!("  events:    no broker (--amqp-url or SLESS_AMQP_URL for event triggers)");
    }
    println!("  get a token: {} --sub <you>", token_command(&data_dir));
    if args.demo {
        let token = demo_token(&args, &data_dir)?;
        let base = format!("http://{address}");
        let demo_token_command = format!(
            "{} --sub {}",
            token_command(&data_dir),
            crate::demo::DEMO_SUBJECT
        );
        tokio::spawn(async move {
            if let Err(e) = crate::demo::deploy(base, token, demo_token_command).await {
                eprintln!("demo: {e:#}");
            }
        });
    }
    let served = crate::serve::serve(listeners, app, &args.serve).await;
    flusher.stop().await;
    served
}

impl UpArgs {
    fn call_records(&self) -> Retention {
        Retention {
            max_count: usize::try_from(self.call_records_kept).unwrap_or(usize::MAX),
            max_age: self
                .call_records_max_age
                .unwrap_or(Retention::DEFAULT.max_age),
        }
    }
}

/// Uploads are spooled here while they are checked; what a crash left behind goes.
fn spool_dir(data_dir: &std::path::Path) -> anyhow::Result<PathBuf> {
    let dir = data_dir.join("spool");
    match std::fs::remove_dir_all(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(e).with_context(|| format!("clearing {}", dir.display()));
        }
        _ => {}
    }
    sless_core::data_dir::own_private_dir(&dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// The exact command that prints a token this server accepts: this binary's path (it
/// may not be on PATH) and this data dir.
fn token_command(data_dir: &std::path::Path) -> String {
    let binary = std::env::current_exe()
        .map(|path| path.display().to_string())
        .unwrap_or_else(|_| "sless".into());
    format!("{binary} token --data-dir {}", data_dir.display())
}

/// The demo deploys through the API, as its own user: it needs the embedded key.
fn demo_token(args: &UpArgs, data_dir: &std::path::Path) -> anyhow::Result<String> {
    let a = &args.auth;
    anyhow::ensure!(
        a.jwt_public_key_file.is_none() && a.jwks_url.is_none() && !a.insecure_skip_jwt_verify,
        "--demo signs its own token: use it with the embedded key or SLESS_JWT_HS256_SECRET"
    );
    let key = match &a.jwt_hs256_secret {
        Some(secret) => secret.as_bytes().to_vec(),
        None => sless_core::auth::load_or_create_signing_key(data_dir)?,
    };
    Ok(sless_core::auth::issue_hs256(
        &key,
        crate::demo::DEMO_SUBJECT,
        3600,
    )?)
}
