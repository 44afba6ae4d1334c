//! Token operations, their locks and breaks: the entities, their list criteria, the types, the
//! state machine (states only move forward; terminal states never change), failure codes.
//!
//! ```text
//! SUBMITTED ──evaluate──► PENDING_SETTLEMENT ──sign + send──► SETTLING ──receipt──► CONFIRMED
//!     │   └──► AWAITING_APPROVAL ──approved──┘     │                  └──reverted──► FAILED (CHAIN_FAILED)
//!     │            ├──rejected by an approver ──► FAILED (APPROVAL_REJECTED)
//!     │            ├──request expired ──► FAILED (POLICY_EXPIRED)
//!     │            └──request cancelled ──► CANCELLED
//!     └──► FAILED (VALIDATION_REJECTED: a policy refused it, or its approvers cannot be
//!          resolved; UNPROCESSABLE)
//!                   PENDING_SETTLEMENT ──► FAILED (SIGNING_REJECTED, RETRY_EXHAUSTED)
//! ```

use crate::account::AccountRef;
use crate::asset::{Amount, AssetId};
use crate::chain::TxHash;
use crate::customer::CustomerRef;
use crate::wire::wire_enum;
use crate::{TenantId, Timestamp};
use uuid::Uuid;

/// A token operation (the spec's transaction).
#[derive(Debug, Clone, PartialEq)]
pub struct Operation {
    /// The `transactionId`.
    pub id: Uuid,
    pub tenant_id: TenantId,
    pub tx_type: TxType,
    pub asset_id: AssetId,
    /// The originating account (for RELEASE and CANCEL: the lock's owner).
    pub account_ref: AccountRef,
    pub customer_ref: CustomerRef,
    /// TRANSFER and LOCK (and a RELEASE, from its lock): the other account.
    pub counterparty_ref: Option<AccountRef>,
    pub amount: Amount,
    /// The submitted `params` object (scalars only).
    pub params: serde_json::Value,
    /// RELEASE and CANCEL: the lock they complete; LOCK: its own id.
    pub lock_id: Option<Uuid>,
    pub state: OperationState,
    pub tx_hash: Option<TxHash>,
    pub block_number: Option<u64>,
    pub failure_code: Option<FailureCode>,
    pub reason_code: Option<String>,
    /// A reverted operation's decoded revert, as the ledger reported it (its reasonCode is
    /// EXECUTION_REVERTED).
    pub revert_reason: Option<String>,
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

/// What a new operation is made of: its instruction as checked (a caller's submission, or the
/// service's own, such as an expired lock's CANCEL) and who made it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewOperation {
    pub id: Uuid,
    pub tenant_id: TenantId,
    pub tx_type: TxType,
    pub asset_id: AssetId,
    pub account_ref: AccountRef,
    pub customer_ref: CustomerRef,
    pub counterparty_ref: Option<AccountRef>,
    pub amount: Amount,
    pub params: serde_json::Value,
    pub lock_id: Option<Uuid>,
    pub submitted_by: String,
    pub idempotency_key: Option<String>,
    pub correlation_id: Option<String>,
}

impl Operation {
    /// Every operation starts SUBMITTED, with nothing signed, sent, settled or failed yet.
    pub fn submitted(new: NewOperation, now: Timestamp) -> Operation {
        Operation {
            id: new.id,
            tenant_id: new.tenant_id,
            tx_type: new.tx_type,
            asset_id: new.asset_id,
            account_ref: new.account_ref,
            customer_ref: new.customer_ref,
            counterparty_ref: new.counterparty_ref,
            amount: new.amount,
            params: new.params,
            lock_id: new.lock_id,
            state: OperationState::Submitted,
            tx_hash: None,
            block_number: None,
            failure_code: None,
            reason_code: None,
            revert_reason: None,
            signed_transaction: None,
            submitted_by: new.submitted_by,
            idempotency_key: new.idempotency_key,
            correlation_id: new.correlation_id,
            created_at: now,
            updated_at: now,
        }
    }
}

/// Which operations a list shows.
#[derive(Debug, Clone, Default)]
pub struct OperationFilter {
    pub state: Option<OperationState>,
    /// Operations the account originates (the record's `accountRef`).
    pub account_ref: Option<AccountRef>,
    /// Operations the account receives or is the lock's counterparty of (`counterpartyRef`).
    pub counterparty_ref: Option<AccountRef>,
    pub tx_type: Option<TxType>,
    /// Operations submitted at or after this instant.
    pub created_from: Option<Timestamp>,
    /// Operations submitted before this instant.
    pub created_to: Option<Timestamp>,
}

/// Funds a LOCK holds on its account until a RELEASE, a CANCEL or its expiry completes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    /// The LOCK operation's `transactionId`.
    pub id: Uuid,
    pub tenant_id: TenantId,
    pub account_ref: AccountRef,
    pub counterparty_ref: Option<AccountRef>,
    pub asset_id: AssetId,
    pub amount: Amount,
    pub expires_at: Option<Timestamp>,
    pub status: LockStatus,
    /// The RELEASE or CANCEL (or expiry) completing it, while that is in flight or once done.
    pub completed_by: Option<Uuid>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// A break: something about an operation or an account's balance that needs a person's look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Break {
    pub id: Uuid,
    pub tenant_id: TenantId,
    pub transaction_id: Option<Uuid>,
    pub account_ref: AccountRef,
    pub asset_id: AssetId,
    pub reason: BreakReason,
    pub detail: String,
    pub detected_at: Timestamp,
}

/// Which breaks a list shows.
#[derive(Debug, Clone, Default)]
pub struct BreakFilter {
    pub reason: Option<BreakReason>,
    pub account_ref: Option<AccountRef>,
    /// Inclusive.
    pub from: Option<Timestamp>,
    /// Exclusive.
    pub to: Option<Timestamp>,
}

wire_enum! {
    /// What an operation does. TRANSFER, LOCK, RELEASE and CANCEL are the spec's; MINT and BURN
    /// (supplement §5) fund and defund accounts.
    TxType {
        Transfer => "TRANSFER",
        Lock => "LOCK",
        Release => "RELEASE",
        Cancel => "CANCEL",
        Mint => "MINT",
        Burn => "BURN",
    }
}

impl TxType {
    /// Whether `counterpartyRef` may be given (TRANSFER, LOCK) and must be (TRANSFER).
    pub fn counterparty(self) -> Counterparty {
        match self {
            TxType::Transfer => Counterparty::Required,
            TxType::Lock => Counterparty::Optional,
            _ => Counterparty::Forbidden,
        }
    }

    /// RELEASE and CANCEL complete a lock and carry nothing but `params.lockId`.
    pub fn completes_lock(self) -> bool {
        matches!(self, TxType::Release | TxType::Cancel)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counterparty {
    Required,
    Optional,
    Forbidden,
}

wire_enum! {
    /// Where an operation is. Listed in the order an operation moves through them, forward only
    /// with one exception: a SETTLING operation whose ledger transaction was dropped (its nonce
    /// taken by another) goes back to PENDING_SETTLEMENT, without its txHash, to be signed again.
    OperationState {
        /// Accepted (202); waiting for policy evaluation.
        Submitted => "SUBMITTED",
        /// A policy requires approvers; waiting for their decision.
        AwaitingApproval => "AWAITING_APPROVAL",
        /// Approved; being signed and sent to the ledger.
        PendingSettlement => "PENDING_SETTLEMENT",
        /// On the ledger (txHash known); waiting for its receipt.
        Settling => "SETTLING",
        Confirmed => "CONFIRMED",
        Failed => "FAILED",
        Cancelled => "CANCELLED",
    }
}

impl OperationState {
    pub fn is_terminal(self) -> bool {
        matches!(self, OperationState::Confirmed | OperationState::Failed | OperationState::Cancelled)
    }

    /// Whether the state machine allows `self → next`.
    pub fn may_become(self, next: OperationState) -> bool {
        use OperationState::*;
        match (self, next) {
            (from, _) if from.is_terminal() => false,
            (Submitted, AwaitingApproval | PendingSettlement | Failed | Cancelled) => true,
            (AwaitingApproval, PendingSettlement | Failed | Cancelled) => true,
            (PendingSettlement, Settling | Failed) => true,
            // Sent bytes the ledger dropped and whose nonce another transaction took: signed anew.
            (Settling, PendingSettlement | Confirmed | Failed) => true,
            _ => false,
        }
    }
}

wire_enum! {
    /// Why an operation failed (the spec's Failed operations table).
    FailureCode {
        ValidationRejected => "VALIDATION_REJECTED",
        ApprovalRejected => "APPROVAL_REJECTED",
        SigningRejected => "SIGNING_REJECTED",
        ChainFailed => "CHAIN_FAILED",
        RetryExhausted => "RETRY_EXHAUSTED",
        Unprocessable => "UNPROCESSABLE",
        PolicyExpired => "POLICY_EXPIRED",
        PolicyTimeout => "POLICY_TIMEOUT",
    }
}

wire_enum! {
    /// A lock's life: ACTIVE once its LOCK is on the ledger; RELEASED, CANCELLED (by a CANCEL, or
    /// returned to the owner after it expired) once completed.
    LockStatus {
        /// The LOCK is accepted but not yet on the ledger.
        Pending => "PENDING",
        Active => "ACTIVE",
        Released => "RELEASED",
        Cancelled => "CANCELLED",
        Expired => "EXPIRED",
        /// The LOCK itself failed: nothing is held.
        Failed => "FAILED",
    }
}

wire_enum! {
    /// Why a break was recorded.
    BreakReason {
        /// The operation reached the ledger and reverted.
        ChainFailed => "CHAIN_FAILED",
        /// Retries of a temporary failure ran out; the ledger outcome may need checking.
        RetryExhausted => "RETRY_EXHAUSTED",
        /// The ledger's balance differs from the service's own expectation.
        BalanceMismatch => "BALANCE_MISMATCH",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use OperationState::*;

    #[test]
    fn states_move_forward_and_terminal_states_never_change() {
        assert!(Submitted.may_become(PendingSettlement));
        assert!(Submitted.may_become(AwaitingApproval));
        assert!(PendingSettlement.may_become(Settling));
        assert!(Settling.may_become(Confirmed));
        assert!(Settling.may_become(Failed));
        assert!(Settling.may_become(PendingSettlement), "the only step back: sent bytes superseded, signed anew");
        assert!(!Settling.may_become(Submitted));
        assert!(!PendingSettlement.may_become(Submitted));
        assert!(!Settling.may_become(Cancelled), "once on the ledger it cannot be cancelled");
        for terminal in [Confirmed, Failed, Cancelled] {
            assert!(terminal.is_terminal());
            for next in OperationState::ALL {
                assert!(!terminal.may_become(next), "{terminal:?} → {next:?}");
            }
        }
        for from in OperationState::ALL {
            for to in OperationState::ALL {
                if from.may_become(to) && (from, to) != (Settling, PendingSettlement) {
                    assert!(to > from, "{from:?} → {to:?} goes backwards");
                }
            }
        }
    }

    #[test]
    fn types_say_what_they_carry() {
        assert_eq!(TxType::Transfer.counterparty(), Counterparty::Required);
        assert_eq!(TxType::Lock.counterparty(), Counterparty::Optional);
        assert_eq!(TxType::Mint.counterparty(), Counterparty::Forbidden);
        assert!(TxType::Release.completes_lock() && TxType::Cancel.completes_lock());
        assert_eq!(TxType::parse("transfer"), None);
        assert_eq!(FailureCode::parse("CHAIN_FAILED"), Some(FailureCode::ChainFailed));
        assert_eq!(BreakReason::parse("BALANCE_MISMATCH"), Some(BreakReason::BalanceMismatch));
    }
}
