//! Locks: `LockRecord` and `LockStore`. Amounts are integer minor units (`i64`).

use async_trait::async_trait;
use tokenops_domain::account::AccountRef;
use tokenops_domain::operation::LockStatus;
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_domain::{TenantId, Timestamp};
use uuid::Uuid;

use crate::StoreResult;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockRecord {
    /// The LOCK operation's `transactionId`.
    pub id: Uuid,
    pub tenant_id: TenantId,
    pub account_ref: AccountRef,
    pub counterparty_ref: Option<AccountRef>,
    pub asset_id: String,
    pub amount: i64,
    pub expires_at: Option<Timestamp>,
    pub status: LockStatus,
    /// The RELEASE or CANCEL (or expiry) completing it, while that is in flight or once done.
    pub completed_by: Option<Uuid>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

#[async_trait]
pub trait LockStore: Send {
    /// `StoreError::Conflict` when the id exists.
    async fn insert(&mut self, lock: &LockRecord) -> StoreResult<()>;
    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<LockRecord>>;
    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<LockRecord>>;
    /// Replaces status, completed_by and updated_at.
    async fn update(&mut self, lock: &LockRecord) -> StoreResult<()>;
    /// The account's locks (as owner), newest first, optionally in one status.
    async fn list_for_account(
        &mut self,
        tenant: TenantId,
        account_ref: &AccountRef,
        status: Option<LockStatus>,
        page: PageRequest,
    ) -> StoreResult<Page<LockRecord>>;
    /// Up to `limit` ACTIVE locks of any organisation whose expiry is at or before `now` and
    /// that nothing completes yet, soonest first: the expiry sweep's work.
    async fn expired(&mut self, now: Timestamp, limit: u32) -> StoreResult<Vec<LockRecord>>;
}
