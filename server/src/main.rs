//! The `sless` binary: `sless up` runs the embedded all-in-one platform, `sless token`
//! issues a token signed with its key, and the developer commands (`deploy`, `ls`,
//! `invoke`, `logs`, ...) talk to a running sless over its REST API.

use sless::{cli, operator_cmd, settings, up};

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "sless",
    version,
    about = "Serverless functions on one machine or on Kubernetes"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the embedded all-in-one server: the REST API, the `/fn` proxy and the console on
    /// one address, state in SQLite and an embedded S3 endpoint under the data dir.
    Up(Box<up::UpArgs>),
    /// Print a JWT signed with the embedded key of a data dir, or with the HS256 secret
    /// a Kubernetes install verifies tokens with.
    Token {
        /// The user's identity; their namespace is derived from it.
        #[arg(long, required_unless_present = "admin")]
        sub: Option<String>,
        #[arg(long, env = "SLESS_DATA_DIR", default_value = settings::DEFAULT_DATA_DIR)]
        data_dir: PathBuf,
        /// Lifetime in seconds.
        #[arg(long, default_value_t = 24 * 3600)]
        ttl: u64,
        /// Issue an admin token (acts on every namespace); --sub is then not needed.
        #[arg(long)]
        admin: bool,
        /// Sign with this secret instead of the data dir's key (the operator's
        /// SLESS_JWT_HS256_SECRET).
        #[arg(long, env = "SLESS_JWT_HS256_SECRET", hide_env_values = true)]
        jwt_hs256_secret: Option<String>,
    },
    /// Run on Kubernetes: the API and `/fn` proxy on CustomResources, and the controllers.
    Operator(Box<operator_cmd::OperatorArgs>),
    /// Print the CustomResourceDefinitions (YAML) for `kubectl apply -f -`.
    Crds,
    #[command(flatten)]
    Cli(cli::CliCommand),
}

// The console and the proxy allocate many small, short-lived buffers per request;
// glibc's malloc spent a third of the console's CPU on them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() {
    // One `error:` line a person can act on, as every CLI command prints; no debug dump.
    if let Err(e) = run().await {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

async fn run() -> anyhow::Result<()> {
    // Chosen before any TLS client exists (kube, reqwest and the S3 SDK all use ring);
    // rustls refuses to guess when more than one provider is compiled in.
    rustls::crypto::ring::default_provider()
        .install_default()
        .map_err(|_| anyhow::anyhow!("a TLS crypto provider was installed twice"))?;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SLESS_LOG")
                .unwrap_or_else(|_| "info,sqlx=warn,aws=warn,hyper=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Up(args) => up::run(*args).await,
        Command::Operator(args) => operator_cmd::run(*args).await,
        Command::Crds => operator_cmd::print_crds(),
        Command::Cli(command) => std::process::exit(cli::run(command).await),
        Command::Token {
            sub,
            data_dir,
            ttl,
            admin,
            jwt_hs256_secret,
        } => {
            let key = match jwt_hs256_secret {
                Some(_) if admin => anyhow::bail!(
                    "with SLESS_JWT_HS256_SECRET an admin is a subject named in \
                     SLESS_ADMIN_SUBJECTS: pass --sub <that subject> instead of --admin"
                ),
                Some(secret) => secret.into_bytes(),
                None => sless_core::auth::load_signing_key(&data_dir)?,
            };
            token(sub, &key, ttl, admin)
        }
    }
}

/// `sless token`: a JWT signed with `key`.
fn token(sub: Option<String>, key: &[u8], ttl: u64, admin: bool) -> anyhow::Result<()> {
    let sub = match sub {
        Some(sub) if !admin => sub,
        _ => settings::EMBEDDED_ADMIN_SUBJECT.to_string(),
    };
    let token = sless_core::auth::issue_hs256(key, &sub, ttl)?;
    if admin {
        eprintln!("admin token (any namespace), valid {ttl} s");
    } else {
        eprintln!(
            "token for namespace {}, valid {ttl} s",
            sless_core::model::namespace_for_sub(&sub)
        );
    }
    println!("{token}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::Cli;

    #[test]
    fn token_needs_a_sub_unless_it_is_for_the_admin() {
        assert!(Cli::try_parse_from(["sless", "token", "--admin"]).is_ok());
        assert!(Cli::try_parse_from(["sless", "token", "--sub", "you"]).is_ok());
        assert!(Cli::try_parse_from(["sless", "token"]).is_err());
    }
}
