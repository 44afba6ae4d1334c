//! `locks.expire`: the sweep that gives expired locks back to their owners, by submitting a
//! CANCEL for each through the settlement pipeline.

use async_trait::async_trait;
use std::sync::Arc;
use tokenops_domain::new_id;
use tokenops_domain::operation::{LockStatus, NewOperation, Operation, TxType};
use tokenops_store::Job;

use crate::jobs::{Finished, JobContext, JobError, JobHandler, kinds};
use crate::settlement::Pipeline;

/// The submitter recorded on the CANCELs the expiry sweep makes.
pub const LOCK_EXPIRY_SUBMITTER: &str = "system:lock-expiry";

/// Finds ACTIVE locks past their expiry that nothing completes yet and submits, for each, a
/// CANCEL (marked `params.expired`) through the pipeline; once it confirms, the lock is EXPIRED
/// and its funds are the owner's again.
pub struct ExpireLocks(pub Arc<Pipeline>);

#[async_trait]
impl JobHandler for ExpireLocks {
    fn kind(&self) -> &'static str {
        kinds::LOCKS_EXPIRE
    }

    async fn run(&self, _job: &Job, ctx: &JobContext) -> Result<Finished, JobError> {
        let p = &self.0;
        let now = ctx.clock().now();
        let expired = {
            let mut tx = p.store.read().await?;
            tx.locks().expired(now, 200).await?
        };
        for candidate in expired {
            let mut tx = p.store.write().await?;
            let tenant = candidate.tenant_id;
            let Some(mut lock) = tx.locks().get_for_update(tenant, candidate.id).await? else { continue };
            let still_due = lock.status == LockStatus::Active
                && lock.completed_by.is_none()
                && lock.expires_at.is_some_and(|at| at <= now);
            // A lock of a switched-off contract waits for it to be ACTIVE again: a CANCEL now
            // would only fail UNPROCESSABLE, sweep after sweep.
            let contract_active = tx
                .contracts()
                .get(tenant, lock.asset_id)
                .await?
                .is_some_and(|c| c.status == tokenops_domain::contract::ContractStatus::Active);
            let Some(owner) =
                tx.accounts().get(tenant, &lock.account_ref).await?.filter(|_| still_due && contract_active)
            else {
                continue;
            };
            let cancel = Operation::submitted(
                NewOperation {
                    id: new_id(),
                    tenant_id: tenant,
                    tx_type: TxType::Cancel,
                    asset_id: lock.asset_id,
                    account_ref: lock.account_ref.clone(),
                    customer_ref: owner.customer_ref,
                    counterparty_ref: None,
                    amount: lock.amount,
                    params: serde_json::json!({ "lockId": lock.id, "expired": true }),
                    lock_id: Some(lock.id),
                    submitted_by: LOCK_EXPIRY_SUBMITTER.to_owned(),
                    idempotency_key: None,
                    correlation_id: None,
                },
                now,
            );
            tx.operations().insert(&cancel).await?;
            crate::signals::operation_entered(&cancel, now);
            lock.completed_by = Some(cancel.id);
            lock.updated_at = now;
            tx.locks().update(&lock).await?;
            tx.jobs().enqueue(&p.job(kinds::OPERATION_EVALUATE, tenant, cancel.id, now), now).await?;
            tx.commit().await?;
        }
        ctx.finish(p.store.write().await?).await
    }
}
