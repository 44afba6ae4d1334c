//! Accounts (one wallet each, once provisioned): `AccountRecord` and `AccountStore`.
//!
//! Assets are stored as their upper-case ISO 4217 code; addresses as `0x` and 40 lower-case hex
//! digits.

use async_trait::async_trait;
use tokenops_domain::account::{AccountRef, AccountStatus};
use tokenops_domain::customer::CustomerRef;
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_domain::{TenantId, Timestamp};
use uuid::Uuid;

use crate::StoreResult;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountRecord {
    pub id: Uuid,
    pub tenant_id: TenantId,
    /// Unique per organisation.
    pub account_ref: AccountRef,
    pub customer_ref: CustomerRef,
    /// Upper-case ISO 4217 code.
    pub asset_id: String,
    pub status: AccountStatus,
    /// The custody wallet. Recorded as soon as custody creates it (while still PENDING, so a
    /// retried provisioning reuses it); shown only once the account is provisioned.
    pub wallet_address: Option<String>,
    /// Why provisioning failed (FAILED only).
    pub failure_reason: Option<String>,
    /// Bumped on every registration of the reference (a FAILED one registered again), so that
    /// a provisioning job of an earlier registration recognises it is stale.
    pub generation: u32,
    pub provisioned_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

#[derive(Debug, Clone, Default)]
pub struct AccountFilter {
    pub customer_ref: Option<CustomerRef>,
    pub status: Option<AccountStatus>,
    /// Matched case-insensitively.
    pub asset_id: Option<String>,
}

#[async_trait]
pub trait AccountStore: Send {
    /// `StoreError::Conflict` when the organisation has the reference.
    async fn insert(&mut self, account: &AccountRecord) -> StoreResult<()>;
    async fn get(&mut self, tenant: TenantId, account_ref: &AccountRef) -> StoreResult<Option<AccountRecord>>;
    /// As `get`, holding the row until the transaction ends (PostgreSQL `FOR UPDATE`).
    async fn get_for_update(
        &mut self,
        tenant: TenantId,
        account_ref: &AccountRef,
    ) -> StoreResult<Option<AccountRecord>>;
    /// Replaces every mutable field (customer_ref, asset_id, status, wallet_address,
    /// failure_reason, generation, provisioned_at, updated_at) of the account with `account.id`.
    async fn update(&mut self, account: &AccountRecord) -> StoreResult<()>;
    /// Oldest first (then id).
    async fn list(
        &mut self,
        tenant: TenantId,
        filter: &AccountFilter,
        page: PageRequest,
    ) -> StoreResult<Page<AccountRecord>>;
    /// Provisioned accounts (ACTIVE or INACTIVE) of every organisation, by id, after `after`:
    /// the reconciliation walks them in batches.
    async fn provisioned_after(&mut self, after: Option<Uuid>, limit: u32) -> StoreResult<Vec<AccountRecord>>;
    /// The customer's accounts in `status`, locked for update, oldest first: the customer
    /// cascades change them in the customer's transaction.
    async fn for_customer_in_status(
        &mut self,
        tenant: TenantId,
        customer_ref: &CustomerRef,
        status: AccountStatus,
    ) -> StoreResult<Vec<AccountRecord>>;
}
