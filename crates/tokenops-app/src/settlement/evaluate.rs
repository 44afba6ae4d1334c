//! `operation.evaluate`, step 1: the checks that decide whether the operation can be
//! processed at all, then the policy decision (`Pipeline::decide`); the approved move on to
//! settlement, the refused fail, the others wait for approval (`approval`).

use async_trait::async_trait;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;
use tokenops_domain::operation::{FailureCode, Operation, OperationState};
use tokenops_domain::policy::{Decision, PolicyAction, PolicyContent, PolicyEvent, Reason, evaluate};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::{Job, Tx};

use super::approval::Approval;
use super::signatures::{Work, signed_hash_note};
use super::{BATCH_LIMIT, Pipeline, sort_batch, target};
use crate::jobs::{BatchContext, BatchFinished, JobError, JobHandler, kinds};
use crate::policies::{ActivePolicy, active_for_action};

pub struct Evaluate(pub Arc<Pipeline>);

/// reasonCodes of a policy refusal (failureCode VALIDATION_REJECTED): a REJECT rule matched; a
/// rule names a field the operation does not supply; the approvers named cannot be resolved.
pub(super) const POLICY_REJECTED: &str = "POLICY_REJECTED";
pub(super) const POLICY_EVALUATION_FAILED: &str = "POLICY_EVALUATION_FAILED";
pub(super) const APPROVERS_UNRESOLVABLE: &str = "APPROVERS_UNRESOLVABLE";

impl Pipeline {
    /// The policy step over the batch's operations to sign (`work.calls`): each whose txType has
    /// a policy action is evaluated against its organisation's ACTIVE policies for it, read once
    /// per (organisation, action) per batch through `read`. The approved stay in `work.calls`;
    /// the refused move to `work.refused`, those needing people to `work.held`. When the
    /// policies cannot be read, the step cannot decide: the job is retried (into `failed`) until
    /// `policy_decision_timeout_ms` after submission, then the operation fails POLICY_TIMEOUT.
    async fn decide(
        &self,
        read: &mut dyn Tx,
        work: &mut Work,
        failed: &mut Vec<(Job, JobError)>,
        now: Timestamp,
    ) -> Result<(), JobError> {
        let mut loaded: HashMap<(TenantId, PolicyAction), Result<Vec<ActivePolicy>, String>> = HashMap::new();
        for (job, operation, token, call) in std::mem::take(&mut work.calls) {
            // RELEASE and CANCEL complete a lock whose LOCK was approved: not evaluated again.
            let Some(event) = PolicyEvent::of_operation(&operation) else {
                work.calls.push((job, operation, token, call));
                continue;
            };
            let action = event.action;
            let key = (operation.tenant_id, action);
            let policies = match loaded.entry(key) {
                Entry::Occupied(found) => found.into_mut(),
                Entry::Vacant(slot) => {
                    slot.insert(active_for_action(read, key.0, action).await.map_err(|e| e.to_string()))
                }
            };
            let policies = match policies {
                Ok(policies) => policies.as_slice(),
                Err(why) => {
                    let deadline = operation.created_at.plus_millis(self.settings.policy_decision_timeout_ms);
                    if now >= deadline {
                        let reason = format!("the policies could not be read in time: {why}");
                        work.refused.push((job, operation, FailureCode::PolicyTimeout, reason));
                    } else {
                        failed.push((job, JobError::Retry(format!("the policies could not be read: {why}"))));
                    }
                    continue;
                }
            };
            if policies.is_empty() {
                work.calls.push((job, operation, token, call));
                continue;
            }
            let contents: Vec<&PolicyContent> = policies.iter().map(|p| &p.content).collect();
            let rejected = FailureCode::ValidationRejected;
            match evaluate(&contents, &event) {
                Ok(Decision::Approved) => work.calls.push((job, operation, token, call)),
                Ok(Decision::Rejected { reasons }) => {
                    let reason = format!("{POLICY_REJECTED}: {}", describe(&reasons, policies));
                    work.refused.push((job, operation, rejected, reason));
                }
                Ok(Decision::RequiresApproval { steps, manual_review, reasons }) => {
                    let approval = Approval { action, steps, manual_review, reasons: describe(&reasons, policies) };
                    work.held.push((job, operation, approval));
                }
                Err(e) => work.refused.push((job, operation, rejected, format!("{POLICY_EVALUATION_FAILED}: {e}"))),
            }
        }
        Ok(())
    }
}

/// The reasons of a decision as one sentence: each policy's id, its rule (or its default) and
/// the rule's `reason`.
fn describe(reasons: &[Reason], policies: &[ActivePolicy]) -> String {
    reasons
        .iter()
        .map(|r| {
            let policy = policies.get(r.policy).map(|p| p.policy.id.to_string()).unwrap_or_default();
            let rule = r.rule_id.as_deref().map(|id| format!("rule {id}")).unwrap_or_else(|| "no rule matched".into());
            match &r.text {
                Some(text) => format!("policy {policy} {rule}: {text}"),
                None => format!("policy {policy} {rule}"),
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Approved and signed by an evaluation that stopped before sending: no settle job exists for
/// it, so the evaluation job itself must see it settled.
pub(super) fn signed_unsent(operation: &Operation) -> bool {
    operation.state == OperationState::PendingSettlement && operation.signed_transaction.is_some()
}

#[async_trait]
impl JobHandler for Evaluate {
    fn kind(&self) -> &'static str {
        kinds::OPERATION_EVALUATE
    }

    fn batch_limit(&self) -> usize {
        BATCH_LIMIT
    }

    /// The approved go straight on into settlement (`Pipeline::sign_and_send`): approval and
    /// the signature commit together, and the job finishes once the operation is sent, so no
    /// `operation.settle` job runs for it (only for one custody did not sign). An operation
    /// that cannot be processed ends FAILED `UNPROCESSABLE`; one the policies refuse FAILED
    /// `VALIDATION_REJECTED`; one they hold for people AWAITING_APPROVAL with its request, in
    /// the batch's last commit; one left signed but unsent (an earlier run stopped after
    /// recording its signature) is sent, the recorded bytes, and not evaluated again.
    async fn run_batch(&self, jobs: Vec<Job>, ctx: &BatchContext) -> Result<BatchFinished, JobError> {
        let p = &self.0;
        let now = ctx.clock().now();
        let mut read = p.store.read().await?;
        let wanted = |o: &Operation| o.state == OperationState::Submitted || signed_unsent(o);
        let mut sorted = sort_batch(read.as_mut(), jobs, wanted).await?;
        let mut work = p.plan(read.as_mut(), &mut sorted, now).await?;
        // The policy decision, on the operations that can be processed and are not signed yet.
        p.decide(read.as_mut(), &mut work, &mut sorted.failed, now).await?;
        drop(read);
        p.sign_and_send(work, OperationState::Submitted, sorted, ctx).await
    }

    /// An evaluation that ran out of attempts, before approval (SUBMITTED) or after it signed
    /// its operation (PENDING_SETTLEMENT), fails the operation `RETRY_EXHAUSTED` with a break:
    /// nothing waits for a job that will never run again.
    async fn on_dead(&self, job: &Job, tx: &mut dyn Tx, reason: &str, now: Timestamp) -> Result<(), JobError> {
        let Ok((tenant, id)) = target(job) else { return Ok(()) };
        let row = tx.operations().get_for_update(tenant, id).await?;
        let from = match row.as_ref().map(|o| o.state) {
            Some(state @ (OperationState::Submitted | OperationState::PendingSettlement)) => state,
            _ => return Ok(()),
        };
        let reason = format!("evaluation stopped: {reason}{}", row.as_ref().map(signed_hash_note).unwrap_or_default());
        self.0.fail_row(tx, row, from, FailureCode::RetryExhausted, reason, None, now).await
    }
}
