//! The WHERE clause of a filtered list (operations, locks, breaks): built from the filters actually
//! given, each a fixed fragment numbered after the tenant.

use crate::{SqliteTx, codec};
use rusqlite::types::Value;
use rusqlite::{Row, params_from_iter};
use tokenops_domain::TenantId;
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_store::StoreResult;
use tokenops_store::conditions::Condition;
use tokenops_store::keyset::KeyValue;

/// The WHERE clause of a list: `tenant_id = ?1`, then each filter given, its parameters
/// numbered in order.
pub(crate) struct Clause {
    pub(crate) sql: String,
    /// The values bound to the filters, from `?2` on.
    pub(crate) binds: Vec<Value>,
}

impl Clause {
    pub(crate) fn new() -> Self {
        Self { sql: String::from("tenant_id = ?1"), binds: Vec::new() }
    }

    /// The clause of a list's shared conditions (`tokenops_store::conditions`).
    pub(crate) fn of(conditions: Vec<Condition>) -> Self {
        let mut clause = Self::new();
        for c in conditions {
            clause.compare(c.column, c.op, value(c.value));
        }
        clause
    }

    /// Binds `value` and returns its placeholder.
    pub(crate) fn param(&mut self, value: Value) -> String {
        self.binds.push(value);
        format!("?{}", self.binds.len() + 1)
    }

    pub(crate) fn and(&mut self, fragment: &str) {
        self.sql.push_str(" AND ");
        self.sql.push_str(fragment);
    }

    /// Adds the filter `column op value`, `value` bound.
    pub(crate) fn compare(&mut self, column: &str, op: &str, value: Value) {
        let p = self.param(value);
        self.and(&format!("{column} {op} {p}"));
    }

    /// The next free placeholder number (for LIMIT and OFFSET).
    pub(crate) fn next(&self) -> usize {
        self.binds.len() + 2
    }

    /// The values of the clause's placeholders, in order: the tenant, then each filter's; the
    /// caller pushes those of LIMIT and OFFSET after them.
    pub(crate) fn values(&self, tenant: TenantId) -> Vec<Value> {
        let mut values = Vec::with_capacity(self.binds.len() + 3);
        values.push(Value::Text(codec::id_text(tenant.as_uuid())));
        values.extend(self.binds.iter().cloned());
        values
    }

    /// Runs `sql`, a `SELECT COUNT(*)` over the clause: a list's total.
    pub(crate) fn count(&self, tenant: TenantId, sql: &str, tx: &SqliteTx) -> StoreResult<u64> {
        let count: i64 = tx.scalar(sql, params_from_iter(self.values(tenant)))?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// One page of the rows of `table` the clause selects (`columns` of them, in `order`), with
    /// the total the clause selects.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn page<T>(
        &self,
        tx: &SqliteTx,
        tenant: TenantId,
        table: &str,
        columns: &str,
        order: &str,
        page: PageRequest,
        decode: impl FnMut(&Row<'_>) -> StoreResult<T>,
    ) -> StoreResult<Page<T>> {
        let total = self.count(tenant, &format!("SELECT COUNT(*) FROM {table} WHERE {}", self.sql), tx)?;
        let n = self.next();
        let sql =
            format!("SELECT {columns} FROM {table} WHERE {} ORDER BY {order} LIMIT ?{n} OFFSET ?{}", self.sql, n + 1);
        let (limit, offset) = codec::page_limits(page);
        let mut values = self.values(tenant);
        values.push(Value::Integer(limit));
        values.push(Value::Integer(offset));
        let items = tx.fetch_all(&sql, params_from_iter(values), decode)?;
        Ok(Page { items, total })
    }
}

/// A compared value as SQLite stores it (uuids as text).
pub(crate) fn value(value: KeyValue) -> Value {
    match value {
        KeyValue::Int(v) => Value::Integer(v),
        KeyValue::Text(v) => Value::Text(v),
        KeyValue::Id(v) => Value::Text(codec::id_text(v)),
    }
}
