//! Saved test events: a short named list per function, kept server-side in
//! `<data_dir>/console.db` (SQLite, beside the sessions), so they follow the user from
//! browser to browser. In Kubernetes mode the console's data dir is its volume, as for
//! the sessions. The console bounds them (20 a function, 64 KiB each); here a save
//! past the bound is refused in the same transaction that counts.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use app::console::{FunctionKey, Saved, SavedEvent, SavedEvents};
use tower_sessions_sqlx_store::sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions,
};
use tower_sessions_sqlx_store::sqlx::{self, SqlitePool};

pub struct SqliteEvents {
    pool: SqlitePool,
}

impl SqliteEvents {
    pub async fn open(data_dir: &Path) -> anyhow::Result<Self> {
        let path = data_dir.join("console.db");
        super::session::create_private(&path)?;
        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(5));
        let pool = SqlitePoolOptions::new()
            .max_connections(2)
            .connect_with(options)
            .await
            .with_context(|| format!("opening {}", path.display()))?;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS saved_events (
                namespace TEXT NOT NULL,
                kind TEXT NOT NULL,
                function TEXT NOT NULL,
                name TEXT NOT NULL,
                body TEXT NOT NULL,
                PRIMARY KEY (namespace, kind, function, name)
            )",
        )
        .execute(&pool)
        .await
        .with_context(|| format!("preparing {}", path.display()))?;
        Ok(SqliteEvents { pool })
    }
}

fn failed(e: sqlx::Error) -> String {
    format!("the saved events could not be read or written: {e}")
}

#[async_trait::async_trait]
impl SavedEvents for SqliteEvents {
    async fn list(&self, key: &FunctionKey) -> Result<Vec<SavedEvent>, String> {
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT name, body FROM saved_events
             WHERE namespace = ? AND kind = ? AND function = ? ORDER BY name",
        )
        .bind(&key.namespace)
        .bind(key.kind.as_str())
        .bind(&key.name)
        .fetch_all(&self.pool)
        .await
        .map_err(failed)?;
        Ok(rows
            .into_iter()
            .map(|(name, body)| SavedEvent { name, body })
            .collect())
    }

    async fn save(
        &self,
        key: &FunctionKey,
        event: &SavedEvent,
        max: usize,
    ) -> Result<Saved, String> {
        let mut tx = self.pool.begin().await.map_err(failed)?;
        let (count, exists): (i64, i64) = sqlx::query_as(
            "SELECT COUNT(*), COALESCE(SUM(name = ?), 0) FROM saved_events
             WHERE namespace = ? AND kind = ? AND function = ?",
        )
        .bind(&event.name)
        .bind(&key.namespace)
        .bind(key.kind.as_str())
        .bind(&key.name)
        .fetch_one(&mut *tx)
        .await
        .map_err(failed)?;
        if exists == 0 && count as usize >= max {
            return Ok(Saved::Full);
        }
        sqlx::query(
            "INSERT INTO saved_events (namespace, kind, function, name, body) VALUES (?, ?, ?, ?, ?)
             ON CONFLICT (namespace, kind, function, name) DO UPDATE SET body = excluded.body",
        )
        .bind(&key.namespace)
        .bind(key.kind.as_str())
        .bind(&key.name)
        .bind(&event.name)
        .bind(&event.body)
        .execute(&mut *tx)
        .await
        .map_err(failed)?;
        tx.commit().await.map_err(failed)?;
        Ok(if exists > 0 {
            Saved::Replaced
        } else {
            Saved::Added
        })
    }

    async fn delete(&self, key: &FunctionKey, name: &str) -> Result<bool, String> {
        let done = sqlx::query(
            "DELETE FROM saved_events
             WHERE namespace = ? AND kind = ? AND function = ? AND name = ?",
        )
        .bind(&key.namespace)
        .bind(key.kind.as_str())
        .bind(&key.name)
        .bind(name)
        .execute(&self.pool)
        .await
        .map_err(failed)?;
        Ok(done.rows_affected() > 0)
    }

    async fn forget(&self, key: &FunctionKey) -> Result<(), String> {
        sqlx::query("DELETE FROM saved_events WHERE namespace = ? AND kind = ? AND function = ?")
            .bind(&key.namespace)
            .bind(key.kind.as_str())
            .bind(&key.name)
            .execute(&self.pool)
            .await
            .map_err(failed)?;
        Ok(())
    }
}
