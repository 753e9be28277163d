//! Where the API is and who is calling: flags, then the environment, then the file
//! `sless login` wrote, then the default endpoint.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use serde_json::{Value, json};
use sless_client::client::{Client, Kind};

pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:8080";

#[derive(Args, Clone, Debug, Default)]
pub struct Connection {
    /// Base URL of sless (default: the one saved by sless login, else http://127.0.0.1:8080).
    #[arg(long, env = "SLESS_ENDPOINT")]
    pub endpoint: Option<String>,
    /// API token (a JWT); the namespace is derived from its sub (default: saved by sless login).
    #[arg(long, env = "SLESS_API_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Act on another namespace (admin tokens only).
    #[arg(long)]
    pub namespace: Option<String>,
}

#[derive(Args)]
pub struct LoginArgs {
    #[command(flatten)]
    pub connection: Connection,
}

/// `<config dir>/sless/config.json`.
fn config_path() -> anyhow::Result<PathBuf> {
    let dir = dirs::config_dir()
        .context("cannot find the user's config directory (set HOME or XDG_CONFIG_HOME)")?;
    Ok(dir.join("sless").join("config.json"))
}

/// The saved settings; a missing file is no settings.
fn saved() -> anyhow::Result<Value> {
    let path = config_path()?;
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text).with_context(|| {
            format!(
                "{} is not valid JSON; fix it or run sless login again",
                path.display()
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Value::Null),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

impl Connection {
    /// A client for the configured endpoint and token.
    pub fn client(&self) -> anyhow::Result<Client> {
        let saved = saved()?;
        let from_file = |key: &str| saved[key].as_str().map(String::from);
        let endpoint = self
            .endpoint
            .clone()
            .or_else(|| from_file("endpoint"))
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
        let Some(token) = self.token.clone().or_else(|| from_file("token")) else {
            bail!("no token: pass --token, set SLESS_API_TOKEN or run sless login");
        };
        let namespace = self.namespace.clone().or_else(|| from_file("namespace"));
        let client = match namespace {
            Some(namespace) => Client::for_namespace(&endpoint, token.trim(), &namespace)?,
            None => Client::new(&endpoint, token.trim())?,
        };
        Ok(client)
    }
}

pub async fn login(args: LoginArgs) -> anyhow::Result<()> {
    let connection = args.connection;
    let endpoint = connection
        .endpoint
        .clone()
        .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
    let Some(token) = connection.token.clone() else {
        bail!("pass the token with --token (or SLESS_API_TOKEN); get one with sless token");
    };
    let token = token.trim().to_string();
    let client = match &connection.namespace {
        Some(namespace) => Client::for_namespace(&endpoint, &token, namespace)?,
        None => Client::new(&endpoint, &token)?,
    };
    client.list_workloads(Kind::Function).await?;

    let mut settings = json!({"endpoint": client.endpoint(), "token": token});
    if let Some(namespace) = &connection.namespace {
        settings["namespace"] = json!(namespace);
    }
    let path = config_path()?;
    write_private(&path, &serde_json::to_vec_pretty(&settings)?)
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!(
        "logged in to {} (namespace {}); saved to {}",
        client.endpoint(),
        client.namespace(),
        path.display()
    );
    Ok(())
}

/// Writes a file only its owner can read: it holds a token.
fn write_private(path: &std::path::Path, content: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().expect("the config path has a parent");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        options.mode(0o600);
        let mut file = options.open(path)?;
        // An existing file keeps its mode on open: tighten it before writing the token.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        file.write_all(content)?;
        file.write_all(b"\n")?;
    }
    #[cfg(not(unix))]
    {
        std::fs::create_dir_all(dir)?;
        let mut file = options.open(path)?;
        file.write_all(content)?;
        file.write_all(b"\n")?;
    }
    Ok(())
}
