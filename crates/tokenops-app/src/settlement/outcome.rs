//! How an operation's step ends beyond moving its state: FAILED with its code, reason and
//! break; the events it publishes and the audit records it leaves.

use tokenops_domain::audit::AuditOutcome;
use tokenops_domain::event::{Event, EventType, ResourceRef};
use tokenops_domain::operation::{Break, Operation};
use tokenops_domain::operation::{BreakReason, FailureCode, OperationState};
use tokenops_domain::{Timestamp, new_id};
use tokenops_store::Tx;

use super::{Pipeline, SETTLED};
use crate::jobs::JobError;
use crate::operations::OperationOut;

impl Pipeline {
    /// Ends the operation (its row as the caller read it for update) FAILED with `code` and
    /// `reason`, if it is still in `from`: its event, its lock bookkeeping, a break when it
    /// reached the ledger or ran out of retries, and the audit record.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn fail_row(
        &self,
        tx: &mut dyn Tx,
        row: Option<Operation>,
        from: OperationState,
        code: FailureCode,
        reason: String,
        block_number: Option<u64>,
        now: Timestamp,
    ) -> Result<(), JobError> {
        let (reason_code, revert_reason) = reason_codes_of(code, &reason);
        let Some(operation) = self
            .advance_row(
                tx,
                row,
                from,
                |o| {
                    o.state = OperationState::Failed;
                    o.failure_code = Some(code);
                    o.reason_code = Some(reason_code);
                    o.revert_reason = revert_reason;
                    if block_number.is_some() {
                        o.block_number = block_number;
                    }
                },
                now,
            )
            .await?
        else {
            return Ok(());
        };
        let tenant = operation.tenant_id;
        // A RELEASE or CANCEL that failed leaves its lock ACTIVE for another try.
        if let Some(lock_id) = operation.lock_id.filter(|_| operation.tx_type.completes_lock())
            && let Some(mut lock) = tx.locks().get_for_update(tenant, lock_id).await?
            && lock.completed_by == Some(operation.id)
        {
            lock.completed_by = None;
            lock.updated_at = now;
            tx.locks().update(&lock).await?;
        }
        let break_reason = match code {
            FailureCode::ChainFailed => Some(BreakReason::ChainFailed),
            FailureCode::RetryExhausted => Some(BreakReason::RetryExhausted),
            _ => None,
        };
        if let Some(break_reason) = break_reason {
            let detail = match &operation.tx_hash {
                Some(hash) => format!("{reason} (txHash {hash})"),
                None => reason.clone(),
            };
            let found = Break {
                id: new_id(),
                tenant_id: tenant,
                transaction_id: Some(operation.id),
                account_ref: operation.account_ref.clone(),
                asset_id: operation.asset_id,
                reason: break_reason,
                detail,
                detected_at: now,
            };
            tx.breaks().insert(&found).await?;
            crate::signals::break_recorded(&found);
        }
        // Refusals (by the policies or an approver) are `transaction.rejected`.
        let event = if matches!(code, FailureCode::ValidationRejected | FailureCode::ApprovalRejected) {
            EventType::TransactionRejected
        } else {
            EventType::TransactionFailed
        };
        self.publish(tx, event, &operation, now).await?;
        self.audit(tx, &operation, AuditOutcome::Failure, now).await
    }

    pub(super) async fn publish(
        &self,
        tx: &mut dyn Tx,
        event_type: EventType,
        operation: &Operation,
        now: Timestamp,
    ) -> Result<(), JobError> {
        let data = serde_json::to_value(OperationOut::from(operation)).map_err(JobError::retry)?;
        let event = Event {
            id: new_id(),
            tenant_id: operation.tenant_id,
            event_type: event_type.as_str().to_owned(),
            occurred_at: now,
            correlation_id: operation.correlation_id.clone(),
            idempotency_key: operation.idempotency_key.clone(),
            resource: ResourceRef::new("transaction", operation.id.to_string()),
            data,
            dispatched_at: None,
        };
        crate::events::publish(tx, &event, self.settings.job_max_attempts, now).await.map_err(JobError::retry)
    }

    pub(super) async fn audit(
        &self,
        tx: &mut dyn Tx,
        operation: &Operation,
        outcome: AuditOutcome,
        now: Timestamp,
    ) -> Result<(), JobError> {
        Ok(crate::audit::record_worker(
            tx,
            operation.tenant_id,
            &SETTLED,
            operation.id.to_string(),
            outcome,
            serde_json::json!({ "after": OperationOut::from(operation) }),
            now,
        )
        .await?)
    }
}

/// What a CHAIN_FAILED reason says after the decoded revert when the ledger included the
/// transaction and reverted it (`settlement::track`).
pub(super) const REVERTED: &str = ": the ledger reverted the transaction";

/// The reason code of a CHAIN_FAILED the ledger refused before including anything (a send it
/// would not take: no txHash); the ledger's words are in the break's detail.
const SUBMISSION_REJECTED: &str = "SUBMISSION_REJECTED";

/// The short, stable reason code the spec reports, and for a revert the decoded revert itself:
/// EXECUTION_REVERTED (the spec's example) with `InsufficientAvailableBalance` beside it; the
/// policy step's code for VALIDATION_REJECTED (the reason starts `CODE: `); else a code of the
/// failure (SUBMISSION_REJECTED for a send the ledger refused, unless its reason starts with a
/// code of its own).
fn reason_codes_of(code: FailureCode, reason: &str) -> (String, Option<String>) {
    let first = |separators: &[char], fallback: &str| reason.split(separators).next().unwrap_or(fallback).to_owned();
    match code {
        FailureCode::ChainFailed => match reason.strip_suffix(REVERTED) {
            Some(revert) => ("EXECUTION_REVERTED".to_owned(), Some(revert.to_owned()).filter(|r| !r.is_empty())),
            None => {
                let word = first(&[':', ' '], SUBMISSION_REJECTED);
                let is_code = !word.is_empty() && word.chars().all(|c| c.is_ascii_uppercase() || c == '_');
                (if is_code { word } else { SUBMISSION_REJECTED.to_owned() }, None)
            }
        },
        FailureCode::SigningRejected => ("CUSTODY_REFUSED".to_owned(), None),
        FailureCode::RetryExhausted => ("DEPENDENCY_UNAVAILABLE".to_owned(), None),
        FailureCode::Unprocessable => ("UNPROCESSABLE".to_owned(), None),
        FailureCode::ValidationRejected => (first(&[':'], "VALIDATION_REJECTED"), None),
        other => (other.as_str().to_owned(), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_failure_has_an_upper_case_reason_code() {
        let reverted = format!("InsufficientAvailableBalance{REVERTED}");
        assert_eq!(
            reason_codes_of(FailureCode::ChainFailed, &reverted),
            ("EXECUTION_REVERTED".to_owned(), Some("InsufficientAvailableBalance".to_owned()))
        );
        // The node would not take the send: the ledger error's words are no code.
        let refused = "ledger refused: insufficient funds for gas * price + value";
        assert_eq!(reason_codes_of(FailureCode::ChainFailed, refused), ("SUBMISSION_REJECTED".to_owned(), None));
        assert_eq!(reason_codes_of(FailureCode::ChainFailed, ""), ("SUBMISSION_REJECTED".to_owned(), None));
        // A reason that starts with a code of its own keeps it.
        let coded = "UNKNOWN_TOKEN: no contract at the address";
        assert_eq!(reason_codes_of(FailureCode::ChainFailed, coded), ("UNKNOWN_TOKEN".to_owned(), None));
    }
}
