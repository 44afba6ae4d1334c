//! `positions.reconcile`: the sweep that compares the ledger's balances with the service's own
//! positions and records a `BALANCE_MISMATCH` break for each difference.

use async_trait::async_trait;
use std::sync::Arc;
use tokenops_domain::operation::{Break, BreakFilter, BreakReason, OperationFilter, OperationState};
use tokenops_domain::{TenantId, new_id};
use tokenops_ledger::U256;
use tokenops_store::Job;

use crate::jobs::{Finished, JobContext, JobError, JobHandler, kinds};
use crate::settlement::{Pipeline, parse_address};

/// Compares every provisioned account's ledger balances (total and held) with its position,
/// the sum of its confirmed operations, and records a `BALANCE_MISMATCH` break for each
/// difference (once per distinct difference). An account with an operation between signing and
/// its receipt, on either side (one it sends, or one paying it: a transfer or a lock's release),
/// is skipped this round: the ledger may be ahead of the positions.
pub struct Reconcile(pub Arc<Pipeline>);

impl Reconcile {
    /// Whether an operation touching `account` is between the ledger and its confirmation.
    async fn in_flight(
        &self,
        tenant: TenantId,
        account: &tokenops_domain::account::AccountRef,
    ) -> Result<bool, JobError> {
        let mut tx = self.0.store.read().await?;
        for state in [OperationState::PendingSettlement, OperationState::Settling] {
            let sends =
                OperationFilter { state: Some(state), account_ref: Some(account.clone()), ..Default::default() };
            let receives =
                OperationFilter { state: Some(state), counterparty_ref: Some(account.clone()), ..Default::default() };
            for filter in [sends, receives] {
                let page = tx
                    .operations()
                    .list(tenant, &filter, tokenops_domain::paging::PageRequest { page: 0, size: 1 })
                    .await?;
                if page.total > 0 {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Whether a difference seen between `position` (read before the ledger) and the ledger's
    /// balances stands rather than being settlement catching up: nothing touching the account is
    /// in flight now (so every operation the ledger read included has confirmed) and its position
    /// reads as it did before the ledger was read (so no confirmation landed in between). A move
    /// and its exact reverse both confirming inside that read (milliseconds) would pass unseen;
    /// a break it caused would be one record, and the next round finds the accounts equal.
    async fn still_differs(
        &self,
        tenant: TenantId,
        account: &tokenops_domain::account::AccountRef,
        position: &tokenops_store::Position,
    ) -> Result<bool, JobError> {
        if self.in_flight(tenant, account).await? {
            crate::signals::reconciliation_skipped("in_flight");
            return Ok(false);
        }
        let now = self.0.store.read().await?.positions().get(tenant, account).await?;
        if &now != position {
            crate::signals::reconciliation_skipped("moving");
            return Ok(false);
        }
        Ok(true)
    }
}

#[async_trait]
impl JobHandler for Reconcile {
    fn kind(&self) -> &'static str {
        kinds::POSITIONS_RECONCILE
    }

    async fn run(&self, _job: &Job, ctx: &JobContext) -> Result<Finished, JobError> {
        let p = &self.0;
        let mut after = None;
        loop {
            let batch = {
                let mut tx = p.store.read().await?;
                tx.accounts().provisioned_after(after, 200).await?
            };
            let Some(last) = batch.last() else { break };
            after = Some(last.id);
            for account in batch {
                let tenant = account.tenant_id;
                if self.in_flight(tenant, &account.account_ref).await? {
                    crate::signals::reconciliation_skipped("in_flight");
                    continue;
                }
                let (contract, expected) = {
                    let mut tx = p.store.read().await?;
                    (
                        tx.contracts().get(tenant, account.asset_id).await?,
                        tx.positions().get(tenant, &account.account_ref).await?,
                    )
                };
                let (Ok(token), Ok(wallet)) = (
                    parse_address(contract.as_ref().and_then(|c| c.address), "the contract"),
                    parse_address(account.wallet_address, "the account"),
                ) else {
                    continue;
                };
                let balances = match p.ledger.balances(token, wallet).await {
                    Ok(balances) => balances,
                    Err(e) => {
                        tracing::warn!(account = %account.account_ref, error = %e, "reconciliation could not read a balance");
                        continue;
                    }
                };
                // Compared at the ledger's width: a balance past what a position can hold (it
                // stays at its bound) is a difference, not equal to the bound.
                let (total, held) = (balances.total, balances.held);
                if same_amount(total, expected.total) && same_amount(held, expected.held) {
                    continue;
                }
                if !self.still_differs(tenant, &account.account_ref, &expected).await? {
                    continue;
                }
                let detail = format!(
                    "ledger total {total}, held {held} at block {}; expected total {}, held {} (minor units); difference total {}, held {}",
                    balances.block_number,
                    expected.total,
                    expected.held,
                    difference(total, expected.total),
                    difference(held, expected.held)
                );
                let now = ctx.clock().now();
                let mut tx = p.store.write().await?;
                let filter = BreakFilter {
                    reason: Some(BreakReason::BalanceMismatch),
                    account_ref: Some(account.account_ref.clone()),
                    from: None,
                    to: None,
                };
                let latest = tx
                    .breaks()
                    .list(tenant, &filter, tokenops_domain::paging::PageRequest { page: 0, size: 1 })
                    .await?;
                let same = latest.items.first().is_some_and(|b| same_difference(&b.detail, &detail));
                if !same {
                    let found = Break {
                        id: new_id(),
                        tenant_id: tenant,
                        transaction_id: None,
                        account_ref: account.account_ref.clone(),
                        asset_id: account.asset_id,
                        reason: BreakReason::BalanceMismatch,
                        detail,
                        detected_at: now,
                    };
                    tx.breaks().insert(&found).await?;
                    crate::signals::break_recorded(&found);
                    tx.commit().await?;
                }
            }
        }
        ctx.finish(p.store.write().await?).await
    }
}

/// Two mismatch details describe the same difference when their differences agree: a drift
/// that persists while balances move is one break, not one per movement.
fn same_amount(ledger: U256, expected: i64) -> bool {
    u64::try_from(expected).is_ok_and(|e| ledger == U256::from(e))
}

/// `ledger - expected`, signed, at the ledger's width.
fn difference(ledger: U256, expected: i64) -> String {
    let magnitude = U256::from(expected.unsigned_abs());
    if expected < 0 {
        ledger.saturating_add(magnitude).to_string()
    } else if ledger >= magnitude {
        (ledger - magnitude).to_string()
    } else {
        format!("-{}", magnitude - ledger)
    }
}

fn same_difference(a: &str, b: &str) -> bool {
    let difference = |s: &str| s.split("; difference ").nth(1).map(str::to_owned);
    difference(a).is_some() && difference(a) == difference(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_compare_and_differ_at_the_ledgers_width() {
        assert!(same_amount(U256::from(5_u64), 5));
        assert!(!same_amount(U256::from(5_u64), -5));
        // A balance past what a position holds is not equal to the position's bound.
        let past = U256::from(i64::MAX as u64) + U256::from(100_u64);
        assert!(!same_amount(past, i64::MAX));
        assert_eq!(difference(past, i64::MAX), "100");
        assert_eq!(difference(U256::from(3_u64), 5), "-2");
        assert_eq!(difference(U256::from(3_u64), -5), "8");
    }
}
