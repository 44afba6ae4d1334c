//! SQLite connections, used inline: a statement runs on the task that issues it, because a
//! statement on a warm page cache takes microseconds, far less than handing it to another thread
//! and back (profiling the driver that did that showed more than half of the service's CPU in
//! thread switches). Only what waits for the disk leaves the task: the sync that makes a group
//! durable, checkpoints, and starting the WAL over (`group_commit`). Also the small pool of
//! read-only connections that serves read transactions.

use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokenops_store::{StoreError, StoreResult};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::codec;

/// Prepared statements kept per connection: every statement of the store, with room to spare.
const STATEMENT_CACHE: usize = 512;

/// Opens a connection with the store's settings: WAL, foreign keys, and a busy timeout for the
/// moments another process (`tokenops migrate`) writes. The writer uses `synchronous=NORMAL`
/// (its COMMIT writes the WAL without waiting for the disk) because the group committer makes
/// each group durable itself by syncing the WAL (`group_commit`); readers write nothing.
pub fn open(path: &Path, read_only: bool) -> StoreResult<Connection> {
    let flags = if read_only {
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI
    } else {
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI
    };
    let conn = Connection::open_with_flags(path, flags).map_err(codec::backend)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(codec::backend)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    if !read_only {
        // The journal mode is a property of the file: set once by the writer.
        conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(())).map_err(codec::backend)?;
        // Checkpoints run on a connection of their own (`checkpoint`), not on the writer, where
        // they would hold it while the database file is synced; only a WAL past its bound is
        // started over on the writer, between groups (`restart_wal`, on a blocking thread).
        // Each write is a savepoint inside the group's transaction (`group_commit`), so SQLite
        // keeps a statement journal of the pages the group changes; `temp_store = MEMORY` keeps
        // it in memory instead of spilling it to a temporary file, which profiles of the
        // service under load showed writing about as much as the WAL itself.
        // The page cache stays at SQLite's default 2 MiB, on purpose: when a b-tree page
        // splits, SQLite renumbers pages through the lock page's number (page 262,145 at 4 KiB
        // pages), and the COMMIT after it then scans the whole cache's hash table to drop
        // pages past the database's end. That scan costs in proportion to the cache: with a
        // 64 MiB cache it took a fifth to a third of the service's CPU, inside the writer.
        conn.execute_batch(
            "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; PRAGMA wal_autocheckpoint = 0; PRAGMA temp_store = MEMORY;",
        )
        .map_err(codec::backend)?;
    }
    Ok(conn)
}

/// Opens the writer connection: `open`, plus what only the connection that starts the WAL over
/// needs. The WAL file keeps up to `wal_bound` bytes when the WAL starts over
/// (`journal_size_limit`), so under load it is reused from its start rather than truncated
/// (truncating a 1 GiB WAL in a COMMIT held requests 300–540 ms); and each COMMIT reports
/// how many frames the WAL holds (`wal_frames_committed`), which its file's length, reused,
/// no longer tells.
pub fn open_writer(path: &Path, wal_bound: u64) -> StoreResult<Connection> {
    let conn = open(path, false)?;
    conn.execute_batch(&format!("PRAGMA journal_size_limit = {wal_bound}")).map_err(codec::backend)?;
    // The planner's statistics (sqlite_stat1), refreshed where a table has grown, as SQLite
    // advises for a connection that lives long: without them it reads the audit search's
    // `query` filter by scanning the organisation's records instead of through each column's
    // index (migration 0017). Bounded by SQLite's own analysis limit, so a start stays quick.
    conn.execute_batch("PRAGMA optimize = 0x10002").map_err(codec::backend)?;
    // After `wal_autocheckpoint = 0` (`open`), which would replace the hook.
    conn.wal_hook(Some(record_wal_frames));
    Ok(conn)
}

thread_local! {
    /// The frames in the WAL after the last COMMIT on this thread that wrote any (the WAL
    /// hook runs inside the COMMIT, on the thread that runs it).
    static WAL_FRAMES: std::cell::Cell<Option<u32>> = const { std::cell::Cell::new(None) };
}

fn record_wal_frames(_: &rusqlite::hooks::Wal, frames: std::ffi::c_int) -> rusqlite::Result<()> {
    WAL_FRAMES.with(|cell| cell.set(u32::try_from(frames).ok()));
    Ok(())
}

/// Runs `commit` (a COMMIT on the writer) and returns its outcome with the number of frames the
/// WAL holds after it, `None` when it wrote nothing.
pub fn wal_frames_committed<T>(commit: impl FnOnce() -> T) -> (T, Option<u32>) {
    WAL_FRAMES.with(|cell| cell.set(None));
    let outcome = commit();
    (outcome, WAL_FRAMES.with(|cell| cell.take()))
}

/// Runs one statement that returns no rows (`BEGIN`, `SAVEPOINT`, `RELEASE`, `COMMIT`) through
/// the connection's statement cache: each write runs several, and `execute_batch` would parse
/// them every time.
pub fn run(conn: &Connection, sql: &str) -> StoreResult<()> {
    conn.prepare_cached(sql).and_then(|mut statement| statement.execute([])).map(drop).map_err(codec::backend)
}

/// Makes everything written to the WAL of the database at `path` so far durable: the COMMITs
/// of the writer (under `synchronous=NORMAL`) append to the WAL without syncing it. Opened per
/// call, so a WAL file SQLite replaced is never synced through a stale handle.
pub fn sync_wal(path: &Path) -> std::io::Result<()> {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    match std::fs::File::open(&wal) {
        Ok(file) => file.sync_data(),
        // No WAL (nothing written since it was last removed): nothing to make durable.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Copies the WAL's frames into the database file (a passive checkpoint: it waits for no reader
/// or writer), so that the writer can start the WAL over. On `conn`, a connection of its own.
pub fn checkpoint(conn: &Connection) -> StoreResult<()> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())).map_err(codec::backend)
}

/// Starts the WAL over, on the writer's connection between groups (lent to a blocking thread):
/// copies what the passive checkpoints have not, syncs the database, and waits up to `wait`
/// for readers still reading from the WAL, so that the next write starts it from the
/// beginning. Returns whether it will start over: not when a reader stayed.
pub fn restart_wal(conn: &Connection, wait: Duration) -> StoreResult<bool> {
    conn.busy_timeout(wait).map_err(codec::backend)?;
    let busy = conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |row| row.get::<_, i64>(0));
    conn.busy_timeout(BUSY_TIMEOUT).map_err(codec::backend)?;
    Ok(busy.map_err(codec::backend)? == 0)
}

/// How long a connection waits for a lock another holds before it gives up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Read-only connections, opened on demand up to a bound and reused.
pub struct Readers {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
    permits: Arc<Semaphore>,
}

impl Readers {
    pub fn new(path: &Path, max: usize) -> Self {
        Self { path: path.to_owned(), idle: Mutex::new(Vec::new()), permits: Arc::new(Semaphore::new(max)) }
    }

    /// A read transaction: a connection of the pool with a deferred transaction open on it, so
    /// that every statement sees the same snapshot.
    pub async fn begin(self: &Arc<Self>) -> StoreResult<ReadTx> {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| StoreError::Backend("the store is closed".into()))?;
        let conn = self.take()?;
        run(&conn, "BEGIN")?;
        Ok(ReadTx { conn: Some(conn), readers: self.clone(), _permit: permit })
    }

    /// `work` on a pooled connection outside any explicit transaction: for a lookup that is one
    /// statement (its own snapshot), it spares the `BEGIN` and the end of a read transaction.
    pub async fn single<T>(self: &Arc<Self>, work: impl FnOnce(&Connection) -> StoreResult<T>) -> StoreResult<T> {
        let _permit = self.permits.acquire().await.map_err(|_| StoreError::Backend("the store is closed".into()))?;
        let conn = self.take()?;
        let result = work(&conn);
        // A connection left inside a transaction would hold its snapshot: not reused.
        if conn.is_autocommit() {
            self.give_back(conn);
        }
        result
    }

    /// An idle connection of the pool, or a new one (the caller holds a permit).
    fn take(&self) -> StoreResult<Connection> {
        match self.idle.lock().ok().and_then(|mut idle| idle.pop()) {
            Some(conn) => Ok(conn),
            None => open(&self.path, true),
        }
    }

    fn give_back(&self, conn: Connection) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.push(conn);
        }
    }

    /// Closes the pool: later reads fail, and the idle connections are closed.
    pub fn close(&self) {
        self.permits.close();
        if let Ok(mut idle) = self.idle.lock() {
            idle.clear();
        }
    }
}

/// A read transaction on a pooled connection; ended (and the connection returned) on commit or
/// drop.
pub struct ReadTx {
    conn: Option<Connection>,
    readers: Arc<Readers>,
    _permit: OwnedSemaphorePermit,
}

impl ReadTx {
    pub fn commit(mut self) -> StoreResult<()> {
        self.end("COMMIT")
    }

    fn end(&mut self, statement: &str) -> StoreResult<()> {
        let Some(conn) = self.conn.take() else { return Ok(()) };
        let ended = run(&conn, statement);
        // A connection whose transaction could not end is not reused.
        if ended.is_ok() {
            self.readers.give_back(conn);
        }
        ended
    }
}

impl Drop for ReadTx {
    fn drop(&mut self) {
        if let Err(e) = self.end("ROLLBACK") {
            tracing::warn!(error = %e, "ending a read transaction failed");
        }
    }
}

impl std::ops::Deref for ReadTx {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        match self.conn.as_ref() {
            Some(conn) => conn,
            None => ended_transaction(),
        }
    }
}

#[allow(clippy::panic)]
pub(crate) fn ended_transaction() -> ! {
    panic!("a transaction used after it ended: commit consumes it")
}
