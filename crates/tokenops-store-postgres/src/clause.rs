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

impl From<KeyValue> for Bind {
    fn from(value: KeyValue) -> Self {
        match value {
            KeyValue::Int(v) => Bind::Int(v),
            KeyValue::Text(v) => Bind::Text(v),
            KeyValue::Id(v) => Bind::Id(v),
        }
    }
}

/// PostgreSQL's dialect of the shared clause: `$1`, `$2`, … and its bound values.
pub(crate) struct Pg;

impl Dialect for Pg {
    type Value = Bind;
    const SIGIL: char = '$';
    fn value(value: KeyValue) -> Bind {
        Bind::from(value)
    }
}

/// The shared clause as PostgreSQL numbers and binds it.
pub(crate) type Clause = conditions::Clause<Pg>;

/// Running the shared clause on PostgreSQL: binding its values, its total and a page of it.
pub(crate) trait RunClause {
    fn bind<'q>(&self, tenant: TenantId, query: Query<'q, Postgres, PgArguments>) -> Query<'q, Postgres, PgArguments>;

    /// Runs `sql`, a `SELECT COUNT(*) AS total` over the clause: a list's total, counting the
    /// rows the transaction held back (written first, as before any statement).
    fn count(
        &self,
        tenant: TenantId,
        sql: String,
        tx: &mut PostgresTx,
    ) -> impl Future<Output = StoreResult<u64>> + Send;

    /// One page of the rows of `table` the clause selects, in `order`, with the total the clause
    /// selects.
    fn page<T: Send>(
        &self,
        tx: &mut PostgresTx,
        tenant: TenantId,
        table: &Table,
        order: &str,
        page: PageRequest,
        decode: impl FnMut(&PgRow) -> StoreResult<T> + Send,
    ) -> impl Future<Output = StoreResult<Page<T>>> + Send;
}

impl RunClause for Clause {
    fn bind<'q>(
        &self,
        tenant: TenantId,
        mut query: Query<'q, Postgres, PgArguments>,
    ) -> Query<'q, Postgres, PgArguments> {
        query = query.bind(tenant.as_uuid());
        for b in &self.binds {
            query = match b {
                Bind::Int(v) => query.bind(*v),
                Bind::Text(v) => query.bind(v.clone()),
                Bind::TextList(v) => query.bind(v.clone()),
                Bind::Id(v) => query.bind(*v),
            };
        }
        query
    }

    async fn count(&self, tenant: TenantId, sql: String, tx: &mut PostgresTx) -> StoreResult<u64> {
        let query = self.bind(tenant, sqlx::query(sqlx::AssertSqlSafe(sql)));
        tx.fetch_one(query, |row| Ok(codec::count(codec::get(row, "total")?))).await
    }

    async fn page<T: Send>(
        &self,
        tx: &mut PostgresTx,
        tenant: TenantId,
        table: &Table,
        order: &str,
        page: PageRequest,
        decode: impl FnMut(&PgRow) -> StoreResult<T> + Send,
    ) -> StoreResult<Page<T>> {
        let total = self.count(tenant, self.count_sql(table.name), tx).await?;
        let sql = self.page_sql(table.name, table.columns, order);
        let items =
            tx.fetch_all(self.bind(tenant, sqlx::query(sqlx::AssertSqlSafe(sql))).bind_page(page), decode).await?;
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
        Clause::of(conditions).page(self, tenant, table, order, page, |row| T::decode(&codec::Cols(row))).await
    }

    async fn row_by_key(
        &mut self,
        tenant: TenantId,
        table: &Table,
        key: KeyValue,
        for_update: bool,
    ) -> StoreResult<Option<T>> {
        let suffix = if for_update { "FOR UPDATE" } else { "" };
        let decode = |row: &PgRow| T::decode(&codec::Cols(row));
        match key {
            KeyValue::Int(v) => self.fetch_by_key(table, tenant, v, suffix, decode).await,
            KeyValue::Text(v) => self.fetch_by_key(table, tenant, v, suffix, decode).await,
            KeyValue::Id(v) => self.fetch_by_key(table, tenant, v, suffix, decode).await,
        }
    }
}
