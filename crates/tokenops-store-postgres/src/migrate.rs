//! Forward-only migrations for PostgreSQL: applied in order, each in its own transaction,
//! recorded in `schema_migrations`. A migration once released is never edited; changes are new
//! files. Every step first takes a transaction-scoped advisory lock for the current schema, so
//! nodes starting together apply each migration exactly once and never race on the catalog.

use crate::{ADVISORY_LOCK_CLASS, codec};
use sqlx::{Executor, PgPool, Postgres, Transaction};
use tokenops_domain::Clock;
use tokenops_store::StoreResult;

/// (version, name, SQL) in application order.
pub const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "spine", include_str!("../migrations/0001_spine.sql")),
    (2, "identity", include_str!("../migrations/0002_identity.sql")),
    (3, "ledger", include_str!("../migrations/0003_ledger.sql")),
    (4, "organisation", include_str!("../migrations/0004_organisation.sql")),
    (5, "accounts", include_str!("../migrations/0005_accounts.sql")),
    (6, "operations", include_str!("../migrations/0006_operations.sql")),
    (7, "idempotency_resource", include_str!("../migrations/0007_idempotency_resource.sql")),
    (8, "policies", include_str!("../migrations/0008_policies.sql")),
    (9, "approvals", include_str!("../migrations/0009_approvals.sql")),
    (10, "webhooks", include_str!("../migrations/0010_webhooks.sql")),
    (11, "scripts", include_str!("../migrations/0011_scripts.sql")),
    (12, "approval_resources", include_str!("../migrations/0012_approval_resources.sql")),
    (13, "webhook_key_rotation", include_str!("../migrations/0013_webhook_key_rotation.sql")),
    (14, "audit_chain", include_str!("../migrations/0014_audit_chain.sql")),
    (16, "job_claim", include_str!("../migrations/0016_job_claim.sql")),
    (17, "audit_query", include_str!("../migrations/0017_audit_query.sql")),
    (20, "job_partial_indexes", include_str!("../migrations/0020_job_partial_indexes.sql")),
    (22, "signing_leases", include_str!("../migrations/0022_signing_leases.sql")),
    (23, "audit_seals", include_str!("../migrations/0023_audit_seals.sql")),
    (24, "operation_revert_reason", include_str!("../migrations/0024_operation_revert_reason.sql")),
    (25, "webhook_past_subscriptions", include_str!("../migrations/0025_webhook_past_subscriptions.sql")),
];

/// Begins a transaction holding the migration lock of the current schema until it ends.
async fn begin_locked(pool: &PgPool) -> StoreResult<Transaction<'static, Postgres>> {
    let mut tx = pool.begin().await.map_err(codec::backend)?;
    sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext(coalesce(current_schema(), '')))")
        .bind(ADVISORY_LOCK_CLASS)
        .execute(&mut *tx)
        .await
        .map_err(codec::backend)?;
    Ok(tx)
}

/// Applies the migrations not yet applied, each recorded as applied at `clock`'s time.
pub async fn apply(pool: &PgPool, clock: &dyn Clock) -> StoreResult<usize> {
    let mut tx = begin_locked(pool).await?;
    tx.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT NOT NULL PRIMARY KEY, name TEXT NOT NULL, checksum TEXT NOT NULL, applied_at BIGINT NOT NULL)",
    )
    .await
    .map_err(codec::backend)?;
    tx.commit().await.map_err(codec::backend)?;
    let mut applied = 0;
    for (version, name, sql) in MIGRATIONS {
        let mut tx = begin_locked(pool).await?;
        let checksum = tokenops_store::migration_checksum(sql);
        let done: Option<String> = sqlx::query_scalar("SELECT checksum FROM schema_migrations WHERE version = $1")
            .bind(version)
            .fetch_optional(&mut *tx)
            .await
            .map_err(codec::backend)?;
        if !tokenops_store::migration_pending(*version, name, &checksum, done.as_deref())? {
            continue;
        }
        tx.execute(sqlx::raw_sql(sqlx::AssertSqlSafe(*sql))).await.map_err(codec::backend)?;
        sqlx::query("INSERT INTO schema_migrations (version, name, checksum, applied_at) VALUES ($1, $2, $3, $4)")
            .bind(version)
            .bind(name)
            .bind(&checksum)
            .bind(clock.now().as_micros())
            .execute(&mut *tx)
            .await
            .map_err(codec::backend)?;
        tx.commit().await.map_err(codec::backend)?;
        tracing::info!(version, name, "applied PostgreSQL migration");
        applied += 1;
    }
    Ok(applied)
}
