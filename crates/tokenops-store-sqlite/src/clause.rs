//! The WHERE clause of a filtered list on SQLite: the shared `conditions::Clause` with `?N`
//! placeholders and SQLite's values, and running a page of it (the lists written once,
//! `TableRows`, included).

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::types::Value;
use rusqlite::{Row, params_from_iter};
use tokenops_domain::TenantId;
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_store::conditions::{self, Condition};
use tokenops_store::keyset::KeyValue;
use tokenops_store::rows::{Decode, Table};
use tokenops_store::{StoreResult, TableRows};

/// The shared clause, numbered `?1`, `?2`, …
pub(crate) struct Clause(conditions::Clause<Value>);

impl std::ops::Deref for Clause {
    type Target = conditions::Clause<Value>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Clause {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Clause {
    pub(crate) fn new() -> Self {
        Self(conditions::Clause::new('?'))
    }

    /// The clause of a list's shared conditions (`tokenops_store::conditions`).
    pub(crate) fn of(conditions: Vec<Condition>) -> Self {
        Self(conditions::Clause::of('?', conditions, value))
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

    /// One page of the rows of `table` the clause selects, in `order`, with the total the clause
    /// selects.
    pub(crate) fn page<T>(
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
        self.fetch_by_key(table, tenant, value(key), |row| T::decode(&codec::Cols(row)))
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
