//! The SYSTEM templates the platform ships: one per policy action, visible to every
//! organisation. Keys read `system.<action>.approval`, the action in lower case with its
//! underscores kept (`system.fiat_payment.approval`): the scope, what is governed, the rule
//! type. A template's default content is a suggestion shown to the caller; it is never copied
//! into a policy, whose content the caller always sends.

use super::catalogue::{PolicyAction, RuleType, TemplateScope, TemplateStatus};
use serde_json::{Value, json};

/// A template shipped with the platform.
#[derive(Debug, Clone, PartialEq)]
pub struct SystemTemplate {
    pub key: String,
    pub name: String,
    pub description: String,
    pub template_version: u32,
    pub action: PolicyAction,
    pub rule_type: RuleType,
    pub scope: TemplateScope,
    pub status: TemplateStatus,
    pub default_content: Value,
}

/// Thresholds at or above which the suggested rules ask `#approvers`, in each currency's own
/// units (a yen threshold is not a euro one).
const THRESHOLDS: &[(&str, &str)] =
    &[("EUR", "10000"), ("USD", "10000"), ("GBP", "10000"), ("CHF", "10000"), ("JPY", "1500000")];

/// The key of the SYSTEM template for `action`.
pub fn system_template_key(action: PolicyAction) -> String {
    format!("system.{}.approval", action.as_str().to_ascii_lowercase())
}

fn title(action: PolicyAction) -> &'static str {
    match action {
        PolicyAction::Mint => "Mint",
        PolicyAction::Burn => "Burn",
        PolicyAction::Transfer => "Transfer",
        PolicyAction::FiatPayment => "Fiat payment",
        PolicyAction::InternationalTransfer => "International transfer",
        PolicyAction::FiatToken => "Fiat to token",
        PolicyAction::TokenFiat => "Token to fiat",
        PolicyAction::FxConversion => "FX conversion",
    }
}

fn default_content(action: PolicyAction) -> Value {
    let mut rules = Vec::new();
    for (currency, threshold) in THRESHOLDS {
        let lower = currency.to_ascii_lowercase();
        rules.push(json!({
            "id": format!("{lower}-at-or-above-{threshold}"),
            "when": {"assetId": format!("== {currency}"), "amount": format!(">= {threshold}")},
            "emit": {"approver": "#approvers", "step": 0, "reason": format!("{currency} {threshold} or more needs an approver")},
        }));
        rules.push(json!({
            "id": format!("{lower}-below-{threshold}"),
            "when": {"assetId": format!("== {currency}"), "amount": format!("[0 .. {threshold})")},
            "emit": {"autoApproval": true},
        }));
    }
    // Other currencies match no rule and go to manual review, the default.
    json!({
        "appliesTo": {"action": action.as_str()},
        "hitPolicy": "COLLECT",
        "rules": rules,
        "defaults": {"unmatched": "REQUIRE_MANUAL_REVIEW"},
    })
}

/// The SYSTEM template for `action`.
pub fn system_template(action: PolicyAction) -> SystemTemplate {
    let title = title(action);
    SystemTemplate {
        key: system_template_key(action),
        name: format!("{title} approval"),
        description: format!(
            "Approval policy for {} operations ({}). Suggested rules: EUR, USD, GBP and CHF amounts \
             of 10000 or more (JPY 1500000) need #approvers, smaller ones pass; other currencies \
             go to manual review.",
            title,
            action.as_str()
        ),
        template_version: 1,
        action,
        rule_type: RuleType::Approval,
        scope: TemplateScope::System,
        status: TemplateStatus::Active,
        default_content: default_content(action),
    }
}

/// Every SYSTEM template, in key order (the order listings show them).
pub fn system_templates() -> Vec<SystemTemplate> {
    let mut all: Vec<SystemTemplate> = PolicyAction::ALL.iter().map(|a| system_template(*a)).collect();
    all.sort_by(|a, b| a.key.cmp(&b.key));
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::content::PolicyContent;
    use std::collections::HashSet;

    #[test]
    fn the_platform_ships_a_system_template_for_each_policy_action() {
        let templates = system_templates();
        assert_eq!(templates.len(), PolicyAction::ALL.len());
        let actions: HashSet<_> = templates.iter().map(|t| t.action).collect();
        assert_eq!(actions.len(), PolicyAction::ALL.len());
        assert!(templates.iter().all(|t| t.scope == TemplateScope::System && t.template_version == 1));
        let keys: HashSet<_> = templates.iter().map(|t| t.key.clone()).collect();
        assert_eq!(keys.len(), templates.len());
    }

    #[test]
    fn every_shipped_templates_default_content_validates_for_its_action() {
        for t in system_templates() {
            let content = PolicyContent::validate(&t.default_content, t.action);
            assert!(content.is_ok(), "{}: {:?}", t.key, content.err());
        }
    }

    #[test]
    fn keys_name_scope_action_and_rule_type() {
        assert_eq!(system_template_key(PolicyAction::Transfer), "system.transfer.approval");
        assert_eq!(system_template_key(PolicyAction::FiatPayment), "system.fiat_payment.approval");
        assert_eq!(system_template(PolicyAction::FxConversion).name, "FX conversion approval");
    }
}
