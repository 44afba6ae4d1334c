//! Token operations: `OperationStore` (of the domain's `Operation`), `InFlight` and
//! `SubmissionReads`.

use async_trait::async_trait;
use tokenops_domain::account::{Account, AccountRef};
use tokenops_domain::asset::AssetId;
use tokenops_domain::operation::{Operation, OperationFilter, OperationState};
use tokenops_domain::paging::{KeysetRequest, Page, PageRequest};
use tokenops_domain::{TenantId, Timestamp};
use uuid::Uuid;

use crate::StoreResult;
use crate::keyset::KeyValue;
use crate::{TableRows, rows};

#[async_trait]
pub trait OperationStore: Send + TableRows<Operation> {
    /// `StoreError::Conflict` when the id exists.
    async fn insert(&mut self, operation: &Operation) -> StoreResult<()>;
    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<Operation>> {
        self.row_by_key(tenant, &rows::OPERATIONS, KeyValue::Id(id), false).await
    }
    /// As `get`, holding the row until the transaction ends (PostgreSQL `FOR UPDATE`).
    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<Operation>> {
        self.row_by_key(tenant, &rows::OPERATIONS, KeyValue::Id(id), true).await
    }
    /// `get` for several operations (of any organisations), in the order asked; a backend may
    /// read them in one statement. `for_update` holds the rows as `get_for_update` does.
    async fn get_many(&mut self, ids: &[(TenantId, Uuid)], for_update: bool) -> StoreResult<Vec<Option<Operation>>> {
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
    /// What accepting a submission on `asset` reads, in one statement: whether the asset has an
    /// ACTIVE contract, and those of `accounts` that exist (in no particular order). On
    /// PostgreSQL every statement is a round trip, and these were three on every submission.
    async fn submission_reads(
        &mut self,
        tenant: TenantId,
        asset: AssetId,
        accounts: &[AccountRef],
    ) -> StoreResult<SubmissionReads>;
    /// Replaces the mutable fields (state, tx_hash, block_number, failure_code, reason_code,
    /// revert_reason, signed_transaction, updated_at) of the operation with `operation.id`.
    async fn update(&mut self, operation: &Operation) -> StoreResult<()>;
    /// Newest first (created_at, then id, descending).
    async fn list(
        &mut self,
        tenant: TenantId,
        filter: &OperationFilter,
        page: PageRequest,
    ) -> StoreResult<Page<Operation>>;
    /// Operations of every organisation whose signed transaction is stored but not settled
    /// (PENDING_SETTLEMENT or SETTLING with `signed_transaction`), oldest first: after a
    /// restart they are sent again before anything new is signed, so that no stored signature's
    /// nonce is given to another transaction.
    async fn unsettled_signed(&mut self, limit: u32) -> StoreResult<Vec<Operation>>;
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
    ) -> StoreResult<Vec<Operation>>;
}

/// An operation in flight, as the sweep that resumes stranded operations sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InFlight {
    pub tenant_id: TenantId,
    pub id: Uuid,
    pub state: OperationState,
    pub updated_at: Timestamp,
}

/// What accepting a submission reads (`OperationStore::submission_reads`).
#[derive(Debug, Clone, PartialEq)]
pub struct SubmissionReads {
    /// Whether the asset has a contract in status ACTIVE.
    pub asset_active: bool,
    /// The accounts asked for that exist.
    pub accounts: Vec<Account>,
}
