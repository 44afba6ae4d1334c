//! Token operations: their types, the state machine (states only move forward; terminal states
//! never change), failure codes, locks and break reasons.
//!
//! ```text
//! SUBMITTED ──evaluate──► PENDING_SETTLEMENT ──sign + send──► SETTLING ──receipt──► CONFIRMED
//!     │   └──► AWAITING_APPROVAL ──approved──┘     │                  └──reverted──► FAILED (CHAIN_FAILED)
//!     │            └──rejected / expired / cancelled ──► FAILED / CANCELLED
//!     └──► FAILED (VALIDATION_REJECTED, UNPROCESSABLE)
//!                   PENDING_SETTLEMENT ──► FAILED (SIGNING_REJECTED, RETRY_EXHAUSTED)
//! ```

use serde::{Deserialize, Serialize};

/// What an operation does. TRANSFER, LOCK, RELEASE and CANCEL are the spec's; MINT and BURN
/// (supplement §5) fund and defund accounts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TxType {
    Transfer,
    Lock,
    Release,
    Cancel,
    Mint,
    Burn,
}

impl TxType {
    pub const ALL: [TxType; 6] =
        [TxType::Transfer, TxType::Lock, TxType::Release, TxType::Cancel, TxType::Mint, TxType::Burn];

    pub fn as_str(self) -> &'static str {
        match self {
            TxType::Transfer => "TRANSFER",
            TxType::Lock => "LOCK",
            TxType::Release => "RELEASE",
            TxType::Cancel => "CANCEL",
            TxType::Mint => "MINT",
            TxType::Burn => "BURN",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == text)
    }

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

/// Where an operation is. Ordered: an operation only ever moves to a later state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OperationState {
    /// Accepted (202); waiting for policy evaluation.
    Submitted,
    /// A policy requires approvers; waiting for their decision.
    AwaitingApproval,
    /// Approved; being signed and sent to the ledger.
    PendingSettlement,
    /// On the ledger (txHash known); waiting for its receipt.
    Settling,
    Confirmed,
    Failed,
    Cancelled,
}

impl OperationState {
    pub const ALL: [OperationState; 7] = [
        OperationState::Submitted,
        OperationState::AwaitingApproval,
        OperationState::PendingSettlement,
        OperationState::Settling,
        OperationState::Confirmed,
        OperationState::Failed,
        OperationState::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            OperationState::Submitted => "SUBMITTED",
            OperationState::AwaitingApproval => "AWAITING_APPROVAL",
            OperationState::PendingSettlement => "PENDING_SETTLEMENT",
            OperationState::Settling => "SETTLING",
            OperationState::Confirmed => "CONFIRMED",
            OperationState::Failed => "FAILED",
            OperationState::Cancelled => "CANCELLED",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }

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
            (Settling, Confirmed | Failed) => true,
            _ => false,
        }
    }
}

/// Why an operation failed (the spec's Failed operations table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum FailureCode {
    ValidationRejected,
    ApprovalRejected,
    SigningRejected,
    ChainFailed,
    RetryExhausted,
    Unprocessable,
    PolicyExpired,
    PolicyTimeout,
}

impl FailureCode {
    pub const ALL: [FailureCode; 8] = [
        FailureCode::ValidationRejected,
        FailureCode::ApprovalRejected,
        FailureCode::SigningRejected,
        FailureCode::ChainFailed,
        FailureCode::RetryExhausted,
        FailureCode::Unprocessable,
        FailureCode::PolicyExpired,
        FailureCode::PolicyTimeout,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FailureCode::ValidationRejected => "VALIDATION_REJECTED",
            FailureCode::ApprovalRejected => "APPROVAL_REJECTED",
            FailureCode::SigningRejected => "SIGNING_REJECTED",
            FailureCode::ChainFailed => "CHAIN_FAILED",
            FailureCode::RetryExhausted => "RETRY_EXHAUSTED",
            FailureCode::Unprocessable => "UNPROCESSABLE",
            FailureCode::PolicyExpired => "POLICY_EXPIRED",
            FailureCode::PolicyTimeout => "POLICY_TIMEOUT",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == text)
    }
}

/// A lock's life: ACTIVE once its LOCK is on the ledger; RELEASED, CANCELLED (by a CANCEL, or
/// returned to the owner after it expired) once completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum LockStatus {
    /// The LOCK is accepted but not yet on the ledger.
    Pending,
    Active,
    Released,
    Cancelled,
    Expired,
    /// The LOCK itself failed: nothing is held.
    Failed,
}

impl LockStatus {
    pub const ALL: [LockStatus; 6] = [
        LockStatus::Pending,
        LockStatus::Active,
        LockStatus::Released,
        LockStatus::Cancelled,
        LockStatus::Expired,
        LockStatus::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LockStatus::Pending => "PENDING",
            LockStatus::Active => "ACTIVE",
            LockStatus::Released => "RELEASED",
            LockStatus::Cancelled => "CANCELLED",
            LockStatus::Expired => "EXPIRED",
            LockStatus::Failed => "FAILED",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

/// Why a break was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum BreakReason {
    /// The operation reached the ledger and reverted.
    ChainFailed,
    /// Retries of a temporary failure ran out; the ledger outcome may need checking.
    RetryExhausted,
    /// The ledger's balance differs from the service's own expectation.
    BalanceMismatch,
}

impl BreakReason {
    pub const ALL: [BreakReason; 3] =
        [BreakReason::ChainFailed, BreakReason::RetryExhausted, BreakReason::BalanceMismatch];

    pub fn as_str(self) -> &'static str {
        match self {
            BreakReason::ChainFailed => "CHAIN_FAILED",
            BreakReason::RetryExhausted => "RETRY_EXHAUSTED",
            BreakReason::BalanceMismatch => "BALANCE_MISMATCH",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use OperationState::*;

    #[test]
    fn states_only_move_forward_and_terminal_states_never_change() {
        assert!(Submitted.may_become(PendingSettlement));
        assert!(Submitted.may_become(AwaitingApproval));
        assert!(PendingSettlement.may_become(Settling));
        assert!(Settling.may_become(Confirmed));
        assert!(Settling.may_become(Failed));
        assert!(!Settling.may_become(PendingSettlement));
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
                if from.may_become(to) {
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
