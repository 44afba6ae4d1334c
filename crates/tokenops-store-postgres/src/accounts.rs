//! Accounts on PostgreSQL: `AccountStore`'s reads of its own; the insert and update are the
//! store's, written once over `TableWrites`. No update can violate a unique index (the reference
//! of an account never changes).

use crate::{PostgresTx, codec};
use async_trait::async_trait;
use tokenops_domain::account::Account;
use tokenops_store::rows::ACCOUNT_COLUMNS;
use tokenops_store::{AccountStore, StoreResult};
use uuid::Uuid;

#[async_trait]
impl AccountStore for PostgresTx {
    async fn provisioned_after(&mut self, after: Option<Uuid>, limit: u32) -> StoreResult<Vec<Account>> {
        let sql = format!(
            "SELECT {ACCOUNT_COLUMNS} FROM accounts
             WHERE status IN ('ACTIVE', 'INACTIVE') AND ($1 IS NULL OR id > $1)
             ORDER BY id LIMIT $2"
        );
        self.fetch_all(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(after).bind(i64::from(limit)), codec::decoded).await
    }
}
