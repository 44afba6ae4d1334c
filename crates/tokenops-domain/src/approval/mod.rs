//! Approvals: approver expressions, the request and task statuses, and the step rule that
//! decides when a task may be acted on and what a decision does to its request. Pure: the
//! app loads a request's tasks and asks these functions.

use crate::wire::wire_enum;
use std::fmt;
use std::str::FromStr;
use uuid::Uuid;

mod entities;
pub use entities::{ApprovalRequest, ApprovalRequestFilter, ApprovalSource, ApprovalTask, ApprovalTaskFilter};

/// The longest group key, as the group endpoints accept it.
pub const GROUP_KEY_MAX_LEN: usize = 64;

/// Who may act on a task: every ACTIVE member of a group (`#groupKey`), or one user
/// (`user:<uuid>`). Ordered (groups first, then users) so that sets of them print
/// deterministically.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ApproverExpr {
    /// The key as written; groups are looked up case-insensitively when resolved.
    Group(String),
    User(Uuid),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApproverExprError {
    #[error("{0:?} is not an approver expression: write #groupKey or user:<uuid>")]
    Unknown(String),
    #[error(
        "{0:?} is not a group key: 1 to {GROUP_KEY_MAX_LEN} letters, digits, '_', '-' or '.', starting with a letter or digit"
    )]
    BadGroupKey(String),
    #[error("{0:?} is not a user id (a UUID)")]
    BadUserId(String),
}

/// Whether `key` is a valid group key: the rule the group endpoints apply when a group is made.
pub fn is_group_key(key: &str) -> bool {
    key.len() <= GROUP_KEY_MAX_LEN
        && key.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

impl ApproverExpr {
    pub fn parse(text: &str) -> Result<ApproverExpr, ApproverExprError> {
        if let Some(key) = text.strip_prefix('#') {
            return if is_group_key(key) {
                Ok(ApproverExpr::Group(key.to_owned()))
            } else {
                Err(ApproverExprError::BadGroupKey(key.to_owned()))
            };
        }
        if let Some(id) = text.strip_prefix("user:") {
            // Only the hyphenated form: one spelling per user keeps sets of approvers exact.
            return crate::ids::canonical_uuid(id)
                .map(ApproverExpr::User)
                .ok_or_else(|| ApproverExprError::BadUserId(id.to_owned()));
        }
        Err(ApproverExprError::Unknown(text.to_owned()))
    }

    pub fn group_key(&self) -> Option<&str> {
        match self {
            ApproverExpr::Group(key) => Some(key),
            ApproverExpr::User(_) => None,
        }
    }
}

/// `#groupKey` or `user:<uuid>` (lower-case hyphenated): what `parse` reads.
impl fmt::Display for ApproverExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApproverExpr::Group(key) => write!(f, "#{key}"),
            ApproverExpr::User(id) => write!(f, "user:{}", id.hyphenated()),
        }
    }
}

impl FromStr for ApproverExpr {
    type Err = ApproverExprError;

    fn from_str(text: &str) -> Result<ApproverExpr, ApproverExprError> {
        ApproverExpr::parse(text)
    }
}

impl serde::Serialize for ApproverExpr {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for ApproverExpr {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<ApproverExpr, D::Error> {
        let text = String::deserialize(deserializer)?;
        ApproverExpr::parse(&text).map_err(serde::de::Error::custom)
    }
}

wire_enum! {
    /// An approval request's status: PENDING until resolved, then one of the others for good.
    ApprovalRequestStatus {
        Pending => "PENDING",
        Approved => "APPROVED",
        Rejected => "REJECTED",
        Cancelled => "CANCELLED",
        Expired => "EXPIRED",
    }
}

impl ApprovalRequestStatus {
    pub fn is_terminal(self) -> bool {
        self != ApprovalRequestStatus::Pending
    }

    /// Cancel is allowed only while PENDING (409 otherwise).
    pub fn may_cancel(self) -> bool {
        self == ApprovalRequestStatus::Pending
    }

    /// What the request's still-PENDING tasks become once it reaches this status, so that no
    /// approver is left a task nobody can act on. A rejected request's other tasks are
    /// CANCELLED; an approved one has none left.
    pub fn pending_tasks_become(self) -> Option<ApprovalTaskState> {
        match self {
            ApprovalRequestStatus::Pending | ApprovalRequestStatus::Approved => None,
            ApprovalRequestStatus::Rejected | ApprovalRequestStatus::Cancelled => Some(ApprovalTaskState::Cancelled),
            ApprovalRequestStatus::Expired => Some(ApprovalTaskState::Expired),
        }
    }
}

wire_enum! {
    /// An approval task's state. A task is acted on once; tasks still PENDING when their request
    /// is cancelled or expires take that state.
    ApprovalTaskState {
        Pending => "PENDING",
        Approved => "APPROVED",
        Rejected => "REJECTED",
        Cancelled => "CANCELLED",
        Expired => "EXPIRED",
    }
}

/// What an eligible approver decides on a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskDecision {
    Approve,
    Reject,
}

impl TaskDecision {
    pub fn task_state(self) -> ApprovalTaskState {
        match self {
            TaskDecision::Approve => ApprovalTaskState::Approved,
            TaskDecision::Reject => ApprovalTaskState::Rejected,
        }
    }
}

/// A task as the step rule sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskStep {
    pub step: u32,
    pub state: ApprovalTaskState,
}

/// Why a caller may not decide a task: 403 Forbidden (separation of duties).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ActorError {
    #[error("the initiator of an approval request cannot approve or reject it")]
    Initiator,
    #[error("the caller is not an eligible approver of this task")]
    NotEligible,
}

/// Whether `caller` may decide a task of a request `initiator` raised; `eligible` is whether
/// the task's approver set (resolved by the app) holds the caller. The initiator is refused
/// even when eligible: nobody approves their own operation.
pub fn check_actor(caller: Uuid, initiator: Uuid, eligible: bool) -> Result<(), ActorError> {
    if caller == initiator {
        return Err(ActorError::Initiator);
    }
    if !eligible {
        return Err(ActorError::NotEligible);
    }
    Ok(())
}

/// Why a task cannot be reassigned to a new approver expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReassignError {
    /// 400: the expression names nobody but the initiator.
    #[error("the approver expression resolves only to the initiator")]
    OnlyInitiator,
    /// 409: reassigning must change who may approve.
    #[error("the approver set is unchanged")]
    Unchanged,
}

/// The eligible approvers after reassigning a task from `current` to `resolved` (the new
/// expression's users): the initiator is never among them, and the set must change.
pub fn reassigned_approvers(
    current: &std::collections::BTreeSet<Uuid>,
    resolved: &std::collections::BTreeSet<Uuid>,
    initiator: Uuid,
) -> Result<std::collections::BTreeSet<Uuid>, ReassignError> {
    let mut approvers = resolved.clone();
    approvers.remove(&initiator);
    if approvers.is_empty() {
        return Err(ReassignError::OnlyInitiator);
    }
    if &approvers == current {
        return Err(ReassignError::Unchanged);
    }
    Ok(approvers)
}

/// Why a task cannot be acted on now; all are 409 Conflict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ActError {
    #[error("the approval request is no longer pending")]
    RequestNotPending,
    #[error("the task has already been acted on")]
    AlreadyActedOn,
    #[error("an earlier step of the approval request is still pending")]
    EarlierStepPending,
    /// The index given to `act` names no task of the request (a caller's bug).
    #[error("the approval request has no such task")]
    NoSuchTask,
}

/// Whether step `step` is open: every task of every earlier step is APPROVED, so that step 0
/// then step 1 gives sequential sign-off.
pub fn step_is_open(tasks: &[TaskStep], step: u32) -> bool {
    tasks.iter().filter(|t| t.step < step).all(|t| t.state == ApprovalTaskState::Approved)
}

/// Whether `task` (one of `tasks`, the request's tasks) may be acted on now. Eligibility (the
/// initiator, a non-approver: 403) is the app's check, made before this one.
pub fn may_act(request: ApprovalRequestStatus, tasks: &[TaskStep], task: TaskStep) -> Result<(), ActError> {
    if request != ApprovalRequestStatus::Pending {
        return Err(ActError::RequestNotPending);
    }
    if task.state != ApprovalTaskState::Pending {
        return Err(ActError::AlreadyActedOn);
    }
    if !step_is_open(tasks, task.step) {
        return Err(ActError::EarlierStepPending);
    }
    Ok(())
}

/// The request's status given its tasks: one rejection rejects it; when every task is
/// approved (the last approval of the last step) it is granted; otherwise it stays PENDING.
/// A request with no task has nothing left to approve, so it reads as granted.
pub fn request_status(tasks: &[TaskStep]) -> ApprovalRequestStatus {
    if tasks.iter().any(|t| t.state == ApprovalTaskState::Rejected) {
        ApprovalRequestStatus::Rejected
    } else if tasks.iter().all(|t| t.state == ApprovalTaskState::Approved) {
        ApprovalRequestStatus::Approved
    } else {
        ApprovalRequestStatus::Pending
    }
}

/// Applies `decision` to `tasks[index]` after checking `may_act`: returns the request's
/// status afterwards. `tasks` is changed only when the act is allowed.
pub fn act(
    request: ApprovalRequestStatus,
    tasks: &mut [TaskStep],
    index: usize,
    decision: TaskDecision,
) -> Result<ApprovalRequestStatus, ActError> {
    let task = *tasks.get(index).ok_or(ActError::NoSuchTask)?;
    may_act(request, tasks, task)?;
    if let Some(t) = tasks.get_mut(index) {
        t.state = decision.task_state();
    }
    Ok(request_status(tasks))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ApprovalTaskState::{Approved, Pending, Rejected};

    fn t(step: u32, state: ApprovalTaskState) -> TaskStep {
        TaskStep { step, state }
    }

    #[test]
    fn approver_expressions_round_trip() {
        for text in ["#approvers", "#risk.desk-2_EU", "user:0190a5c0-7b6e-7c3a-9d2e-5f1a2b3c4d5e"] {
            let parsed = ApproverExpr::parse(text);
            assert_eq!(parsed.as_ref().map(ToString::to_string).ok(), Some(text.to_owned()));
        }
    }

    #[test]
    fn malformed_approver_expressions_are_refused() {
        for bad in ["approvers", "#", "#-lead", "#a b", &format!("#{}", "a".repeat(65)), "user:", "user:42", "@x"] {
            assert!(ApproverExpr::parse(bad).is_err(), "{bad}");
        }
        assert!(ApproverExpr::parse(&format!("#{}", "a".repeat(64))).is_ok());
        // Only the canonical hyphenated spelling of a user id.
        assert!(ApproverExpr::parse("user:0190a5c07b6e7c3a9d2e5f1a2b3c4d5e").is_err());
    }

    #[test]
    fn upper_case_user_ids_print_lower_case() {
        let e = ApproverExpr::parse("user:0190A5C0-7B6E-7C3A-9D2E-5F1A2B3C4D5E");
        assert_eq!(e.map(|e| e.to_string()).ok().as_deref(), Some("user:0190a5c0-7b6e-7c3a-9d2e-5f1a2b3c4d5e"));
    }

    #[test]
    fn statuses_parse_for_filters_and_only_pending_is_not_terminal() {
        for s in ApprovalRequestStatus::ALL {
            assert_eq!(ApprovalRequestStatus::parse(s.as_str()), Some(s));
            assert_eq!(s.is_terminal(), s != ApprovalRequestStatus::Pending);
        }
        for s in ApprovalTaskState::ALL {
            assert_eq!(ApprovalTaskState::parse(s.as_str()), Some(s));
        }
        assert_eq!(ApprovalTaskState::parse("DONE"), None);
    }

    #[test]
    fn cancel_is_allowed_only_while_pending() {
        for s in ApprovalRequestStatus::ALL {
            assert_eq!(s.may_cancel(), s == ApprovalRequestStatus::Pending);
        }
    }

    #[test]
    fn a_task_can_be_acted_on_once() {
        let tasks = [t(0, Approved)];
        assert_eq!(may_act(ApprovalRequestStatus::Pending, &tasks, tasks[0]), Err(ActError::AlreadyActedOn));
        let tasks = [t(0, Rejected), t(0, Pending)];
        assert_eq!(may_act(ApprovalRequestStatus::Pending, &tasks, tasks[0]), Err(ActError::AlreadyActedOn));
    }

    #[test]
    fn a_higher_step_cannot_be_acted_on_while_an_earlier_step_is_pending() {
        let tasks = [t(0, Approved), t(0, Pending), t(1, Pending)];
        assert_eq!(may_act(ApprovalRequestStatus::Pending, &tasks, tasks[2]), Err(ActError::EarlierStepPending));
        assert_eq!(may_act(ApprovalRequestStatus::Pending, &tasks, tasks[1]), Ok(()));
    }

    #[test]
    fn each_steps_tasks_must_all_be_approved_before_the_next_opens() {
        let tasks = [t(0, Approved), t(0, Approved), t(2, Pending)];
        assert!(step_is_open(&tasks, 2));
        assert_eq!(may_act(ApprovalRequestStatus::Pending, &tasks, tasks[2]), Ok(()));
        // Steps need not be consecutive: step 2 waits for step 0 and nothing else.
        assert!(step_is_open(&[t(0, Pending)], 0));
    }

    #[test]
    fn tasks_of_a_resolved_request_cannot_be_acted_on() {
        let tasks = [t(0, Pending)];
        for s in [ApprovalRequestStatus::Cancelled, ApprovalRequestStatus::Expired, ApprovalRequestStatus::Rejected] {
            assert_eq!(may_act(s, &tasks, tasks[0]), Err(ActError::RequestNotPending));
        }
    }

    #[test]
    fn one_rejection_rejects_the_request() {
        let mut tasks = [t(0, Approved), t(1, Pending), t(1, Pending), t(2, Pending)];
        assert_eq!(
            act(ApprovalRequestStatus::Pending, &mut tasks, 1, TaskDecision::Reject),
            Ok(ApprovalRequestStatus::Rejected)
        );
        assert_eq!(tasks[1].state, Rejected);
    }

    #[test]
    fn the_last_approval_of_the_last_step_grants_the_request() {
        let mut tasks = [t(0, Pending), t(1, Pending)];
        let pending = ApprovalRequestStatus::Pending;
        assert_eq!(act(pending, &mut tasks, 0, TaskDecision::Approve), Ok(ApprovalRequestStatus::Pending));
        assert_eq!(act(pending, &mut tasks, 1, TaskDecision::Approve), Ok(ApprovalRequestStatus::Approved));
    }

    #[test]
    fn a_refused_act_changes_nothing() {
        let mut tasks = [t(0, Pending), t(1, Pending)];
        assert_eq!(
            act(ApprovalRequestStatus::Pending, &mut tasks, 1, TaskDecision::Approve),
            Err(ActError::EarlierStepPending)
        );
        assert_eq!(tasks, [t(0, Pending), t(1, Pending)]);
    }

    #[test]
    fn the_initiator_cannot_approve_or_reject() {
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        assert_eq!(check_actor(a, a, true), Err(ActorError::Initiator));
        assert_eq!(check_actor(b, a, true), Ok(()));
    }

    #[test]
    fn a_user_who_is_not_an_eligible_approver_cannot_act() {
        assert_eq!(check_actor(Uuid::from_u128(2), Uuid::from_u128(1), false), Err(ActorError::NotEligible));
    }

    #[test]
    fn reassigning_must_change_the_approver_set_and_not_name_only_the_initiator() {
        let (initiator, x, y) = (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3));
        let current = std::collections::BTreeSet::from([x]);
        assert_eq!(reassigned_approvers(&current, &[initiator].into(), initiator), Err(ReassignError::OnlyInitiator));
        assert_eq!(reassigned_approvers(&current, &[x, initiator].into(), initiator), Err(ReassignError::Unchanged));
        assert_eq!(reassigned_approvers(&current, &[y, initiator].into(), initiator), Ok([y].into()));
    }

    #[test]
    fn acting_on_a_task_the_request_lacks_is_refused() {
        let mut tasks = [t(0, Pending)];
        assert_eq!(
            act(ApprovalRequestStatus::Pending, &mut tasks, 3, TaskDecision::Approve),
            Err(ActError::NoSuchTask)
        );
    }

    #[test]
    fn pending_tasks_close_with_their_request() {
        use ApprovalRequestStatus as R;
        assert_eq!(R::Pending.pending_tasks_become(), None);
        assert_eq!(R::Approved.pending_tasks_become(), None);
        assert_eq!(R::Rejected.pending_tasks_become(), Some(ApprovalTaskState::Cancelled));
        assert_eq!(R::Cancelled.pending_tasks_become(), Some(ApprovalTaskState::Cancelled));
        assert_eq!(R::Expired.pending_tasks_become(), Some(ApprovalTaskState::Expired));
    }

    #[test]
    fn approver_expressions_serialise_as_their_text() {
        let e = ApproverExpr::Group("risk".into());
        assert_eq!(serde_json::to_value(&e).ok(), Some(serde_json::json!("#risk")));
        let back: Result<ApproverExpr, _> = serde_json::from_value(serde_json::json!("#risk"));
        assert_eq!(back.ok(), Some(e));
        assert!(serde_json::from_value::<ApproverExpr>(serde_json::json!("risk")).is_err());
    }

    #[test]
    fn otherwise_the_request_stays_pending() {
        assert_eq!(request_status(&[t(0, Approved), t(0, Pending)]), ApprovalRequestStatus::Pending);
        assert_eq!(request_status(&[]), ApprovalRequestStatus::Approved);
    }
}
