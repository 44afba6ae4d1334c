//! The WHERE clause of a filtered list on SQLite: the shared `conditions::Clause` with `?N`
//! placeholders and SQLite's values, and running a page of it (the lists written once,
//! `TableRows`, included).

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::types::Value;
use rusqlite::{Row, params_from_iter};
use tokenops_domain::TenantId;
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_store::conditions::{self, Condition, Dialect};
use tokenops_store::keyset::KeyValue;
use tokenops_store::rows::{Decode, Table};
use tokenops_store::{StoreResult, TableRows};

/// SQLite's dialect of the shared clause: `?1`, `?2`, … and its values (uuids as text).
pub(crate) struct Sqlite;

impl Dialect for Sqlite {
    type Value = Value;
    const SIGIL: char = '?';
    fn value(value: KeyValue) -> Value {
        match value {
            KeyValue::Int(v) => Value::Integer(v),
            KeyValue::Text(v) => Value::Text(v),
            KeyValue::Id(v) => Value::Text(codec::id_text(v)),
        }
    }
}

/// The shared clause as SQLite numbers and binds it.
pub(crate) type Clause = conditions::Clause<Sqlite>;

/// Running the shared clause on SQLite: its values, its total and a page of it.
pub(crate) trait RunClause {
    /// The values of the clause's placeholders, in order: the tenant, then each filter's; the
    /// caller pushes those of LIMIT and OFFSET after them.
    fn values(&self, tenant: TenantId) -> Vec<Value>;

    /// Runs `sql`, a `SELECT COUNT(*)` over the clause: a list's total.
    fn count(&self, tenant: TenantId, sql: &str, tx: &SqliteTx) -> StoreResult<u64>;

    /// One page of the rows of `table` the clause selects, in `order`, with the total the clause
    /// selects.
    fn page<T>(
        &self,
        tx: &SqliteTx,
        tenant: TenantId,
        table: &Table,
        order: &str,
        page: PageRequest,
        decode: impl FnMut(&Row<'_>) -> StoreResult<T>,
    ) -> StoreResult<Page<T>>;
}

impl RunClause for Clause {
    fn values(&self, tenant: TenantId) -> Vec<Value> {
        let mut values = Vec::with_capacity(self.binds.len() + 3);
        values.push(Value::Text(codec::id_text(tenant.as_uuid())));
        values.extend(self.binds.iter().cloned());
        values
    }

    fn count(&self, tenant: TenantId, sql: &str, tx: &SqliteTx) -> StoreResult<u64> {
        let count: i64 = tx.scalar(sql, params_from_iter(self.values(tenant)))?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    fn page<T>(
        &self,
        tx: &SqliteTx,
        tenant: TenantId,
        table: &Table,
        order: &str,
        page: PageRequest,
        decode: impl FnMut(&Row<'_>) -> StoreResult<T>,
    ) -> StoreResult<Page<T>> {
        let total = self.count(tenant, &self.count_sql(table.name), tx)?;
        let (limit, offset) = codec::page_limits(page);
        let mut values = self.values(tenant);
        values.push(Value::Integer(limit));
        values.push(Value::Integer(offset));
        let items = tx.fetch_all(&self.page_sql(table.name, table.columns, order), params_from_iter(values), decode)?;
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
        Clause::of(conditions).page(self, tenant, table, order, page, |row| T::decode(&codec::Cols(row)))
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
        self.fetch_by_key(table, tenant, Sqlite::value(key), |row| T::decode(&codec::Cols(row)))
    }
}
