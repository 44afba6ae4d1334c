//! Accounts (one wallet each, once provisioned): `AccountStore` of the domain's `Account`.

use async_trait::async_trait;
use tokenops_domain::TenantId;
use tokenops_domain::account::{Account, AccountFilter, AccountRef, AccountStatus};
use tokenops_domain::customer::CustomerRef;
use tokenops_domain::paging::{Page, PageRequest};
use uuid::Uuid;

use crate::StoreResult;
use crate::keyset::KeyValue;
use crate::rows::{self, Encode};
use crate::sorting::CREATED_ORDER;
use crate::{TableRows, TableWrites, conditions};

#[async_trait]
pub trait AccountStore: Send + TableRows<Account> + TableWrites {
    /// `StoreError::Conflict` when the organisation has the reference.
    async fn insert(&mut self, account: &Account) -> StoreResult<()> {
        self.insert_row(&rows::ACCOUNTS, account.values()?, "account id or reference").await
    }
    async fn get(&mut self, tenant: TenantId, account_ref: &AccountRef) -> StoreResult<Option<Account>> {
        self.row_by_key(tenant, &rows::ACCOUNTS, KeyValue::Text(account_ref.as_str().to_owned()), false).await
    }
    /// As `get`, holding the row until the transaction ends (PostgreSQL `FOR UPDATE`).
    async fn get_for_update(&mut self, tenant: TenantId, account_ref: &AccountRef) -> StoreResult<Option<Account>> {
        self.row_by_key(tenant, &rows::ACCOUNTS, KeyValue::Text(account_ref.as_str().to_owned()), true).await
    }
    /// Replaces every mutable field (customer_ref, asset_id, status, wallet_address,
    /// failure_reason, generation, provisioned_at, updated_at) of the account with `account.id`.
    async fn update(&mut self, account: &Account) -> StoreResult<()> {
        let set = [
            "customer_ref",
            "asset_id",
            "status",
            "wallet_address",
            "failure_reason",
            "generation",
            "provisioned_at",
            "updated_at",
        ];
        self.update_row(&rows::ACCOUNTS_BY_ID, account.values()?, &set).await.map(drop)
    }
    /// Oldest first (then id).
    async fn list(
        &mut self,
        tenant: TenantId,
        filter: &AccountFilter,
        page: PageRequest,
    ) -> StoreResult<Page<Account>> {
        self.page_rows(tenant, &rows::ACCOUNTS, conditions::accounts(filter), CREATED_ORDER, page).await
    }
    /// Provisioned accounts (ACTIVE or INACTIVE) of every organisation, by id, after `after`:
    /// the reconciliation walks them in batches.
    async fn provisioned_after(&mut self, after: Option<Uuid>, limit: u32) -> StoreResult<Vec<Account>>;
    /// The customer's accounts in `status`, locked for update, oldest first: the customer
    /// cascades change them in the customer's transaction.
    async fn for_customer_in_status(
        &mut self,
        tenant: TenantId,
        customer_ref: &CustomerRef,
        status: AccountStatus,
    ) -> StoreResult<Vec<Account>> {
        let filter = AccountFilter { customer_ref: Some(customer_ref.clone()), status: Some(status), asset_id: None };
        self.rows_where(tenant, &rows::ACCOUNTS, conditions::accounts(&filter), CREATED_ORDER, true).await
    }
}
