//! The WHERE clause of a filtered list on PostgreSQL: the shared `conditions::Clause` with `$N`
//! placeholders and PostgreSQL's bound values, and running a page of it (the lists written once,
//! `TableRows`, included); the inserts and updates written once (`TableWrites`) bind the same.

use crate::query::{BindPage, PgQuery};
use crate::{PostgresTx, codec};
use async_trait::async_trait;
use sqlx::postgres::PgRow;
use tokenops_domain::TenantId;
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_store::conditions::{self, Condition, Dialect};
use tokenops_store::keyset::KeyValue;
use tokenops_store::rows::{ColumnValue, Decode, Table};
use tokenops_store::{StoreResult, TableRows, TableWrites};

/// PostgreSQL's dialect of the shared clause: `$1`, `$2`, … and its bound values, the shared
/// column values themselves (`bind_value` binds each as its own type).
pub(crate) struct Pg;

impl Dialect for Pg {
    type Value = ColumnValue;
    const SIGIL: char = '$';
    fn value(value: ColumnValue) -> ColumnValue {
        value
    }
}

/// Binds one column's value as its PostgreSQL type, a NULL typed as the column's.
pub(crate) fn bind_value(query: PgQuery<'_>, value: ColumnValue) -> PgQuery<'_> {
    match value {
        ColumnValue::Bool(v) => query.bind(v),
        ColumnValue::SmallInt(v) => query.bind(v),
        ColumnValue::Int(v) => query.bind(v),
        ColumnValue::BigInt(v) => query.bind(v),
        ColumnValue::Text(v) => query.bind(v),
        ColumnValue::Uuid(v) => query.bind(v),
        ColumnValue::Json(v) => query.bind(v),
        ColumnValue::TextList(v) => query.bind(v),
        ColumnValue::Bytes(v) => query.bind(v),
    }
}

/// Binds `values` in order.
pub(crate) fn bind_values(query: PgQuery<'_>, values: Vec<ColumnValue>) -> PgQuery<'_> {
    values.into_iter().fold(query, bind_value)
}

/// The shared clause as PostgreSQL numbers and binds it.
pub(crate) type Clause = conditions::Clause<Pg>;

/// Binds the clause's values to `query`: the tenant, then each filter's.
pub(crate) fn bind<'q>(clause: &Clause, tenant: TenantId, query: PgQuery<'q>) -> PgQuery<'q> {
    bind_values(query.bind(tenant.as_uuid()), clause.binds.clone())
}

impl PostgresTx {
    /// Runs `sql`, a `SELECT COUNT(*) AS total` over `clause`: a list's total, counting the
    /// rows the transaction held back (written first, as before any statement).
    pub(crate) async fn count_of(&mut self, clause: &Clause, tenant: TenantId, sql: String) -> StoreResult<u64> {
        let query = bind(clause, tenant, sqlx::query(sqlx::AssertSqlSafe(sql)));
        self.fetch_one(query, |row| Ok(codec::count(codec::get(row, "total")?))).await
    }

    /// One page of the rows of `table` that `clause` selects, in `order`, with the total it
    /// selects.
    pub(crate) async fn page_of<T>(
        &mut self,
        clause: &Clause,
        tenant: TenantId,
        table: &Table,
        order: &str,
        page: PageRequest,
        decode: impl FnMut(&PgRow) -> StoreResult<T>,
    ) -> StoreResult<Page<T>> {
        let total = self.count_of(clause, tenant, clause.count_sql(table.name)).await?;
        let sql = clause.page_sql(table.name, table.columns, order);
        let query = bind(clause, tenant, sqlx::query(sqlx::AssertSqlSafe(sql))).bind_page(page);
        let items = self.fetch_all(query, decode).await?;
        Ok(Page { items, total })
    }
}

#[async_trait]
impl<T: Decode + Send> TableRows<T> for PostgresTx {
    async fn page_rows(
        &mut self,
        tenant: TenantId,
        table: &Table,
        conditions: Vec<Condition>,
        order: &str,
        page: PageRequest,
    ) -> StoreResult<Page<T>> {
        self.page_of(&Clause::of(conditions), tenant, table, order, page, codec::decoded).await
    }

    async fn row_by_key(
        &mut self,
        tenant: TenantId,
        table: &Table,
        key: KeyValue,
        for_update: bool,
    ) -> StoreResult<Option<T>> {
        let suffix = if for_update { "FOR UPDATE" } else { "" };
        match key {
            KeyValue::Int(v) => self.fetch_by_key(table, tenant, v, suffix, codec::decoded).await,
            KeyValue::Text(v) => self.fetch_by_key(table, tenant, v, suffix, codec::decoded).await,
            KeyValue::Id(v) => self.fetch_by_key(table, tenant, v, suffix, codec::decoded).await,
        }
    }

    async fn rows_where(
        &mut self,
        tenant: TenantId,
        table: &Table,
        conditions: Vec<Condition>,
        order: &str,
        for_update: bool,
    ) -> StoreResult<Vec<T>> {
        let clause = Clause::of(conditions);
        let mut sql = clause.rows_sql(table.name, table.columns, order);
        if for_update {
            sql.push_str(" FOR UPDATE");
        }
        self.fetch_all(bind(&clause, tenant, sqlx::query(sqlx::AssertSqlSafe(sql))), codec::decoded).await
    }
}

#[async_trait]
impl TableWrites for PostgresTx {
    async fn insert_row_if_new(&mut self, table: &Table, row: Vec<ColumnValue>) -> StoreResult<bool> {
        let query = sqlx::query(sqlx::AssertSqlSafe(table.insert_new_sql(Pg::SIGIL)));
        Ok(self.execute(bind_values(query, row)).await? > 0)
    }

    async fn update_by_key(&mut self, table: &Table, set: &[&str], values: Vec<ColumnValue>) -> StoreResult<u64> {
        let query = sqlx::query(sqlx::AssertSqlSafe(table.update_sql(Pg::SIGIL, set)));
        self.execute(bind_values(query, values)).await
    }
}
