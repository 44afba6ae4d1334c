//! The SQLite store: the default, single-node backend. One writer connection takes every write
//! transaction, one at a time (so a read-then-write never fails with "locked"); a small read pool
//! serves snapshots; WAL with `synchronous=FULL` makes each commit durable. Writes are
//! group-committed (`group_commit`): each is a savepoint inside a shared transaction, and one
//! durable COMMIT ends many of them; each `commit` returns only once its group is durable.

mod accounts;
mod audit;
mod codec;
mod custody;
mod customers;
mod events;
mod group_commit;
mod idempotency;
mod identity;
mod jobs;
mod ledger;
mod migrate;
mod operations;
mod settings;

use async_trait::async_trait;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Sqlite, SqlitePool, Transaction};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokenops_store::{AccountStore, ContractStore};
use tokenops_store::{
    AuditStore, Backend, CustomerStore, EventStore, IdempotencyStore, JobStore, SettingStore, Store, StoreError,
    StoreResult, Tx,
};
use tokenops_store::{BreakStore, LockStore, OperationStore, PositionStore};
use tokenops_store::{ChallengeStore, MachineClientStore, RefreshTokenStore, SigningKeyStore, TenantStore, UserStore};
use tokenops_store::{CustodyKeyStore, LedgerStore};
use tokenops_store::{GroupStore, RoleStore, SecretRevealStore};
use tokio::sync::Notify;

pub use migrate::MIGRATIONS;

#[derive(Clone)]
pub struct SqliteStore {
    writer: SqlitePool,
    group: Arc<group_commit::GroupCommit>,
    readers: SqlitePool,
    jobs_enqueued: Arc<Notify>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").finish_non_exhaustive()
    }
}

impl SqliteStore {
    pub async fn open(path: &Path) -> StoreResult<Self> {
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10));
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .connect_with(options.clone())
            .await
            .map_err(codec::backend)?;
        let readers = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options.read_only(true))
            .await
            .map_err(codec::backend)?;
        let jobs_enqueued = Arc::new(Notify::new());
        let group = group_commit::GroupCommit::start(writer.clone());
        Ok(Self { writer, group, readers, jobs_enqueued })
    }

    pub async fn migrate(&self) -> StoreResult<usize> {
        // Migrations take the writer connection themselves: no group may hold it meanwhile.
        self.group.quiesce().await;
        migrate::apply(&self.writer).await
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> Backend {
        Backend::Sqlite
    }

    async fn write(&self) -> StoreResult<Box<dyn Tx>> {
        let handle = self.group.begin().await?;
        Ok(Box::new(SqliteTx {
            tx: Conn::Write(handle),
            writable: true,
            enqueued: false,
            jobs_enqueued: self.jobs_enqueued.clone(),
        }))
    }

    async fn read(&self) -> StoreResult<Box<dyn Tx>> {
        let tx = self.readers.begin().await.map_err(codec::backend)?;
        Ok(Box::new(SqliteTx {
            tx: Conn::Read(tx),
            writable: false,
            enqueued: false,
            jobs_enqueued: self.jobs_enqueued.clone(),
        }))
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.readers).await.map_err(codec::backend)?;
        Ok(())
    }

    async fn wait_for_jobs(&self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.jobs_enqueued.notified()).await;
    }

    async fn close(&self) {
        self.group.quiesce().await;
        self.readers.close().await;
        self.writer.close().await;
    }
}

/// A transaction's connection: a read transaction of the pool, or the group-committed writer.
enum Conn {
    Read(Transaction<'static, Sqlite>),
    Write(group_commit::WriteHandle),
}

impl std::ops::Deref for Conn {
    type Target = sqlx::SqliteConnection;
    fn deref(&self) -> &Self::Target {
        match self {
            Conn::Read(tx) => tx,
            Conn::Write(handle) => handle,
        }
    }
}

impl std::ops::DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut Self::Target {
        match self {
            Conn::Read(tx) => &mut *tx,
            Conn::Write(handle) => &mut *handle,
        }
    }
}

pub(crate) fn wake_workers(notify: &Notify) {
    notify.notify_waiters();
    notify.notify_one();
}

/// A transaction on either pool. Enqueuing a job marks it so that the commit wakes the workers.
pub struct SqliteTx {
    tx: Conn,
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
}

#[async_trait]
impl Tx for SqliteTx {
    fn customers(&mut self) -> &mut dyn CustomerStore {
        self
    }
    fn contracts(&mut self) -> &mut dyn ContractStore {
        self
    }
    fn accounts(&mut self) -> &mut dyn AccountStore {
        self
    }
    fn operations(&mut self) -> &mut dyn OperationStore {
        self
    }
    fn locks(&mut self) -> &mut dyn LockStore {
        self
    }
    fn breaks(&mut self) -> &mut dyn BreakStore {
        self
    }
    fn positions(&mut self) -> &mut dyn PositionStore {
        self
    }
    fn events(&mut self) -> &mut dyn EventStore {
        self
    }
    fn audit(&mut self) -> &mut dyn AuditStore {
        self
    }
    fn idempotency(&mut self) -> &mut dyn IdempotencyStore {
        self
    }
    fn jobs(&mut self) -> &mut dyn JobStore {
        self
    }
    fn settings(&mut self) -> &mut dyn SettingStore {
        self
    }
    fn custody_keys(&mut self) -> &mut dyn CustodyKeyStore {
        self
    }
    fn ledger(&mut self) -> &mut dyn LedgerStore {
        self
    }
    fn tenants(&mut self) -> &mut dyn TenantStore {
        self
    }
    fn users(&mut self) -> &mut dyn UserStore {
        self
    }
    fn machine_clients(&mut self) -> &mut dyn MachineClientStore {
        self
    }
    fn signing_keys(&mut self) -> &mut dyn SigningKeyStore {
        self
    }
    fn refresh_tokens(&mut self) -> &mut dyn RefreshTokenStore {
        self
    }
    fn challenges(&mut self) -> &mut dyn ChallengeStore {
        self
    }
    fn roles(&mut self) -> &mut dyn RoleStore {
        self
    }
    fn groups(&mut self) -> &mut dyn GroupStore {
        self
    }
    fn secret_reveals(&mut self) -> &mut dyn SecretRevealStore {
        self
    }

    async fn commit(self: Box<Self>) -> StoreResult<()> {
        let SqliteTx { tx, enqueued, jobs_enqueued, .. } = *self;
        match tx {
            Conn::Read(tx) => tx.commit().await.map_err(codec::backend)?,
            // Returns once the group holding this write is durable.
            Conn::Write(handle) => handle.commit().await?,
        }
        if enqueued {
            wake_workers(&jobs_enqueued);
        }
        Ok(())
    }
}
