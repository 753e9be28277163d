use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;
use std::sync::RwLock;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::Row;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use tokio::sync::broadcast;

use sless_core::calls::{CallArchive, SavedCalls};
use sless_core::error_text::BoxError;
use sless_core::model::{Kind, now};
use sless_core::store::{
    Change, Meta, Part, RawObject, Result, SpecWrite, SpecWriteHook, Store, StoreError,
};

/// The embedded store: one SQLite file in WAL mode. `synchronous=FULL` makes every
/// acknowledged write survive a crash of the process (and of the machine).
pub struct SqliteStore {
    pool: SqlitePool,
    changes: broadcast::Sender<Change>,
    spec_hooks: RwLock<Vec<SpecWriteHook>>,
}

fn backend(e: impl Into<BoxError>) -> StoreError {
    StoreError::backend("sqlite", e)
}

fn open_error(doing: &str, path: &Path, e: impl Into<BoxError>) -> StoreError {
    StoreError::backend(format!("{doing} {}", path.display()), e)
}

fn kind_from_str(s: &str) -> Option<Kind> {
    Kind::ALL.into_iter().find(|k| k.as_str() == s)
}

fn row_to_object(row: &SqliteRow) -> Result<RawObject> {
    let kind_name: String = row.try_get("kind").map_err(backend)?;
    let name: String = row.try_get("name").map_err(backend)?;
    let kind = kind_from_str(&kind_name)
        .ok_or_else(|| backend(format!("unknown kind {kind_name:?} in the store")))?;
    let json = |column: &'static str| -> Result<serde_json::Value> {
        let text: String = row.try_get(column).map_err(backend)?;
        serde_json::from_str(&text).map_err(|e| StoreError::corrupt(kind, &name, column, e))
    };
    let annotations: BTreeMap<String, String> = serde_json::from_value(json("annotations")?)
        .map_err(|e| StoreError::corrupt(kind, &name, "annotations", e))?;
    let resource_version: i64 = row.try_get("resource_version").map_err(backend)?;
    Ok(RawObject {
        kind,
        spec: json("spec")?,
        status: json("status")?,
        meta: Meta {
            namespace: row.try_get("namespace").map_err(backend)?,
            name: name.clone(),
            uid: row.try_get("uid").map_err(backend)?,
            resource_version: resource_version.to_string(),
            created_at: row.try_get("created_at").map_err(backend)?,
            annotations,
        },
    })
}

impl SqliteStore {
    /// Opens (or creates) `<data_dir>/sless.db` and applies migrations.
    pub async fn open(data_dir: &Path) -> Result<Self> {
        sless_core::data_dir::create_private_dir(data_dir)
            .map_err(|e| open_error("cannot create data dir", data_dir, e))?;
        let path = data_dir.join("sless.db");
        // Every tenant's env vars are in it: 0600 before SQLite creates it (or them).
        sless_core::data_dir::own_private_file(&path)
            .map_err(|e| open_error("cannot create", &path, e))?;
        let options = SqliteConnectOptions::from_str("sqlite:")
            .map_err(backend)?
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(options)
            .await
            .map_err(|e| open_error("cannot open", &path, e))?;
        sqlx::migrate!("./migrations")
            .run(&pool)
            .await
            .map_err(|e| open_error("migrating", &path, e))?;
        let (changes, _) = broadcast::channel(1024);
        Ok(Self {
            pool,
            changes,
            spec_hooks: RwLock::new(Vec::new()),
        })
    }

    /// The pool, for other tables that live in the same file (console sessions).
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    fn announce(&self, kind: Kind, namespace: &str, name: &str) {
        // No subscriber yet is fine: the runner lists everything when it starts.
        let _ = self.changes.send(Change {
            kind,
            namespace: namespace.to_string(),
            name: name.to_string(),
        });
    }

    /// Tells the spec hooks of a write, before it returns.
    fn spec_written(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        spec: Option<&serde_json::Value>,
    ) {
        let write = SpecWrite {
            kind,
            namespace,
            name,
            spec,
        };
        for hook in self
            .spec_hooks
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            hook(&write);
        }
    }

    fn expected_version(object: &RawObject) -> Result<i64> {
        object
            .meta
            .resource_version
            .parse()
            .map_err(|_| StoreError::Conflict {
                kind: object.kind,
                name: object.meta.name.clone(),
                expected: object.meta.resource_version.clone(),
            })
    }

    /// Runs an `UPDATE ... WHERE kind, namespace, name, resource_version ... RETURNING *`
    /// whose SET values are bound already: the updated object, or why none matched.
    async fn conditional_update<'q>(
        &self,
        query: sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>>,
        object: &'q RawObject,
        part: Part,
    ) -> Result<RawObject> {
        let row = query
            .bind(object.kind.as_str())
            .bind(&object.meta.namespace)
            .bind(&object.meta.name)
            .bind(Self::expected_version(object)?)
            .fetch_optional(&self.pool)
            .await
            .map_err(backend)?;
        match row {
            Some(row) => {
                let updated = row_to_object(&row)?;
                if part == Part::Spec {
                    self.spec_written(
                        object.kind,
                        &object.meta.namespace,
                        &object.meta.name,
                        Some(&updated.spec),
                    );
                }
                self.announce(object.kind, &object.meta.namespace, &object.meta.name);
                Ok(updated)
            }
            None => Err(self.missed_update(object).await),
        }
    }

    /// An update matched no row: tell a missing object from a stale version.
    async fn missed_update(&self, object: &RawObject) -> StoreError {
        match self
            .get(object.kind, &object.meta.namespace, &object.meta.name)
            .await
        {
            Ok(Some(_)) => StoreError::Conflict {
                kind: object.kind,
                name: object.meta.name.clone(),
                expected: object.meta.resource_version.clone(),
            },
            Ok(None) => StoreError::NotFound {
                kind: object.kind,
                namespace: object.meta.namespace.clone(),
                name: object.meta.name.clone(),
            },
            Err(e) => e,
        }
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn ensure_namespace(&self, namespace: &str) -> Result<bool> {
        let done = sqlx::query("INSERT OR IGNORE INTO namespaces (name, created_at) VALUES (?, ?)")
            .bind(namespace)
            .bind(now())
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok(done.rows_affected() == 1)
    }

    async fn list(&self, kind: Kind, namespace: Option<&str>) -> Result<Vec<RawObject>> {
        let rows = match namespace {
            Some(ns) => {
                sqlx::query("SELECT * FROM objects WHERE kind = ? AND namespace = ? ORDER BY name")
                    .bind(kind.as_str())
                    .bind(ns)
                    .fetch_all(&self.pool)
                    .await
            }
            None => {
                sqlx::query("SELECT * FROM objects WHERE kind = ? ORDER BY namespace, name")
                    .bind(kind.as_str())
                    .fetch_all(&self.pool)
                    .await
            }
        }
        .map_err(backend)?;
        rows.iter().map(row_to_object).collect()
    }

    async fn count(&self, kind: Kind, namespace: &str) -> Result<u64> {
        let count: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM objects WHERE kind = ? AND namespace = ?")
                .bind(kind.as_str())
                .bind(namespace)
                .fetch_one(&self.pool)
                .await
                .map_err(backend)?;
        Ok(count.max(0) as u64)
    }

    async fn triggers_of(&self, namespace: &str, function: &str) -> Result<Vec<RawObject>> {
        // The kind is literal, so the partial index of 0003 applies.
        sqlx::query(
            "SELECT * FROM objects WHERE kind = 'Trigger' AND namespace = ? \
             AND json_extract(spec, '$.functionRef') = ? ORDER BY name",
        )
        .bind(namespace)
        .bind(function)
        .fetch_all(&self.pool)
        .await
        .map_err(backend)?
        .iter()
        .map(row_to_object)
        .collect()
    }

    async fn get(&self, kind: Kind, namespace: &str, name: &str) -> Result<Option<RawObject>> {
        sqlx::query("SELECT * FROM objects WHERE kind = ? AND namespace = ? AND name = ?")
            .bind(kind.as_str())
            .bind(namespace)
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .map_err(backend)?
            .as_ref()
            .map(row_to_object)
            .transpose()
    }

    async fn create(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        spec: serde_json::Value,
        status: serde_json::Value,
    ) -> Result<RawObject> {
        self.ensure_namespace(namespace).await?;
        let uid = hex::encode(rand::random::<[u8; 16]>());
        // One statement, so the check of the kind sharing the name is atomic with the
        // insert: two racing creates of a function and a service leave one of them.
        let sibling = kind.shares_names_with().unwrap_or(kind);
        let row = sqlx::query(
            "INSERT INTO objects (kind, namespace, name, uid, resource_version, created_at, \
             annotations, spec, status) SELECT ?, ?, ?, ?, 1, ?, '{}', ?, ? \
             WHERE NOT EXISTS (SELECT 1 FROM objects WHERE kind = ? AND namespace = ? AND name = ?) \
             ON CONFLICT DO NOTHING RETURNING *",
        )
        .bind(kind.as_str())
        .bind(namespace)
        .bind(name)
        .bind(uid)
        .bind(now())
        .bind(spec.to_string())
        .bind(status.to_string())
        .bind(sibling.as_str())
        .bind(namespace)
        .bind(name)
        .fetch_optional(&self.pool)
        .await
        .map_err(backend)?;
        let Some(row) = row else {
            let holder = match self.get(sibling, namespace, name).await? {
                Some(_) => sibling,
                None => kind,
            };
            return Err(StoreError::AlreadyExists {
                kind: holder,
                namespace: namespace.to_string(),
                name: name.to_string(),
            });
        };
        let object = row_to_object(&row)?;
        self.spec_written(kind, namespace, name, Some(&object.spec));
        self.announce(kind, namespace, name);
        Ok(object)
    }

    async fn update(&self, object: &RawObject) -> Result<RawObject> {
        let annotations = serde_json::to_string(&object.meta.annotations).map_err(backend)?;
        let query = sqlx::query(
            "UPDATE objects SET spec = ?, annotations = ?, resource_version = resource_version + 1 \
             WHERE kind = ? AND namespace = ? AND name = ? AND resource_version = ? RETURNING *",
        )
        .bind(object.spec.to_string())
        .bind(annotations);
        self.conditional_update(query, object, Part::Spec).await
    }

    async fn update_status(&self, object: &RawObject) -> Result<RawObject> {
        let query = sqlx::query(
            "UPDATE objects SET status = ?, resource_version = resource_version + 1 \
             WHERE kind = ? AND namespace = ? AND name = ? AND resource_version = ? RETURNING *",
        )
        .bind(object.status.to_string());
        self.conditional_update(query, object, Part::Status).await
    }

    /// One IMMEDIATE transaction: the write lock is taken before the read, so no other
    /// writer can get in between and nothing is retried.
    async fn modify(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        part: Part,
        change: &mut (dyn for<'o> FnMut(&'o mut RawObject) -> Result<()> + Send),
    ) -> Result<RawObject> {
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(backend)?;
        let row =
            sqlx::query("SELECT * FROM objects WHERE kind = ? AND namespace = ? AND name = ?")
                .bind(kind.as_str())
                .bind(namespace)
                .bind(name)
                .fetch_optional(&mut *tx)
                .await
                .map_err(backend)?
                .ok_or_else(|| StoreError::NotFound {
                    kind,
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                })?;
        let mut object = row_to_object(&row)?;
        change(&mut object)?;
        let query = match part {
            Part::Spec => sqlx::query(
                "UPDATE objects SET spec = ?, annotations = ?, \
                 resource_version = resource_version + 1 \
                 WHERE kind = ? AND namespace = ? AND name = ? RETURNING *",
            )
            .bind(object.spec.to_string())
            .bind(serde_json::to_string(&object.meta.annotations).map_err(backend)?),
            Part::Status => sqlx::query(
                "UPDATE objects SET status = ?, resource_version = resource_version + 1 \
                 WHERE kind = ? AND namespace = ? AND name = ? RETURNING *",
            )
            .bind(object.status.to_string()),
        };
        let row = query
            .bind(kind.as_str())
            .bind(namespace)
            .bind(name)
            .fetch_one(&mut *tx)
            .await
            .map_err(backend)?;
        let updated = row_to_object(&row)?;
        tx.commit().await.map_err(backend)?;
        if part == Part::Spec {
            self.spec_written(kind, namespace, name, Some(&updated.spec));
        }
        self.announce(kind, namespace, name);
        Ok(updated)
    }

    async fn delete(&self, kind: Kind, namespace: &str, name: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM objects WHERE kind = ? AND namespace = ? AND name = ?")
            .bind(kind.as_str())
            .bind(namespace)
            .bind(name)
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        let deleted = done.rows_affected() == 1;
        if deleted {
            self.spec_written(kind, namespace, name, None);
            self.announce(kind, namespace, name);
        }
        Ok(deleted)
    }

    fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.changes.subscribe()
    }

    fn hook_spec_writes(&self, hook: SpecWriteHook) -> bool {
        self.spec_hooks
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(hook);
        true
    }
}

/// The proxy's call records live in the same file, in their own table.
#[async_trait]
impl CallArchive for SqliteStore {
    async fn save(&self, documents: &[SavedCalls]) -> Result<()> {
        let mut tx = self.pool.begin().await.map_err(backend)?;
        for saved in documents {
            sqlx::query(
                "INSERT INTO call_records (namespace, name, document) VALUES (?, ?, ?) \
                 ON CONFLICT (namespace, name) DO UPDATE SET document = excluded.document",
            )
            .bind(&saved.namespace)
            .bind(&saved.name)
            .bind(&saved.document)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        }
        tx.commit().await.map_err(backend)?;
        Ok(())
    }

    async fn load_all(&self) -> Result<Vec<SavedCalls>> {
        let rows = sqlx::query("SELECT namespace, name, document FROM call_records")
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?;
        rows.iter()
            .map(|row| {
                Ok(SavedCalls {
                    namespace: row.try_get("namespace").map_err(backend)?,
                    name: row.try_get("name").map_err(backend)?,
                    document: row.try_get("document").map_err(backend)?,
                })
            })
            .collect()
    }

    async fn forget(&self, namespace: &str, name: &str) -> Result<()> {
        sqlx::query("DELETE FROM call_records WHERE namespace = ? AND name = ?")
            .bind(namespace)
            .bind(name)
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sless_core::model::Function;
    use sless_core::model::{FunctionSpec, Runtime, WorkloadSpec, WorkloadStatus};
    use sless_core::store::StoreExt;

    fn spec() -> FunctionSpec {
        FunctionSpec {
            workload: WorkloadSpec {
                runtime: Runtime::Python311,
                entrypoint: "handler.handle".into(),
                memory_mb: 128,
                cpu_millis: 1000,
                disk_mb: 512,
                timeout_sec: 30,
                env: BTreeMap::new(),
                s3_key: None,
                replicas: None,
                min_instances: None,
                max_instances: None,
                target_concurrency: None,
                egress: Default::default(),
            },
        }
    }

    #[tokio::test]
    async fn create_get_update_conflict_delete() {
        let dir = tempfile::tempdir().unwrap();
        let sqlite = SqliteStore::open(dir.path()).await.unwrap();
        let mut changes = sqlite.subscribe();
        let store: &dyn Store = &sqlite;

        let created = store
            .create_typed::<Function>("ns", "f", &spec())
            .await
            .unwrap();
        assert_eq!(created.meta.resource_version, "1");
        assert_eq!(created.status, WorkloadStatus::default());
        assert_eq!(changes.recv().await.unwrap().name, "f");
        assert!(matches!(
            store.create_typed::<Function>("ns", "f", &spec()).await,
            Err(StoreError::AlreadyExists { .. })
        ));

        let mut first = created.clone();
        first.spec.workload.memory_mb = 256;
        let updated = store.update_typed(&first).await.unwrap();
        assert_eq!(updated.meta.resource_version, "2");

        // The same stale version again: someone else already wrote.
        let mut second = created.clone();
        second.spec.workload.memory_mb = 512;
        assert!(matches!(
            store.update_typed(&second).await,
            Err(StoreError::Conflict { .. })
        ));
        let current = store
            .get_typed::<Function>("ns", "f")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(current.spec.workload.memory_mb, 256);

        let mut status = current.clone();
        status.status.message = Some("hello".into());
        let with_status = store.update_status_typed(&status).await.unwrap();
        assert_eq!(with_status.status.message.as_deref(), Some("hello"));
        assert_eq!(with_status.spec.workload.memory_mb, 256);

        assert!(store.delete(Kind::Function, "ns", "f").await.unwrap());
        assert!(!store.delete(Kind::Function, "ns", "f").await.unwrap());
        assert!(matches!(
            store.update_typed(&with_status).await,
            Err(StoreError::NotFound { .. })
        ));
    }

    #[tokio::test]
    async fn ensure_namespace_reports_creation_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path()).await.unwrap();
        assert!(store.ensure_namespace("a").await.unwrap());
        assert!(!store.ensure_namespace("a").await.unwrap());
    }

    #[tokio::test]
    async fn survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let sqlite = SqliteStore::open(dir.path()).await.unwrap();
            let store: &dyn Store = &sqlite;
            store
                .create_typed::<Function>("ns", "kept", &spec())
                .await
                .unwrap();
        }
        let sqlite = SqliteStore::open(dir.path()).await.unwrap();
        let store: &dyn Store = &sqlite;
        let all = store.list_typed::<Function>(None).await.unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].meta.name, "kept");
    }

    #[tokio::test]
    async fn call_records_are_replaced_kept_and_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = SqliteStore::open(dir.path()).await.unwrap();
            let saved = |name: &str, document: &[u8]| SavedCalls {
                namespace: "ns".into(),
                name: name.into(),
                document: document.to_vec(),
            };
            store.save(&[saved("f", b"first")]).await.unwrap();
            store
                .save(&[saved("f", b"second"), saved("g", b"other")])
                .await
                .unwrap();
            store.forget("ns", "g").await.unwrap();
            store.forget("ns", "never-saved").await.unwrap();
        }
        let store = SqliteStore::open(dir.path()).await.unwrap();
        assert_eq!(
            store.load_all().await.unwrap(),
            [SavedCalls {
                namespace: "ns".into(),
                name: "f".into(),
                document: b"second".to_vec(),
            }]
        );
    }
}
