//! Forward-only migrations for SQLite: applied in order, each in its own transaction, recorded
//! in `schema_migrations`. A migration once released is never edited; changes are new files.

use crate::codec;
use sqlx::{Executor, SqlitePool};
use tokenops_domain::Timestamp;
use tokenops_store::StoreResult;

/// (version, name, SQL) in application order.
pub const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "spine", include_str!("../migrations/0001_spine.sql")),
    (2, "identity", include_str!("../migrations/0002_identity.sql")),
    (3, "ledger", include_str!("../migrations/0003_ledger.sql")),
    (4, "organisation", include_str!("../migrations/0004_organisation.sql")),
    (5, "accounts", include_str!("../migrations/0005_accounts.sql")),
    (6, "operations", include_str!("../migrations/0006_operations.sql")),
];

pub async fn apply(pool: &SqlitePool) -> StoreResult<usize> {
    let mut conn = pool.acquire().await.map_err(codec::backend)?;
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, checksum TEXT NOT NULL, applied_at INTEGER NOT NULL) STRICT",
    )
    .await
    .map_err(codec::backend)?;
    drop(conn);
    let mut applied = 0;
    for (version, name, sql) in MIGRATIONS {
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.map_err(codec::backend)?;
        let checksum = tokenops_store::migration_checksum(sql);
        let done: Option<String> = sqlx::query_scalar("SELECT checksum FROM schema_migrations WHERE version = $1")
            .bind(version)
            .fetch_optional(&mut *tx)
            .await
            .map_err(codec::backend)?;
        match done {
            Some(recorded) if recorded == checksum => continue,
            Some(_) => {
                return Err(tokenops_store::StoreError::Corrupt(format!(
                    "migration {version} ({name}) differs from the one applied to this database; migrations are never edited once applied"
                )));
            }
            None => {}
        }
        tx.execute(sqlx::raw_sql(sqlx::AssertSqlSafe(*sql))).await.map_err(codec::backend)?;
        sqlx::query("INSERT INTO schema_migrations (version, name, checksum, applied_at) VALUES ($1, $2, $3, $4)")
            .bind(version)
            .bind(name)
            .bind(&checksum)
            .bind(Timestamp::system_now().as_micros())
            .execute(&mut *tx)
            .await
            .map_err(codec::backend)?;
        tx.commit().await.map_err(codec::backend)?;
        tracing::info!(version, name, "applied SQLite migration");
        applied += 1;
    }
    Ok(applied)
}
