//! The PostgreSQL store: the multi-node backend. A pool of connections serves every
//! transaction (`READ COMMITTED` for writes; `REPEATABLE READ, READ ONLY` for reads so that a
//! list and its total come from one snapshot). Job claims use `FOR UPDATE SKIP LOCKED`, so any
//! number of nodes can claim concurrently; a commit that enqueued wakes this node's workers at
//! once and has the other nodes woken by a `NOTIFY` sent after it, which a background `LISTEN`
//! connection on each node receives.
//!
//! The `NOTIFY` is not sent inside the enqueuing transaction: PostgreSQL serialises the commits
//! of transactions that notify (a global lock held through the commit's WAL flush), which made
//! every write that enqueued a job commit one at a time. Sent after the commit, coalesced by
//! one task, it costs nothing to the writes; if a node dies between a commit and its `NOTIFY`,
//! the other nodes find the job by polling.
//!
//! One optional schema isolates a store: every connection sets `search_path` to it. Tests use one
//! schema per test; production uses the default (`public`).

mod accounts;
mod approvals;
mod audit;
mod automations;
mod breaks;
mod challenges;
mod clause;
mod codec;
mod contracts;
mod custody;
mod customers;
mod deferred;
mod events;
mod exclusive;
mod executions;
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
mod query;
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
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::{PgPool, Postgres, Transaction};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokenops_store::{Backend, Store, StoreError, StoreResult, Tx};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};

pub use migrate::MIGRATIONS;

/// Connections in the main pool.
const MAX_CONNECTIONS: u32 = 10;
/// How long a caller waits for a connection. While the server is down every new connection is
/// refused and the pool keeps trying: a request must get its 500 in seconds, not hang (the
/// pool's own default is 30 s).
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);
/// Server-side bounds on one statement and on a transaction left idle by a client that went
/// away without closing its connection (its locks would otherwise be held for good).
const STATEMENT_TIMEOUT: &str = "30s";
const IDLE_IN_TRANSACTION_TIMEOUT: &str = "60s";
/// The prefix of the job wake-up channel; the schema (or `public`) completes it.
const CHANNEL_PREFIX: &str = "tokenops_jobs_";
/// PostgreSQL truncates identifiers (and refuses channel names) beyond 63 bytes.
const MAX_IDENTIFIER_LEN: usize = 63;
/// The first and the longest pause before the job listener reconnects.
const LISTEN_BACKOFF_MIN: Duration = Duration::from_millis(250);
const LISTEN_BACKOFF_MAX: Duration = Duration::from_secs(30);
/// The first key of every advisory lock this store takes (the second is per schema).
pub(crate) const ADVISORY_LOCK_CLASS: i32 = 0x546f_4f70;

/// A configuration the store refuses before touching the database.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "invalid PostgreSQL schema name {0:?}: use 1 to {max} characters of [a-z0-9_], starting with a letter or '_'",
        max = MAX_IDENTIFIER_LEN - CHANNEL_PREFIX.len()
    )]
    InvalidSchema(String),
}

#[derive(Clone)]
pub struct PostgresStore {
    pool: PgPool,
    /// How the pool connects: a held role (`exclusive`) takes a connection of its own.
    options: PgConnectOptions,
    /// One connection, used only by the job listener (so it never starves transactions).
    listener_pool: PgPool,
    channel: Arc<str>,
    jobs_notified: Arc<Notify>,
    shutdown: CancellationToken,
    listener_task: Arc<Mutex<Option<JoinHandle<()>>>>,
    /// Stops the listener task when the last clone is dropped without `close`.
    _stop_listener_on_drop: Arc<DropGuard>,
    /// Asks the notifier task for one `NOTIFY` (many asks before it runs make one).
    notify_nodes: Arc<Notify>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore").field("channel", &self.channel).finish_non_exhaustive()
    }
}

/// Accepts a schema name that is safe to place between double quotes and in a channel name.
fn validate_schema(schema: &str) -> StoreResult<()> {
    let valid = !schema.is_empty()
        && schema.len() + CHANNEL_PREFIX.len() <= MAX_IDENTIFIER_LEN
        && schema.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !schema.as_bytes()[0].is_ascii_digit();
    if valid { Ok(()) } else { Err(StoreError::Backend(Box::new(ConfigError::InvalidSchema(schema.to_owned())))) }
}

impl PostgresStore {
    /// Connects a pool to `url`. With `schema`, every connection works in that schema, which is
    /// created if missing. Subscribes to job wake-ups before returning. Does not migrate: call
    /// [`Self::migrate`].
    pub async fn connect(url: &str, schema: Option<&str>) -> StoreResult<Self> {
        let mut options: PgConnectOptions = url.parse().map_err(codec::backend)?;
        options = options.options([
            ("statement_timeout", STATEMENT_TIMEOUT),
            ("idle_in_transaction_session_timeout", IDLE_IN_TRANSACTION_TIMEOUT),
        ]);
        if let Some(schema) = schema {
            validate_schema(schema)?;
            options = options.options([("search_path", schema)]);
        }
        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options.clone())
            .await
            .map_err(codec::backend)?;
        if let Some(schema) = schema
            && let Err(error) = create_schema(&pool, schema).await
        {
            pool.close().await;
            return Err(error);
        }

        let channel: Arc<str> = format!("{CHANNEL_PREFIX}{}", schema.unwrap_or("public")).into();
        let listener_pool = PgPoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_lazy_with(options.clone());
        let listener = match subscribe(&listener_pool, &channel).await {
            Ok(listener) => listener,
            Err(error) => {
                pool.close().await;
                return Err(codec::backend(error));
            }
        };

        let jobs_notified = Arc::new(Notify::new());
        let shutdown = CancellationToken::new();
        let notify_nodes = Arc::new(Notify::new());
        tokio::spawn(notify_other_nodes(pool.clone(), channel.clone(), notify_nodes.clone(), shutdown.clone()));
        let task = tokio::spawn(listen_for_jobs(
            listener_pool.clone(),
            channel.clone(),
            listener,
            jobs_notified.clone(),
            shutdown.clone(),
        ));
        Ok(Self {
            pool,
            options,
            listener_pool,
            channel,
            jobs_notified,
            _stop_listener_on_drop: Arc::new(shutdown.clone().drop_guard()),
            shutdown,
            listener_task: Arc::new(Mutex::new(Some(task))),
            notify_nodes,
        })
    }

    /// Applies every migration not yet applied; returns how many ran. Safe to run from several
    /// nodes at once: an advisory lock serialises them. `clock` stamps each one's `applied_at`.
    pub async fn migrate(&self, clock: &dyn tokenops_domain::Clock) -> StoreResult<usize> {
        migrate::apply(&self.pool, clock).await
    }

    fn tx(&self, tx: Transaction<'static, Postgres>, read_only: bool) -> Box<dyn Tx> {
        Box::new(PostgresTx {
            tx,
            read_only,
            deferred: deferred::Deferred::default(),
            enqueued: false,
            jobs_notified: self.jobs_notified.clone(),
            notify_nodes: self.notify_nodes.clone(),
        })
    }
}

/// Creates the schema if missing. Serialised by an advisory lock: concurrent
/// `CREATE SCHEMA IF NOT EXISTS` can otherwise fail on the catalog's unique index.
async fn create_schema(pool: &PgPool, schema: &str) -> StoreResult<()> {
    let mut tx = pool.begin().await.map_err(codec::backend)?;
    let lock = sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))").bind(ADVISORY_LOCK_CLASS).bind(schema);
    query::execute(&mut *tx, lock).await?;
    // The name is validated to [a-z0-9_], so quoting it is enough.
    let create = sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\"")));
    query::execute(&mut *tx, create).await?;
    tx.commit().await.map_err(codec::backend)
}

async fn subscribe(pool: &PgPool, channel: &str) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    // `close` cancels the task before closing this pool; the listener need not watch for it.
    listener.ignore_pool_close_event(true);
    listener.listen(channel).await?;
    Ok(listener)
}

/// Wakes every waiting worker and leaves one permit for a worker that is between polls, so a
/// notification that arrives while nobody waits is not lost (at the cost of a spurious wake-up).
fn wake_workers(notify: &Notify) {
    notify.notify_waiters();
    notify.notify_one();
}

/// Sends one `NOTIFY` on `channel` per wake-up of `asked` until `shutdown`: asks that arrive
/// while one is sent are answered by the next.
async fn notify_other_nodes(pool: PgPool, channel: Arc<str>, asked: Arc<Notify>, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = asked.notified() => {
                if let Err(error) = sqlx::query("SELECT pg_notify($1, '')").bind(&*channel).execute(&pool).await {
                    // The other nodes' polling finds the jobs.
                    tracing::warn!(%error, "could not notify the other nodes of new jobs");
                }
            }
        }
    }
}

/// Feeds `notify` from `LISTEN channel` until `shutdown`. A lost connection is re-established
/// with exponential backoff; workers are woken after each reconnect since notifications sent
/// meanwhile are lost. Without notifications, workers still poll on their own timeout.
async fn listen_for_jobs(
    pool: PgPool,
    channel: Arc<str>,
    first: PgListener,
    notify: Arc<Notify>,
    shutdown: CancellationToken,
) {
    let mut current = Some(first);
    let mut backoff = LISTEN_BACKOFF_MIN;
    loop {
        let mut listener = match current.take() {
            Some(listener) => listener,
            None => {
                let attempt = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    attempt = subscribe(&pool, &channel) => attempt,
                };
                match attempt {
                    Ok(listener) => {
                        tracing::info!(channel = &*channel, "job listener reconnected");
                        backoff = LISTEN_BACKOFF_MIN;
                        notify.notify_waiters();
                        listener
                    }
                    Err(error) => {
                        tracing::warn!(channel = &*channel, %error, ?backoff, "job listener cannot connect; retrying");
                        if pause(&shutdown, &mut backoff).await {
                            return;
                        }
                        continue;
                    }
                }
            }
        };
        loop {
            let next = tokio::select! {
                _ = shutdown.cancelled() => return,
                next = listener.try_recv() => next,
            };
            match next {
                Ok(Some(_)) => wake_workers(&notify),
                // The connection dropped and the listener re-subscribed on a new one.
                Ok(None) => {
                    tracing::info!(channel = &*channel, "job listener connection replaced");
                    notify.notify_waiters();
                }
                Err(error) => {
                    tracing::warn!(channel = &*channel, %error, ?backoff, "job listener lost its connection");
                    break;
                }
            }
        }
        drop(listener);
        if pause(&shutdown, &mut backoff).await {
            return;
        }
    }
}

/// Begins a transaction (with `statement`, or a plain `BEGIN`) in a task of its own, so that a
/// caller who gives up meanwhile (a request whose client went away, a job stopped at shutdown)
/// cannot leave the connection inside a transaction. sqlx 0.9 counts a PostgreSQL transaction
/// only once its `BEGIN` is answered, so a begin dropped before that returns the connection to
/// the pool with the server still in the transaction, and every later borrower of that
/// connection runs inside it (transact-rs/sqlx#4393). In its own task the begin always
/// finishes; a transaction nobody is left to receive is dropped there, which rolls it back.
async fn begin(pool: &PgPool, statement: Option<&'static str>) -> StoreResult<Transaction<'static, Postgres>> {
    let pool = pool.clone();
    let begun = tokio::spawn(async move {
        match statement {
            Some(statement) => pool.begin_with(statement).await,
            None => pool.begin().await,
        }
    });
    match begun.await {
        Ok(begun) => begun.map_err(codec::backend),
        Err(error) => Err(StoreError::Backend(Box::new(error))),
    }
}

/// Sleeps for `backoff` and doubles it; true when shutdown came first.
async fn pause(shutdown: &CancellationToken, backoff: &mut Duration) -> bool {
    let stopped = tokio::select! {
        _ = shutdown.cancelled() => true,
        _ = tokio::time::sleep(*backoff) => false,
    };
    *backoff = (*backoff * 2).min(LISTEN_BACKOFF_MAX);
    stopped
}

#[async_trait]
impl Store for PostgresStore {
    fn backend(&self) -> Backend {
        Backend::Postgres
    }

    async fn write(&self) -> StoreResult<Box<dyn Tx>> {
        let tx = begin(&self.pool, None).await?;
        Ok(self.tx(tx, false))
    }

    async fn read(&self) -> StoreResult<Box<dyn Tx>> {
        let tx = begin(&self.pool, Some("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")).await?;
        Ok(self.tx(tx, true))
    }

    async fn subject_standing(
        &self,
        tenant: Option<tokenops_domain::TenantId>,
        id: uuid::Uuid,
    ) -> StoreResult<tokenops_store::SubjectStanding> {
        standing::subject_standing(&self.pool, tenant, id).await
    }

    async fn ping(&self) -> StoreResult<()> {
        query::execute(&self.pool, sqlx::query("SELECT 1")).await?;
        Ok(())
    }

    async fn exclusive(&self, role: &str) -> StoreResult<Option<tokenops_store::Exclusive>> {
        exclusive::exclusive(&self.options, role, self.shutdown.clone()).await
    }

    async fn wait_for_jobs(&self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.jobs_notified.notified()).await;
    }

    async fn close(&self) {
        self.shutdown.cancel();
        let task = self.listener_task.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(task) = task
            && let Err(error) = task.await
        {
            tracing::warn!(%error, "job listener task failed");
        }
        self.listener_pool.close().await;
        self.pool.close().await;
    }
}

/// One transaction. Enqueuing a job marks it, so that its commit wakes this node's workers at
/// once and the other nodes by a `NOTIFY`. The rows it holds back (`deferred`) are written
/// before its next statement or its COMMIT.
pub struct PostgresTx {
    tx: Transaction<'static, Postgres>,
    /// A read transaction refuses a held-back write at once, as the server would its statement.
    read_only: bool,
    deferred: deferred::Deferred,
    enqueued: bool,
    jobs_notified: Arc<Notify>,
    notify_nodes: Arc<Notify>,
}

#[async_trait]
impl Tx for PostgresTx {
    tokenops_store::tx_accessors!();

    async fn commit(mut self: Box<Self>) -> StoreResult<()> {
        if let Err(e) = self.flush().await {
            // Ended now, not when the pool next pings the connection: what it holds (a key's
            // lock) is free once the caller answers.
            let _ = self.tx.rollback().await;
            return Err(e);
        }
        let PostgresTx { tx, enqueued, jobs_notified, notify_nodes, .. } = *self;
        tx.commit().await.map_err(codec::backend)?;
        if enqueued {
            jobs_notified.notify_one();
            notify_nodes.notify_one();
        }
        Ok(())
    }

    async fn rollback(self: Box<Self>) -> StoreResult<()> {
        // The held-back rows are dropped unsent.
        self.tx.rollback().await.map_err(codec::backend)
    }
}

#[cfg(test)]
mod tests {
    use super::validate_schema;

    #[test]
    fn schema_names_are_restricted() {
        assert!(validate_schema("tenant_test_01").is_ok());
        assert!(validate_schema("_x").is_ok());
        assert!(validate_schema(&"a".repeat(49)).is_ok());
        assert!(validate_schema(&"a".repeat(50)).is_err());
        assert!(validate_schema("").is_err());
        assert!(validate_schema("1abc").is_err());
        assert!(validate_schema("Public").is_err());
        assert!(validate_schema("a\"; DROP").is_err());
        assert!(validate_schema("a-b").is_err());
    }
}
