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
    async fn get(&mut self, tenant: TenantId, account_ref: &AccountRef) -> StoreResult<Position>;
}
