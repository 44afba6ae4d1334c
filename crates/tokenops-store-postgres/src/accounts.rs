//! Accounts on PostgreSQL: `AccountStore`, mapping rows to and from the domain's `Account` (by
//! parsing: a value that does not parse is a corrupt row).
//!
//! Inserts use `ON CONFLICT DO NOTHING` and report a duplicate as `StoreError::Conflict` from the
//! row count (see `codec::conflict`). No update can violate a unique index (the reference of an
//! account never changes).

use crate::codec::asset_text;
use crate::query::PgQuery;
use crate::{PostgresTx, codec, query};
use async_trait::async_trait;
use tokenops_domain::account::{Account, AccountStatus};
use tokenops_domain::customer::CustomerRef;
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::rows::{self, ACCOUNT_COLUMNS};
use tokenops_store::{AccountStore, StoreResult};
use uuid::Uuid;

/// Binds an account's values in `ACCOUNT_COLUMNS` order: the insert binds them all, the update the
/// columns it may change, each by its place in that list.
fn bind_account<'q>(query: PgQuery<'q>, account: &'q Account) -> PgQuery<'q> {
    query
        .bind(account.id)
        .bind(account.tenant_id.as_uuid())
        .bind(account.account_ref.as_str())
        .bind(account.customer_ref.as_str())
        .bind(asset_text(account.asset_id))
        .bind(account.status.as_str())
        .bind(account.wallet_address.map(|a| a.to_string()))
        .bind(account.failure_reason.as_deref())
        .bind(i64::from(account.generation))
        .bind(account.provisioned_at.map(Timestamp::as_micros))
        .bind(account.created_at.as_micros())
        .bind(account.updated_at.as_micros())
}

#[async_trait]
impl AccountStore for PostgresTx {
    async fn insert(&mut self, account: &Account) -> StoreResult<()> {
        self.insert_new(bind_account(query::insert(&rows::ACCOUNTS), account), "account id or reference").await
    }

    async fn update(&mut self, account: &Account) -> StoreResult<()> {
        let query = sqlx::query(
            "UPDATE accounts SET customer_ref = $4, asset_id = $5, status = $6, wallet_address = $7, failure_reason = $8,
                                 generation = $9, provisioned_at = $10, updated_at = $12
             WHERE tenant_id = $2 AND id = $1",
        );
        self.execute(bind_account(query, account)).await?;
        Ok(())
    }

    async fn provisioned_after(&mut self, after: Option<Uuid>, limit: u32) -> StoreResult<Vec<Account>> {
        let sql = format!(
            "SELECT {ACCOUNT_COLUMNS} FROM accounts
             WHERE status IN ('ACTIVE', 'INACTIVE') AND ($1 IS NULL OR id > $1)
             ORDER BY id LIMIT $2"
        );
        self.fetch_all(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(after).bind(i64::from(limit)), codec::decoded).await
    }

    async fn for_customer_in_status(
        &mut self,
        tenant: TenantId,
        customer_ref: &CustomerRef,
        status: AccountStatus,
    ) -> StoreResult<Vec<Account>> {
        let sql = format!(
            "SELECT {ACCOUNT_COLUMNS} FROM accounts WHERE tenant_id = $1 AND customer_ref = $2 AND status = $3
             ORDER BY created_at ASC, id ASC FOR UPDATE"
        );
        self.fetch_all(
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(tenant.as_uuid())
                .bind(customer_ref.as_str())
                .bind(status.as_str()),
            codec::decoded,
        )
        .await
    }
}
