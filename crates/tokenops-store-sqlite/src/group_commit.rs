//! Group commit on SQLite's single writer. Each write transaction is a savepoint inside one
//! shared `BEGIN IMMEDIATE` transaction; a committer task ends that transaction with one COMMIT
//! for every savepoint released since the last one, then syncs the WAL once, and each writer's
//! `commit` returns only once the group holding its write is durable.
//!
//! The sync runs after the writer connection is handed back: while one group's WAL frames go to
//! the disk, the next group's writes already run. (The writer runs `synchronous=NORMAL`, so its
//! COMMIT appends the group's frames, commit frame included, without syncing; the committer's
//! `fdatasync` of the WAL then makes them, and every group before, durable, which is what
//! `synchronous=FULL` would do inside the COMMIT while holding the writer.) Groups are synced
//! in order, and a writer learns of its group's durability only after that sync, so nothing is
//! acknowledged, and no job acts on the ledger, before the state it follows from is durable. A
//! read may see a group's writes during the sync; only a power loss in that window (not a
//! process crash: the frames are already in the OS) could take back what such a read showed.
//!
//! Writers take the connection one at a time (a fair mutex), exactly like the single writer did,
//! so a write still sees every earlier write, and isolation between writes is unchanged.
//! Background writes (jobs, `tokenops_store::in_background`) queue for it only a few at a time,
//! and give way to requests: one that would take the writer while a request waits for it steps
//! back, a bounded number of times, so a request's write waits for the write holding the
//! writer rather than for every job queued ahead of it. A write dropped without `commit` is
//! rolled back to its savepoint by whoever takes the connection next.
//!
//! The committer also keeps the WAL in check, by the frames each COMMIT reports it holds: a
//! passive checkpoint on a connection of its own each time the WAL has grown by
//! `CHECKPOINT_AFTER_FRAMES`, and past `WAL_BOUND_BYTES` a restart of the WAL on the writer
//! between two groups.

use rusqlite::Connection;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use tokenops_store::{StoreError, StoreResult};
use tokio::sync::{Mutex, Notify, OwnedMutexGuard, OwnedSemaphorePermit, Semaphore, watch};

use crate::{codec, connection};

/// How much the WAL grows between passive checkpoints, in frames: SQLite's automatic
/// checkpoint's default (about 4 MiB).
const CHECKPOINT_AFTER_FRAMES: u64 = 1_000;
/// A WAL frame: a page (SQLite's default 4 KiB, which the store keeps) and its header.
const WAL_FRAME_BYTES: u64 = 4096 + 24;

/// The WAL's bound: past it, the committer starts the WAL over itself (`restart_wal`).
/// Passive checkpoints copy the WAL into the database, but SQLite starts it over only at a
/// write that begins after a complete copy while no reader reads from the WAL; under a steady
/// load some reader always does, and the WAL grew to 10 GB in a benchmark run. Starting it
/// over holds the writer for a copy of what the last passive checkpoint left, a sync of the
/// database and the readers' end. The WAL file keeps its length up to the bound and is reused
/// (`connection::open_writer`): the first COMMIT after a restart cuts back only what lies past
/// the bound (at most about `CHECKPOINT_AFTER_FRAMES`, unless readers held restarts off).
pub const WAL_BOUND_BYTES: u64 = 256 * 1024 * 1024;
/// How long starting the WAL over waits for readers still reading from it.
const WAL_RESTART_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// A COMMIT or a sync at least this long is logged: every write waiting meanwhile is late.
const SLOW_MS: u128 = 250;

/// Background writes queued for the writer at once.
const BACKGROUND_QUEUE: usize = 4;

/// How often a background write steps back for waiting requests before it takes the writer
/// anyway (so that a steady stream of requests cannot hold the jobs back for good), and how
/// long it waits each time at most.
const GIVE_WAY_TIMES: u32 = 8;
const GIVE_WAY_FOR: std::time::Duration = std::time::Duration::from_millis(2);

const SAVEPOINT: &str = "SAVEPOINT tokenops_write";
const RELEASE: &str = "RELEASE tokenops_write";
const ROLLBACK: &str = "ROLLBACK TO tokenops_write; RELEASE tokenops_write";

/// The writer connection and the open group.
struct Writer {
    path: PathBuf,
    /// See `WAL_BOUND_BYTES`.
    wal_bound: u64,
    /// The writer's connection; lent to a blocking thread while the WAL starts over
    /// (`GroupCommit::restart_wal`), and reopened if that lost it.
    conn: Option<Connection>,
    /// A group (the shared `BEGIN IMMEDIATE` transaction) is open.
    open: bool,
    /// The number of the open group (or of the next one).
    group: u64,
    /// Savepoints released into the open group.
    members: u64,
    /// A write was dropped without commit: its savepoint must be rolled back first.
    pending_rollback: bool,
    /// The WAL's frames when the last passive checkpoint was started.
    checkpoint_mark: u64,
    /// The WAL's frames at the last attempt to start it over; the next is made once it has
    /// grown by `CHECKPOINT_AFTER_FRAMES` more, so a long read costs one attempt, not one per
    /// group.
    restart_mark: u64,
}

impl Writer {
    /// The writer before its first group.
    fn new(path: PathBuf, conn: Option<Connection>, wal_bound: u64) -> Self {
        Self {
            path,
            wal_bound,
            conn,
            open: false,
            group: 1,
            members: 0,
            pending_rollback: false,
            checkpoint_mark: 0,
            restart_mark: 0,
        }
    }

    fn conn(&mut self) -> StoreResult<&mut Connection> {
        if self.conn.is_none() {
            self.conn = Some(connection::open_writer(&self.path, self.wal_bound)?);
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
    /// Admits background writes to the writer's queue.
    background: Arc<Semaphore>,
    /// Requests waiting for the writer; background writes give way while there are any.
    requests_waiting: AtomicUsize,
    /// Told when no request waits for the writer any more.
    requests_served: Notify,
    /// The checkpointer's connection, opened on first use; held while a checkpoint runs, so
    /// that one runs at a time (and none while the WAL starts over).
    checkpointer: Arc<StdMutex<Option<Connection>>>,
}

impl GroupCommit {
    /// Starts the committer task for the writer connection (`connection::open_writer`, with
    /// the same `wal_bound`). The task ends when the store is dropped.
    pub fn start(path: PathBuf, conn: Connection, wal_bound: u64) -> Arc<Self> {
        let (committed, _) = watch::channel(0);
        let wake = Arc::new(Notify::new());
        let writer = Writer::new(path, Some(conn), wal_bound);
        let group = Arc::new(Self {
            writer: Arc::new(Mutex::new(writer)),
            wake: wake.clone(),
            committed,
            failed: StdMutex::new(HashSet::new()),
            background: Arc::new(Semaphore::new(BACKGROUND_QUEUE)),
            requests_waiting: AtomicUsize::new(0),
            requests_served: Notify::new(),
            checkpointer: Arc::new(StdMutex::new(None)),
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
        let (queued, mut writer) = if tokenops_store::is_background() {
            let permit = self.background.clone().acquire_owned().await;
            let permit = permit.map_err(|_| StoreError::Backend("the store is closed".into()))?;
            (Some(permit), self.writer_giving_way().await)
        } else {
            let waiting = RequestWaiting::new(self);
            let writer = self.writer.clone().lock_owned().await;
            drop(waiting);
            (None, writer)
        };
        writer.settle_dropped()?;
        if !writer.open {
            connection::run(writer.conn()?, "BEGIN IMMEDIATE")?;
            writer.open = true;
        }
        connection::run(writer.conn()?, SAVEPOINT)?;
        Ok(WriteHandle { writer: Some(writer), group: self.clone(), queued })
    }

    /// The writer for a background write, once no request waits for it (or after giving way
    /// `GIVE_WAY_TIMES` times). A write that got the writer while a request waited hands it on
    /// down the mutex's queue, which reaches the request.
    async fn writer_giving_way(self: &Arc<Self>) -> OwnedMutexGuard<Writer> {
        let mut gave_way = 0;
        loop {
            if gave_way < GIVE_WAY_TIMES && self.requests_waiting.load(Ordering::Acquire) > 0 {
                gave_way += 1;
                // A wake-up missed between the check and the wait costs at most `GIVE_WAY_FOR`.
                let _ = tokio::time::timeout(GIVE_WAY_FOR, self.requests_served.notified()).await;
                continue;
            }
            let writer = self.writer.clone().lock_owned().await;
            if gave_way < GIVE_WAY_TIMES && self.requests_waiting.load(Ordering::Acquire) > 0 {
                gave_way += 1;
                drop(writer);
                tokio::task::yield_now().await;
                continue;
            }
            return writer;
        }
    }

    /// Ends the open group with one COMMIT, syncs the WAL with the writer connection already
    /// free for the next group, and tells the group's writers. Runs on the committer task only
    /// (and at migrations and close), so syncs happen in group order.
    async fn commit_open_group(&self) {
        let mut writer = self.writer.lock().await;
        if let Err(e) = writer.settle_dropped() {
            tracing::warn!(error = %e, "rolling back a dropped write failed");
        }
        if !writer.open {
            return;
        }
        writer.open = false;
        let group = writer.group;
        writer.group += 1;
        let members = std::mem::take(&mut writer.members);
        // Under `synchronous=NORMAL` the COMMIT writes the WAL without waiting for the disk, so
        // it runs here, on the task. (The first COMMIT after the WAL started over also syncs
        // the WAL's new header and cuts the file back to its limit: once per restart.)
        let commit_started = std::time::Instant::now();
        let (committed, frames) = connection::wal_frames_committed(|| {
            writer.conn().and_then(|conn| {
                connection::run(conn, "COMMIT").inspect_err(|_| {
                    // Whatever state the failure left, end the transaction before the
                    // connection is used again.
                    let _ = conn.execute_batch("ROLLBACK");
                })
            })
        });
        let commit_ms = commit_started.elapsed().as_millis();
        if commit_ms >= SLOW_MS {
            tracing::warn!(group, members, commit_ms, frames, "a group's COMMIT held the writer long");
        }
        let checkpoint_due = match (&committed, frames) {
            (Ok(()), Some(frames)) => match wal_step(&mut writer, frames.into()) {
                WalStep::Nothing => false,
                WalStep::Checkpoint => true,
                WalStep::Restart => {
                    self.restart_wal(&mut writer, group, frames.into()).await;
                    false
                }
            },
            _ => false,
        };
        let path = writer.path.clone();
        drop(writer);
        let started = std::time::Instant::now();
        let wal_path = path.clone();
        let outcome = match committed {
            Ok(()) => match tokio::task::spawn_blocking(move || connection::sync_wal(&wal_path)).await {
                Ok(Ok(())) => {
                    if checkpoint_due {
                        self.checkpoint_in_background(path);
                    }
                    Ok(())
                }
                Ok(Err(e)) => Err(StoreError::Backend(format!("syncing the WAL failed: {e}").into())),
                Err(e) => Err(StoreError::Backend(format!("syncing the WAL was interrupted: {e}").into())),
            },
            Err(e) => Err(e),
        };
        metrics::histogram!("tokenops_store_group_commit_writes").record(members as f64);
        let synced_in = started.elapsed();
        metrics::histogram!("tokenops_store_group_commit_sync_seconds").record(synced_in.as_secs_f64());
        let sync_ms = synced_in.as_millis();
        if sync_ms >= SLOW_MS {
            tracing::warn!(group, members, sync_ms, "syncing a group's WAL took long: a slow disk delays every write");
        }
        if let Err(e) = &outcome {
            tracing::error!(error = %e, group, members, "a group commit failed; its writes are not acknowledged");
            if let Ok(mut failed) = self.failed.lock() {
                if failed.len() > 1_000 {
                    failed.clear();
                }
                failed.insert(group);
            }
        }
        // `close` may end a group while the committer still syncs an earlier one: the later
        // sync covers the earlier group's frames too, and the count never goes back.
        self.committed.send_modify(|last| *last = (*last).max(group));
    }

    /// Starts the WAL over (`connection::restart_wal`) on a blocking thread, with the writer
    /// held and its connection lent to that thread: the restart syncs the WAL and the database
    /// and waits for readers, whose tasks need the runtime's threads to finish. Not while a
    /// passive checkpoint runs (it holds the lock the restart needs): then a later COMMIT
    /// tries again.
    async fn restart_wal(&self, writer: &mut Writer, group: u64, frames: u64) {
        // A checkpoint running now would refuse the restart: spare the hand-off to a thread.
        if matches!(self.checkpointer.try_lock(), Err(std::sync::TryLockError::WouldBlock)) {
            return;
        }
        let Some(conn) = writer.conn.take() else { return };
        let checkpointer = self.checkpointer.clone();
        let started = std::time::Instant::now();
        let attempt = tokio::task::spawn_blocking(move || {
            // Held through the restart, so that no passive checkpoint starts meanwhile.
            let restarted =
                free_checkpointer(&checkpointer).map(|_held| connection::restart_wal(&conn, WAL_RESTART_WAIT));
            (conn, restarted)
        })
        .await;
        let held_ms = started.elapsed().as_millis();
        let restarted = match attempt {
            Ok((conn, restarted)) => {
                writer.conn = Some(conn);
                restarted
            }
            // The connection went with the thread: `Writer::conn` opens another.
            Err(e) => Some(Err(StoreError::Backend(format!("starting the WAL over was interrupted: {e}").into()))),
        };
        let Some(restarted) = restarted else { return };
        writer.restart_mark = frames;
        writer.checkpoint_mark = frames;
        match restarted {
            Ok(true) => tracing::info!(group, frames, held_ms, "the WAL passed its bound and starts over"),
            Ok(false) => {
                tracing::info!(group, frames, held_ms, "the WAL passed its bound; readers kept it from starting over");
            }
            Err(e) => tracing::warn!(error = %e, "starting the WAL over failed"),
        }
    }

    /// Starts a checkpoint on a blocking thread unless one is running. It takes no lock the
    /// writer needs, so writes and syncs go on meanwhile.
    fn checkpoint_in_background(&self, path: PathBuf) {
        let checkpointer = self.checkpointer.clone();
        tokio::task::spawn_blocking(move || {
            let Some(mut conn) = free_checkpointer(&checkpointer) else { return };
            let started = std::time::Instant::now();
            let done = match conn.as_ref() {
                Some(conn) => connection::checkpoint(conn),
                None => connection::open(&path, false).and_then(|opened| {
                    let done = connection::checkpoint(&opened);
                    *conn = Some(opened);
                    done
                }),
            };
            if let Err(e) = done {
                tracing::warn!(error = %e, "a WAL checkpoint failed; the next sync tries again");
            }
            let checkpoint_ms = started.elapsed().as_millis();
            if checkpoint_ms >= SLOW_MS {
                tracing::info!(checkpoint_ms, "a passive WAL checkpoint took long");
            }
        });
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

/// The checkpointer, unless a checkpoint holds it. A checkpoint that panicked poisoned it, but
/// its connection is still usable (SQLite ends the checkpoint whatever the caller does), so the
/// poison is cleared rather than stopping every later checkpoint and restart.
fn free_checkpointer(
    checkpointer: &StdMutex<Option<Connection>>,
) -> Option<std::sync::MutexGuard<'_, Option<Connection>>> {
    match checkpointer.try_lock() {
        Ok(held) => Some(held),
        Err(std::sync::TryLockError::Poisoned(poisoned)) => {
            checkpointer.clear_poison();
            Some(poisoned.into_inner())
        }
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// What keeping the WAL in check asks for after a COMMIT.
#[derive(Debug, PartialEq, Eq)]
enum WalStep {
    Nothing,
    /// A passive checkpoint, on the checkpointer's connection.
    Checkpoint,
    /// Starting the WAL over on the writer (`GroupCommit::restart_wal`).
    Restart,
}

/// After a COMMIT that left `frames` in the WAL: a restart once the WAL is past its bound (at
/// most one attempt per `CHECKPOINT_AFTER_FRAMES` of growth; the restart copies what passive
/// checkpoints would), else a passive checkpoint per `CHECKPOINT_AFTER_FRAMES` of growth.
fn wal_step(writer: &mut Writer, frames: u64) -> WalStep {
    // Fewer frames than at a mark: the WAL started over since.
    if frames < writer.checkpoint_mark {
        writer.checkpoint_mark = 0;
    }
    if frames < writer.restart_mark {
        writer.restart_mark = 0;
    }
    if frames * WAL_FRAME_BYTES > writer.wal_bound && frames >= writer.restart_mark + CHECKPOINT_AFTER_FRAMES {
        return WalStep::Restart;
    }
    if frames >= writer.checkpoint_mark + CHECKPOINT_AFTER_FRAMES {
        writer.checkpoint_mark = frames;
        return WalStep::Checkpoint;
    }
    WalStep::Nothing
}

/// A request counted among those waiting for the writer until dropped (also when its wait is
/// cancelled).
struct RequestWaiting<'a>(&'a GroupCommit);

impl<'a> RequestWaiting<'a> {
    fn new(group: &'a GroupCommit) -> Self {
        group.requests_waiting.fetch_add(1, Ordering::AcqRel);
        Self(group)
    }
}

impl Drop for RequestWaiting<'_> {
    fn drop(&mut self) {
        if self.0.requests_waiting.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.requests_served.notify_waiters();
        }
    }
}

/// One write in a group: the writer connection until `commit` or drop.
pub struct WriteHandle {
    writer: Option<OwnedMutexGuard<Writer>>,
    group: Arc<GroupCommit>,
    /// A background write's place in the queue, given up with the writer.
    queued: Option<OwnedSemaphorePermit>,
}

impl WriteHandle {
    /// Releases the savepoint into the open group, lets the committer end the group, and
    /// returns once that COMMIT is durable.
    pub async fn commit(mut self) -> StoreResult<()> {
        let Some(mut writer) = self.writer.take() else {
            return Err(StoreError::Backend("a write committed twice".into()));
        };
        let released = writer.conn().and_then(|conn| connection::run(conn, RELEASE));
        if let Err(e) = released {
            writer.pending_rollback = true;
            drop(writer);
            self.group.wake.notify_one();
            return Err(e);
        }
        writer.members += 1;
        let group = writer.group;
        drop(writer);
        // The wait for durability holds no place in the queue.
        drop(self.queued.take());
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

#[cfg(test)]
mod tests {
    use super::*;
    use WalStep::{Checkpoint, Nothing, Restart};

    fn writer(wal_bound: u64) -> Writer {
        Writer::new(PathBuf::from("unused.db"), None, wal_bound)
    }

    #[test]
    fn a_passive_checkpoint_runs_per_thousand_frames_of_growth() {
        let mut w = writer(WAL_BOUND_BYTES);
        assert_eq!(wal_step(&mut w, 10), Nothing);
        assert_eq!(wal_step(&mut w, 1_000), Checkpoint);
        assert_eq!(wal_step(&mut w, 1_500), Nothing);
        assert_eq!(wal_step(&mut w, 1_999), Nothing);
        assert_eq!(wal_step(&mut w, 2_000), Checkpoint);
        // The WAL started over: growth counts from its new start.
        assert_eq!(wal_step(&mut w, 20), Nothing);
        assert_eq!(wal_step(&mut w, 1_020), Checkpoint);
    }

    #[test]
    fn past_the_bound_the_wal_starts_over_at_most_once_per_thousand_frames() {
        let bound_frames = WAL_BOUND_BYTES / WAL_FRAME_BYTES;
        let mut w = writer(WAL_BOUND_BYTES);
        w.checkpoint_mark = bound_frames - 10;
        assert_eq!(wal_step(&mut w, bound_frames + 1), Restart);
        // `GroupCommit::restart_wal` sets the marks after an attempt that readers held off.
        w.restart_mark = bound_frames + 1;
        w.checkpoint_mark = bound_frames + 1;
        assert_eq!(wal_step(&mut w, bound_frames + 500), Nothing);
        assert_eq!(wal_step(&mut w, bound_frames + 1_001), Restart);
        // Once it started over, the marks no longer hold anything back.
        w.restart_mark = bound_frames + 1_001;
        w.checkpoint_mark = bound_frames + 1_001;
        assert_eq!(wal_step(&mut w, 5), Nothing);
        assert_eq!((w.restart_mark, w.checkpoint_mark), (0, 0));
        assert_eq!(wal_step(&mut w, 1_005), Checkpoint);
    }
}
