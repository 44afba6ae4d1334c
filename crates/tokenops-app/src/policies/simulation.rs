//! Policy simulation (beyond the spec): the decision each of the organisation's operations of
//! a time window got, beside the one it would get if a policy version, or content not saved
//! yet, took part in the ACTIVE policies. Read-only: one read transaction, nothing written.

use serde::Serialize;
use serde_json::Value;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use tokenops_domain::approval::{ApprovalSource, ApproverExpr};
use tokenops_domain::asset::format_minor_units;
use tokenops_domain::operation::{FailureCode, Operation, OperationFilter, OperationState, TxType};
use tokenops_domain::paging::PageRequest;
use tokenops_domain::policy::{Decision, PolicyAction, PolicyContent, PolicyEvent, PolicyStatus, evaluate};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::Tx;
use uuid::Uuid;

use super::templates::{stored_json, usable_template};
use super::{Policies, active_for_action, not_found, validated};
use crate::error::{AppResult, Code, Error};
use crate::settlement::{POLICY_RESOURCE_TYPE, resolve_approvers};

/// The longest window one simulation reads: a month of traffic.
pub const MAX_WINDOW_DAYS: i64 = 31;
/// The most operations one simulation examines (the window's newest).
pub const MAX_OPERATIONS: u32 = 1000;

/// What is simulated.
#[derive(Debug, Clone)]
pub enum SimulationSource {
    /// A stored version of a policy (`None`: its current one), in place of the policy itself.
    Version { policy_id: Uuid, version_number: Option<u32> },
    /// Content sent in the request, validated as creating a policy from the template would.
    Content { template_key: String, content: Value },
}

#[derive(Debug, Clone)]
pub struct Simulation {
    pub source: SimulationSource,
    /// Operations submitted at or after `from` and before `to`.
    pub from: Timestamp,
    pub to: Timestamp,
}

/// A decision on an operation, as the simulation reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SimulatedOutcome {
    /// Settled without asking anyone.
    Approve,
    /// Held for approvers.
    RequireApproval,
    /// Refused (a REJECT rule, or a rule naming a field the operation lacks).
    Reject,
    /// No policy governs it: RELEASE and CANCEL, or an action with no ACTIVE policy.
    NotGoverned,
    /// `got` only: the operation has had no policy decision (not evaluated yet, or failed
    /// before one: UNPROCESSABLE, POLICY_TIMEOUT).
    Undecided,
}

/// How the simulated content takes part in the ACTIVE policies of its action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SimulationMode {
    /// In place of the policy's current content (the policy is ACTIVE).
    Replaces,
    /// Beside the ACTIVE policies (content sent alone, or a policy that is not ACTIVE).
    Joins,
}

/// One examined operation.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SimulatedOperation {
    pub transaction_id: Uuid,
    pub tx_type: TxType,
    /// The policy action governing it; absent for RELEASE and CANCEL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<PolicyAction>,
    /// Decimal string in the asset's minor unit.
    pub amount: String,
    pub asset_id: String,
    #[schema(value_type = String, format = DateTime)]
    pub submitted_at: Timestamp,
    pub state: OperationState,
    pub got: SimulatedOutcome,
    pub would_get: SimulatedOutcome,
}

/// How many examined operations got `got` and would get `wouldGet`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutcomeCount {
    pub got: SimulatedOutcome,
    pub would_get: SimulatedOutcome,
    pub count: u64,
}

/// A simulation's answer.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SimulationOut {
    /// The simulated policy (absent for content sent alone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_id: Option<Uuid>,
    /// The simulated version (absent for content sent alone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version_number: Option<u32>,
    pub template_key: String,
    pub action: PolicyAction,
    pub mode: SimulationMode,
    #[schema(value_type = String, format = DateTime)]
    pub from: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    pub to: Timestamp,
    /// Every operation of the organisation submitted in the window.
    pub operations_in_window: u64,
    /// How many of them were examined: the newest, at most 1,000.
    pub examined: u64,
    /// The window held more operations than were examined.
    pub truncated: bool,
    /// How many examined operations would get another decision than they got.
    pub changed: u64,
    /// One entry per (got, wouldGet) pair that occurs, in the order of `operations`' outcomes.
    pub counts: Vec<OutcomeCount>,
    /// The examined operations, newest first.
    pub operations: Vec<SimulatedOperation>,
}

/// The content to simulate, for which action, and which policy (if any) it stands in for.
struct Candidate {
    content: PolicyContent,
    template_key: String,
    policy_id: Option<Uuid>,
    version_number: Option<u32>,
    replaces: bool,
}

/// The decision an operation got, from what is stored: a request its policy raised means it
/// was held; FAILED VALIDATION_REJECTED means refused; nothing decided yet or failed before a
/// decision is UNDECIDED; any other operation with a policy action passed.
fn got(operation: &Operation, held: &HashSet<Uuid>) -> SimulatedOutcome {
    if held.contains(&operation.id) {
        return SimulatedOutcome::RequireApproval;
    }
    if PolicyAction::for_tx_type(operation.tx_type).is_none() {
        return SimulatedOutcome::NotGoverned;
    }
    match (operation.state, operation.failure_code) {
        (OperationState::Failed, Some(FailureCode::ValidationRejected)) => SimulatedOutcome::Reject,
        (OperationState::Submitted, _)
        | (OperationState::Failed, Some(FailureCode::Unprocessable | FailureCode::PolicyTimeout)) => {
            SimulatedOutcome::Undecided
        }
        _ => SimulatedOutcome::Approve,
    }
}

/// A hold as the pipeline would resolve it: who submitted, the approvers by step, and whether a
/// manual review was asked for.
type Hold = (String, BTreeMap<u32, BTreeSet<ApproverExpr>>, bool);

/// What the pipeline's policy step would decide with `policies` governing the event of an
/// operation `submitter` submitted. A rule naming a field the event lacks is refused there, so
/// here too; and so is a hold no one could ever grant (its approvers as they resolve now, each
/// distinct hold resolved once per simulation in `grantable`).
async fn decide(
    tx: &mut dyn Tx,
    tenant: TenantId,
    submitter: &str,
    policies: &[&PolicyContent],
    event: &PolicyEvent,
    grantable: &mut BTreeMap<Hold, bool>,
) -> AppResult<SimulatedOutcome> {
    if policies.is_empty() {
        return Ok(SimulatedOutcome::NotGoverned);
    }
    Ok(match evaluate(policies, event) {
        Ok(Decision::Approved) => SimulatedOutcome::Approve,
        Ok(Decision::RequiresApproval { steps, manual_review, .. }) => {
            let hold = (submitter.to_owned(), steps, manual_review);
            let can_be_granted = match grantable.get(&hold) {
                Some(known) => *known,
                None => {
                    let resolved = resolve_approvers(tx, tenant, submitter, &hold.1, manual_review).await?;
                    *grantable.entry(hold).or_insert(resolved.problems.is_empty())
                }
            };
            if can_be_granted { SimulatedOutcome::RequireApproval } else { SimulatedOutcome::Reject }
        }
        Ok(Decision::Rejected { .. }) | Err(_) => SimulatedOutcome::Reject,
    })
}

fn check_window(from: Timestamp, to: Timestamp) -> AppResult<()> {
    if from >= to {
        return Err(Error::invalid_field("from", "must be before to"));
    }
    if to.as_micros() - from.as_micros() > MAX_WINDOW_DAYS * 24 * 3600 * 1_000_000 {
        return Err(Error::invalid_field("to", format!("the window may span at most {MAX_WINDOW_DAYS} days")));
    }
    Ok(())
}

async fn candidate(tx: &mut dyn Tx, tenant: TenantId, source: SimulationSource) -> AppResult<Candidate> {
    match source {
        SimulationSource::Content { template_key, content } => {
            let template = usable_template(tx, tenant, &template_key).await?;
            let content = validated(&content, template.action)?;
            Ok(Candidate {
                content,
                template_key: template.key,
                policy_id: None,
                version_number: None,
                replaces: false,
            })
        }
        SimulationSource::Version { policy_id, version_number } => {
            let policy = tx.policies().get(tenant, policy_id).await?.ok_or_else(|| not_found(policy_id))?;
            let number = version_number.unwrap_or(policy.version);
            let version = tx.policies().get_version(tenant, policy_id, number).await?.ok_or_else(|| {
                Error::not_found(format!("Policy {policy_id} has no version {number}"))
                    .with_code(Code::PolicyVersionNotFound)
            })?;
            let content = PolicyContent::validate(&stored_json(&version.content)?, policy.action).map_err(|v| {
                Error::internal(format!("policy {policy_id} version {number}: stored content is invalid: {v:?}"))
            })?;
            Ok(Candidate {
                content,
                template_key: policy.template_key,
                policy_id: Some(policy_id),
                version_number: Some(number),
                replaces: policy.status == PolicyStatus::Active,
            })
        }
    }
}

impl Policies {
    /// Simulates `s` over the window's newest operations (at most `MAX_OPERATIONS`), each
    /// against the ACTIVE policies of its own action as the pipeline reads them now, the
    /// candidate taking part in those of its action: in place of its policy when that is
    /// ACTIVE, beside them otherwise.
    pub async fn simulate(&self, tenant: TenantId, s: Simulation) -> AppResult<SimulationOut> {
        check_window(s.from, s.to)?;
        let mut tx = self.store.read().await?;
        let candidate = candidate(&mut *tx, tenant, s.source).await?;
        let action = candidate.content.action;

        let filter =
            OperationFilter { created_from: Some(s.from), created_to: Some(s.to), ..OperationFilter::default() };
        let found = tx.operations().list(tenant, &filter, PageRequest { page: 0, size: MAX_OPERATIONS }).await?;
        let ids: Vec<String> = found.items.iter().map(|o| o.id.to_string()).collect();
        let held: HashSet<Uuid> = tx
            .approvals()
            .requests_for_resources(tenant, POLICY_RESOURCE_TYPE, &ids)
            .await?
            .into_iter()
            .filter(|r| r.source == ApprovalSource::Policy)
            .filter_map(|r| r.resource_id.and_then(|id| Uuid::parse_str(&id).ok()))
            .collect();

        let mut active: HashMap<PolicyAction, Vec<PolicyContent>> = HashMap::new();
        let mut operations = Vec::with_capacity(found.items.len());
        let mut counts: BTreeMap<(SimulatedOutcome, SimulatedOutcome), u64> = BTreeMap::new();
        let mut grantable = BTreeMap::new();
        for operation in &found.items {
            let would_get = match PolicyEvent::of_operation(operation) {
                None => SimulatedOutcome::NotGoverned,
                Some(event) => {
                    let policies = match active.entry(event.action) {
                        Entry::Occupied(found) => found.into_mut(),
                        Entry::Vacant(slot) => {
                            let loaded = active_for_action(&mut *tx, tenant, event.action).await?;
                            let kept = loaded
                                .into_iter()
                                .filter(|p| !(candidate.replaces && Some(p.policy.id) == candidate.policy_id))
                                .map(|p| p.content);
                            slot.insert(kept.collect())
                        }
                    };
                    let mut governing: Vec<&PolicyContent> = policies.iter().collect();
                    if event.action == action {
                        governing.push(&candidate.content);
                    }
                    decide(&mut *tx, tenant, &operation.submitted_by, &governing, &event, &mut grantable).await?
                }
            };
            let got = got(operation, &held);
            *counts.entry((got, would_get)).or_default() += 1;
            operations.push(SimulatedOperation {
                transaction_id: operation.id,
                tx_type: operation.tx_type,
                action: PolicyAction::for_tx_type(operation.tx_type),
                amount: format_minor_units(operation.amount.minor_units(), operation.asset_id.minor_unit()),
                asset_id: operation.asset_id.to_string(),
                submitted_at: operation.created_at,
                state: operation.state,
                got,
                would_get,
            });
        }
        let examined = operations.len() as u64;
        Ok(SimulationOut {
            policy_id: candidate.policy_id,
            version_number: candidate.version_number,
            template_key: candidate.template_key,
            action,
            mode: if candidate.replaces { SimulationMode::Replaces } else { SimulationMode::Joins },
            from: s.from,
            to: s.to,
            operations_in_window: found.total,
            examined,
            truncated: found.total > examined,
            changed: counts.iter().filter(|((g, w), _)| g != w).map(|(_, n)| n).sum(),
            counts: counts
                .into_iter()
                .map(|((got, would_get), count)| OutcomeCount { got, would_get, count })
                .collect(),
            operations,
        })
    }
}
