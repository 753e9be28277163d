//! Console sessions: `tower-sessions` in a SQLite file of the data dir, so a restart of
//! `sless up` keeps people logged in. The cookie carries only the session id; the token
//! stays on the server.

use std::time::Duration;

use anyhow::Context;
use app::pages::Flash;
use serde::{Deserialize, Serialize};
use tower_sessions::cookie::SameSite;
use tower_sessions::{ExpiredDeletion, Expiry, Session, SessionManagerLayer};
use tower_sessions_sqlx_store::SqliteStore;
use tower_sessions_sqlx_store::sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions,
};

use super::ConsoleConfig;
use super::error::ConsoleError;

pub const COOKIE_NAME: &str = "sless_session";
/// Idle sessions end after this; the token's own `exp` ends them earlier.
const IDLE_HOURS: i64 = 12;

const USER_KEY: &str = "user";
const FLASH_KEY: &str = "flash";

/// Who is logged in: kept server-side in the session record.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SessionUser {
    pub token: String,
    pub namespace: String,
    pub admin: bool,
}

pub async fn layer(config: &ConsoleConfig) -> anyhow::Result<SessionManagerLayer<SqliteStore>> {
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating {}", config.data_dir.display()))?;
    let path = config.data_dir.join("sessions.db");
    create_private(&path)?;
    let options = SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(5));
    let pool = SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await
        .with_context(|| format!("opening the session store {}", path.display()))?;
    let store = SqliteStore::new(pool);
    store
        .migrate()
        .await
        .with_context(|| format!("preparing the session store {}", path.display()))?;
    let cleaner = store.clone();
    tokio::spawn(async move {
        if let Err(e) = cleaner
            .continuously_delete_expired(Duration::from_secs(3600))
            .await
        {
            tracing::warn!(error = %e, "deleting expired console sessions stopped");
        }
    });
    Ok(SessionManagerLayer::new(store)
        .with_name(COOKIE_NAME)
        .with_path("/")
        .with_http_only(true)
        .with_same_site(SameSite::Lax)
        .with_secure(config.secure_cookies)
        .with_expiry(Expiry::OnInactivity(
            tower_sessions::cookie::time::Duration::hours(IDLE_HOURS),
        )))
}

/// The session file holds tokens (and the console's file, users' test events): readable
/// by the owner only.
pub(super) fn create_private(path: &std::path::Path) -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)
            .with_context(|| format!("creating {}", path.display()))?;
    }
    Ok(())
}

fn store_error(e: tower_sessions::session::Error) -> ConsoleError {
    ConsoleError::Session(e)
}

pub async fn user(session: &Session) -> Result<Option<SessionUser>, ConsoleError> {
    session.get(USER_KEY).await.map_err(store_error)
}

/// Logs in: a new session id (no fixation) and the user. The caller gives it a fresh
/// CSRF token ([`super::csrf::rotate`]).
pub async fn log_in(session: &Session, user: SessionUser) -> Result<(), ConsoleError> {
    session.cycle_id().await.map_err(store_error)?;
    session.insert(USER_KEY, user).await.map_err(store_error)
}

pub async fn log_out(session: &Session) -> Result<(), ConsoleError> {
    session.flush().await.map_err(store_error)
}

/// Ends a login whose token no longer verifies, leaving a note for the login page.
pub async fn expire(session: &Session, reason: &str) -> Result<(), ConsoleError> {
    session
        .remove::<SessionUser>(USER_KEY)
        .await
        .map_err(store_error)?;
    set_flash(
        session,
        Flash::error(format!("Please log in again: {reason}")),
    )
    .await
}

pub async fn set_flash(session: &Session, flash: Flash) -> Result<(), ConsoleError> {
    session.insert(FLASH_KEY, flash).await.map_err(store_error)
}

/// Reads and forgets the flash; a session without one is not rewritten.
pub async fn take_flash(session: &Session) -> Result<Option<Flash>, ConsoleError> {
    let flash: Option<Flash> = session.get(FLASH_KEY).await.map_err(store_error)?;
    if flash.is_some() {
        session
            .remove::<Flash>(FLASH_KEY)
            .await
            .map_err(store_error)?;
    }
    Ok(flash)
}

pub async fn get_string(session: &Session, key: &str) -> Result<Option<String>, ConsoleError> {
    session.get(key).await.map_err(store_error)
}

pub async fn set_string(session: &Session, key: &str, value: &str) -> Result<(), ConsoleError> {
    session.insert(key, value).await.map_err(store_error)
}
