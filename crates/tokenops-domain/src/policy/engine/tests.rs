//! The engine's rules, one test each, and property tests against a reference evaluator.

use super::*;
use crate::policy::condition::Condition;
use crate::policy::content::PolicyContent;
use serde_json::{Value, json};

fn asset(code: &str) -> AssetId {
    AssetId::parse(code).unwrap_or_else(|e| panic!("{e}"))
}

fn dec(text: &str) -> Decimal {
    Decimal::parse(text).unwrap_or_else(|e| panic!("{e}"))
}

fn policy(action: PolicyAction, rules: Value, unmatched: Option<&str>) -> PolicyContent {
    let mut doc = json!({"appliesTo": {"action": action.as_str()}, "rules": rules});
    if let (Some(u), Some(o)) = (unmatched, doc.as_object_mut()) {
        o.insert("defaults".into(), json!({"unmatched": u}));
    }
    PolicyContent::validate(&doc, action).unwrap_or_else(|v| panic!("{v:?}"))
}

fn transfer(rules: Value) -> PolicyContent {
    policy(PolicyAction::Transfer, rules, Some("AUTO_APPROVE"))
}

fn event(amount: &str, code: &str) -> PolicyEvent {
    PolicyEvent::new(PolicyAction::Transfer, dec(amount), asset(code))
}

fn group(key: &str) -> ApproverExpr {
    ApproverExpr::Group(key.into())
}

fn decide(policies: &[&PolicyContent], e: &PolicyEvent) -> Decision {
    evaluate(policies, e).unwrap_or_else(|err| panic!("{err}"))
}

fn steps_of(decision: &Decision) -> Vec<(u32, Vec<String>)> {
    match decision {
        Decision::RequiresApproval { steps, .. } => {
            steps.iter().map(|(s, set)| (*s, set.iter().map(ToString::to_string).collect())).collect()
        }
        _ => Vec::new(),
    }
}

fn big_eur(id: &str, emit: Value) -> Value {
    json!({"id": id, "when": {"assetId": "== EUR", "amount": ">= 10000"}, "emit": emit})
}

#[test]
fn an_operations_amount_in_minor_units_is_its_decimal_value() {
    let jpy = asset("JPY");
    let bhd = asset("BHD");
    let e = PolicyEvent::for_amount(
        PolicyAction::Transfer,
        crate::asset::Amount::parse("1500", 0).unwrap_or_else(|e| panic!("{e}")),
        jpy,
    );
    assert_eq!(e.amount, dec("1500"));
    let e = PolicyEvent::for_amount(
        PolicyAction::Mint,
        crate::asset::Amount::parse("1.5", 3).unwrap_or_else(|e| panic!("{e}")),
        bhd,
    );
    assert_eq!(e.amount, dec("1.500"));
}

#[test]
fn an_action_no_active_policy_governs_is_approved() {
    assert_eq!(decide(&[], &event("1000000", "EUR")), Decision::Approved);
}

#[test]
fn a_rule_matches_when_all_its_conditions_hold() {
    let p = transfer(json!([big_eur("big", json!({"approver": "#a"}))]));
    assert!(matches!(decide(&[&p], &event("10000", "EUR")), Decision::RequiresApproval { .. }));
    assert_eq!(decide(&[&p], &event("9999.99", "EUR")), Decision::Approved);
    assert_eq!(decide(&[&p], &event("20000", "USD")), Decision::Approved);
}

#[test]
fn an_empty_when_matches_every_event() {
    let p = transfer(json!([{"id": "all", "when": {}, "emit": {"approver": "#a"}}]));
    for e in [event("0.01", "USD"), event("5", "JPY")] {
        assert_eq!(steps_of(&decide(&[&p], &e)), [(0, vec!["#a".to_owned()])]);
    }
}

#[test]
fn every_matching_rule_of_every_policy_contributes() {
    let p1 = transfer(json!([
        big_eur("big", json!({"approver": "#a"})),
        {"id": "eur", "when": {"assetId": "== EUR"}, "emit": {"approver": "#b", "step": 1}},
    ]));
    let p2 = transfer(json!([{"id": "all", "when": {}, "emit": {"approver": "#c"}}]));
    let d = decide(&[&p1, &p2], &event("50000", "EUR"));
    assert_eq!(steps_of(&d), [(0, vec!["#a".to_owned(), "#c".to_owned()]), (1, vec!["#b".to_owned()])]);
}

#[test]
fn hit_policy_has_no_effect_every_matching_rule_contributes() {
    let rules = json!([
        {"id": "first", "when": {}, "emit": {"approver": "#a"}},
        {"id": "second", "when": {}, "emit": {"approver": "#b"}},
    ]);
    let doc = json!({"appliesTo": {"action": "TRANSFER"}, "hitPolicy": "FIRST", "rules": rules});
    let first = PolicyContent::validate(&doc, PolicyAction::Transfer).unwrap_or_else(|v| panic!("{v:?}"));
    let collect = transfer(rules);
    assert_eq!(decide(&[&first], &event("1", "EUR")), decide(&[&collect], &event("1", "EUR")));
}

#[test]
fn a_refusal_always_outranks_approval() {
    let p1 = transfer(json!([{"id": "approve", "when": {}, "emit": {"approver": "#a"}}]));
    let p2 = transfer(json!([
        {"id": "ok", "when": {}, "emit": {"autoApproval": true}},
        big_eur("no", json!({"outcome": "REJECT", "reason": "too large"})),
    ]));
    let d = decide(&[&p1, &p2], &event("10000", "EUR"));
    assert_eq!(
        d,
        Decision::Rejected {
            reasons: vec![Reason { policy: 1, rule_id: Some("no".into()), text: Some("too large".into()) }]
        }
    );
}

#[test]
fn a_refusal_outranks_a_manual_review() {
    let review = policy(PolicyAction::Transfer, json!([]), None);
    let reject = transfer(json!([{"id": "no", "when": {}, "emit": {"outcome": "REJECT"}}]));
    assert!(matches!(decide(&[&review, &reject], &event("1", "EUR")), Decision::Rejected { .. }));
}

#[test]
fn approvers_collect_by_step_once_each() {
    let p1 = transfer(json!([
        {"id": "a0", "when": {}, "emit": {"approver": "#risk", "step": 0}},
        {"id": "b2", "when": {}, "emit": {"approver": "#board", "step": 2}},
    ]));
    let p2 = transfer(json!([{"id": "a0", "when": {}, "emit": {"approver": "#risk"}}]));
    let d = decide(&[&p1, &p2], &event("1", "EUR"));
    assert_eq!(steps_of(&d), [(0, vec!["#risk".to_owned()]), (2, vec!["#board".to_owned()])]);
    assert!(matches!(d, Decision::RequiresApproval { manual_review: false, .. }));
}

#[test]
fn a_policy_with_no_matching_rule_requires_manual_review_by_default() {
    let p = policy(PolicyAction::Transfer, json!([big_eur("big", json!({"approver": "#a"}))]), None);
    let d = decide(&[&p], &event("1", "EUR"));
    assert_eq!(
        d,
        Decision::RequiresApproval {
            steps: BTreeMap::new(),
            manual_review: true,
            reasons: vec![Reason { policy: 0, rule_id: None, text: None }],
        }
    );
}

#[test]
fn a_policy_with_no_matching_rule_and_auto_approve_contributes_nothing() {
    let p = policy(PolicyAction::Transfer, json!([big_eur("big", json!({"approver": "#a"}))]), Some("AUTO_APPROVE"));
    assert_eq!(decide(&[&p], &event("1", "EUR")), Decision::Approved);
}

#[test]
fn a_matching_auto_approval_rule_keeps_the_default_from_applying() {
    let p = policy(PolicyAction::Transfer, json!([{"id": "ok", "when": {}, "emit": {"autoApproval": true}}]), None);
    assert_eq!(decide(&[&p], &event("1", "EUR")), Decision::Approved);
}

#[test]
fn approval_is_automatic_only_when_matching_rules_say_so_and_none_names_an_approver() {
    let auto = transfer(json!([{"id": "ok", "when": {}, "emit": {"autoApproval": true}}]));
    let approver = transfer(json!([big_eur("big", json!({"approver": "#a"}))]));
    assert_eq!(decide(&[&auto, &approver], &event("1", "EUR")), Decision::Approved);
    assert!(matches!(decide(&[&auto, &approver], &event("10000", "EUR")), Decision::RequiresApproval { .. }));
}

#[test]
fn manual_review_and_approvers_combine() {
    let review = policy(PolicyAction::Transfer, json!([]), None);
    let approver = transfer(json!([{"id": "a", "when": {}, "emit": {"approver": "#a", "reason": "always"}}]));
    let d = decide(&[&approver, &review], &event("1", "EUR"));
    assert_eq!(
        d,
        Decision::RequiresApproval {
            steps: BTreeMap::from([(0, BTreeSet::from([group("a")]))]),
            manual_review: true,
            reasons: vec![
                Reason { policy: 0, rule_id: Some("a".into()), text: Some("always".into()) },
                Reason { policy: 1, rule_id: None, text: None },
            ],
        }
    );
}

#[test]
fn reasons_follow_policy_then_rule_order() {
    let p1 = transfer(json!([
        {"id": "z", "when": {}, "emit": {"outcome": "REJECT"}},
        {"id": "a", "when": {}, "emit": {"outcome": "REJECT"}},
    ]));
    let p2 = transfer(json!([{"id": "m", "when": {}, "emit": {"outcome": "REJECT"}}]));
    let Decision::Rejected { reasons } = decide(&[&p2, &p1], &event("1", "EUR")) else { panic!("not rejected") };
    let order: Vec<_> = reasons.iter().map(|r| (r.policy, r.rule_id.clone().unwrap_or_default())).collect();
    assert_eq!(order, [(0, "m".to_owned()), (1, "z".to_owned()), (1, "a".to_owned())]);
}

#[test]
fn every_field_a_rule_names_must_be_supplied_by_the_event() {
    let p = policy(
        PolicyAction::FxConversion,
        json!([{"id": "to-usd", "when": {"targetAssetId": "== USD"}, "emit": {"approver": "#fx"}}]),
        None,
    );
    let e = PolicyEvent::new(PolicyAction::FxConversion, dec("5"), asset("EUR"));
    assert_eq!(
        evaluate(&[&p], &e),
        Err(EvaluationError::MissingField { policy: 0, rule_id: "to-usd".into(), field: ContextField::TargetAssetId })
    );
    let with_target = e.with_target_asset(asset("USD"));
    assert_eq!(steps_of(&decide(&[&p], &with_target)), [(0, vec!["#fx".to_owned()])]);
}

#[test]
fn a_missing_field_is_found_before_any_rule_decides() {
    let reject =
        policy(PolicyAction::FxConversion, json!([{"id": "no", "when": {}, "emit": {"outcome": "REJECT"}}]), None);
    let needs_target = policy(
        PolicyAction::FxConversion,
        json!([{"id": "t", "when": {"targetAssetId": "== USD"}, "emit": {"outcome": "REJECT"}}]),
        None,
    );
    let e = PolicyEvent::new(PolicyAction::FxConversion, dec("5"), asset("EUR"));
    assert!(matches!(evaluate(&[&reject, &needs_target], &e), Err(EvaluationError::MissingField { policy: 1, .. })));
}

#[test]
fn a_policy_of_another_action_is_refused() {
    let mint = policy(PolicyAction::Mint, json!([]), None);
    assert!(matches!(evaluate(&[&mint], &event("1", "EUR")), Err(EvaluationError::ActionMismatch { policy: 0, .. })));
}

mod properties {
    //! The engine against a reference evaluator that works on the generated rules directly,
    //! with amounts as integer thousandths: conditions are rendered to text, validated, and
    //! must decide as the reference does.

    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    const CURRENCIES: [&str; 4] = ["EUR", "USD", "JPY", "BHD"];
    const GROUPS: [&str; 4] = ["a", "b", "risk", "board"];

    /// An amount condition on thousandths.
    #[derive(Debug, Clone)]
    enum AmountCond {
        Range { lo: u64, lo_inc: bool, hi: u64, hi_inc: bool },
        AtLeast(u64),
        Above(u64),
        AtMost(u64),
        Below(u64),
        Equal(u64),
    }

    impl AmountCond {
        fn holds(&self, v: u64) -> bool {
            match *self {
                AmountCond::Range { lo, lo_inc, hi, hi_inc } => {
                    (if lo_inc { v >= lo } else { v > lo }) && (if hi_inc { v <= hi } else { v < hi })
                }
                AmountCond::AtLeast(b) => v >= b,
                AmountCond::Above(b) => v > b,
                AmountCond::AtMost(b) => v <= b,
                AmountCond::Below(b) => v < b,
                AmountCond::Equal(b) => v == b,
            }
        }

        fn bounds(&self) -> Vec<u64> {
            match *self {
                AmountCond::Range { lo, hi, .. } => vec![lo, hi],
                AmountCond::AtLeast(b)
                | AmountCond::Above(b)
                | AmountCond::AtMost(b)
                | AmountCond::Below(b)
                | AmountCond::Equal(b) => vec![b],
            }
        }

        fn text(&self, pad: bool) -> String {
            let r = |v| render(v, pad);
            match *self {
                AmountCond::Range { lo, lo_inc, hi, hi_inc } => {
                    format!(
                        "{}{} .. {}{}",
                        if lo_inc { '[' } else { '(' },
                        r(lo),
                        r(hi),
                        if hi_inc { ']' } else { ')' }
                    )
                }
                AmountCond::AtLeast(b) => format!(">= {}", r(b)),
                AmountCond::Above(b) => format!("> {}", r(b)),
                AmountCond::AtMost(b) => format!("<= {}", r(b)),
                AmountCond::Below(b) => format!("< {}", r(b)),
                AmountCond::Equal(b) => format!("== {}", r(b)),
            }
        }
    }

    /// Thousandths as a decimal string, with 0 to 3 decimals (or always 3 when `pad`).
    fn render(v: u64, pad: bool) -> String {
        let text = format!("{}.{:03}", v / 1000, v % 1000);
        if pad { text } else { text.trim_end_matches('0').trim_end_matches('.').to_owned() }
    }

    #[derive(Debug, Clone)]
    enum TEffect {
        Reject,
        Approver(&'static str, u32),
        Auto,
    }

    #[derive(Debug, Clone)]
    struct TRule {
        asset: Option<&'static str>,
        amount: Option<AmountCond>,
        effect: TEffect,
        reason: Option<String>,
    }

    #[derive(Debug, Clone)]
    struct TPolicy {
        rules: Vec<TRule>,
        manual_review_default: bool,
        say_default: bool,
    }

    fn thousandths() -> impl Strategy<Value = u64> {
        prop_oneof![
            prop::sample::select(vec![0u64, 1, 10, 500, 999, 1000, 1001, 10_000, 10_000_000, 10_000_001]),
            0u64..20_000_000,
        ]
    }

    fn amount_cond() -> impl Strategy<Value = AmountCond> {
        prop_oneof![
            (thousandths(), thousandths(), any::<bool>(), any::<bool>()).prop_map(|(a, b, lo_inc, hi_inc)| {
                let (lo, hi) = (a.min(b), a.max(b));
                // Equal bounds form a non-empty range only when both are inclusive.
                let (lo_inc, hi_inc) = if lo == hi { (true, true) } else { (lo_inc, hi_inc) };
                AmountCond::Range { lo, lo_inc, hi, hi_inc }
            }),
            thousandths().prop_map(AmountCond::AtLeast),
            thousandths().prop_map(AmountCond::Above),
            thousandths().prop_map(AmountCond::AtMost),
            thousandths().prop_map(AmountCond::Below),
            thousandths().prop_map(AmountCond::Equal),
        ]
    }

    fn effect() -> impl Strategy<Value = TEffect> {
        prop_oneof![
            1 => Just(TEffect::Reject),
            3 => (prop::sample::select(GROUPS.to_vec()), 0u32..4).prop_map(|(g, s)| TEffect::Approver(g, s)),
            2 => Just(TEffect::Auto),
        ]
    }

    fn rule() -> impl Strategy<Value = TRule> {
        (
            prop::option::of(prop::sample::select(CURRENCIES.to_vec())),
            prop::option::of(amount_cond()),
            effect(),
            prop::option::of("[a-z]{1,8}"),
        )
            .prop_map(|(asset, amount, effect, reason)| {
                // The content rule: an amount needs its currency.
                let asset = if amount.is_some() { asset.or(Some("EUR")) } else { asset };
                TRule { asset, amount, effect, reason }
            })
    }

    fn policy_strategy() -> impl Strategy<Value = TPolicy> {
        (prop::collection::vec(rule(), 0..5), any::<bool>(), any::<bool>()).prop_map(
            |(rules, manual_review_default, say_default)| TPolicy {
                rules,
                // An absent default is REQUIRE_MANUAL_REVIEW.
                manual_review_default: manual_review_default || !say_default,
                say_default,
            },
        )
    }

    fn document(p: &TPolicy, pad: bool) -> Value {
        let rules: Vec<Value> = p
            .rules
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let mut when = serde_json::Map::new();
                if let Some(a) = r.asset {
                    when.insert("assetId".into(), json!(format!("== {a}")));
                }
                if let Some(c) = &r.amount {
                    when.insert("amount".into(), json!(c.text(pad)));
                }
                let mut emit = match r.effect {
                    TEffect::Reject => json!({"outcome": "REJECT"}),
                    TEffect::Approver(g, s) => json!({"approver": format!("#{g}"), "step": s}),
                    TEffect::Auto => json!({"autoApproval": true}),
                };
                if let (Some(reason), Some(o)) = (&r.reason, emit.as_object_mut()) {
                    o.insert("reason".into(), json!(reason));
                }
                json!({"id": format!("r{i}"), "when": when, "emit": emit})
            })
            .collect();
        let mut doc = json!({"appliesTo": {"action": "TRANSFER"}, "rules": rules});
        if let (true, Some(o)) = (p.say_default, doc.as_object_mut()) {
            let u = if p.manual_review_default { "REQUIRE_MANUAL_REVIEW" } else { "AUTO_APPROVE" };
            o.insert("defaults".into(), json!({"unmatched": u}));
        }
        doc
    }

    /// The reference: the specification's sentences, applied literally.
    fn reference(policies: &[TPolicy], amount: u64, currency: &str) -> Decision {
        let mut rejected = Vec::new();
        let mut needs = Vec::new();
        let mut steps: BTreeMap<u32, BTreeSet<ApproverExpr>> = BTreeMap::new();
        let mut manual_review = false;
        for (pi, p) in policies.iter().enumerate() {
            let mut any = false;
            for (ri, r) in p.rules.iter().enumerate() {
                let asset_ok = r.asset.is_none_or(|a| a == currency);
                let amount_ok = r.amount.as_ref().is_none_or(|c| c.holds(amount));
                if !(asset_ok && amount_ok) {
                    continue;
                }
                any = true;
                let reason = Reason { policy: pi, rule_id: Some(format!("r{ri}")), text: r.reason.clone() };
                match r.effect {
                    TEffect::Reject => rejected.push(reason),
                    TEffect::Approver(g, s) => {
                        steps.entry(s).or_default().insert(ApproverExpr::Group(g.to_owned()));
                        needs.push(reason);
                    }
                    TEffect::Auto => {}
                }
            }
            if !any && p.manual_review_default {
                manual_review = true;
                needs.push(Reason { policy: pi, rule_id: None, text: None });
            }
        }
        if !rejected.is_empty() {
            Decision::Rejected { reasons: rejected }
        } else if steps.is_empty() && !manual_review {
            Decision::Approved
        } else {
            Decision::RequiresApproval { steps, manual_review, reasons: needs }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn the_engine_decides_as_the_reference(
            policies in prop::collection::vec(policy_strategy(), 0..4),
            random_amount in thousandths(),
            near in prop::option::of((any::<prop::sample::Index>(), 0u64..3)),
            currency in prop::sample::select(CURRENCIES.to_vec()),
            pad in any::<bool>(),
        ) {
            // Often the event's amount sits on or beside a bound, where inclusive and exclusive
            // differ.
            let bounds: Vec<u64> = policies.iter().flat_map(|p| &p.rules).filter_map(|r| r.amount.as_ref()).flat_map(AmountCond::bounds).collect();
            let amount = match near {
                Some((index, offset)) if !bounds.is_empty() => (bounds[index.index(bounds.len())] + offset).saturating_sub(1),
                _ => random_amount,
            };
            let contents: Vec<PolicyContent> = policies
                .iter()
                .map(|p| PolicyContent::validate(&document(p, pad), PolicyAction::Transfer))
                .collect::<Result<_, _>>()
                .map_err(|v| TestCaseError::fail(format!("{v:?}")))?;
            let refs: Vec<&PolicyContent> = contents.iter().collect();
            let e = PolicyEvent::new(PolicyAction::Transfer, Decimal::from_minor_units(u128::from(amount), 3), asset(currency));
            prop_assert_eq!(evaluate(&refs, &e), Ok(reference(&policies, amount, currency)));
        }

        #[test]
        fn decimals_compare_as_their_values(a in thousandths(), b in thousandths(), pa in any::<bool>(), pb in any::<bool>()) {
            let (da, db) = (dec(&render(a, pa)), dec(&render(b, pb)));
            prop_assert_eq!(da.cmp(&db), a.cmp(&b));
            prop_assert_eq!(da, Decimal::from_minor_units(u128::from(a), 3));
        }

        #[test]
        fn conditions_round_trip_through_display(
            c in amount_cond(),
            pad in any::<bool>(),
            spaces in prop::sample::select(vec!["", " ", "  "]),
            currency in prop::sample::select(vec!["EUR", "usd", "Jpy", "BHD"]),
        ) {
            let text = format!("{spaces}{}{spaces}", c.text(pad));
            let parsed = Condition::parse(&text, ContextField::Amount).map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
            prop_assert_eq!(Condition::parse(&parsed.to_string(), ContextField::Amount), Ok(parsed.clone()));
            prop_assert_eq!(parsed.to_string(), c.text(false));
            let eq = Condition::parse(&format!("=={spaces}{currency}"), ContextField::AssetId)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(Condition::parse(&eq.to_string(), ContextField::AssetId), Ok(eq.clone()));
            prop_assert_eq!(eq.to_string(), format!("== {}", currency.to_ascii_uppercase()));
        }

        #[test]
        fn conditions_match_as_the_reference(c in amount_cond(), v in thousandths(), pad in any::<bool>()) {
            let parsed = Condition::parse(&c.text(pad), ContextField::Amount).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let value = FieldValue::Amount(Decimal::from_minor_units(u128::from(v), 3));
            prop_assert_eq!(parsed.matches(&value), c.holds(v));
        }
    }
}
