//! Policies: the bank's opt-in controls on token operations. The context catalogue and the
//! policy vocabulary (`catalogue`), exact decimals for amount conditions (`decimal`), the
//! condition grammar (`condition`), the validated rule document (`content`), the pure
//! decision-table engine (`engine`), the policy state rules (`lifecycle`), the entities the store keeps (`entities`) and the SYSTEM
//! templates the platform ships (`templates`). No I/O: the app loads ACTIVE policies and hands
//! them to `engine::evaluate`.

/// A closed vocabulary of wire strings: an enum with `ALL`, `as_str`, `parse` (exact,
/// case-sensitive, as the API's enums are) and `Display`, serialised as its wire string.
macro_rules! vocabulary {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord,
            serde::Serialize, serde::Deserialize, utoipa::ToSchema,
        )]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $text)] $variant),+
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }

            pub fn parse(text: &str) -> Option<$name> {
                Self::ALL.iter().copied().find(|v| v.as_str() == text)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
pub(crate) use vocabulary;

pub mod catalogue;
pub mod condition;
pub mod content;
pub mod decimal;
pub mod engine;
pub mod entities;
pub mod lifecycle;
pub mod templates;

pub use catalogue::{ContextField, FieldType, PolicyAction, PolicyStatus, RuleType, TemplateScope, TemplateStatus};
pub use condition::{Condition, ConditionError, FieldValue};
pub use content::{Effect, PolicyContent, Rule, Unmatched, Violation};
pub use decimal::Decimal;
pub use engine::{Decision, EvaluationError, PolicyEvent, Reason, evaluate};
pub use entities::{Policy, PolicyFilter, PolicyVersion, TenantTemplate};
pub use lifecycle::Activation;
pub use templates::{SystemTemplate, system_template, system_templates};
