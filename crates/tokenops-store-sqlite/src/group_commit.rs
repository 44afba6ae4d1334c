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

use rusqlite::Connection;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex as StdMutex};
use tokenops_store::{StoreError, StoreResult};
use tokio::sync::{Mutex, Notify, OwnedMutexGuard, watch};

use crate::{codec, connection};

const SAVEPOINT: &str = "SAVEPOINT tokenops_write";
const RELEASE: &str = "RELEASE tokenops_write";
const ROLLBACK: &str = "ROLLBACK TO tokenops_write; RELEASE tokenops_write";

/// The writer connection and the open group.
struct Writer {
    path: PathBuf,
    /// Taken only while the committer's COMMIT runs off the task; reopened if that was lost.
    conn: Option<Connection>,
    /// A group (the shared `BEGIN IMMEDIATE` transaction) is open.
    open: bool,
    /// The number of the open group (or of the next one).
    group: u64,
    /// Savepoints released into the open group.
    members: u64,
    /// A write was dropped without commit: its savepoint must be rolled back first.
    pending_rollback: bool,
}

impl Writer {
    fn conn(&mut self) -> StoreResult<&mut Connection> {
        if self.conn.is_none() {
            self.conn = Some(connection::open(&self.path, false)?);
            self.open = false;
        }
        self.conn.as_mut().ok_or_else(|| StoreError::Backend("the writer connection is gone".into()))
    }

    /// Rolls back a dropped write's savepoint, if any.
    fn settle_dropped(&mut self) -> StoreResult<()> {
        if self.pending_rollback {
            self.pending_rollback = false;
            if self.open {
                self.conn()?.execute_batch(ROLLBACK).map_err(codec::backend)?;
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
    /// Starts the committer task for the writer connection. The task ends when the store is
    /// dropped.
    pub fn start(path: PathBuf, conn: Connection) -> Arc<Self> {
        let (committed, _) = watch::channel(0);
        let wake = Arc::new(Notify::new());
        let writer = Writer { path, conn: Some(conn), open: false, group: 1, members: 0, pending_rollback: false };
        let group = Arc::new(Self {
            writer: Arc::new(Mutex::new(writer)),
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
        writer.settle_dropped()?;
        if !writer.open {
            writer.conn()?.execute_batch("BEGIN IMMEDIATE").map_err(codec::backend)?;
            writer.open = true;
        }
        writer.conn()?.execute_batch(SAVEPOINT).map_err(codec::backend)?;
        Ok(WriteHandle { writer: Some(writer), group: self.clone() })
    }

    /// Ends the open group with one COMMIT and tells its writers. The COMMIT waits for the
    /// disk, so it runs on a blocking thread, not on the task.
    async fn commit_open_group(&self) {
        let mut writer = self.writer.lock().await;
        if let Err(e) = writer.settle_dropped() {
            tracing::warn!(error = %e, "rolling back a dropped write failed");
        }
        if !writer.open {
            return;
        }
        let Some(conn) = writer.conn.take() else { return };
        writer.open = false;
        let group = writer.group;
        writer.group += 1;
        let members = std::mem::take(&mut writer.members);
        let outcome = tokio::task::spawn_blocking(move || {
            let outcome = conn.execute_batch("COMMIT").map_err(codec::backend);
            if outcome.is_err() {
                // Whatever state the failure left, end the transaction before the connection
                // is used again.
                let _ = conn.execute_batch("ROLLBACK");
            }
            (conn, outcome)
        })
        .await;
        let outcome = match outcome {
            Ok((conn, outcome)) => {
                writer.conn = Some(conn);
                outcome
            }
            // The connection went with the lost thread: the next write opens a new one.
            Err(e) => Err(StoreError::Backend(format!("the group commit was interrupted: {e}").into())),
        };
        if let Err(e) = &outcome {
            tracing::error!(error = %e, group, members, "a group commit failed; its writes are rolled back");
            if let Ok(mut failed) = self.failed.lock() {
                if failed.len() > 1_000 {
                    failed.clear();
                }
                failed.insert(group);
            }
        }
        drop(writer);
        self.committed.send_replace(group);
    }

    /// Runs `work` on the writer connection outside any group (migrations).
    pub async fn exclusive<T>(&self, work: impl FnOnce(&mut Connection) -> StoreResult<T>) -> StoreResult<T> {
        self.commit_open_group().await;
        let mut writer = self.writer.lock().await;
        if writer.open {
            return Err(StoreError::Backend("a write group is still open".into()));
        }
        work(writer.conn()?)
    }

    /// Closes the writer connection (at shutdown, after `quiesce`).
    pub async fn close(&self) {
        self.commit_open_group().await;
        let mut writer = self.writer.lock().await;
        writer.conn = None;
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
        let released = writer.conn().and_then(|conn| conn.execute_batch(RELEASE).map_err(codec::backend));
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
    type Target = Connection;
    fn deref(&self) -> &Connection {
        // A handle holds the writer, and the writer holds the connection, until commit or drop.
        match self.writer.as_ref().and_then(|w| w.conn.as_ref()) {
            Some(conn) => conn,
            None => connection::ended_transaction(),
        }
    }
}
