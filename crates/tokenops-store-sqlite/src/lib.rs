//! The SQLite store: the default, single-node backend. One writer connection takes every write
//! transaction with `BEGIN IMMEDIATE` (so a read-then-write never fails with "locked"); a small
//! read pool serves snapshots; WAL with `synchronous=FULL` makes each commit durable.

mod accounts;
mod audit;
mod codec;
mod custody;
mod customers;
mod events;
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
    readers: SqlitePool,
    jobs_enqueued: Arc<Notify>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (creating if missing) the database file. Does not migrate: call [`Self::migrate`].
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
        Ok(Self { writer, readers, jobs_enqueued: Arc::new(Notify::new()) })
    }

    /// Applies every migration not yet applied; returns how many ran.
    pub async fn migrate(&self) -> StoreResult<usize> {
        migrate::apply(&self.writer).await
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> Backend {
        Backend::Sqlite
    }

    async fn write(&self) -> StoreResult<Box<dyn Tx>> {
        let tx = self.writer.begin_with("BEGIN IMMEDIATE").await.map_err(codec::backend)?;
        Ok(Box::new(SqliteTx { tx, writable: true, enqueued: false, jobs_enqueued: self.jobs_enqueued.clone() }))
    }

    async fn read(&self) -> StoreResult<Box<dyn Tx>> {
        let tx = self.readers.begin().await.map_err(codec::backend)?;
        Ok(Box::new(SqliteTx { tx, writable: false, enqueued: false, jobs_enqueued: self.jobs_enqueued.clone() }))
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.readers).await.map_err(codec::backend)?;
        Ok(())
    }

    async fn wait_for_jobs(&self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.jobs_enqueued.notified()).await;
    }

    async fn close(&self) {
        self.readers.close().await;
        self.writer.close().await;
    }
}

/// Wakes every waiting worker (as a PostgreSQL notification does) and leaves one permit for a
/// worker that is between polls, so an enqueue committed while nobody waits is not lost (at the
/// cost of a spurious wake-up).
fn wake_workers(notify: &Notify) {
    notify.notify_waiters();
    notify.notify_one();
}

/// A transaction on either pool. Enqueuing a job marks it so that the commit wakes the workers.
pub struct SqliteTx {
    tx: Transaction<'static, Sqlite>,
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
        tx.commit().await.map_err(codec::backend)?;
        if enqueued {
            wake_workers(&jobs_enqueued);
        }
        Ok(())
    }
}
