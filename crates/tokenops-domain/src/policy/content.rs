//! Policy content: the rule document a policy version holds, validated against the context
//! catalogue of the action it governs. Validation reports every violation at once, each with
//! the JSON path of the offending element, so that a caller fixes a document in one round.
//!
//! ```text
//! {
//!   "appliesTo": {"action": "TRANSFER"},          required; must be the policy's action
//!   "hitPolicy": "COLLECT",                        optional, any JSON value, kept, no effect
//!   "rules": [                                     required array, may be empty
//!     {"id": "large-eur",                          non-empty, unique in the document
//!      "when": {"amount": ">= 10000", "assetId": "== EUR"},   object, may be empty (matches all)
//!      "emit": {"approver": "#treasury", "step": 0, "reason": "..."}}
//!   ],
//!   "defaults": {"unmatched": "REQUIRE_MANUAL_REVIEW"}       optional; this is the default
//! }
//! ```
//!
//! `emit` says exactly one effect: `"outcome": "REJECT"`, `"approver": "#groupKey"` (with an
//! optional `step`, 0 to `MAX_STEP`, default 0) or `"autoApproval": true` (`false` is no effect,
//! and may stand beside another); `reason` may go with any. Policy content names approvers by
//! group only (the specification's "a group key prefixed with #"); `user:<uuid>` expressions
//! belong to manual approval requests. Unknown keys are
//! errors at every level, so that a misspelt key (`"aprover"`) is not silently ignored.
//!
//! `PolicyContent` keeps a copy of the document as sent (`document()`): the store keeps that
//! verbatim, and holding it beside the validated form means what is stored is what was checked.

use super::catalogue::{ContextField, PolicyAction};
use super::condition::Condition;
use crate::approval::ApproverExpr;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashSet};

/// The highest approval step a rule may name: sequential sign-off beyond ten steps is a
/// mistake, not a control.
pub const MAX_STEP: u32 = 9;
/// The most rules one document may hold.
pub const MAX_RULES: usize = 500;
/// The longest rule id.
pub const RULE_ID_MAX_LEN: usize = 128;
/// The longest reason.
pub const REASON_MAX_LEN: usize = 1000;

/// One problem in a document: `field` is its JSON path (`rules[2].when.amount`,
/// `appliesTo.action`; empty for the document itself), `message` what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Violation {
    pub field: String,
    pub message: String,
}

impl Violation {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Violation {
        Violation { field: field.into(), message: message.into() }
    }

    /// The violation with its path under `prefix` (`content` makes `content.rules[0].id`), for
    /// a document nested in a request body.
    pub fn under(self, prefix: &str) -> Violation {
        let field = match (prefix.is_empty(), self.field.is_empty()) {
            (true, _) => self.field,
            (false, true) => prefix.to_owned(),
            (false, false) if self.field.starts_with('[') => format!("{prefix}{}", self.field),
            (false, false) => format!("{prefix}.{}", self.field),
        };
        Violation { field, message: self.message }
    }
}

crate::wire::wire_enum! {
    /// What a policy does with an event none of its rules matches (`defaults.unmatched`).
    #[derive(Default)]
    Unmatched {
        /// The event waits for a manual review (the default: an unforeseen case is a person's
        /// call).
        #[default]
        RequireManualReview => "REQUIRE_MANUAL_REVIEW",
        AutoApprove => "AUTO_APPROVE",
    }
}

/// What a matching rule contributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Refuses the event; outranks every approval.
    Reject,
    /// The group must approve at this step.
    Approver { approver: ApproverExpr, step: u32 },
    /// Contributes nothing, but counts as a match (the policy's default does not apply).
    AutoApproval,
}

/// A validated rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub id: String,
    /// Every condition must hold for the rule to match; empty matches every event.
    pub when: BTreeMap<ContextField, Condition>,
    pub effect: Effect,
    pub reason: Option<String>,
}

/// A validated policy content document.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyContent {
    pub action: PolicyAction,
    /// Stored as sent, whatever its type (the spec gives it none), and of no effect.
    pub hit_policy: Option<Value>,
    pub rules: Vec<Rule>,
    pub unmatched: Unmatched,
    document: Value,
}

impl PolicyContent {
    /// Validates `document` as the content of a policy governing `action`, collecting every
    /// violation.
    pub fn validate(document: &Value, action: PolicyAction) -> Result<PolicyContent, Vec<Violation>> {
        let mut v = Vec::new();
        let Some(root) = document.as_object() else {
            return Err(vec![Violation::new("", "must be a JSON object")]);
        };
        unknown_keys(root, "", &["appliesTo", "hitPolicy", "rules", "defaults"], &mut v);

        match root.get("appliesTo") {
            None => v.push(Violation::new("appliesTo", "is required")),
            Some(Value::Object(applies)) => {
                unknown_keys(applies, "appliesTo", &["action"], &mut v);
                match applies.get("action") {
                    None => v.push(Violation::new("appliesTo.action", "is required")),
                    Some(Value::String(text)) => match PolicyAction::parse(text) {
                        None => v.push(Violation::new(
                            "appliesTo.action",
                            format!("{text:?} is not a policy action; one of {}", names(&PolicyAction::ALL)),
                        )),
                        Some(a) if a != action => v.push(Violation::new(
                            "appliesTo.action",
                            format!("must be {action}, the action of the policy, not {a}"),
                        )),
                        Some(_) => {}
                    },
                    Some(_) => v.push(Violation::new("appliesTo.action", "must be a string")),
                }
            }
            Some(_) => v.push(Violation::new("appliesTo", "must be an object")),
        }

        let hit_policy = root.get("hitPolicy").filter(|h| !h.is_null()).cloned();

        let unmatched = match root.get("defaults") {
            None => Unmatched::default(),
            Some(Value::Object(defaults)) => {
                unknown_keys(defaults, "defaults", &["unmatched"], &mut v);
                match defaults.get("unmatched") {
                    None => Unmatched::default(),
                    Some(Value::String(text)) => Unmatched::parse(text).unwrap_or_else(|| {
                        v.push(Violation::new(
                            "defaults.unmatched",
                            format!("{text:?} is not REQUIRE_MANUAL_REVIEW or AUTO_APPROVE"),
                        ));
                        Unmatched::default()
                    }),
                    Some(_) => {
                        v.push(Violation::new("defaults.unmatched", "must be REQUIRE_MANUAL_REVIEW or AUTO_APPROVE"));
                        Unmatched::default()
                    }
                }
            }
            Some(_) => {
                v.push(Violation::new("defaults", "must be an object"));
                Unmatched::default()
            }
        };

        let mut rules = Vec::new();
        match root.get("rules") {
            None => v.push(Violation::new("rules", "is required (an empty array is allowed)")),
            Some(Value::Array(items)) => {
                if items.len() > MAX_RULES {
                    v.push(Violation::new("rules", format!("must hold at most {MAX_RULES} rules")));
                }
                let mut seen = HashSet::new();
                for (i, item) in items.iter().enumerate() {
                    if let Some(rule) = rule(item, &format!("rules[{i}]"), action, &mut seen, &mut v) {
                        rules.push(rule);
                    }
                }
            }
            Some(_) => v.push(Violation::new("rules", "must be an array")),
        }

        if v.is_empty() {
            Ok(PolicyContent { action, hit_policy, rules, unmatched, document: document.clone() })
        } else {
            Err(v)
        }
    }

    /// The document as sent.
    pub fn document(&self) -> &Value {
        &self.document
    }
}

fn names<T: std::fmt::Display>(all: &[T]) -> String {
    all.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

fn path(parent: &str, key: &str) -> String {
    if parent.is_empty() { key.to_owned() } else { format!("{parent}.{key}") }
}

fn unknown_keys(object: &Map<String, Value>, parent: &str, known: &[&str], v: &mut Vec<Violation>) {
    for key in object.keys().filter(|k| !known.contains(&k.as_str())) {
        v.push(Violation::new(path(parent, key), format!("is not a known key; expected {}", known.join(", "))));
    }
}

/// Validates one rule at `at`; `None` when it has a violation (recorded in `v`).
fn rule(
    item: &Value,
    at: &str,
    action: PolicyAction,
    seen: &mut HashSet<String>,
    v: &mut Vec<Violation>,
) -> Option<Rule> {
    let before = v.len();
    let Some(object) = item.as_object() else {
        v.push(Violation::new(at, "must be an object with id, when and emit"));
        return None;
    };
    unknown_keys(object, at, &["id", "when", "emit"], v);

    let id = match object.get("id") {
        None => {
            v.push(Violation::new(path(at, "id"), "is required"));
            None
        }
        Some(Value::String(id)) if id.trim().is_empty() => {
            v.push(Violation::new(path(at, "id"), "must not be blank"));
            None
        }
        Some(Value::String(id)) if id.chars().count() > RULE_ID_MAX_LEN => {
            v.push(Violation::new(path(at, "id"), format!("must be at most {RULE_ID_MAX_LEN} characters")));
            None
        }
        Some(Value::String(id)) => {
            if !seen.insert(id.clone()) {
                v.push(Violation::new(
                    path(at, "id"),
                    format!("{id:?} is the id of an earlier rule; ids must be unique"),
                ));
            }
            Some(id.clone())
        }
        Some(_) => {
            v.push(Violation::new(path(at, "id"), "must be a string"));
            None
        }
    };

    let when = match object.get("when") {
        None => {
            v.push(Violation::new(path(at, "when"), "is required (an empty object matches every event)"));
            BTreeMap::new()
        }
        Some(Value::Object(when)) => conditions(when, &path(at, "when"), action, v),
        Some(_) => {
            v.push(Violation::new(path(at, "when"), "must be an object mapping context fields to conditions"));
            BTreeMap::new()
        }
    };

    let emit = match object.get("emit") {
        None => {
            v.push(Violation::new(path(at, "emit"), "is required"));
            None
        }
        Some(Value::Object(emit_object)) => emit(emit_object, &path(at, "emit"), v),
        Some(_) => {
            v.push(Violation::new(path(at, "emit"), "must be an object"));
            None
        }
    };

    match (id, emit) {
        (Some(id), Some((effect, reason))) if v.len() == before => Some(Rule { id, when, effect, reason }),
        _ => None,
    }
}

fn conditions(
    when: &Map<String, Value>,
    at: &str,
    action: PolicyAction,
    v: &mut Vec<Violation>,
) -> BTreeMap<ContextField, Condition> {
    let mut out = BTreeMap::new();
    for (name, value) in when {
        let field_at = path(at, name);
        let Some(field) = action.field(name) else {
            v.push(Violation::new(
                field_at,
                format!("is not a context field of {action}; its fields are {}", names(action.fields())),
            ));
            continue;
        };
        let Value::String(text) = value else {
            v.push(Violation::new(field_at, "must be a condition string"));
            continue;
        };
        match Condition::parse(text, field) {
            Ok(condition) => {
                out.insert(field, condition);
            }
            Err(e) => v.push(Violation::new(field_at, e.to_string())),
        }
    }
    // The rule is judged on the fields it names, whether or not their conditions parsed.
    let names_amount = when.contains_key(ContextField::Amount.as_str());
    if names_amount && !when.contains_key(ContextField::AssetId.as_str()) {
        v.push(Violation::new(
            at,
            "a rule that compares amount must also constrain assetId: an amount means nothing without its currency",
        ));
    }
    out
}

fn emit(object: &Map<String, Value>, at: &str, v: &mut Vec<Violation>) -> Option<(Effect, Option<String>)> {
    let before = v.len();
    unknown_keys(object, at, &["outcome", "approver", "step", "autoApproval", "reason"], v);

    let reason = match object.get("reason") {
        None => None,
        Some(Value::String(r)) if r.chars().count() > REASON_MAX_LEN => {
            v.push(Violation::new(path(at, "reason"), format!("must be at most {REASON_MAX_LEN} characters")));
            None
        }
        Some(Value::String(r)) => Some(r.clone()),
        Some(_) => {
            v.push(Violation::new(path(at, "reason"), "must be a string"));
            None
        }
    };

    // `autoApproval: false` is a boolean saying "not automatic": no effect of its own, so it may
    // stand beside the effect the rule does name.
    let says_nothing = |k: &str| k == "autoApproval" && object.get(k) == Some(&Value::Bool(false));
    let given: Vec<&str> = ["outcome", "approver", "autoApproval"]
        .into_iter()
        .filter(|k| object.contains_key(*k) && !says_nothing(k))
        .collect();
    if given.len() != 1 {
        let what = match (given.is_empty(), says_nothing("autoApproval")) {
            (true, true) => "none (autoApproval false is no effect)".to_owned(),
            (true, false) => "none".to_owned(),
            (false, _) => given.join(" and "),
        };
        v.push(Violation::new(
            at,
            format!(
                "must say exactly one effect: outcome REJECT, approver #groupKey (with an optional step) or autoApproval true; found {what}"
            ),
        ));
    }
    if object.contains_key("step") && !object.contains_key("approver") {
        v.push(Violation::new(path(at, "step"), "applies only with an approver"));
    }

    let mut effect = None;
    if let Some(outcome) = object.get("outcome") {
        match outcome {
            Value::String(s) if s == "REJECT" => effect = Some(Effect::Reject),
            _ => v.push(Violation::new(path(at, "outcome"), "must be REJECT, the only outcome")),
        }
    }
    if let Some(auto) = object.get("autoApproval") {
        match auto {
            Value::Bool(true) => effect = Some(Effect::AutoApproval),
            Value::Bool(false) => {}
            _ => v.push(Violation::new(path(at, "autoApproval"), "must be a boolean")),
        }
    }
    if let Some(approver) = object.get("approver") {
        let step = match object.get("step") {
            None => Some(0),
            Some(step) => match step.as_u64().and_then(|s| u32::try_from(s).ok()) {
                Some(s) if s <= MAX_STEP => Some(s),
                _ => {
                    v.push(Violation::new(path(at, "step"), format!("must be a whole number from 0 to {MAX_STEP}")));
                    None
                }
            },
        };
        let expr = match approver {
            Value::String(text) if !text.starts_with('#') => {
                v.push(Violation::new(
                    path(at, "approver"),
                    "must be a group key prefixed with # (such as #approvers)",
                ));
                None
            }
            Value::String(text) => match ApproverExpr::parse(text) {
                Ok(expr) => Some(expr),
                Err(e) => {
                    v.push(Violation::new(path(at, "approver"), e.to_string()));
                    None
                }
            },
            _ => {
                v.push(Violation::new(path(at, "approver"), "must be a string such as #approvers"));
                None
            }
        };
        if let (Some(approver), Some(step)) = (expr, step) {
            effect = Some(Effect::Approver { approver, step });
        }
    }
    match effect {
        Some(effect) if v.len() == before => Some((effect, reason)),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
