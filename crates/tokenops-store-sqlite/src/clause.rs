//! The WHERE clause of a filtered list on SQLite: the shared `conditions::Clause` with `?N`
//! placeholders and SQLite's values, and running a page of it (the lists written once,
//! `TableRows`, included); the inserts and updates written once (`TableWrites`) bind the same.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::types::Value;
use rusqlite::{Params, Row, params_from_iter};
use tokenops_domain::TenantId;
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_store::conditions::{self, Condition, Dialect};
use tokenops_store::keyset::KeyValue;
use tokenops_store::rows::{ColumnValue, Decode, Table};
use tokenops_store::{StoreResult, TableRows, TableWrites};

/// SQLite's dialect of the shared clause: `?1`, `?2`, … and its values: uuids as text, JSON
/// documents and lists as JSON text, booleans as 0 and 1.
pub(crate) struct Sqlite;

impl Dialect for Sqlite {
    type Value = Value;
    const SIGIL: char = '?';
    fn value(value: ColumnValue) -> Value {
        let value = match value {
            ColumnValue::Bool(v) => v.map(|v| Value::Integer(i64::from(v))),
            ColumnValue::SmallInt(v) => v.map(|v| Value::Integer(i64::from(v))),
            ColumnValue::Int(v) => v.map(|v| Value::Integer(i64::from(v))),
            ColumnValue::BigInt(v) => v.map(Value::Integer),
            ColumnValue::Text(v) => v.map(Value::Text),
            ColumnValue::Uuid(v) => v.map(|v| Value::Text(codec::id_text(v))),
            ColumnValue::Json(v) => v.map(|v| Value::Text(codec::json_text(&v))),
            ColumnValue::TextList(v) => v.map(|v| Value::Text(codec::names_text(&v))),
            ColumnValue::Bytes(v) => v.map(Value::Blob),
        };
        value.unwrap_or(Value::Null)
    }
}

/// `row`'s values as SQLite binds them.
fn values_of(row: Vec<ColumnValue>) -> impl Params {
    params_from_iter(row.into_iter().map(Sqlite::value))
}

/// The shared clause as SQLite numbers and binds it.
pub(crate) type Clause = conditions::Clause<Sqlite>;

/// The values of the clause's placeholders, in order: the tenant, then each filter's; the
/// caller pushes those of LIMIT and OFFSET after them.
pub(crate) fn values(clause: &Clause, tenant: TenantId) -> Vec<Value> {
    let mut values = Vec::with_capacity(clause.binds.len() + 3);
    values.push(Value::Text(codec::id_text(tenant.as_uuid())));
    values.extend(clause.binds.iter().cloned());
    values
}

impl SqliteTx {
    /// Runs `sql`, a `SELECT COUNT(*)` over `clause`: a list's total.
    pub(crate) fn count_of(&self, clause: &Clause, tenant: TenantId, sql: &str) -> StoreResult<u64> {
        let count: i64 = self.scalar(sql, params_from_iter(values(clause, tenant)))?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// One page of the rows of `table` that `clause` selects, in `order`, with the total it
    /// selects.
    pub(crate) fn page_of<T>(
        &self,
        clause: &Clause,
        tenant: TenantId,
        table: &Table,
        order: &str,
        page: PageRequest,
        decode: impl FnMut(&Row<'_>) -> StoreResult<T>,
    ) -> StoreResult<Page<T>> {
        let total = self.count_of(clause, tenant, &clause.count_sql(table.name))?;
        let (limit, offset) = codec::page_limits(page);
        let mut values = values(clause, tenant);
        values.push(Value::Integer(limit));
        values.push(Value::Integer(offset));
        let items =
            self.fetch_all(&clause.page_sql(table.name, table.columns, order), params_from_iter(values), decode)?;
        Ok(Page { items, total })
    }
}

#[async_trait]
impl<T: Decode + Send> TableRows<T> for SqliteTx {
    async fn page_rows(
        &mut self,
        tenant: TenantId,
        table: &Table,
        conditions: Vec<Condition>,
        order: &str,
        page: PageRequest,
    ) -> StoreResult<Page<T>> {
        self.page_of(&Clause::of(conditions), tenant, table, order, page, codec::decoded)
    }

    async fn row_by_key(
        &mut self,
        tenant: TenantId,
        table: &Table,
        key: KeyValue,
        for_update: bool,
    ) -> StoreResult<Option<T>> {
        // Write transactions run one at a time on the single writer: the row is held already.
        if for_update {
            self.require_write(&format!("reading a row of {} for update", table.name))?;
        }
        self.fetch_by_key(table, tenant, Sqlite::value(key.into()), codec::decoded)
    }

    async fn rows_where(
        &mut self,
        tenant: TenantId,
        table: &Table,
        conditions: Vec<Condition>,
        order: &str,
        for_update: bool,
    ) -> StoreResult<Vec<T>> {
        // As `row_by_key`: the single writer holds the rows already.
        if for_update {
            self.require_write(&format!("reading rows of {} for update", table.name))?;
        }
        let clause = Clause::of(conditions);
        let sql = clause.rows_sql(table.name, table.columns, order);
        self.fetch_all(&sql, params_from_iter(values(&clause, tenant)), codec::decoded)
    }
}

#[async_trait]
impl TableWrites for SqliteTx {
    async fn insert_row_if_new(&mut self, table: &Table, row: Vec<ColumnValue>) -> StoreResult<bool> {
        Ok(self.execute(&table.insert_new_sql(Sqlite::SIGIL), values_of(row))? > 0)
    }

    async fn update_by_key(&mut self, table: &Table, set: &[&str], values: Vec<ColumnValue>) -> StoreResult<u64> {
        let changed = self.execute(&table.update_sql(Sqlite::SIGIL, set), values_of(values))?;
        Ok(u64::try_from(changed).unwrap_or(u64::MAX))
    }
}
