//! One test per rule of the specification's policy content, named for it.

use super::*;
use crate::policy::condition::FieldValue;
use crate::policy::decimal::Decimal;
use serde_json::json;

fn transfer_doc(rules: Value) -> Value {
    json!({"appliesTo": {"action": "TRANSFER"}, "rules": rules})
}

fn valid(doc: &Value, action: PolicyAction) -> PolicyContent {
    PolicyContent::validate(doc, action).unwrap_or_else(|v| panic!("{v:?}"))
}

fn violations(doc: &Value, action: PolicyAction) -> Vec<Violation> {
    match PolicyContent::validate(doc, action) {
        Ok(_) => panic!("{doc} validated"),
        Err(v) => v,
    }
}

/// The one violation of `doc`: at `field`, its message naming `says`.
#[track_caller]
fn assert_one_violation(doc: &Value, action: PolicyAction, field: &str, says: &str) {
    let v = violations(doc, action);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].field, field);
    assert!(v[0].message.contains(says), "{}", v[0].message);
}

fn fields(doc: &Value, action: PolicyAction) -> Vec<String> {
    violations(doc, action).into_iter().map(|v| v.field).collect()
}

fn eur_rule(id: &str, emit: Value) -> Value {
    json!({"id": id, "when": {"assetId": "== EUR", "amount": ">= 10000"}, "emit": emit})
}

#[test]
fn a_valid_document_validates_into_rules() {
    let doc = transfer_doc(json!([
        eur_rule("big", json!({"approver": "#treasury", "step": 1, "reason": "large"})),
        {"id": "any", "when": {}, "emit": {"autoApproval": true}},
        {"id": "usd", "when": {"assetId": "== usd"}, "emit": {"outcome": "REJECT"}},
    ]));
    let content = valid(&doc, PolicyAction::Transfer);
    assert_eq!(content.action, PolicyAction::Transfer);
    assert_eq!(content.rules.len(), 3);
    assert_eq!(content.rules[0].effect, Effect::Approver { approver: ApproverExpr::Group("treasury".into()), step: 1 });
    assert_eq!(content.rules[0].reason.as_deref(), Some("large"));
    assert_eq!(content.rules[1].effect, Effect::AutoApproval);
    assert!(content.rules[1].when.is_empty());
    assert_eq!(content.rules[2].effect, Effect::Reject);
    assert_eq!(
        content.rules[2].when.get(&ContextField::AssetId),
        Some(&Condition::Equals(FieldValue::Text("USD".into())))
    );
    let amount = content.rules[0].when.get(&ContextField::Amount);
    assert!(amount.is_some_and(|c| c.matches(&FieldValue::Amount(Decimal::from_minor_units(1_000_000, 2)))));
}

#[test]
fn applies_to_action_is_required() {
    assert_eq!(fields(&json!({"rules": []}), PolicyAction::Transfer), ["appliesTo"]);
    assert_eq!(fields(&json!({"appliesTo": {}, "rules": []}), PolicyAction::Transfer), ["appliesTo.action"]);
}

#[test]
fn applies_to_action_must_be_the_action_the_policy_governs() {
    let doc = json!({"appliesTo": {"action": "MINT"}, "rules": []});
    assert_eq!(fields(&doc, PolicyAction::Transfer), ["appliesTo.action"]);
    let doc = json!({"appliesTo": {"action": "PAYMENT"}, "rules": []});
    assert_eq!(fields(&doc, PolicyAction::Transfer), ["appliesTo.action"]);
    assert!(
        PolicyContent::validate(&json!({"appliesTo": {"action": "MINT"}, "rules": []}), PolicyAction::Mint).is_ok()
    );
}

#[test]
fn hit_policy_is_stored_as_sent_and_has_no_effect() {
    let doc = json!({"appliesTo": {"action": "TRANSFER"}, "hitPolicy": "FIRST", "rules": [
        {"id": "a", "when": {}, "emit": {"outcome": "REJECT"}},
        {"id": "b", "when": {}, "emit": {"approver": "#x"}},
    ]});
    let content = valid(&doc, PolicyAction::Transfer);
    assert_eq!(content.hit_policy, Some(json!("FIRST")));
    assert_eq!(content.rules.len(), 2);
    // Whatever its type: the spec gives it none.
    for sent in [json!(1), json!({"mode": "collect"}), json!(["a"]), json!(true)] {
        let doc = json!({"appliesTo": {"action": "TRANSFER"}, "hitPolicy": sent, "rules": []});
        let content = valid(&doc, PolicyAction::Transfer);
        assert_eq!(content.hit_policy.as_ref(), Some(&sent));
        assert_eq!(content.document(), &doc);
    }
}

#[test]
fn the_document_is_kept_verbatim() {
    let doc = json!({"appliesTo": {"action": "TRANSFER"}, "hitPolicy": "whatever", "rules": [
        {"id": "r", "when": {"amount": "[1000.00 .. 5000)", "assetId": "==eur"}, "emit": {"approver": "#a"}}
    ]});
    assert_eq!(valid(&doc, PolicyAction::Transfer).document(), &doc);
}

#[test]
fn rules_are_required_and_may_be_empty() {
    assert_eq!(fields(&json!({"appliesTo": {"action": "TRANSFER"}}), PolicyAction::Transfer), ["rules"]);
    assert!(valid(&transfer_doc(json!([])), PolicyAction::Transfer).rules.is_empty());
    assert_eq!(fields(&transfer_doc(json!({})), PolicyAction::Transfer), ["rules"]);
}

#[test]
fn a_rule_is_an_object_with_id_when_and_emit() {
    let doc = transfer_doc(json!(["r", {}]));
    assert_eq!(fields(&doc, PolicyAction::Transfer), ["rules[0]", "rules[1].id", "rules[1].when", "rules[1].emit"]);
}

#[test]
fn rule_ids_are_non_blank_strings() {
    let doc = transfer_doc(json!([
        {"id": " ", "when": {}, "emit": {"autoApproval": true}},
        {"id": 7, "when": {}, "emit": {"autoApproval": true}},
    ]));
    assert_eq!(fields(&doc, PolicyAction::Transfer), ["rules[0].id", "rules[1].id"]);
}

#[test]
fn rule_ids_are_unique_within_the_content() {
    let doc = transfer_doc(json!([
        {"id": "r", "when": {}, "emit": {"autoApproval": true}},
        {"id": "r", "when": {}, "emit": {"outcome": "REJECT"}},
    ]));
    assert_eq!(fields(&doc, PolicyAction::Transfer), ["rules[1].id"]);
}

#[test]
fn when_maps_context_fields_to_condition_strings() {
    let doc = transfer_doc(json!([{"id": "r", "when": {"assetId": 5}, "emit": {"autoApproval": true}}]));
    assert_eq!(fields(&doc, PolicyAction::Transfer), ["rules[0].when.assetId"]);
    let doc = transfer_doc(json!([{"id": "r", "when": ["amount"], "emit": {"autoApproval": true}}]));
    assert_eq!(fields(&doc, PolicyAction::Transfer), ["rules[0].when"]);
}

#[test]
fn only_catalogue_fields_may_be_named() {
    let doc = transfer_doc(json!([{"id": "r", "when": {"counterpartyRef": "== X"}, "emit": {"autoApproval": true}}]));
    assert_one_violation(&doc, PolicyAction::Transfer, "rules[0].when.counterpartyRef", "amount, assetId");
}

#[test]
fn target_asset_id_is_a_field_of_conversion_actions_only() {
    let rule = json!([{"id": "r", "when": {"targetAssetId": "== USD"}, "emit": {"autoApproval": true}}]);
    assert_eq!(fields(&transfer_doc(rule.clone()), PolicyAction::Transfer), ["rules[0].when.targetAssetId"]);
    for action in [PolicyAction::FiatToken, PolicyAction::TokenFiat, PolicyAction::FxConversion] {
        let doc = json!({"appliesTo": {"action": action.as_str()}, "rules": rule});
        assert!(PolicyContent::validate(&doc, action).is_ok(), "{action}");
    }
}

#[test]
fn operators_unsuited_to_a_field_type_are_rejected() {
    let doc = transfer_doc(json!([
        {"id": "r", "when": {"assetId": ">= EUR"}, "emit": {"autoApproval": true}},
        {"id": "s", "when": {"assetId": "== EUR", "amount": "== EUR"}, "emit": {"autoApproval": true}},
    ]));
    assert_eq!(fields(&doc, PolicyAction::Transfer), ["rules[0].when.assetId", "rules[1].when.amount"]);
}

#[test]
fn the_not_equal_operator_is_rejected() {
    let doc = transfer_doc(json!([{"id": "r", "when": {"assetId": "!= EUR"}, "emit": {"outcome": "REJECT"}}]));
    assert_one_violation(&doc, PolicyAction::Transfer, "rules[0].when.assetId", "!= is not supported");
}

#[test]
fn a_misspelt_currency_is_rejected() {
    let doc = transfer_doc(json!([{"id": "r", "when": {"assetId": "== EUT"}, "emit": {"outcome": "REJECT"}}]));
    assert_eq!(fields(&doc, PolicyAction::Transfer), ["rules[0].when.assetId"]);
}

#[test]
fn a_rule_that_compares_amount_must_also_constrain_asset_id() {
    let doc = transfer_doc(json!([{"id": "r", "when": {"amount": ">= 10000"}, "emit": {"approver": "#a"}}]));
    assert_one_violation(&doc, PolicyAction::Transfer, "rules[0].when", "assetId");
    // Also on conversions, where targetAssetId does not stand in for the source asset.
    let doc = json!({"appliesTo": {"action": "FX_CONVERSION"}, "rules": [
        {"id": "r", "when": {"amount": ">= 1", "targetAssetId": "== USD"}, "emit": {"approver": "#a"}}
    ]});
    assert_eq!(fields(&doc, PolicyAction::FxConversion), ["rules[0].when"]);
}

#[test]
fn emit_auto_approval_true_approves_automatically() {
    let doc = transfer_doc(json!([{"id": "r", "when": {}, "emit": {"autoApproval": true, "reason": "small"}}]));
    assert_eq!(valid(&doc, PolicyAction::Transfer).rules[0].effect, Effect::AutoApproval);
    // false is no effect: alone the rule says nothing; beside an approver or an outcome it is
    // as if absent.
    let doc = transfer_doc(json!([{"id": "r", "when": {}, "emit": {"autoApproval": false}}]));
    assert_eq!(fields(&doc, PolicyAction::Transfer), ["rules[0].emit"]);
    let doc =
        transfer_doc(json!([{"id": "r", "when": {}, "emit": {"autoApproval": false, "approver": "#a", "step": 1}}]));
    assert_eq!(
        valid(&doc, PolicyAction::Transfer).rules[0].effect,
        Effect::Approver { approver: ApproverExpr::Group("a".into()), step: 1 }
    );
    let doc = transfer_doc(json!([{"id": "r", "when": {}, "emit": {"autoApproval": false, "outcome": "REJECT"}}]));
    assert_eq!(valid(&doc, PolicyAction::Transfer).rules[0].effect, Effect::Reject);
    let doc = transfer_doc(json!([{"id": "r", "when": {}, "emit": {"autoApproval": "true"}}]));
    assert_eq!(fields(&doc, PolicyAction::Transfer), ["rules[0].emit.autoApproval"]);
}

#[test]
fn emit_approver_is_a_group_key_prefixed_with_hash() {
    for bad in
        [json!("approvers"), json!("#"), json!("#a b"), json!(3), json!("user:0190a5c0-7b6e-7c3a-9d2e-5f1a2b3c4d5e")]
    {
        let doc = transfer_doc(json!([{"id": "r", "when": {}, "emit": {"approver": bad}}]));
        assert_eq!(fields(&doc, PolicyAction::Transfer), ["rules[0].emit.approver"], "{bad}");
    }
}

#[test]
fn emit_step_defaults_to_zero_and_is_a_small_whole_number() {
    let doc = transfer_doc(json!([{"id": "r", "when": {}, "emit": {"approver": "#a"}}]));
    assert_eq!(
        valid(&doc, PolicyAction::Transfer).rules[0].effect,
        Effect::Approver { approver: ApproverExpr::Group("a".into()), step: 0 }
    );
    for bad in [json!(-1), json!(1.5), json!("1"), json!(MAX_STEP + 1)] {
        let doc = transfer_doc(json!([{"id": "r", "when": {}, "emit": {"approver": "#a", "step": bad}}]));
        assert_eq!(fields(&doc, PolicyAction::Transfer), ["rules[0].emit.step"], "{bad}");
    }
}

#[test]
fn emit_step_applies_only_with_an_approver() {
    let doc = transfer_doc(json!([{"id": "r", "when": {}, "emit": {"outcome": "REJECT", "step": 1}}]));
    assert_eq!(fields(&doc, PolicyAction::Transfer), ["rules[0].emit.step"]);
}

#[test]
fn emit_outcome_is_reject() {
    let doc = transfer_doc(json!([{"id": "r", "when": {}, "emit": {"outcome": "APPROVE"}}]));
    assert_eq!(fields(&doc, PolicyAction::Transfer), ["rules[0].emit.outcome"]);
}

#[test]
fn emit_says_exactly_one_effect() {
    let doc = transfer_doc(json!([
        {"id": "none", "when": {}, "emit": {"reason": "why"}},
        {"id": "two", "when": {}, "emit": {"outcome": "REJECT", "approver": "#a"}},
    ]));
    assert_eq!(fields(&doc, PolicyAction::Transfer), ["rules[0].emit", "rules[1].emit"]);
}

#[test]
fn emit_reason_is_an_optional_string() {
    let doc = transfer_doc(json!([{"id": "r", "when": {}, "emit": {"outcome": "REJECT", "reason": 1}}]));
    assert_eq!(fields(&doc, PolicyAction::Transfer), ["rules[0].emit.reason"]);
}

#[test]
fn unknown_keys_are_rejected_at_every_level() {
    let doc = json!({
        "appliesTo": {"action": "TRANSFER", "ruleType": "APPROVAL"},
        "rules": [{"id": "r", "when": {}, "emit": {"aprover": "#a", "autoApproval": true}, "note": "x"}],
        "defaults": {"unmatched": "AUTO_APPROVE", "matched": "X"},
        "extra": 1,
    });
    assert_eq!(
        fields(&doc, PolicyAction::Transfer),
        ["extra", "appliesTo.ruleType", "defaults.matched", "rules[0].note", "rules[0].emit.aprover"]
    );
}

#[test]
fn defaults_unmatched_is_require_manual_review_when_absent() {
    assert_eq!(valid(&transfer_doc(json!([])), PolicyAction::Transfer).unmatched, Unmatched::RequireManualReview);
    let doc = json!({"appliesTo": {"action": "TRANSFER"}, "rules": [], "defaults": {}});
    assert_eq!(valid(&doc, PolicyAction::Transfer).unmatched, Unmatched::RequireManualReview);
}

#[test]
fn defaults_unmatched_may_be_auto_approve() {
    let doc = json!({"appliesTo": {"action": "TRANSFER"}, "rules": [], "defaults": {"unmatched": "AUTO_APPROVE"}});
    assert_eq!(valid(&doc, PolicyAction::Transfer).unmatched, Unmatched::AutoApprove);
    let doc = json!({"appliesTo": {"action": "TRANSFER"}, "rules": [], "defaults": {"unmatched": "APPROVE"}});
    assert_eq!(fields(&doc, PolicyAction::Transfer), ["defaults.unmatched"]);
}

#[test]
fn every_violation_is_reported_not_just_the_first() {
    let doc = json!({
        "appliesTo": {"action": "MINT"},
        "rules": [
            {"id": "a", "when": {"amount": ">= 1"}, "emit": {"approver": "#ok"}},
            {"id": "b", "when": {"amount": "!= 5", "assetId": "== EUR"}, "emit": {"outcome": "REJECT"}},
            {"id": "c", "when": {"assetId": "== EUR"}, "emit": {"approver": "#ok", "step": 99}},
        ],
    });
    assert_eq!(
        fields(&doc, PolicyAction::Transfer),
        ["appliesTo.action", "rules[0].when", "rules[1].when.amount", "rules[2].emit.step"]
    );
}

#[test]
fn a_document_that_is_not_an_object_is_one_violation() {
    assert_eq!(fields(&json!([]), PolicyAction::Transfer), [""]);
}

#[test]
fn violations_nest_under_a_prefix() {
    let v = Violation { field: "rules[0].id".into(), message: "m".into() };
    assert_eq!(v.clone().under("content").field, "content.rules[0].id");
    assert_eq!(Violation { field: String::new(), message: "m".into() }.under("content").field, "content");
    assert_eq!(v.under("").field, "rules[0].id");
}
