//! Locks: `LockStore` of the domain's `Lock`.

use async_trait::async_trait;
use tokenops_domain::account::AccountRef;
use tokenops_domain::operation::{Lock, LockStatus};
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_domain::{TenantId, Timestamp};
use uuid::Uuid;

use crate::StoreResult;
use crate::keyset::KeyValue;
use crate::rows::Encode;
use crate::{TableRows, TableWrites, conditions, rows};

#[async_trait]
pub trait LockStore: Send + TableRows<Lock> + TableWrites {
    /// `StoreError::Conflict` when the id exists.
    async fn insert(&mut self, lock: &Lock) -> StoreResult<()> {
        self.insert_row(&rows::LOCKS, lock.values()?, "lock id").await
    }
    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<Lock>> {
        self.row_by_key(tenant, &rows::LOCKS, KeyValue::Id(id), false).await
    }
    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<Lock>> {
        self.row_by_key(tenant, &rows::LOCKS, KeyValue::Id(id), true).await
    }
    /// Replaces status, completed_by and updated_at.
    async fn update(&mut self, lock: &Lock) -> StoreResult<()> {
        let set = ["status", "completed_by", "updated_at"];
        self.update_row(&rows::LOCKS, lock.values()?, &set).await.map(drop)
    }
    /// The account's locks (as owner), newest first, optionally in one status.
    async fn list_for_account(
        &mut self,
        tenant: TenantId,
        account_ref: &AccountRef,
        status: Option<LockStatus>,
        page: PageRequest,
    ) -> StoreResult<Page<Lock>> {
        let conditions = conditions::account_locks(account_ref, status);
        self.page_rows(tenant, &rows::LOCKS, conditions, "created_at DESC, id DESC", page).await
    }
    /// Up to `limit` ACTIVE locks of any organisation whose expiry is at or before `now` and
    /// that nothing completes yet, soonest first: the expiry sweep's work.
    async fn expired(&mut self, now: Timestamp, limit: u32) -> StoreResult<Vec<Lock>>;
}
