//! The SQLite store: the default, single-node backend. One writer connection takes every write
//! transaction, one at a time (so a read-then-write never fails with "locked"); a small read pool
//! serves snapshots in WAL mode. Writes are group-committed (`group_commit`): each is a
//! savepoint inside a shared transaction, one COMMIT and one sync of the WAL end many of them,
//! and each `commit` returns only once its group is durable.
//! Statements run inline on the calling task (`connection`).

mod accounts;
mod approvals;
mod audit;
mod automations;
mod breaks;
mod challenges;
mod clause;
mod codec;
mod connection;
mod contracts;
mod custody;
mod customers;
mod events;
mod exclusive;
mod executions;
mod group_commit;
mod groups;
mod idempotency;
mod jobs;
mod ledger;
mod locks;
mod machine_clients;
mod migrate;
mod operations;
mod policies;
mod policy_templates;
mod positions;
mod refresh_tokens;
mod roles;
mod scripts;
mod secret_reveals;
mod settings;
mod signing_keys;
mod standing;
mod tenants;
mod users;
mod webhooks;

use async_trait::async_trait;
use rusqlite::types::{FromSql, ToSql};
use rusqlite::{Connection, Params, Row};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokenops_domain::TenantId;
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_store::SubjectStanding;
use tokenops_store::rows::Table;
use tokenops_store::{Backend, Store, StoreError, StoreResult, Tx};
use tokio::sync::Notify;
use uuid::Uuid;

pub use migrate::MIGRATIONS;

/// Read connections: reads are short and inline, so a few serve many tasks.
const READERS: usize = 4;

#[derive(Clone)]
pub struct SqliteStore {
    /// The database file, beside which held roles lock files of their own (`exclusive`).
    path: Arc<std::path::PathBuf>,
    group: Arc<group_commit::GroupCommit>,
    readers: Arc<connection::Readers>,
    jobs_enqueued: Arc<Notify>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").finish_non_exhaustive()
    }
}

impl SqliteStore {
    pub async fn open(path: &Path) -> StoreResult<Self> {
        Self::open_with_wal_bound(path, group_commit::WAL_BOUND_BYTES).await
    }

    /// Opens the store with the WAL started over whenever it grows past `wal_bound` bytes (and
    /// at the earliest after 1,000 frames; `open` uses 256 MiB, tests a small bound to see it
    /// hold).
    pub async fn open_with_wal_bound(path: &Path, wal_bound: u64) -> StoreResult<Self> {
        let writer = connection::open_writer(path, wal_bound)?;
        let readers = Arc::new(connection::Readers::new(path, READERS));
        let jobs_enqueued = Arc::new(Notify::new());
        let group = group_commit::GroupCommit::start(path.to_owned(), writer, wal_bound);
        Ok(Self { path: Arc::new(path.to_owned()), group, readers, jobs_enqueued })
    }

    /// Applies every migration not yet applied; returns how many ran. `clock` stamps each one's
    /// `applied_at`.
    pub async fn migrate(&self, clock: &dyn tokenops_domain::Clock) -> StoreResult<usize> {
        // Migrations take the writer connection themselves: no group may hold it meanwhile.
        self.group.exclusive(|conn| migrate::apply(conn, clock)).await
    }

    /// A transaction on `conn`: writable on the writer's, read-only on a reader's.
    fn tx(&self, conn: Conn) -> Box<dyn Tx> {
        let writable = matches!(conn, Conn::Write(_));
        Box::new(SqliteTx { conn, writable, enqueued: false, jobs_enqueued: self.jobs_enqueued.clone() })
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> Backend {
        Backend::Sqlite
    }

    async fn write(&self) -> StoreResult<Box<dyn Tx>> {
        Ok(self.tx(Conn::Write(self.group.begin().await?)))
    }

    async fn read(&self) -> StoreResult<Box<dyn Tx>> {
        Ok(self.tx(Conn::Read(self.readers.begin().await?)))
    }

    async fn subject_standing(&self, tenant: Option<TenantId>, id: Uuid) -> StoreResult<SubjectStanding> {
        self.readers.single(|conn| standing::subject_standing(conn, tenant, id)).await
    }

    async fn ping(&self) -> StoreResult<()> {
        self.readers.single(|conn| conn.query_row("SELECT 1", [], |_| Ok(())).map_err(codec::backend)).await
    }

    async fn exclusive(&self, role: &str) -> StoreResult<Option<tokenops_store::Exclusive>> {
        exclusive::exclusive(&self.path, role)
    }

    async fn wait_for_jobs(&self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.jobs_enqueued.notified()).await;
    }

    async fn close(&self) {
        self.group.close().await;
        self.readers.close();
    }
}

/// A transaction's connection: a read transaction of the pool, or the group-committed writer.
enum Conn {
    Read(connection::ReadTx),
    Write(group_commit::WriteHandle),
}

impl std::ops::Deref for Conn {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        match self {
            Conn::Read(tx) => tx,
            Conn::Write(handle) => handle,
        }
    }
}

pub(crate) fn wake_workers(notify: &Notify) {
    notify.notify_waiters();
    notify.notify_one();
}

/// A transaction on either pool. Enqueuing a job marks it so that the commit wakes the workers.
pub struct SqliteTx {
    conn: Conn,
    /// False on the read pool, whose connections refuse every write statement.
    writable: bool,
    enqueued: bool,
    jobs_enqueued: Arc<Notify>,
}

impl SqliteTx {
    /// Refuses, in a read transaction, a call that writes or locks but may run no write
    /// statement (a claim with nothing due, a read for update), as PostgreSQL's read-only
    /// transactions refuse it, so that such a misuse fails on both stores alike.
    fn require_write(&self, what: &str) -> StoreResult<()> {
        if self.writable {
            Ok(())
        } else {
            Err(StoreError::Backend(format!("{what} needs a write transaction").into()))
        }
    }

    /// Runs a statement; the number of rows it changed.
    pub(crate) fn execute(&self, sql: &str, params: impl Params) -> StoreResult<usize> {
        let mut statement = self.conn.prepare_cached(sql).map_err(codec::backend)?;
        statement.execute(params).map_err(codec::backend)
    }

    /// The rows of a query, each decoded.
    pub(crate) fn fetch_all<T>(
        &self,
        sql: &str,
        params: impl Params,
        mut decode: impl FnMut(&Row<'_>) -> StoreResult<T>,
    ) -> StoreResult<Vec<T>> {
        let mut statement = self.conn.prepare_cached(sql).map_err(codec::backend)?;
        let mut rows = statement.query(params).map_err(codec::backend)?;
        let mut items = Vec::new();
        while let Some(row) = rows.next().map_err(codec::backend)? {
            items.push(decode(row)?);
        }
        Ok(items)
    }

    /// The first row of a query, decoded, if there is one.
    pub(crate) fn fetch_optional<T>(
        &self,
        sql: &str,
        params: impl Params,
        decode: impl FnOnce(&Row<'_>) -> StoreResult<T>,
    ) -> StoreResult<Option<T>> {
        let mut statement = self.conn.prepare_cached(sql).map_err(codec::backend)?;
        let mut rows = statement.query(params).map_err(codec::backend)?;
        match rows.next().map_err(codec::backend)? {
            Some(row) => decode(row).map(Some),
            None => Ok(None),
        }
    }

    /// The one row a query must return, decoded.
    pub(crate) fn fetch_one<T>(
        &self,
        sql: &str,
        params: impl Params,
        decode: impl FnOnce(&Row<'_>) -> StoreResult<T>,
    ) -> StoreResult<T> {
        self.fetch_optional(sql, params, decode)?
            .ok_or_else(|| StoreError::Backend("a query that returns one row returned none".into()))
    }

    /// Inserts one row of `table`, bound to `values` in its columns' order: for the hot path's
    /// appends, which bind their own parameters rather than the shared values (`TableWrites`).
    pub(crate) fn insert_params(&self, table: &Table, values: impl Params) -> StoreResult<()> {
        self.execute(&table.insert_sql('?'), values)?;
        Ok(())
    }

    /// The organisation's row of `table` whose key is `key`, decoded, if there is one.
    pub(crate) fn fetch_by_key<T>(
        &self,
        table: &Table,
        tenant: TenantId,
        key: impl ToSql,
        decode: impl FnOnce(&Row<'_>) -> StoreResult<T>,
    ) -> StoreResult<Option<T>> {
        let sql = table.select_by_key_sql('?', "");
        self.fetch_optional(&sql, rusqlite::params![codec::id_text(tenant.as_uuid()), key], decode)
    }

    /// One page of a list with a fixed WHERE clause, and its total: `count` (a `SELECT COUNT(*)`)
    /// and `rows` are its two statements over the same filter, bound to `values` (the tenant
    /// first); `rows` ends with `LIMIT` and `OFFSET` on the two placeholders after them.
    pub(crate) fn page_where<T>(
        &self,
        count: &str,
        rows: &str,
        values: &[&dyn ToSql],
        page: PageRequest,
        decode: impl FnMut(&Row<'_>) -> StoreResult<T>,
    ) -> StoreResult<Page<T>> {
        let total: i64 = self.scalar(count, values)?;
        let (limit, offset) = codec::page_limits(page);
        let mut all = values.to_vec();
        all.extend([&limit as &dyn ToSql, &offset]);
        let items = self.fetch_all(rows, all.as_slice(), decode)?;
        Ok(Page { items, total: u64::try_from(total).unwrap_or(0) })
    }

    /// The first column of the one row a query returns.
    pub(crate) fn scalar<T: FromSql>(&self, sql: &str, params: impl Params) -> StoreResult<T> {
        self.fetch_one(sql, params, |row| row.get(0).map_err(codec::backend))
    }

    /// The first column of the first row of a query, if there is one.
    pub(crate) fn scalar_optional<T: FromSql>(&self, sql: &str, params: impl Params) -> StoreResult<Option<T>> {
        self.fetch_optional(sql, params, |row| row.get(0).map_err(codec::backend))
    }
}

#[async_trait]
impl Tx for SqliteTx {
    tokenops_store::tx_accessors!();

    async fn commit(self: Box<Self>) -> StoreResult<()> {
        let SqliteTx { conn, enqueued, jobs_enqueued, .. } = *self;
        match conn {
            Conn::Read(tx) => tx.commit()?,
            // Returns once the group holding this write is durable.
            Conn::Write(handle) => handle.commit().await?,
        }
        if enqueued {
            wake_workers(&jobs_enqueued);
        }
        Ok(())
    }
}
