//! Group commit on SQLite's single writer. Each write transaction is a savepoint inside one
//! shared `BEGIN IMMEDIATE` transaction; a committer task ends that transaction with one durable
//! COMMIT (one fsync under `synchronous=FULL`) for every savepoint released since the last one,
//! and each writer's `commit` returns only once the COMMIT of its group succeeded. Under load
//! the writers queued behind the committer join the group, so commits per second stop limiting
//! writes per second; alone, a write costs the same single COMMIT as before.
//!
//! Writers take the connection one at a time (a fair mutex), exactly like the single writer did,
//! so a write still sees every earlier write, and isolation between writes is unchanged. A
//! write dropped without `commit` is rolled back to its savepoint by whoever takes the
//! connection next.

use sqlx::pool::PoolConnection;
use sqlx::{Executor, Sqlite, SqliteConnection, SqlitePool};
use std::collections::HashSet;
use std::sync::{Arc, Mutex as StdMutex};
use tokenops_store::{StoreError, StoreResult};
use tokio::sync::{Mutex, Notify, OwnedMutexGuard, watch};

use crate::codec;

const SAVEPOINT: &str = "SAVEPOINT tokenops_write";
const RELEASE: &str = "RELEASE tokenops_write";
const ROLLBACK: &str = "ROLLBACK TO tokenops_write; RELEASE tokenops_write";

/// The writer connection and the open group.
struct Writer {
    pool: SqlitePool,
    /// Held while a group is open.
    conn: Option<PoolConnection<Sqlite>>,
    /// The number of the open group (or of the next one).
    group: u64,
    /// Savepoints released into the open group.
    members: u64,
    /// A write was dropped without commit: its savepoint must be rolled back first.
    pending_rollback: bool,
}

impl Writer {
    /// Rolls back a dropped write's savepoint, if any.
    async fn settle_dropped(&mut self) -> StoreResult<()> {
        if self.pending_rollback {
            self.pending_rollback = false;
            if let Some(conn) = self.conn.as_mut() {
                conn.execute(ROLLBACK).await.map_err(codec::backend)?;
            }
        }
        Ok(())
    }
}

pub struct GroupCommit {
    writer: Arc<Mutex<Writer>>,
    /// Wakes the committer after a release (or a drop).
    wake: Arc<Notify>,
    /// The number of the last group whose COMMIT finished (successfully or not).
    committed: watch::Sender<u64>,
    /// Groups whose COMMIT failed (their writers get an error), the most recent ones.
    failed: StdMutex<HashSet<u64>>,
}

impl GroupCommit {
    /// Starts the committer task for the writer pool (one connection). The task ends when the
    /// store is dropped.
    pub fn start(pool: SqlitePool) -> Arc<Self> {
        let (committed, _) = watch::channel(0);
        let wake = Arc::new(Notify::new());
        let group = Arc::new(Self {
            writer: Arc::new(Mutex::new(Writer { pool, conn: None, group: 1, members: 0, pending_rollback: false })),
            wake: wake.clone(),
            committed,
            failed: StdMutex::new(HashSet::new()),
        });
        let committer = Arc::downgrade(&group);
        tokio::spawn(async move {
            loop {
                let woken = tokio::time::timeout(std::time::Duration::from_secs(1), wake.notified()).await.is_ok();
                let Some(group) = committer.upgrade() else { return };
                if woken {
                    group.commit_open_group().await;
                }
            }
        });
        group
    }

    /// Opens a write: waits for the connection, opens the group if none is open, and sets a
    /// savepoint.
    pub async fn begin(self: &Arc<Self>) -> StoreResult<WriteHandle> {
        let mut writer = self.writer.clone().lock_owned().await;
        writer.settle_dropped().await?;
        if writer.conn.is_none() {
            let mut conn = writer.pool.acquire().await.map_err(codec::backend)?;
            conn.execute("BEGIN IMMEDIATE").await.map_err(codec::backend)?;
            writer.conn = Some(conn);
        }
        if let Some(conn) = writer.conn.as_mut() {
            conn.execute(SAVEPOINT).await.map_err(codec::backend)?;
        }
        Ok(WriteHandle { writer: Some(writer), group: self.clone() })
    }

    /// Ends the open group with one COMMIT and tells its writers.
    async fn commit_open_group(&self) {
        let mut writer = self.writer.lock().await;
        if let Err(e) = writer.settle_dropped().await {
            tracing::warn!(error = %e, "rolling back a dropped write failed");
        }
        let Some(mut conn) = writer.conn.take() else { return };
        let group = writer.group;
        writer.group += 1;
        let members = std::mem::take(&mut writer.members);
        let outcome = conn.execute("COMMIT").await;
        if let Err(e) = &outcome {
            tracing::error!(error = %e, group, members, "a group commit failed; its writes are rolled back");
            // Whatever state the failure left, end the transaction before the connection is
            // used again.
            let _ = conn.execute("ROLLBACK").await;
            if let Ok(mut failed) = self.failed.lock() {
                if failed.len() > 1_000 {
                    failed.clear();
                }
                failed.insert(group);
            }
        }
        drop(conn);
        drop(writer);
        self.committed.send_replace(group);
    }

    /// Ends the open group, if any: before migrations and at shutdown.
    pub async fn quiesce(&self) {
        self.commit_open_group().await;
    }

    /// Waits for the COMMIT of `group`.
    async fn durable(&self, group: u64) -> StoreResult<()> {
        let mut committed = self.committed.subscribe();
        committed.wait_for(|last| *last >= group).await.map_err(|_| StoreError::Backend("the store closed".into()))?;
        if self.failed.lock().map(|f| f.contains(&group)).unwrap_or(true) {
            return Err(StoreError::Backend("the group commit holding this write failed".into()));
        }
        Ok(())
    }
}

/// One write in a group: the writer connection until `commit` or drop.
pub struct WriteHandle {
    writer: Option<OwnedMutexGuard<Writer>>,
    group: Arc<GroupCommit>,
}

impl WriteHandle {
    /// Releases the savepoint into the open group, lets the committer end the group, and
    /// returns once that COMMIT is durable.
    pub async fn commit(mut self) -> StoreResult<()> {
        let Some(mut writer) = self.writer.take() else {
            return Err(StoreError::Backend("a write committed twice".into()));
        };
        let released = match writer.conn.as_mut() {
            Some(conn) => conn.execute(RELEASE).await.map_err(codec::backend),
            None => Err(StoreError::Backend("the writer connection is gone".into())),
        };
        if let Err(e) = released {
            writer.pending_rollback = true;
            drop(writer);
            self.group.wake.notify_one();
            return Err(e);
        }
        writer.members += 1;
        let group = writer.group;
        drop(writer);
        self.group.wake.notify_one();
        self.group.durable(group).await
    }
}

impl Drop for WriteHandle {
    fn drop(&mut self) {
        if let Some(mut writer) = self.writer.take() {
            // Rolled back by whoever takes the connection next (a writer or the committer).
            writer.pending_rollback = true;
            drop(writer);
            self.group.wake.notify_one();
        }
    }
}

impl std::ops::Deref for WriteHandle {
    type Target = SqliteConnection;
    fn deref(&self) -> &SqliteConnection {
        // A handle holds the writer, and the writer holds the connection, until commit or drop.
        match self.writer.as_ref().and_then(|w| w.conn.as_ref()) {
            Some(conn) => conn,
            None => unreachable_connection(),
        }
    }
}

impl std::ops::DerefMut for WriteHandle {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        match self.writer.as_mut().and_then(|w| w.conn.as_mut()) {
            Some(conn) => conn,
            None => unreachable_connection(),
        }
    }
}

#[allow(clippy::panic)]
fn unreachable_connection() -> ! {
    panic!("a write handle without its connection: begin() always opens one")
}
