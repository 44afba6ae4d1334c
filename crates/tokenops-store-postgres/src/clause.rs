//! The WHERE clause of a filtered list on PostgreSQL: the shared `conditions::Clause` with `$N`
//! placeholders and PostgreSQL's bound values, and running a page of it (the lists written once,
//! `TableRows`, included).

use crate::query::BindPage;
use crate::{PostgresTx, codec};
use async_trait::async_trait;
use sqlx::Postgres;
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::Query;
use tokenops_domain::TenantId;
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_store::conditions::{self, Condition, Dialect};
use tokenops_store::keyset::KeyValue;
use tokenops_store::rows::{Decode, Table};
use tokenops_store::{StoreResult, TableRows};
use uuid::Uuid;

/// A value bound to a list's dynamic WHERE clause.
pub(crate) enum Bind {
    Int(i64),
    Text(String),
    TextList(Vec<String>),
    Id(Uuid),
}

/// PostgreSQL's dialect of the shared clause: `$1`, `$2`, … and its bound values.
pub(crate) struct Pg;

impl Dialect for Pg {
    type Value = Bind;
    const SIGIL: char = '$';
    fn value(value: KeyValue) -> Bind {
        match value {
            KeyValue::Int(v) => Bind::Int(v),
            KeyValue::Text(v) => Bind::Text(v),
            KeyValue::Id(v) => Bind::Id(v),
        }
    }
}

/// The shared clause as PostgreSQL numbers and binds it.
pub(crate) type Clause = conditions::Clause<Pg>;

/// Binds the clause's values to `query`: the tenant, then each filter's.
pub(crate) fn bind<'q>(
    clause: &Clause,
    tenant: TenantId,
    mut query: Query<'q, Postgres, PgArguments>,
) -> Query<'q, Postgres, PgArguments> {
    query = query.bind(tenant.as_uuid());
    for b in &clause.binds {
        query = match b {
            Bind::Int(v) => query.bind(*v),
            Bind::Text(v) => query.bind(v.clone()),
            Bind::TextList(v) => query.bind(v.clone()),
            Bind::Id(v) => query.bind(*v),
        };
    }
    query
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
}
