//! Token operations: `OperationRecord`, `OperationFilter`, `InFlight` and `OperationStore`.
//!
//! Amounts are integer minor units (`i64`: SQLite's INTEGER and PostgreSQL's BIGINT).

use async_trait::async_trait;
use tokenops_domain::account::AccountRef;
use tokenops_domain::customer::CustomerRef;
use tokenops_domain::operation::{FailureCode, OperationState, TxType};
use tokenops_domain::paging::{KeysetRequest, Page, PageRequest};
use tokenops_domain::{TenantId, Timestamp};
use uuid::Uuid;

use crate::StoreResult;

#[derive(Debug, Clone, PartialEq)]
pub struct OperationRecord {
    /// The `transactionId`.
    pub id: Uuid,
    pub tenant_id: TenantId,
    pub tx_type: TxType,
    /// Upper-case ISO 4217 code.
    pub asset_id: String,
    /// The originating account (for RELEASE and CANCEL: the lock's owner).
    pub account_ref: AccountRef,
    pub customer_ref: CustomerRef,
    /// TRANSFER and LOCK (and a RELEASE, from its lock): the other account.
    pub counterparty_ref: Option<AccountRef>,
    /// Minor units, positive.
    pub amount: i64,
    /// The submitted `params` object (scalars only).
    pub params: serde_json::Value,
    /// RELEASE and CANCEL: the lock they complete; LOCK: its own id.
    pub lock_id: Option<Uuid>,
    pub state: OperationState,
    pub tx_hash: Option<String>,
    pub block_number: Option<u64>,
    pub failure_code: Option<FailureCode>,
    pub reason_code: Option<String>,
    /// The signed ledger transaction (hex), kept between signing and sending so that after an
    /// unknown outcome the same bytes are sent again, never a new signature.
    pub signed_transaction: Option<String>,
    /// The caller's `sub`.
    pub submitted_by: String,
    pub idempotency_key: Option<String>,
    pub correlation_id: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

#[derive(Debug, Clone, Default)]
pub struct OperationFilter {
    pub state: Option<OperationState>,
    /// Operations where the account is the originating account or the counterparty.
    pub account_ref: Option<AccountRef>,
    pub tx_type: Option<TxType>,
}

#[async_trait]
pub trait OperationStore: Send {
    /// `StoreError::Conflict` when the id exists.
    async fn insert(&mut self, operation: &OperationRecord) -> StoreResult<()>;
    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<OperationRecord>>;
    /// As `get`, holding the row until the transaction ends (PostgreSQL `FOR UPDATE`).
    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<OperationRecord>>;
    /// `get` for several operations (of any organisations), in the order asked; a backend may
    /// read them in one statement. `for_update` holds the rows as `get_for_update` does.
    async fn get_many(
        &mut self,
        ids: &[(TenantId, Uuid)],
        for_update: bool,
    ) -> StoreResult<Vec<Option<OperationRecord>>> {
        let mut found = Vec::with_capacity(ids.len());
        for (tenant, id) in ids {
            found.push(if for_update {
                self.get_for_update(*tenant, *id).await?
            } else {
                self.get(*tenant, *id).await?
            });
        }
        Ok(found)
    }
    /// Replaces the mutable fields (state, tx_hash, block_number, failure_code, reason_code,
    /// signed_transaction, updated_at) of the operation with `operation.id`.
    async fn update(&mut self, operation: &OperationRecord) -> StoreResult<()>;
    /// Newest first (created_at, then id, descending).
    async fn list(
        &mut self,
        tenant: TenantId,
        filter: &OperationFilter,
        page: PageRequest,
    ) -> StoreResult<Page<OperationRecord>>;
    /// Operations of every organisation whose signed transaction is stored but not settled
    /// (PENDING_SETTLEMENT or SETTLING with `signed_transaction`), oldest first: after a
    /// restart they are sent again before anything new is signed, so that no stored signature's
    /// nonce is given to another transaction.
    async fn unsettled_signed(&mut self, limit: u32) -> StoreResult<Vec<OperationRecord>>;
    /// Operations of every organisation that a pipeline job carries (SUBMITTED,
    /// PENDING_SETTLEMENT or SETTLING) and that have not changed since before `before`, least
    /// recently changed first, up to `limit`: the candidates of the sweep that resumes an
    /// operation no job carries any more (only what it needs of each, as there may be many).
    async fn in_flight_unchanged_since(&mut self, before: Timestamp, limit: u32) -> StoreResult<Vec<InFlight>>;
    /// Newest first, up to `window.limit` after the window's position (keyset paging:
    /// created_at and id of the last item seen).
    async fn list_after(
        &mut self,
        tenant: TenantId,
        filter: &OperationFilter,
        window: KeysetRequest,
    ) -> StoreResult<Vec<OperationRecord>>;
}

/// An operation in flight, as the sweep that resumes stranded operations sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InFlight {
    pub tenant_id: TenantId,
    pub id: Uuid,
    pub state: OperationState,
    pub updated_at: Timestamp,
}
