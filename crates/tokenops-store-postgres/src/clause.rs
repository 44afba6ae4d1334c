//! The WHERE clause of a filtered list (operations, locks, breaks): built from the filters actually
//! given, each a fixed fragment numbered after the tenant.

use crate::query::BindPage;
use crate::{PostgresTx, codec, query};
use sqlx::Postgres;
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::Query;
use tokenops_domain::TenantId;
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_store::StoreResult;
use tokenops_store::conditions::Condition;
use tokenops_store::keyset::KeyValue;
use uuid::Uuid;

/// A value bound to a list's dynamic WHERE clause.
pub(crate) enum Bind {
    Int(i64),
    Text(String),
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

/// The WHERE clause of a list: `tenant_id = $1`, then each filter given, its parameters
/// numbered in order.
pub(crate) struct Clause {
    pub(crate) sql: String,
    pub(crate) binds: Vec<Bind>,
}

impl Clause {
    pub(crate) fn new() -> Self {
        Self { sql: String::from("tenant_id = $1"), binds: Vec::new() }
    }

    /// The clause of a list's shared conditions (`tokenops_store::conditions`).
    pub(crate) fn of(conditions: Vec<Condition>) -> Self {
        let mut clause = Self::new();
        for c in conditions {
            clause.compare(c.column, c.op, c.value.into());
        }
        clause
    }

    /// Binds `value` and returns its placeholder.
    pub(crate) fn param(&mut self, value: Bind) -> String {
        self.binds.push(value);
        format!("${}", self.binds.len() + 1)
    }

    pub(crate) fn and(&mut self, fragment: &str) {
        self.sql.push_str(" AND ");
        self.sql.push_str(fragment);
    }

    /// Adds the filter `column op value`, `value` bound.
    pub(crate) fn compare(&mut self, column: &str, op: &str, value: Bind) {
        let p = self.param(value);
        self.and(&format!("{column} {op} {p}"));
    }

    /// The next free placeholder number (for LIMIT and OFFSET).
    pub(crate) fn next(&self) -> usize {
        self.binds.len() + 2
    }

    pub(crate) fn bind<'q>(
        &self,
        tenant: TenantId,
        mut query: Query<'q, Postgres, PgArguments>,
    ) -> Query<'q, Postgres, PgArguments> {
        query = query.bind(tenant.as_uuid());
        for b in &self.binds {
            query = match b {
                Bind::Int(v) => query.bind(*v),
                Bind::Text(v) => query.bind(v.clone()),
                Bind::Id(v) => query.bind(*v),
            };
        }
        query
    }

    /// Runs `sql`, a `SELECT COUNT(*) AS total` over the clause: a list's total.
    pub(crate) async fn count(&self, tenant: TenantId, sql: String, conn: &mut sqlx::PgConnection) -> StoreResult<u64> {
        let query = self.bind(tenant, sqlx::query(sqlx::AssertSqlSafe(sql)));
        query::fetch_one(conn, query, |row| Ok(codec::count(codec::get(row, "total")?))).await
    }

    /// One page of the rows of `table` the clause selects (`columns` of them, in `order`), with
    /// the total the clause selects.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn page<T>(
        &self,
        tx: &mut PostgresTx,
        tenant: TenantId,
        table: &str,
        columns: &str,
        order: &str,
        page: PageRequest,
        decode: impl FnMut(&PgRow) -> StoreResult<T>,
    ) -> StoreResult<Page<T>> {
        let count_sql = format!("SELECT COUNT(*) AS total FROM {table} WHERE {}", self.sql);
        let total = self.count(tenant, count_sql, &mut tx.tx).await?;
        let n = self.next();
        let sql =
            format!("SELECT {columns} FROM {table} WHERE {} ORDER BY {order} LIMIT ${n} OFFSET ${}", self.sql, n + 1);
        let items =
            tx.fetch_all(self.bind(tenant, sqlx::query(sqlx::AssertSqlSafe(sql))).bind_page(page), decode).await?;
        Ok(Page { items, total })
    }
}
