//! The shapes every statement takes: run a bound query, map the driver's error
//! (`codec::backend`), decode the rows. Free functions take any executor (the pool, a
//! connection); `PostgresTx` has the same as methods on its transaction. Queries are built and
//! bound as sqlx builds them (`sqlx::query(..).bind(..)`) and handed over whole.

use crate::{PostgresTx, codec};
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::{Query, QueryScalar};
use sqlx::{PgExecutor, Postgres};
use tokenops_domain::TenantId;
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_store::StoreResult;
use tokenops_store::rows::Table;

/// The class of the organisations' turns (`take_turn`): neither the migrations' nor the roles'.
const TURN_LOCK_CLASS: i32 = crate::ADVISORY_LOCK_CLASS + 2;

/// A statement with its parameters bound.
pub(crate) type PgQuery<'q> = Query<'q, Postgres, PgArguments>;
/// A statement whose rows are one column, of type `O`.
pub(crate) type PgScalar<'q, O> = QueryScalar<'q, Postgres, O, PgArguments>;

/// A page's parameters on a list's query.
pub(crate) trait BindPage {
    /// Binds the page's size and offset, in that order (a list's `LIMIT $n OFFSET $n+1`).
    fn bind_page(self, page: PageRequest) -> Self;
}

impl BindPage for PgQuery<'_> {
    fn bind_page(self, page: PageRequest) -> Self {
        self.bind(i64::from(page.size)).bind(codec::sql_i64(page.offset()))
    }
}

/// Runs a statement; returns how many rows it affected.
pub(crate) async fn execute<'c>(executor: impl PgExecutor<'c>, query: PgQuery<'_>) -> StoreResult<u64> {
    Ok(query.execute(executor).await.map_err(codec::backend)?.rows_affected())
}

/// The rows of a query, each decoded.
pub(crate) async fn fetch_all<'c, T>(
    executor: impl PgExecutor<'c>,
    query: PgQuery<'_>,
    decode: impl FnMut(&PgRow) -> StoreResult<T>,
) -> StoreResult<Vec<T>> {
    let rows = query.fetch_all(executor).await.map_err(codec::backend)?;
    rows.iter().map(decode).collect()
}

/// The first row of a query, decoded, if there is one.
pub(crate) async fn fetch_optional<'c, T>(
    executor: impl PgExecutor<'c>,
    query: PgQuery<'_>,
    decode: impl FnOnce(&PgRow) -> StoreResult<T>,
) -> StoreResult<Option<T>> {
    let row = query.fetch_optional(executor).await.map_err(codec::backend)?;
    row.as_ref().map(decode).transpose()
}

/// The one row a query must return, decoded.
pub(crate) async fn fetch_one<'c, T>(
    executor: impl PgExecutor<'c>,
    query: PgQuery<'_>,
    decode: impl FnOnce(&PgRow) -> StoreResult<T>,
) -> StoreResult<T> {
    let row = query.fetch_one(executor).await.map_err(codec::backend)?;
    decode(&row)
}

impl PostgresTx {
    /// Writes the rows this transaction holds back (`deferred`), in one statement; every other
    /// statement of the transaction runs after this, so that it sees them.
    pub(crate) async fn flush(&mut self) -> StoreResult<()> {
        self.flush_written().await.map(drop)
    }

    /// [`flush`](Self::flush), answering what the statement wrote (`None` when nothing was held
    /// back).
    pub(crate) async fn flush_written(&mut self) -> StoreResult<Option<crate::deferred::Written>> {
        let Some((query, expected)) = self.deferred.take()? else {
            return Ok(None);
        };
        let written = fetch_one(&mut *self.tx, query, crate::deferred::decode_written).await?;
        expected.check(&written)?;
        Ok(Some(written))
    }

    /// Where a write the transaction holds back goes; a read transaction refuses it.
    pub(crate) fn hold_back(&mut self) -> StoreResult<&mut crate::deferred::Deferred> {
        if self.read_only {
            return Err(tokenops_store::StoreError::Backend("a write in a read-only transaction".into()));
        }
        Ok(&mut self.deferred)
    }

    /// [`execute`] in this transaction.
    pub(crate) async fn execute(&mut self, query: PgQuery<'_>) -> StoreResult<u64> {
        self.flush().await?;
        execute(&mut *self.tx, query).await
    }

    /// Waits for the transactions holding the organisation's turn at `topic` and holds it
    /// until this one ends: a transaction-scoped advisory lock per schema, topic and
    /// organisation, in a class of its own. Writes that each judge rows the other may change
    /// (a write skew that row locks cannot see) take turns this way.
    pub(crate) async fn take_turn(&mut self, topic: &str, tenant: TenantId) -> StoreResult<()> {
        self.execute(
            sqlx::query(
                "SELECT pg_advisory_xact_lock($1, hashtext(coalesce(current_schema(), '') || '/' || $2 || '/' || $3))",
            )
            .bind(TURN_LOCK_CLASS)
            .bind(topic.to_owned())
            .bind(tenant.as_uuid().to_string()),
        )
        .await
        .map(drop)
    }

    /// Runs an `INSERT … ON CONFLICT DO NOTHING`; a row that already exists is
    /// `StoreError::Conflict` naming `what` (see `codec::conflict` for why not the unique
    /// violation itself).
    pub(crate) async fn insert_new(&mut self, query: PgQuery<'_>, what: &str) -> StoreResult<()> {
        if self.execute(query).await? == 0 {
            return Err(codec::conflict(what));
        }
        Ok(())
    }

    /// [`fetch_all`] in this transaction.
    pub(crate) async fn fetch_all<T>(
        &mut self,
        query: PgQuery<'_>,
        decode: impl FnMut(&PgRow) -> StoreResult<T>,
    ) -> StoreResult<Vec<T>> {
        self.flush().await?;
        fetch_all(&mut *self.tx, query, decode).await
    }

    /// [`fetch_optional`] in this transaction.
    pub(crate) async fn fetch_optional<T>(
        &mut self,
        query: PgQuery<'_>,
        decode: impl FnOnce(&PgRow) -> StoreResult<T>,
    ) -> StoreResult<Option<T>> {
        self.flush().await?;
        fetch_optional(&mut *self.tx, query, decode).await
    }

    /// The organisation's row of `table` whose key is `key`, decoded, if there is one; `suffix`
    /// ends the statement (a further condition, `FOR UPDATE`).
    pub(crate) async fn fetch_by_key<K, T>(
        &mut self,
        table: &Table,
        tenant: TenantId,
        key: K,
        suffix: &str,
        decode: impl FnOnce(&PgRow) -> StoreResult<T>,
    ) -> StoreResult<Option<T>>
    where
        K: for<'k> sqlx::Encode<'k, Postgres> + sqlx::Type<Postgres> + Send,
    {
        let sql = table.select_by_key_sql('$', suffix);
        self.fetch_optional(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(tenant.as_uuid()).bind(key), decode).await
    }

    /// One page of a list with a fixed WHERE clause, and its total: `count` (a `SELECT COUNT(*)`)
    /// and `rows` are its two statements over the same filter, whose values `bind` binds to each
    /// (the tenant first); `rows` ends with `LIMIT` and `OFFSET` on the two placeholders after them.
    pub(crate) async fn page_where<T>(
        &mut self,
        count: impl Into<String>,
        rows: String,
        bind: impl for<'q> Fn(PgQuery<'q>) -> PgQuery<'q>,
        page: PageRequest,
        decode: impl FnMut(&PgRow) -> StoreResult<T>,
    ) -> StoreResult<Page<T>> {
        let total: i64 = self
            .fetch_one(bind(sqlx::query(sqlx::AssertSqlSafe(count.into()))), |row| {
                sqlx::Row::try_get(row, 0).map_err(codec::backend)
            })
            .await?;
        let items = self.fetch_all(bind(sqlx::query(sqlx::AssertSqlSafe(rows))).bind_page(page), decode).await?;
        Ok(Page { items, total: codec::count(total) })
    }

    /// [`fetch_one`] in this transaction.
    pub(crate) async fn fetch_one<T>(
        &mut self,
        query: PgQuery<'_>,
        decode: impl FnOnce(&PgRow) -> StoreResult<T>,
    ) -> StoreResult<T> {
        self.flush().await?;
        fetch_one(&mut *self.tx, query, decode).await
    }

    /// The value of the one row a one-column query returns.
    pub(crate) async fn scalar<O>(&mut self, query: PgScalar<'_, O>) -> StoreResult<O>
    where
        O: Send + Unpin,
        (O,): Send + Unpin + for<'r> sqlx::FromRow<'r, PgRow>,
    {
        self.flush().await?;
        query.fetch_one(&mut *self.tx).await.map_err(codec::backend)
    }

    /// The value of the first row of a one-column query, if there is one.
    pub(crate) async fn scalar_optional<O>(&mut self, query: PgScalar<'_, O>) -> StoreResult<Option<O>>
    where
        O: Send + Unpin,
        (O,): Send + Unpin + for<'r> sqlx::FromRow<'r, PgRow>,
    {
        self.flush().await?;
        query.fetch_optional(&mut *self.tx).await.map_err(codec::backend)
    }

    /// The values of a one-column query.
    pub(crate) async fn scalars<O>(&mut self, query: PgScalar<'_, O>) -> StoreResult<Vec<O>>
    where
        O: Send + Unpin,
        (O,): Send + Unpin + for<'r> sqlx::FromRow<'r, PgRow>,
    {
        self.flush().await?;
        query.fetch_all(&mut *self.tx).await.map_err(codec::backend)
    }
}
