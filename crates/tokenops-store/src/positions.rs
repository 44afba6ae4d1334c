//! Positions, what the service expects each account's ledger balances to be: `Position` and
//! `PositionStore`. Amounts are integer minor units (`i64`).
//!
//! The ledger's balances are 256-bit: an account can hold more than a position can say. A sum
//! past the `i64` range stays at its bound instead of failing the confirmation of an operation
//! the ledger has already included; reconciliation then reports the account's difference as a
//! break, which is the truth: the service's own record cannot follow that balance.

use async_trait::async_trait;
use tokenops_domain::account::AccountRef;
use tokenops_domain::{TenantId, Timestamp};

use crate::StoreResult;

/// SQL for `current + delta` kept within the `BIGINT` range, both dialects: each CASE branch is
/// evaluated only when chosen, so no out-of-range intermediate is computed.
pub fn saturating_sum_sql(current: &str, delta: &str) -> String {
    format!(
        "CASE WHEN {delta} > 0 THEN (CASE WHEN {current} > 9223372036854775807 - {delta} THEN 9223372036854775807 \
         ELSE {current} + {delta} END) \
         ELSE (CASE WHEN {current} < -9223372036854775807 - {delta} THEN -9223372036854775807 \
         ELSE {current} + {delta} END) END"
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Position {
    /// Expected total balance (available + held), minor units.
    pub total: i64,
    /// Expected held balance (ACTIVE locks), minor units.
    pub held: i64,
}

#[async_trait]
pub trait PositionStore: Send {
    /// Adds the deltas to the account's position (creating it at zero first), in the caller's
    /// transaction: a confirmed operation moves the positions it affects as it commits.
    async fn apply(
        &mut self,
        tenant: TenantId,
        account_ref: &AccountRef,
        total_delta: i64,
        held_delta: i64,
        now: Timestamp,
    ) -> StoreResult<()>;
    /// [`PositionStore::apply`] for each change, in the order given (callers order them, so
    /// two transactions take the rows in one order and never deadlock); a backend where a
    /// statement is a round trip applies them in one.
    async fn apply_all(&mut self, changes: &[PositionChange], now: Timestamp) -> StoreResult<()> {
        for change in changes {
            self.apply(change.tenant, &change.account_ref, change.total_delta, change.held_delta, now).await?;
        }
        Ok(())
    }
    async fn get(&mut self, tenant: TenantId, account_ref: &AccountRef) -> StoreResult<Position>;
}

/// One account's position change, for [`PositionStore::apply_all`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PositionChange {
    pub tenant: TenantId,
    pub account_ref: AccountRef,
    pub total_delta: i64,
    pub held_delta: i64,
}
