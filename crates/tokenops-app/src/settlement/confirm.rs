//! CONFIRMED: what an operation's confirmation moves with it (positions, locks, the
//! `transaction.confirmed` event and the audit record).

use tokenops_domain::account::AccountRef;
use tokenops_domain::audit::AuditOutcome;
use tokenops_domain::event::EventType;
use tokenops_domain::operation::{Lock, LockStatus, Operation, OperationState, TxType};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::{PositionChange, Tx};

use super::{Pipeline, lock_expiry};
use crate::jobs::JobError;
use crate::lock_expiry::LOCK_EXPIRY_SUBMITTER;

/// The position changes of the operations one transaction confirms, applied together at its
/// end in one order (organisation, then account): two transactions then never wait for each
/// other's position rows in opposite orders, which PostgreSQL would end as a deadlock.
#[derive(Default)]
pub(super) struct PositionDeltas(std::collections::BTreeMap<(TenantId, AccountRef), (i64, i64)>);

impl PositionDeltas {
    fn add(&mut self, tenant: TenantId, account: &AccountRef, total: i64, held: i64) {
        // Kept within range, as the store keeps the sums (`tokenops_store::positions`): a batch
        // may confirm several of the largest amounts for one account.
        let delta = self.0.entry((tenant, account.clone())).or_default();
        delta.0 = delta.0.saturating_add(total);
        delta.1 = delta.1.saturating_add(held);
    }

    pub(super) async fn apply(self, tx: &mut dyn Tx, now: Timestamp) -> Result<(), JobError> {
        let changes: Vec<PositionChange> = self
            .0
            .into_iter()
            .map(|((tenant, account_ref), (total_delta, held_delta))| PositionChange {
                tenant,
                account_ref,
                total_delta,
                held_delta,
            })
            .collect();
        tx.positions().apply_all(&changes, now).await?;
        Ok(())
    }
}

/// CONFIRMED: the operation (its row as the caller read it for update), its effect on locks,
/// its event and audit record; its effect on positions goes into `positions`, for the caller to
/// apply before committing.
pub(super) async fn confirm_row(
    p: &Pipeline,
    tx: &mut dyn Tx,
    positions: &mut PositionDeltas,
    row: Option<Operation>,
    block_number: u64,
    now: Timestamp,
) -> Result<(), JobError> {
    let Some(operation) = p
        .advance_row(
            tx,
            row,
            OperationState::Settling,
            |o| {
                o.state = OperationState::Confirmed;
                o.block_number = Some(block_number);
            },
            now,
        )
        .await?
    else {
        return Ok(());
    };
    let tenant = operation.tenant_id;
    let amount = operation.amount.as_i64();
    let owner = &operation.account_ref;
    match operation.tx_type {
        TxType::Mint => positions.add(tenant, owner, amount, 0),
        TxType::Burn => positions.add(tenant, owner, -amount, 0),
        TxType::Transfer => {
            positions.add(tenant, owner, -amount, 0);
            if let Some(other) = &operation.counterparty_ref {
                positions.add(tenant, other, amount, 0);
            }
        }
        TxType::Lock => {
            positions.add(tenant, owner, 0, amount);
            let expires_at = lock_expiry(&operation, operation.created_at).ok().flatten();
            tx.locks()
                .insert(&Lock {
                    id: operation.id,
                    tenant_id: tenant,
                    account_ref: owner.clone(),
                    counterparty_ref: operation.counterparty_ref.clone(),
                    asset_id: operation.asset_id,
                    amount: operation.amount,
                    expires_at,
                    status: LockStatus::Active,
                    completed_by: None,
                    created_at: now,
                    updated_at: now,
                })
                .await?;
        }
        TxType::Release | TxType::Cancel => {
            let lock_id = operation.lock_id.unwrap_or(operation.id);
            if let Some(mut lock) = tx.locks().get_for_update(tenant, lock_id).await? {
                let payee = if operation.tx_type == TxType::Release { lock.counterparty_ref.clone() } else { None };
                let held = lock.amount.as_i64();
                match payee {
                    // Paid out: held and total leave the owner, the payee's total grows.
                    Some(payee) if payee != lock.account_ref => {
                        positions.add(tenant, &lock.account_ref, -held, -held);
                        positions.add(tenant, &payee, held, 0);
                    }
                    // Back to the owner's available balance.
                    _ => positions.add(tenant, &lock.account_ref, 0, -held),
                }
                // Only the sweep's own CANCEL (no Idempotency-Key: it never came through the
                // API) expires a lock; a client's `params.expired` is just a parameter.
                let expired = operation.submitted_by == LOCK_EXPIRY_SUBMITTER
                    && operation.idempotency_key.is_none()
                    && operation.params.get("expired").and_then(|v| v.as_bool()) == Some(true);
                lock.status = match operation.tx_type {
                    TxType::Release => LockStatus::Released,
                    _ if expired => LockStatus::Expired,
                    _ => LockStatus::Cancelled,
                };
                lock.completed_by = Some(operation.id);
                lock.updated_at = now;
                tx.locks().update(&lock).await?;
            }
        }
    }
    p.publish(tx, EventType::TransactionConfirmed, &operation, now).await?;
    p.audit(tx, &operation, AuditOutcome::Success, now).await
}
