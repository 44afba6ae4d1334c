//! Forward-only migrations for SQLite: applied in order, each in its own transaction, recorded
//! in `schema_migrations`. A migration once released is never edited; changes are new files.

use crate::codec;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior};
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
    (17, "audit_query", include_str!("../migrations/0017_audit_query.sql")),
    (22, "signing_leases", include_str!("../migrations/0022_signing_leases.sql")),
    (23, "operation_revert_reason", include_str!("../migrations/0023_operation_revert_reason.sql")),
    (24, "webhook_past_subscriptions", include_str!("../migrations/0024_webhook_past_subscriptions.sql")),
];

/// Applies the migrations not yet applied, on the writer connection (outside any write group),
/// each recorded as applied at `clock`'s time.
pub fn apply(conn: &mut Connection, clock: &dyn Clock) -> StoreResult<usize> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, checksum TEXT NOT NULL, applied_at INTEGER NOT NULL) STRICT",
    )
    .map_err(codec::backend)?;
    let mut applied = 0;
    for (version, name, sql) in MIGRATIONS {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(codec::backend)?;
        let checksum = tokenops_store::migration_checksum(sql);
        let done: Option<String> = tx
            .query_row("SELECT checksum FROM schema_migrations WHERE version = ?1", [version], |row| row.get(0))
            .optional()
            .map_err(codec::backend)?;
        if !tokenops_store::migration_pending(*version, name, &checksum, done.as_deref())? {
            continue;
        }
        tx.execute_batch(sql).map_err(codec::backend)?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name, checksum, applied_at) VALUES (?1, ?2, ?3, ?4)",
            rusqlite::params![version, name, &checksum, clock.now().as_micros()],
        )
        .map_err(codec::backend)?;
        tx.commit().map_err(codec::backend)?;
        tracing::info!(version, name, "applied SQLite migration");
        applied += 1;
    }
    Ok(applied)
}
