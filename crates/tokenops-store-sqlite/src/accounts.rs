//! Accounts on SQLite: `AccountStore`, mapping rows to and from the domain's `Account` (by parsing:
//! a value that does not parse is a corrupt row).

use crate::codec::asset_text;
use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::{Params, params};
use tokenops_domain::account::{Account, AccountStatus};
use tokenops_domain::customer::CustomerRef;
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::rows::{self, ACCOUNT_COLUMNS};
use tokenops_store::{AccountStore, StoreResult};
use uuid::Uuid;

/// An account's values in `ACCOUNT_COLUMNS` order: the insert binds them all, the update the
/// columns it may change, each by its place in that list.
fn account_values(account: &Account) -> impl Params + '_ {
    (
        codec::id_text(account.id),
        codec::id_text(account.tenant_id.as_uuid()),
        account.account_ref.as_str(),
        account.customer_ref.as_str(),
        asset_text(account.asset_id),
        account.status.as_str(),
        account.wallet_address.map(|a| a.to_string()),
        account.failure_reason.as_deref(),
        i64::from(account.generation),
        account.provisioned_at.map(Timestamp::as_micros),
        account.created_at.as_micros(),
        account.updated_at.as_micros(),
    )
}

#[async_trait]
impl AccountStore for SqliteTx {
    async fn insert(&mut self, account: &Account) -> StoreResult<()> {
        self.insert_row(&rows::ACCOUNTS, account_values(account))
    }

    async fn update(&mut self, account: &Account) -> StoreResult<()> {
        self.execute(
            "UPDATE accounts SET customer_ref = ?4, asset_id = ?5, status = ?6, wallet_address = ?7, failure_reason = ?8,
                                 generation = ?9, provisioned_at = ?10, updated_at = ?12
             WHERE tenant_id = ?2 AND id = ?1",
            account_values(account),
        )?;
        Ok(())
    }

    async fn provisioned_after(&mut self, after: Option<Uuid>, limit: u32) -> StoreResult<Vec<Account>> {
        let sql = format!(
            "SELECT {ACCOUNT_COLUMNS} FROM accounts
             WHERE status IN ('ACTIVE', 'INACTIVE') AND (?1 IS NULL OR id > ?1)
             ORDER BY id LIMIT ?2"
        );
        self.fetch_all(&sql, params![after.map(codec::id_text), i64::from(limit)], codec::decoded)
    }

    async fn for_customer_in_status(
        &mut self,
        tenant: TenantId,
        customer_ref: &CustomerRef,
        status: AccountStatus,
    ) -> StoreResult<Vec<Account>> {
        // Write transactions run one at a time on the single writer: the rows are already held.
        self.require_write("reading a customer's accounts for update")?;
        let sql = format!(
            "SELECT {ACCOUNT_COLUMNS} FROM accounts WHERE tenant_id = ?1 AND customer_ref = ?2 AND status = ?3
             ORDER BY created_at ASC, id ASC"
        );
        self.fetch_all(
            &sql,
            params![codec::id_text(tenant.as_uuid()), customer_ref.as_str(), status.as_str()],
            codec::decoded,
        )
    }
}
