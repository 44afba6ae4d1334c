//! The decision-table engine: what the ACTIVE policies governing an action decide about one
//! event. Pure and deterministic; the app loads the policies, builds the event and acts on the
//! decision.
//!
//! Every matching rule of every policy contributes (a rule matches when all its conditions
//! hold). Any REJECT refuses the event and outranks every approval. Otherwise the approvers of
//! matching rules are collected by step. A policy none of whose rules matches applies its
//! `defaults.unmatched`: AUTO_APPROVE contributes nothing, REQUIRE_MANUAL_REVIEW asks for a
//! manual review. Only when nothing asks for a person is the event approved; so an action no
//! ACTIVE policy governs is approved (policies are opt-in controls).

use super::catalogue::{ContextField, PolicyAction};
use super::condition::FieldValue;
use super::content::{Effect, PolicyContent, Unmatched};
use super::decimal::Decimal;
use crate::approval::ApproverExpr;
use crate::asset::{Amount, AssetId};
use crate::operation::Operation;
use std::collections::{BTreeMap, BTreeSet};

/// The values an event supplies for the context catalogue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyEvent {
    pub action: PolicyAction,
    /// For conversions, the source side's amount.
    pub amount: Decimal,
    /// For conversions, the source side's asset.
    pub asset_id: AssetId,
    /// The received asset, on conversion events.
    pub target_asset_id: Option<AssetId>,
}

impl PolicyEvent {
    pub fn new(action: PolicyAction, amount: Decimal, asset_id: AssetId) -> PolicyEvent {
        PolicyEvent { action, amount, asset_id, target_asset_id: None }
    }

    /// The event of an operation moving `amount` of `asset_id` (amounts are held in minor units).
    pub fn for_amount(action: PolicyAction, amount: Amount, asset_id: AssetId) -> PolicyEvent {
        let amount = Decimal::from_minor_units(amount.minor_units(), asset_id.minor_unit());
        PolicyEvent::new(action, amount, asset_id)
    }

    /// The event an operation presents to the policies of its action: what the settlement
    /// pipeline evaluates and the policy simulation evaluates again, so the two never differ.
    /// `None` for the types no policy governs (RELEASE and CANCEL).
    pub fn of_operation(operation: &Operation) -> Option<PolicyEvent> {
        let action = PolicyAction::for_tx_type(operation.tx_type)?;
        Some(PolicyEvent::for_amount(action, operation.amount, operation.asset_id))
    }

    pub fn with_target_asset(mut self, target: AssetId) -> PolicyEvent {
        self.target_asset_id = Some(target);
        self
    }

    /// The event's value of `field`, if it supplies one.
    pub fn value(&self, field: ContextField) -> Option<FieldValue> {
        match field {
            ContextField::Amount => Some(FieldValue::Amount(self.amount)),
            ContextField::AssetId => Some(FieldValue::Text(self.asset_id.code().to_owned())),
            ContextField::TargetAssetId => self.target_asset_id.map(|a| FieldValue::Text(a.code().to_owned())),
        }
    }
}

/// Why a contribution was made: the rule (or the policy's default) and its `reason`, if any.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reason {
    /// The policy's index in the slice given to `evaluate`.
    pub policy: usize,
    /// The matching rule; `None` when the policy's `defaults.unmatched` applied.
    pub rule_id: Option<String>,
    pub text: Option<String>,
}

/// The outcome of an evaluation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Nothing asks for a person: the operation proceeds.
    Approved,
    /// At least one matching rule said REJECT; `reasons` are those rules'.
    Rejected { reasons: Vec<Reason> },
    /// People must approve first.
    RequiresApproval {
        /// Approver expressions by step: every task of a step must be approved before the
        /// next step opens. May be empty when only a manual review is asked for.
        steps: BTreeMap<u32, BTreeSet<ApproverExpr>>,
        /// A policy matched no rule and its default is REQUIRE_MANUAL_REVIEW. The engine does
        /// not know who reviews: the app adds step 0 tasks for the organisation's users holding
        /// policy:update.
        manual_review: bool,
        /// The approver rules and the defaults that asked for a review, in policy then rule
        /// order.
        reasons: Vec<Reason>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvaluationError {
    /// A rule names a field the event does not supply: the evaluation cannot be trusted.
    #[error("rule {rule_id:?} of policy {policy} names {field}, which the event does not supply")]
    MissingField { policy: usize, rule_id: String, field: ContextField },
    /// A policy governing another action was given.
    #[error("policy {policy} governs {policy_action}, not the event's action {event_action}")]
    ActionMismatch { policy: usize, policy_action: PolicyAction, event_action: PolicyAction },
}

/// Evaluates `event` against `policies` (all ACTIVE policies governing its action; their
/// order only orders the reasons). Every rule is checked for fields the event lacks before
/// any is matched, so that the outcome never depends on rule order.
pub fn evaluate(policies: &[&PolicyContent], event: &PolicyEvent) -> Result<Decision, EvaluationError> {
    for (index, policy) in policies.iter().enumerate() {
        if policy.action != event.action {
            return Err(EvaluationError::ActionMismatch {
                policy: index,
                policy_action: policy.action,
                event_action: event.action,
            });
        }
        for rule in &policy.rules {
            if let Some(field) = rule.when.keys().find(|f| event.value(**f).is_none()) {
                return Err(EvaluationError::MissingField { policy: index, rule_id: rule.id.clone(), field: *field });
            }
        }
    }

    let mut rejections = Vec::new();
    let mut approvals = Vec::new();
    let mut manual_review = false;
    let mut steps: BTreeMap<u32, BTreeSet<ApproverExpr>> = BTreeMap::new();
    for (index, policy) in policies.iter().enumerate() {
        let mut matched = false;
        for rule in &policy.rules {
            let holds = rule
                .when
                .iter()
                .all(|(field, condition)| event.value(*field).is_some_and(|value| condition.matches(&value)));
            if !holds {
                continue;
            }
            matched = true;
            let reason = Reason { policy: index, rule_id: Some(rule.id.clone()), text: rule.reason.clone() };
            match &rule.effect {
                Effect::Reject => rejections.push(reason),
                Effect::Approver { approver, step } => {
                    steps.entry(*step).or_default().insert(approver.clone());
                    approvals.push(reason);
                }
                Effect::AutoApproval => {}
            }
        }
        if !matched && policy.unmatched == Unmatched::RequireManualReview {
            manual_review = true;
            approvals.push(Reason { policy: index, rule_id: None, text: None });
        }
    }

    if !rejections.is_empty() {
        return Ok(Decision::Rejected { reasons: rejections });
    }
    if steps.is_empty() && !manual_review {
        return Ok(Decision::Approved);
    }
    Ok(Decision::RequiresApproval { steps, manual_review, reasons: approvals })
}

#[cfg(test)]
mod tests;
