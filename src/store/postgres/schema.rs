//! The PostgreSQL schema: `postgres.sql` of each numbered folder in `migrations/`, beside
//! SQLite's `up.sql` (tests/schema_parity.rs keeps the two in step). Applied in one
//! transaction under an advisory lock, so daemons starting at once migrate once and the
//! others wait for it; `proxypool_schema` records what was applied.

use include_dir::Dir;

use crate::store::sqlite::MIGRATIONS_DIR;
use crate::store::{PgTarget, StoreError};

/// The advisory lock key every proxypool migration takes ("proxypool" in ASCII).
const LOCK_KEY: i64 = 0x7072_6f78_7970_6f6f;

pub(super) enum MigrateError {
    Pg(tokio_postgres::Error),
    Store(StoreError),
}

impl From<tokio_postgres::Error> for MigrateError {
    fn from(e: tokio_postgres::Error) -> Self {
        MigrateError::Pg(e)
    }
}

/// The migrations in order: (number, folder name, SQL).
pub fn migrations() -> Vec<(i64, &'static str, &'static str)> {
    let mut v: Vec<(i64, &str, &str)> = MIGRATIONS_DIR
        .dirs()
        .filter_map(|d: &'static Dir<'static>| {
            let name = d.path().file_name()?.to_str()?;
            let n = name.split_once('-')?.0.parse().ok()?;
            let sql = d.get_file(d.path().join("postgres.sql"))?.contents_utf8()?;
            Some((n, name, sql))
        })
        .collect();
    v.sort_by_key(|m| m.0);
    v
}

/// The schema version: the number of the last migration applied (0 before the first).
pub(super) async fn version(c: &tokio_postgres::Client) -> Result<i64, tokio_postgres::Error> {
    let row = c
        .query_one(
            "SELECT COALESCE(MAX(version), 0)::bigint FROM proxypool_schema",
            &[],
        )
        .await;
    match row {
        Ok(r) => Ok(r.get(0)),
        // Never migrated.
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) => Ok(0),
        Err(e) => Err(e),
    }
}

/// Bring the schema up to date; returns the version reached.
pub(super) async fn migrate(
    c: &mut deadpool_postgres::Object,
    target: &PgTarget,
) -> Result<i64, MigrateError> {
    let all = migrations();
    let latest = all.last().map_or(0, |m| m.0);
    let tx = c.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK_KEY])
        .await?;
    // "relation already exists, skipping" is PostgreSQL's NOTICE on every start but the
    // first: not news for the log (the migration's own line says what changed).
    tx.batch_execute("SET LOCAL client_min_messages = warning")
        .await?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS proxypool_schema (\
           version INTEGER PRIMARY KEY, name TEXT NOT NULL, \
           applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
    )
    .await?;
    let have: i64 = tx
        .query_one(
            "SELECT COALESCE(MAX(version), 0)::bigint FROM proxypool_schema",
            &[],
        )
        .await?
        .get(0);
    if have > latest {
        return Err(MigrateError::Store(StoreError::Migration {
            path: target.describe().into(),
            message: format!(
                "the schema is at version {have}, newer than this proxypool knows ({latest}); \
                 upgrade proxypool"
            ),
        }));
    }
    for (n, name, sql) in all.into_iter().filter(|m| m.0 > have) {
        tx.batch_execute(sql).await.map_err(|e| {
            MigrateError::Store(StoreError::Migration {
                path: target.describe().into(),
                message: format!(
                    "{name}: {}",
                    e.as_db_error()
                        .map(|d| d.message().to_string())
                        .unwrap_or_else(|| e.to_string())
                ),
            })
        })?;
        tx.execute(
            "INSERT INTO proxypool_schema (version, name) VALUES ($1, $2)",
            &[&(n as i32), &name],
        )
        .await?;
        tracing::info!(database = %target.describe(), migration = name, "schema migrated");
    }
    tx.commit().await?;
    Ok(latest.max(have))
}
