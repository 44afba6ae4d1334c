//! Accounts on SQLite: `AccountStore`, mapping rows to and from the domain's `Account` (by parsing:
//! a value that does not parse is a corrupt row).

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::params;
use tokenops_domain::account::Account;
use tokenops_store::rows::ACCOUNT_COLUMNS;
use tokenops_store::{AccountStore, StoreResult};
use uuid::Uuid;

#[async_trait]
impl AccountStore for SqliteTx {
    async fn provisioned_after(&mut self, after: Option<Uuid>, limit: u32) -> StoreResult<Vec<Account>> {
        let sql = format!(
            "SELECT {ACCOUNT_COLUMNS} FROM accounts
             WHERE status IN ('ACTIVE', 'INACTIVE') AND (?1 IS NULL OR id > ?1)
             ORDER BY id LIMIT ?2"
        );
        self.fetch_all(&sql, params![after.map(codec::id_text), i64::from(limit)], codec::decoded)
    }
}
