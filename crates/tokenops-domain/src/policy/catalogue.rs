//! The policy vocabulary and the context catalogue: which actions a policy can govern, which
//! fields each action's events carry and of what type, the rule type, the policy and template
//! statuses and scopes, and which policy action governs each kind of token operation.

use crate::operation::TxType;
use crate::wire::wire_enum;

wire_enum! {
    /// What a policy governs (`appliesTo.action`).
    PolicyAction {
        Mint => "MINT",
        Burn => "BURN",
        Transfer => "TRANSFER",
        FiatPayment => "FIAT_PAYMENT",
        InternationalTransfer => "INTERNATIONAL_TRANSFER",
        FiatToken => "FIAT_TOKEN",
        TokenFiat => "TOKEN_FIAT",
        FxConversion => "FX_CONVERSION",
    }
}

wire_enum! {
    /// A context field's type: it decides which condition forms suit the field.
    FieldType {
        Amount => "AMOUNT",
        String => "STRING",
    }
}

wire_enum! {
    /// The kinds of policy; approval is the only one the platform defines.
    RuleType {
        Approval => "APPROVAL",
    }
}

wire_enum! {
    /// A policy's status; its moves are in `lifecycle`.
    PolicyStatus {
        Draft => "DRAFT",
        Active => "ACTIVE",
        Archived => "ARCHIVED",
    }
}

wire_enum! {
    /// Who sees a template: SYSTEM ones every organisation, TENANT ones their owner only.
    TemplateScope {
        System => "SYSTEM",
        Tenant => "TENANT",
    }
}

wire_enum! {
    /// DEPRECATED templates are hidden from listings unless asked for.
    TemplateStatus {
        Active => "ACTIVE",
        Deprecated => "DEPRECATED",
    }
}

wire_enum! {
    /// A field of the context catalogue, named in a rule's `when` by its wire name.
    ContextField {
        /// The amount moved; for conversions the source side's.
        Amount => "amount",
        /// The asset moved; for conversions the source side's.
        AssetId => "assetId",
        /// The asset received, on conversion actions only.
        TargetAssetId => "targetAssetId",
    }
}

impl ContextField {
    pub fn field_type(self) -> FieldType {
        match self {
            ContextField::Amount => FieldType::Amount,
            ContextField::AssetId | ContextField::TargetAssetId => FieldType::String,
        }
    }

    /// Fields whose values are ISO 4217 codes: their `==` value must be a recognised code.
    pub fn is_asset(self) -> bool {
        matches!(self, ContextField::AssetId | ContextField::TargetAssetId)
    }
}

const PLAIN_FIELDS: &[ContextField] = &[ContextField::Amount, ContextField::AssetId];
const CONVERSION_FIELDS: &[ContextField] = &[ContextField::Amount, ContextField::AssetId, ContextField::TargetAssetId];

impl PolicyAction {
    /// Conversions receive another asset than they spend, so their events carry targetAssetId.
    pub fn is_conversion(self) -> bool {
        matches!(self, PolicyAction::FiatToken | PolicyAction::TokenFiat | PolicyAction::FxConversion)
    }

    /// The context catalogue: the fields this action's events supply, fixed by the release.
    pub fn fields(self) -> &'static [ContextField] {
        if self.is_conversion() { CONVERSION_FIELDS } else { PLAIN_FIELDS }
    }

    /// The catalogue field of this action with that wire name, if any.
    pub fn field(self, name: &str) -> Option<ContextField> {
        self.fields().iter().copied().find(|f| f.as_str() == name)
    }

    /// The policy action governing an operation of this type (supplement §5). RELEASE and
    /// CANCEL complete a lock whose LOCK was already evaluated, so nothing governs them.
    pub fn for_tx_type(tx_type: TxType) -> Option<PolicyAction> {
        match tx_type {
            TxType::Transfer | TxType::Lock => Some(PolicyAction::Transfer),
            TxType::Mint => Some(PolicyAction::Mint),
            TxType::Burn => Some(PolicyAction::Burn),
            TxType::Release | TxType::Cancel => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_actions_supply_amount_and_asset_id() {
        for a in [
            PolicyAction::Mint,
            PolicyAction::Burn,
            PolicyAction::Transfer,
            PolicyAction::FiatPayment,
            PolicyAction::InternationalTransfer,
        ] {
            assert_eq!(a.fields(), &[ContextField::Amount, ContextField::AssetId]);
            assert_eq!(a.field("targetAssetId"), None);
        }
    }

    #[test]
    fn conversion_actions_also_supply_target_asset_id() {
        for a in [PolicyAction::FiatToken, PolicyAction::TokenFiat, PolicyAction::FxConversion] {
            assert_eq!(a.fields(), &[ContextField::Amount, ContextField::AssetId, ContextField::TargetAssetId]);
            assert_eq!(a.field("targetAssetId"), Some(ContextField::TargetAssetId));
        }
    }

    #[test]
    fn amount_is_an_amount_and_asset_fields_are_strings() {
        assert_eq!(ContextField::Amount.field_type(), FieldType::Amount);
        assert_eq!(ContextField::AssetId.field_type(), FieldType::String);
        assert_eq!(ContextField::TargetAssetId.field_type(), FieldType::String);
    }

    #[test]
    fn transfer_and_lock_are_governed_by_transfer_policies() {
        assert_eq!(PolicyAction::for_tx_type(TxType::Transfer), Some(PolicyAction::Transfer));
        assert_eq!(PolicyAction::for_tx_type(TxType::Lock), Some(PolicyAction::Transfer));
    }

    #[test]
    fn mint_and_burn_are_governed_by_their_own_action() {
        assert_eq!(PolicyAction::for_tx_type(TxType::Mint), Some(PolicyAction::Mint));
        assert_eq!(PolicyAction::for_tx_type(TxType::Burn), Some(PolicyAction::Burn));
    }

    #[test]
    fn release_and_cancel_are_not_re_evaluated() {
        assert_eq!(PolicyAction::for_tx_type(TxType::Release), None);
        assert_eq!(PolicyAction::for_tx_type(TxType::Cancel), None);
    }
}
