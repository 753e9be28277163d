use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use operator::api::{ApiConfig, AppState};
use operator::auth::Authenticator;
use operator::s3::{EmbeddedS3, ObjectStore};
use operator::store::SqliteStore;

use crate::settings::{AuthArgs, DEFAULT_DATA_DIR, S3Args};

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
    #[command(flatten)]
    pub auth: AuthArgs,
    #[command(flatten)]
    pub s3: S3Args,
}

pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    let data_dir = args.data_dir.clone();
    std::fs::create_dir_all(&data_dir)
        .with_context(|| format!("creating the data dir {}", data_dir.display()))?;
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
        ..ApiConfig::default()
    };
    config.upload_limits.max_zip_bytes = args.max_upload_mb * 1024 * 1024;
    let state = Arc::new(AppState {
        store,
        objects,
        auth,
        config,
    });
    let app = operator::api::router(state).layer(tower_http::trace::TraceLayer::new_for_http());

    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {}; is another sless running?",
                args.listen
            )
        })?;
    let address = listener.local_addr()?;
    println!("sless is up on http://{address}");
    println!("  API:       http://{address}/v1/namespaces/<namespace>/...");
    println!("  data dir:  {}", data_dir.display());
    println!(
        "  get a token: sless token --sub <you> --data-dir {}",
        data_dir.display()
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .context("serving")?;
    Ok(())
}
