//! The filters of the offset-paged lists, dialect-neutral: each filter a caller gives becomes a
//! column compared with a value, and a `Clause` numbers them after the tenant in the backend's
//! placeholder style, so the two backends select the same rows. A filter one dialect spells its
//! own way (a JSON array's member) stays in that backend, as does binding the values.

use crate::customers::CustomerFilter;
use crate::encode::asset_text;
use crate::keyset::{self, KeyColumn, KeyValue};
use crate::rows::ColumnValue;
use tokenops_domain::account::{AccountFilter, AccountRef};
use tokenops_domain::approval::{ApprovalRequestFilter, ApprovalTaskFilter};
use tokenops_domain::audit::AuditFilter;
use tokenops_domain::automation::{AutomationFilter, AutomationStatus, ExecutionFilter};
use tokenops_domain::contract::ContractFilter;
use tokenops_domain::operation::{BreakFilter, LockStatus, OperationFilter};
use tokenops_domain::paging::KeysetPosition;
use tokenops_domain::policy::{PolicyAction, PolicyStatus, RuleType};
use tokenops_domain::script::{ScriptFilter, ScriptStatus};
use uuid::Uuid;

/// One filter of a list: `column op value`, the value bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub column: &'static str,
    pub op: &'static str,
    pub value: KeyValue,
}

/// What a backend's SQL differs in: its placeholders (`SIGIL` `?` or `$`, numbered) and the value
/// it binds for a column's (a compared one, or one written).
pub trait Dialect {
    type Value;
    const SIGIL: char;
    fn value(value: ColumnValue) -> Self::Value;
}

/// The WHERE clause of a list: `tenant_id = <1>`, then each filter given, its placeholders
/// numbered in order in the backend's style (`D`); the values are the backend's, the tenant's
/// not among them (the backend binds it first).
pub struct Clause<D: Dialect> {
    pub sql: String,
    /// The values bound to the filters, from placeholder 2 on.
    pub binds: Vec<D::Value>,
}

impl<D: Dialect> Default for Clause<D> {
    fn default() -> Self {
        Self::new()
    }
}

impl<D: Dialect> Clause<D> {
    pub fn new() -> Self {
        Self { sql: format!("tenant_id = {}1", D::SIGIL), binds: Vec::new() }
    }

    /// The clause of a list's shared conditions.
    pub fn of(conditions: Vec<Condition>) -> Self {
        let mut clause = Self::new();
        clause.extend(conditions);
        clause
    }

    /// Adds `conditions` after the clause's filters.
    pub fn extend(&mut self, conditions: Vec<Condition>) {
        for c in conditions {
            self.compare(c.column, c.op, D::value(c.value.into()));
        }
    }

    /// Binds `value` and returns its placeholder.
    pub fn param(&mut self, value: D::Value) -> String {
        self.binds.push(value);
        self.placeholder(self.binds.len() + 1)
    }

    pub fn placeholder(&self, n: usize) -> String {
        format!("{}{n}", D::SIGIL)
    }

    pub fn and(&mut self, fragment: &str) {
        self.sql.push_str(" AND ");
        self.sql.push_str(fragment);
    }

    /// Adds the filter `column op value`, `value` bound.
    pub fn compare(&mut self, column: &str, op: &str, value: D::Value) {
        let p = self.param(value);
        self.and(&format!("{column} {op} {p}"));
    }

    /// Adds the keyset condition "strictly after the row whose sort values are `values`"
    /// (`keyset::after`), numbered on from the clause's placeholders.
    pub fn after(&mut self, keys: &[KeyColumn], values: &[KeyValue]) {
        let (condition, bound) = keyset::after(keys, values);
        let condition = keyset::number_placeholders(&condition, self.next(), |n| self.placeholder(n));
        self.and(&condition);
        self.binds.extend(bound.into_iter().map(|value| D::value(value.into())));
    }

    /// The next free placeholder number (for LIMIT and OFFSET).
    pub fn next(&self) -> usize {
        self.binds.len() + 2
    }

    /// `LIMIT` and `OFFSET` on the next two placeholders, which the caller binds in that order.
    pub fn limit_offset(&self) -> String {
        let n = self.next();
        format!("LIMIT {} OFFSET {}", self.placeholder(n), self.placeholder(n + 1))
    }

    /// The total the clause selects from `table`, as the column `total`.
    pub fn count_sql(&self, table: &str) -> String {
        format!("SELECT COUNT(*) AS total FROM {table} WHERE {}", self.sql)
    }

    /// Every row of `table` the clause selects (`columns` of them, in `order`).
    pub fn rows_sql(&self, table: &str, columns: &str, order: &str) -> String {
        format!("SELECT {columns} FROM {table} WHERE {} ORDER BY {order}", self.sql)
    }

    /// One page of the rows of `table` the clause selects (`columns` of them, in `order`).
    pub fn page_sql(&self, table: &str, columns: &str, order: &str) -> String {
        format!("{} {}", self.rows_sql(table, columns, order), self.limit_offset())
    }
}

/// The conditions of a list, in the order their placeholders are numbered.
#[derive(Debug, Default)]
struct Conditions(Vec<Condition>);

impl Conditions {
    fn compare(mut self, column: &'static str, op: &'static str, value: Option<KeyValue>) -> Self {
        if let Some(value) = value {
            self.0.push(Condition { column, op, value });
        }
        self
    }

    fn equal(self, column: &'static str, value: Option<KeyValue>) -> Self {
        self.compare(column, "=", value)
    }
}

fn text(value: &str) -> KeyValue {
    KeyValue::Text(value.to_owned())
}

/// The approval requests a filter selects: by status, who acted, when resolved (from inclusive,
/// to exclusive), action and resource.
pub fn approval_requests(filter: &ApprovalRequestFilter) -> Vec<Condition> {
    Conditions::default()
        .equal("status", filter.status.map(|s| text(s.as_str())))
        .equal("acted_by", filter.acted_by.as_deref().map(text))
        .compare("resolved_at", ">=", filter.resolved_from.map(|t| KeyValue::Int(t.as_micros())))
        .compare("resolved_at", "<", filter.resolved_to.map(|t| KeyValue::Int(t.as_micros())))
        .equal("action", filter.action.as_deref().map(text))
        .equal("resource_id", filter.resource_id.as_deref().map(text))
        .0
}

/// Audit records by when they occurred (from inclusive, to exclusive), request, action, source
/// and resource. The actors and the free-text query each backend reads through its own indexes.
pub fn audit_records(filter: &AuditFilter) -> Vec<Condition> {
    Conditions::default()
        .compare("occurred_at", ">=", filter.occurred_from.map(|t| KeyValue::Int(t.as_micros())))
        .compare("occurred_at", "<", filter.occurred_to.map(|t| KeyValue::Int(t.as_micros())))
        .equal("request_id", filter.request_id.as_deref().map(text))
        .equal("action", filter.action.as_deref().map(text))
        .equal("category", filter.category.as_deref().map(text))
        .equal("outcome", filter.outcome.as_deref().map(text))
        .equal("source", filter.source.as_deref().map(text))
        .equal("resource_type", filter.resource_type.as_deref().map(text))
        .equal("resource_id", filter.resource_id.as_deref().map(text))
        .0
}

/// The approval tasks in a state, of one request if named; the approver filter is the backend's.
pub fn approval_tasks(filter: &ApprovalTaskFilter) -> Vec<Condition> {
    Conditions::default()
        .equal("state", Some(text(filter.state.as_str())))
        .equal("request_id", filter.request_id.map(KeyValue::Id))
        .0
}

/// One approval request's tasks.
pub fn tasks_of_request(request_id: Uuid) -> Vec<Condition> {
    Conditions::default().equal("request_id", Some(KeyValue::Id(request_id))).0
}

/// The policies holding a (rule type, action, template key) slot: all but the ARCHIVED ones.
pub fn policy_slot(rule_type: RuleType, action: PolicyAction, template_key: &str) -> Vec<Condition> {
    Conditions::default()
        .equal("rule_type", Some(text(rule_type.as_str())))
        .equal("action", Some(text(action.as_str())))
        .equal("template_key", Some(text(template_key)))
        .compare("status", "<>", Some(text(PolicyStatus::Archived.as_str())))
        .0
}

/// Automations in a status (all but DELETED when none is named), of a script, by trigger.
pub fn automations(filter: &AutomationFilter) -> Vec<Condition> {
    let status = match filter.status {
        Some(status) => Condition { column: "status", op: "=", value: text(status.as_str()) },
        None => Condition { column: "status", op: "<>", value: text(AutomationStatus::Deleted.as_str()) },
    };
    Conditions(vec![status])
        .equal("script_id", filter.script_id.map(KeyValue::Id))
        .equal("trigger_type", filter.trigger.map(|t| text(t.as_str())))
        .0
}

/// An automation's executions, by status.
pub fn executions(automation_id: Uuid, filter: &ExecutionFilter) -> Vec<Condition> {
    Conditions::default()
        .equal("automation_id", Some(KeyValue::Id(automation_id)))
        .equal("status", filter.status.map(|s| text(s.as_str())))
        .0
}

/// A policy's versions.
pub fn policy_versions(policy_id: Uuid) -> Vec<Condition> {
    Conditions::default().equal("policy_id", Some(KeyValue::Id(policy_id))).0
}

/// Scripts in a status (all but DELETED when none is named), by name.
pub fn scripts(filter: &ScriptFilter) -> Vec<Condition> {
    let status = match filter.status {
        Some(status) => Condition { column: "status", op: "=", value: text(status.as_str()) },
        None => Condition { column: "status", op: "<>", value: text(ScriptStatus::Deleted.as_str()) },
    };
    Conditions(vec![status]).equal("name", filter.name.as_deref().map(text)).0
}

/// Customers by status.
pub fn customers(filter: &CustomerFilter) -> Vec<Condition> {
    Conditions::default().equal("status", filter.status.map(|s| text(s.as_str()))).0
}

/// Accounts by customer, status and asset.
pub fn accounts(filter: &AccountFilter) -> Vec<Condition> {
    Conditions::default()
        .equal("customer_ref", filter.customer_ref.as_ref().map(|c| text(c.as_str())))
        .equal("status", filter.status.map(|s| text(s.as_str())))
        .equal("asset_id", filter.asset_id.map(|a| text(asset_text(a))))
        .0
}

/// Contracts by asset and status.
pub fn contracts(filter: &ContractFilter) -> Vec<Condition> {
    Conditions::default()
        .equal("asset_id", filter.asset_id.map(|a| text(asset_text(a))))
        .equal("status", filter.status.map(|s| text(s.as_str())))
        .0
}

/// Operations by originating account, counterparty, type, and created from (inclusive) and to
/// (exclusive); the state each backend compares its own way (`operation_selection`).
pub fn operations(filter: &OperationFilter) -> Vec<Condition> {
    Conditions::default()
        .equal("account_ref", filter.account_ref.as_ref().map(|a| text(a.as_str())))
        .equal("counterparty_ref", filter.counterparty_ref.as_ref().map(|a| text(a.as_str())))
        .equal("tx_type", filter.tx_type.map(|t| text(t.as_str())))
        .compare("created_at", ">=", filter.created_from.map(|t| KeyValue::Int(t.as_micros())))
        .compare("created_at", "<", filter.created_to.map(|t| KeyValue::Int(t.as_micros())))
        .0
}

/// An operation list's WHERE clause: its filters after the tenant, numbered in the backend's
/// style (`D`), strictly older than `after` if given. The backend names the state column as it
/// compares it (`state_column`) and spells "(created_at, id) before (`at`, `id`)" with their
/// placeholders (`before`).
pub fn operation_selection<D: Dialect>(
    filter: &OperationFilter,
    after: Option<KeysetPosition>,
    state_column: &str,
    before: fn(&str, &str) -> String,
) -> Clause<D> {
    let mut clause = Clause::new();
    if let Some(state) = filter.state {
        let p = clause.param(D::value(state.as_str().into()));
        clause.and(&format!("{state_column} = {p}"));
    }
    clause.extend(operations(filter));
    if let Some(after) = after {
        let at = clause.param(D::value(after.at_micros.into()));
        let id = clause.param(D::value(after.id.into()));
        clause.and(&before(&at, &id));
    }
    clause
}

/// Breaks by reason and account, detected from (inclusive) and to (exclusive).
pub fn breaks(filter: &BreakFilter) -> Vec<Condition> {
    Conditions::default()
        .equal("reason", filter.reason.map(|r| text(r.as_str())))
        .equal("account_ref", filter.account_ref.as_ref().map(|a| text(a.as_str())))
        .compare("detected_at", ">=", filter.from.map(|t| KeyValue::Int(t.as_micros())))
        .compare("detected_at", "<", filter.to.map(|t| KeyValue::Int(t.as_micros())))
        .0
}

/// An account's locks, by status.
pub fn account_locks(account_ref: &AccountRef, status: Option<LockStatus>) -> Vec<Condition> {
    Conditions::default()
        .equal("account_ref", Some(text(account_ref.as_str())))
        .equal("status", status.map(|s| text(s.as_str())))
        .0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dialect binding the compared values as they are.
    struct Numbered<const SIGIL: char>;

    impl<const S: char> Dialect for Numbered<S> {
        type Value = ColumnValue;
        const SIGIL: char = S;
        fn value(value: ColumnValue) -> ColumnValue {
            value
        }
    }

    fn numbers_after_the_tenant<D: Dialect<Value = ColumnValue>>() {
        let conditions = vec![
            Condition { column: "status", op: "=", value: text("OPEN") },
            Condition { column: "created_at", op: "<", value: KeyValue::Int(7) },
        ];
        let mut clause = Clause::<D>::of(conditions);
        let p = clause.param(text("a-1").into());
        clause.and(&format!("account_ref = {p}"));
        let s = D::SIGIL;
        assert_eq!(
            clause.sql,
            format!("tenant_id = {s}1 AND status = {s}2 AND created_at < {s}3 AND account_ref = {s}4")
        );
        assert_eq!(clause.binds, vec![text("OPEN").into(), 7i64.into(), text("a-1").into()]);
        assert_eq!(
            clause.page_sql("locks", "id", "id DESC"),
            format!("SELECT id FROM locks WHERE {} ORDER BY id DESC LIMIT {s}5 OFFSET {s}6", clause.sql)
        );
        assert_eq!(clause.count_sql("locks"), format!("SELECT COUNT(*) AS total FROM locks WHERE {}", clause.sql));
    }

    #[test]
    fn a_clause_numbers_its_filters_after_the_tenant_in_the_backends_style() {
        numbers_after_the_tenant::<Numbered<'?'>>();
        numbers_after_the_tenant::<Numbered<'$'>>();
    }
}
