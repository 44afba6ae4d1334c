//! The policy state rules: which moves each status allows. The slot rule (at most one
//! non-archived policy per ruleType, action and templateKey) needs the store, so the app checks
//! it when `activate` says `Activate`.

use super::catalogue::PolicyStatus;

/// What activating a policy in a given status does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// DRAFT becomes ACTIVE, if no other non-archived policy holds the slot (409 otherwise).
    Activate,
    /// Already ACTIVE: succeeds, nothing changes.
    AlreadyActive,
    /// ARCHIVED stays archived: its slot may since have been taken, and an archived policy's
    /// history should read as ended (409).
    Refused,
}

impl PolicyStatus {
    /// Every new policy starts as a DRAFT at version 1, affecting no operation.
    pub const INITIAL: PolicyStatus = PolicyStatus::Draft;

    pub fn activation(self) -> Activation {
        match self {
            PolicyStatus::Draft => Activation::Activate,
            PolicyStatus::Active => Activation::AlreadyActive,
            PolicyStatus::Archived => Activation::Refused,
        }
    }

    /// Archive has no state guard: every status (ARCHIVED too) moves to ARCHIVED.
    pub fn archived(self) -> PolicyStatus {
        PolicyStatus::Archived
    }

    /// Only ACTIVE policies are evaluated against events.
    pub fn is_evaluated(self) -> bool {
        self == PolicyStatus::Active
    }

    /// Whether the policy holds its (ruleType, action, templateKey) slot: archiving frees it.
    pub fn holds_slot(self) -> bool {
        self != PolicyStatus::Archived
    }

    /// New versions may be added, and the current version set, on DRAFT and ACTIVE policies;
    /// an archived policy's versions are kept but frozen (409).
    pub fn accepts_versions(self) -> bool {
        self != PolicyStatus::Archived
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_policy_is_a_draft_that_affects_no_operation() {
        assert_eq!(PolicyStatus::INITIAL, PolicyStatus::Draft);
        assert!(!PolicyStatus::INITIAL.is_evaluated());
    }

    #[test]
    fn activating_a_draft_makes_it_active_subject_to_the_slot() {
        assert_eq!(PolicyStatus::Draft.activation(), Activation::Activate);
    }

    #[test]
    fn activating_an_active_policy_succeeds_without_change() {
        assert_eq!(PolicyStatus::Active.activation(), Activation::AlreadyActive);
    }

    #[test]
    fn an_archived_policy_cannot_be_activated_again() {
        assert_eq!(PolicyStatus::Archived.activation(), Activation::Refused);
    }

    #[test]
    fn archive_has_no_state_guard() {
        for s in PolicyStatus::ALL {
            assert_eq!(s.archived(), PolicyStatus::Archived);
        }
    }

    #[test]
    fn an_archived_policy_stops_being_selected_and_frees_its_slot() {
        assert!(!PolicyStatus::Archived.is_evaluated());
        assert!(!PolicyStatus::Archived.holds_slot());
        assert!(PolicyStatus::Draft.holds_slot() && PolicyStatus::Active.holds_slot());
    }

    #[test]
    fn matching_events_are_checked_against_active_policies_only() {
        assert!(PolicyStatus::Active.is_evaluated());
        assert!(!PolicyStatus::Draft.is_evaluated());
    }

    #[test]
    fn drafts_and_active_policies_accept_versions_and_archived_ones_do_not() {
        assert!(PolicyStatus::Draft.accepts_versions());
        assert!(PolicyStatus::Active.accepts_versions());
        assert!(!PolicyStatus::Archived.accepts_versions());
    }
}
