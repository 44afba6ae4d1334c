//! Positions, what the service expects each account's ledger balances to be: `Position` and
//! `PositionStore`. Amounts are integer minor units (`i64`).

use async_trait::async_trait;
use tokenops_domain::account::AccountRef;
use tokenops_domain::{TenantId, Timestamp};

use crate::StoreResult;

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
