//! Accounts: the entity, its list criteria, the client-chosen reference, the status set and the
//! whole transition table.
//!
//! | from \ to | ACTIVE | INACTIVE | PENDING | FAILED |
//! |---|---|---|---|---|
//! | (none) | | | register | |
//! | PENDING | provisioned (customer ACTIVE) | provisioned (customer INACTIVE) | — | provisioning failed |
//! | ACTIVE | same (no change) | PATCH; customer deactivated | — | — |
//! | INACTIVE | PATCH, only while the customer is ACTIVE | same (no change) | — | — |
//! | FAILED | — | — | register again | — |
//!
//! PATCH sets only ACTIVE or INACTIVE (400 otherwise); any other move by PATCH is 422.

use crate::asset::AssetId;
use crate::chain::Address;
use crate::customer::{CustomerRef, CustomerStatus, reference};
use crate::wire::wire_enum;
use crate::{TenantId, Timestamp};
use uuid::Uuid;

/// An account: one wallet, once provisioned, holding one asset for one customer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub id: Uuid,
    pub tenant_id: TenantId,
    /// Unique per organisation.
    pub account_ref: AccountRef,
    pub customer_ref: CustomerRef,
    pub asset_id: AssetId,
    pub status: AccountStatus,
    /// The custody wallet. Recorded as soon as custody creates it (while still PENDING, so a
    /// retried provisioning reuses it); shown only once the account is provisioned.
    pub wallet_address: Option<Address>,
    /// Why provisioning failed (FAILED only).
    pub failure_reason: Option<String>,
    /// Bumped on every registration of the reference (a FAILED one registered again), so that
    /// a provisioning job of an earlier registration recognises it is stale.
    pub generation: u32,
    pub provisioned_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// Which accounts a list shows.
#[derive(Debug, Clone, Default)]
pub struct AccountFilter {
    pub customer_ref: Option<CustomerRef>,
    pub status: Option<AccountStatus>,
    pub asset_id: Option<AssetId>,
}

reference! {
    /// A client-chosen account reference, under the same rule as customer references.
    AccountRef
}

wire_enum! {
    AccountStatus {
        /// Registered; its wallet is being provisioned. No wallet address yet.
        Pending => "PENDING",
        /// Provisioned and usable.
        Active => "ACTIVE",
        /// Provisioned, but switched off: operations refuse it; its balance stays readable.
        Inactive => "INACTIVE",
        /// Provisioning failed (the reason is on the account). No wallet address; the reference may
        /// be registered again.
        Failed => "FAILED",
    }
}

/// Why a PATCH status change is refused (422), in words an integrator can act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TransitionRefused {
    #[error("the account is still being provisioned")]
    StillProvisioning,
    #[error("the account's provisioning failed; register the reference again")]
    ProvisioningFailed,
    #[error("the customer is INACTIVE; reactivate the customer first")]
    CustomerInactive,
}

/// The outcome of a status change request that is allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccountChange {
    Unchanged,
    Changed { from: AccountStatus, to: AccountStatus },
}

impl AccountStatus {
    /// What PATCH may set.
    pub const SETTABLE: [AccountStatus; 2] = [AccountStatus::Active, AccountStatus::Inactive];

    /// Whether the account has a wallet (ACTIVE or INACTIVE).
    pub fn is_provisioned(self) -> bool {
        matches!(self, AccountStatus::Active | AccountStatus::Inactive)
    }

    /// A PATCH to `target` (ACTIVE or INACTIVE), with the customer's current status.
    pub fn patch_to(self, target: AccountStatus, customer: CustomerStatus) -> Result<AccountChange, TransitionRefused> {
        match (self, target) {
            (AccountStatus::Pending, _) => Err(TransitionRefused::StillProvisioning),
            (AccountStatus::Failed, _) => Err(TransitionRefused::ProvisioningFailed),
            (from, to) if from == to => Ok(AccountChange::Unchanged),
            (AccountStatus::Inactive, AccountStatus::Active) if customer != CustomerStatus::Active => {
                Err(TransitionRefused::CustomerInactive)
            }
            (from, to) => Ok(AccountChange::Changed { from, to }),
        }
    }

    /// Where a provisioned account lands: ACTIVE, or INACTIVE when its customer was deactivated
    /// while it was provisioned.
    pub fn provisioned_for(customer: CustomerStatus) -> AccountStatus {
        match customer {
            CustomerStatus::Active => AccountStatus::Active,
            CustomerStatus::Inactive => AccountStatus::Inactive,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use AccountStatus::*;

    #[test]
    fn the_transition_table() {
        let active = CustomerStatus::Active;
        let inactive = CustomerStatus::Inactive;
        assert_eq!(Active.patch_to(Inactive, active), Ok(AccountChange::Changed { from: Active, to: Inactive }));
        assert_eq!(Inactive.patch_to(Active, active), Ok(AccountChange::Changed { from: Inactive, to: Active }));
        assert_eq!(Active.patch_to(Active, active), Ok(AccountChange::Unchanged));
        assert_eq!(Inactive.patch_to(Inactive, inactive), Ok(AccountChange::Unchanged));
        assert_eq!(Active.patch_to(Inactive, inactive), Ok(AccountChange::Changed { from: Active, to: Inactive }));
        assert_eq!(Inactive.patch_to(Active, inactive), Err(TransitionRefused::CustomerInactive));
        assert_eq!(Pending.patch_to(Active, active), Err(TransitionRefused::StillProvisioning));
        assert_eq!(Pending.patch_to(Inactive, active), Err(TransitionRefused::StillProvisioning));
        assert_eq!(Failed.patch_to(Active, active), Err(TransitionRefused::ProvisioningFailed));
        assert_eq!(AccountStatus::provisioned_for(active), Active);
        assert_eq!(AccountStatus::provisioned_for(inactive), Inactive);
    }

    #[test]
    fn only_active_and_inactive_accounts_are_provisioned() {
        assert!(Active.is_provisioned() && Inactive.is_provisioned() && !Pending.is_provisioned());
    }
}
