//! Policies: the bank's opt-in controls on token operations. The context catalogue and the
//! policy vocabulary (`catalogue`), exact decimals for amount conditions (`decimal`), the
//! condition grammar (`condition`), the validated rule document (`content`), the pure
//! decision-table engine (`engine`), the policy state rules (`lifecycle`), the entities the store keeps (`entities`) and the SYSTEM
//! templates the platform ships (`templates`). No I/O: the app loads ACTIVE policies and hands
//! them to `engine::evaluate`.

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
