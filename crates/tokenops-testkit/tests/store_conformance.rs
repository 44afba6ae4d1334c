//! The store conformance suite: the contract of the store traits (`tokenops_store`), checked on
//! both backends. Every test takes a `Backend` and is registered with `backends!`, so it runs as
//! `name::sqlite` and `name::postgres`; a behaviour that differs between the two is a bug in a
//! backend. Each test opens a fresh, migrated store through the trait object (`Arc<dyn Store>`),
//! the way the app sees it. What only PostgreSQL has (the LISTEN connection, nodes migrating one
//! schema together) is tested in `tokenops-store-postgres/tests`.
//!
//! The store never reads the clock: tests pass time in, from the fixed instant `T0`.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokenops_domain::audit::{AuditFilter, AuditOutcome, AuditRecord, AuditSeal, AuditSource};
use tokenops_domain::audit_chain::AuditBlock;
use tokenops_domain::customer::{Customer, CustomerRef, CustomerStatus};
use tokenops_domain::event::{Event, EventFilter, ResourceRef};
use tokenops_domain::paging::{KeysetPosition, KeysetRequest, SortDirection, SortKey};
use tokenops_domain::{ManualClock, TenantId, Timestamp, new_id};
use tokenops_store::{
    CustomerFilter, IdempotencyScope, IdempotencyState, Job, JobStatus, Lease, NewJob, QueueStats, SealedCount, Store,
    StoreError, StoreResult, StoredResponse,
};
use tokenops_store_postgres::PostgresStore;
use tokenops_store_sqlite::SqliteStore;
use tokenops_testkit::{Backend, TestDb, backends};
use uuid::Uuid;

mod common;
use common::{T0, accepted_in_reads, page};

// ---------------------------------------------------------------------------------------------
// The fixture

/// The concrete store behind the trait object, for what the trait does not cover (migrations).
#[derive(Clone)]
enum Concrete {
    Sqlite(SqliteStore),
    Postgres(PostgresStore),
}

impl Concrete {
    /// Opens (does not migrate) the store of `db`.
    async fn open(db: &TestDb) -> Self {
        match db.backend {
            Backend::Sqlite => {
                let url = db.url();
                let path = url.strip_prefix("sqlite://").expect("a sqlite:// URL");
                Concrete::Sqlite(SqliteStore::open(path.as_ref()).await.expect("open the SQLite store"))
            }
            Backend::Postgres => Concrete::Postgres(
                PostgresStore::connect(&db.url(), db.schema()).await.expect("connect to the test PostgreSQL server"),
            ),
        }
    }

    async fn migrate(&self) -> StoreResult<usize> {
        match self {
            // Migrations are stamped by the clock they are given, from the fixed instant `T0`.
            Concrete::Sqlite(store) => store.migrate(&ManualClock::starting_at(T0)).await,
            Concrete::Postgres(store) => store.migrate(&ManualClock::starting_at(T0)).await,
        }
    }

    fn migrations(&self) -> &'static [(i64, &'static str, &'static str)] {
        match self {
            Concrete::Sqlite(_) => tokenops_store_sqlite::MIGRATIONS,
            Concrete::Postgres(_) => tokenops_store_postgres::MIGRATIONS,
        }
    }

    fn as_store(&self) -> Arc<dyn Store> {
        match self {
            Concrete::Sqlite(store) => Arc::new(store.clone()),
            Concrete::Postgres(store) => Arc::new(store.clone()),
        }
    }
}

/// A fresh store (a SQLite file or a PostgreSQL schema) and raw SQL access to it. The PostgreSQL
/// schema is dropped when the fixture is, even when the test panics.
struct Fixture {
    db: TestDb,
    concrete: Concrete,
    store: Arc<dyn Store>,
}

impl Fixture {
    /// A fresh store, migrated.
    async fn new(backend: Backend) -> Self {
        let fixture = Self::unmigrated(backend).await;
        fixture.concrete.migrate().await.expect("migrate");
        fixture
    }

    async fn unmigrated(backend: Backend) -> Self {
        let db = TestDb::create(backend).await;
        let concrete = Concrete::open(&db).await;
        let store = concrete.as_store();
        Self { db, concrete, store }
    }

    /// Another handle on the same store, as another writer would hold it: on PostgreSQL another
    /// node (its own pool and listener); on SQLite, a single-node store, a clone of this handle
    /// (used from another task), since job wake-ups there are in-process.
    async fn peer(&self) -> Arc<dyn Store> {
        match self.db.backend {
            Backend::Sqlite => self.store.clone(),
            Backend::Postgres => Concrete::open(&self.db).await.as_store(),
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.db.drop_schema();
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers

fn job(kind: &str, run_at: Timestamp) -> NewJob {
    NewJob {
        kind: kind.to_owned(),
        tenant_id: None,
        payload: serde_json::json!({ "kind": kind }),
        run_at,
        max_attempts: 5,
        dedupe_key: None,
    }
}

async fn enqueue(store: &dyn Store, new: &NewJob, now: Timestamp) -> Option<Uuid> {
    let mut tx = store.write().await.expect("begin");
    let id = tx.jobs().enqueue(new, now).await.expect("enqueue");
    tx.commit().await.expect("commit");
    id
}

/// Claims (and commits the claim of) up to `limit` jobs due at `now`.
async fn claim(store: &dyn Store, now: Timestamp, lease_until: Timestamp, limit: u32) -> Vec<Job> {
    let mut tx = store.write().await.expect("begin");
    let jobs = tx.jobs().claim(now, lease_until, limit).await.expect("claim");
    tx.commit().await.expect("commit claim");
    jobs
}

fn lease_of(job: &Job) -> Lease {
    Lease { job_id: job.id, token: job.lease_token.expect("a claimed job has a lease token") }
}

async fn get_job(store: &dyn Store, id: Uuid) -> Job {
    let mut tx = store.read().await.expect("begin read");
    tx.jobs().get(id).await.expect("get job").expect("the job exists")
}

fn customer(tenant: TenantId, reference: &str, at: Timestamp) -> Customer {
    Customer {
        id: new_id(),
        tenant_id: tenant,
        customer_ref: CustomerRef::parse(reference).expect("valid reference"),
        display_name: Some(format!("Customer {reference}")),
        status: CustomerStatus::Active,
        created_at: at,
        updated_at: at,
    }
}

// ---------------------------------------------------------------------------------------------
// Migrations

backends!(migrating_twice_is_a_no_op, a_changed_migration_is_refused);

async fn migrating_twice_is_a_no_op(backend: Backend) {
    let fx = Fixture::unmigrated(backend).await;
    let migrations = fx.concrete.migrations();
    assert_eq!(fx.concrete.migrate().await.expect("migrate"), migrations.len());
    assert_eq!(fx.concrete.migrate().await.expect("migrate again"), 0, "nothing left to apply");

    // Every table exists (a count fails on a missing one) and is empty.
    for table in ["customers", "events", "audit_records", "idempotency_records", "jobs", "settings"] {
        assert_eq!(fx.db.count(table, "").await, 0, "{table}");
    }
    // Each migration is recorded once, with the checksum of its text.
    let recorded = fx.db.strings("SELECT checksum FROM schema_migrations ORDER BY version").await;
    let expected: Vec<String> = migrations.iter().map(|(_, _, sql)| tokenops_store::migration_checksum(sql)).collect();
    assert_eq!(recorded, expected);
    let names = fx.db.strings("SELECT name FROM schema_migrations ORDER BY version").await;
    assert_eq!(names, migrations.iter().map(|(_, name, _)| name.to_string()).collect::<Vec<_>>());
    // ...applied at the migrating clock's time, not the system's.
    let stamped = fx.db.count("schema_migrations", &format!("applied_at = {}", T0.as_micros())).await;
    assert_eq!(usize::try_from(stamped).expect("a count"), migrations.len());

    fx.store.ping().await.expect("ping");
    let expected_backend = match backend {
        Backend::Sqlite => tokenops_store::Backend::Sqlite,
        Backend::Postgres => tokenops_store::Backend::Postgres,
    };
    assert_eq!(fx.store.backend(), expected_backend);
}

async fn a_changed_migration_is_refused(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (version, name, _) = fx.concrete.migrations()[0];
    // As if the migration's text had been edited after it was applied to this database.
    fx.db.execute(&format!("UPDATE schema_migrations SET checksum = 'edited' WHERE version = {version}")).await;

    let error = fx.concrete.migrate().await.expect_err("a changed migration is refused");
    let message = error.to_string();
    assert!(message.contains(&format!("migration {version} ({name})")), "the error names the migration: {message}");
    // Nothing was applied or re-recorded.
    assert_eq!(fx.db.count("schema_migrations", "checksum = 'edited'").await, 1);
    let again = Concrete::open(&fx.db).await;
    assert!(again.migrate().await.is_err(), "refused by every node that starts");
    again.as_store().close().await;
}

// ---------------------------------------------------------------------------------------------
// Jobs

backends!(
    concurrent_claimers_take_every_job_exactly_once,
    an_expired_lease_is_fenced_out,
    extending_a_lease_keeps_the_job_from_being_reclaimed,
    retry_release_and_bury_follow_the_lease,
    live_payload_values_name_what_queued_and_running_jobs_of_the_kinds_act_on,
    a_dedupe_key_admits_one_live_job,
    wait_for_jobs_wakes_promptly_after_an_enqueue_commits,
    jobs_are_enqueued_and_completed_several_at_a_time,
);

/// `enqueue_all` queues every job as `enqueue` would; `complete_all` completes the leases still
/// held and counts them, fencing out a stale one.
async fn jobs_are_enqueued_and_completed_several_at_a_time(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let mut tx = fx.store.write().await.expect("begin");
    let mut batch: Vec<NewJob> = (0..5).map(|i| job(&format!("batch.{i}"), T0)).collect();
    batch[4].tenant_id = Some(TenantId(new_id()));
    tx.jobs().enqueue_all(&batch, T0).await.expect("enqueue all");
    tx.jobs().enqueue_all(&[], T0).await.expect("enqueue none");
    tx.commit().await.expect("commit");
    let claimed = claim(fx.store.as_ref(), T0, T0.plus_millis(1_000), 10).await;
    let mut kinds: Vec<&str> = claimed.iter().map(|j| j.kind.as_str()).collect();
    kinds.sort_unstable();
    assert_eq!(kinds, ["batch.0", "batch.1", "batch.2", "batch.3", "batch.4"]);
    let with_tenant = claimed.iter().find(|j| j.kind == "batch.4").expect("batch.4");
    assert_eq!(with_tenant.tenant_id, batch[4].tenant_id);
    assert_eq!(with_tenant.payload, batch[4].payload);
    assert_eq!(with_tenant.max_attempts, 5);

    // One lease goes stale: its job is given back and claimed again, with a new lease.
    let later = T0.plus_millis(500);
    let mut leases: Vec<Lease> = claimed.iter().map(lease_of).collect();
    let stale = leases[0];
    let mut tx = fx.store.write().await.expect("begin");
    assert!(tx.jobs().release(stale, T0).await.expect("release"));
    tx.commit().await.expect("commit");
    let again = claim(fx.store.as_ref(), later, later.plus_millis(1_000), 1).await;
    assert_eq!(again.len(), 1);
    let mut tx = fx.store.write().await.expect("begin");
    assert_eq!(tx.jobs().complete_all(&leases, later).await.expect("complete all"), 4, "the stale lease is fenced out");
    tx.commit().await.expect("commit");
    for lease in &leases[1..] {
        assert_eq!(get_job(fx.store.as_ref(), lease.job_id).await.status, tokenops_store::JobStatus::Done);
    }
    leases.truncate(0);
    let mut tx = fx.store.write().await.expect("begin");
    assert_eq!(tx.jobs().complete_all(&leases, later).await.expect("complete none"), 0);
}

async fn concurrent_claimers_take_every_job_exactly_once(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let mut tx = fx.store.write().await.expect("begin");
    let mut enqueued = HashSet::new();
    for i in 0..200 {
        // Spread run_at so that claim order is observable.
        let id = tx.jobs().enqueue(&job("bulk", T0.minus_millis(i)), T0).await.expect("enqueue");
        enqueued.insert(id.expect("no dedupe key, always enqueued"));
    }
    tx.commit().await.expect("commit");
    assert_eq!(enqueued.len(), 200);

    // Four claimers at once (on SQLite the single writer serialises them; it must still hold).
    let lease_until = T0.plus_millis(60_000);
    let mut claimers = Vec::new();
    for _ in 0..4 {
        let store = fx.store.clone();
        claimers.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let claimed = claim(&*store, T0, lease_until, 10).await;
                if claimed.is_empty() {
                    return mine;
                }
                assert!(claimed.len() <= 10);
                assert!(claimed.windows(2).all(|w| w[0].run_at <= w[1].run_at), "claims come ordered by run_at");
                for job in claimed {
                    assert_eq!(job.status, JobStatus::Running);
                    assert_eq!(job.attempts, 1);
                    assert_eq!(job.lease_until, Some(lease_until));
                    let mut tx = store.write().await.expect("begin");
                    assert!(tx.jobs().complete(lease_of(&job), T0).await.expect("complete"), "our own lease completes");
                    tx.commit().await.expect("commit complete");
                    mine.push(job.id);
                }
            }
        }));
    }
    let mut claimed = Vec::new();
    for claimer in claimers {
        claimed.extend(claimer.await.expect("claimer task"));
    }
    let unique: HashSet<Uuid> = claimed.iter().copied().collect();
    assert_eq!(claimed.len(), 200, "no job claimed twice");
    assert_eq!(unique, enqueued, "every job claimed");

    let mut tx = fx.store.read().await.expect("begin read");
    let stats = QueueStats::total(&tx.jobs().stats(T0).await.expect("stats"));
    assert_eq!((stats.queued, stats.running, stats.dead, stats.oldest_due_age_ms), (0, 0, 0, 0));
    for id in &enqueued {
        let job = tx.jobs().get(*id).await.expect("get").expect("job exists");
        assert_eq!(job.status, JobStatus::Done);
        assert_eq!(job.attempts, 1);
        assert_eq!((job.lease_token, job.lease_until), (None, None));
    }
    drop(tx);

    let mut tx = fx.store.write().await.expect("begin");
    assert_eq!(tx.jobs().prune_done(T0).await.expect("prune"), 0, "done at T0, not before it");
    assert_eq!(tx.jobs().prune_done(T0.plus_millis(1)).await.expect("prune"), 200);
    tx.commit().await.expect("commit");
}

async fn an_expired_lease_is_fenced_out(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let store = &*fx.store;
    let id = enqueue(store, &job("fenced", T0), T0).await.expect("enqueued");

    let first = claim(store, T0, T0.plus_millis(1_000), 5).await;
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].id, id);
    let first = lease_of(&first[0]);

    // While the lease runs, nobody else can claim the job.
    assert!(claim(store, T0.plus_millis(999), T0.plus_millis(60_000), 5).await.is_empty());

    // Past the lease, the job is claimable again, with a new token and a counted attempt.
    let later = T0.plus_millis(2_000);
    let second = claim(store, later, later.plus_millis(60_000), 5).await;
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].attempts, 2);
    let second = lease_of(&second[0]);
    assert_ne!(first.token, second.token);

    let mut tx = store.write().await.expect("begin");
    assert!(!tx.jobs().complete(first, later).await.expect("complete"), "the stale lease is fenced out");
    assert!(!tx.jobs().retry(first, later, "stale", later).await.expect("retry"));
    assert!(!tx.jobs().bury(first, "stale", later).await.expect("bury"));
    assert!(!tx.jobs().release(first, later).await.expect("release"));
    assert!(!tx.jobs().extend_lease(first, later.plus_millis(90_000), later).await.expect("extend"));
    let stored = tx.jobs().get(id).await.expect("get").expect("exists");
    assert_eq!((stored.status, stored.lease_token, stored.attempts), (JobStatus::Running, Some(second.token), 2));
    assert!(tx.jobs().complete(second, later).await.expect("complete"), "the current lease completes");
    assert!(!tx.jobs().complete(second, later).await.expect("complete twice"), "completion happens once");
    tx.commit().await.expect("commit");

    let stored = get_job(store, id).await;
    assert_eq!(stored.status, JobStatus::Done);
    assert_eq!(stored.updated_at, later);
    assert_eq!(stored.last_error, None);
}

async fn extending_a_lease_keeps_the_job_from_being_reclaimed(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let store = &*fx.store;
    let id = enqueue(store, &job("long", T0), T0).await.expect("enqueued");
    let claimed = claim(store, T0, T0.plus_millis(1_000), 1).await;
    let lease = lease_of(&claimed[0]);

    // The worker's heartbeat, before the lease ends.
    let beat = T0.plus_millis(800);
    let mut tx = store.write().await.expect("begin");
    assert!(tx.jobs().extend_lease(lease, beat.plus_millis(5_000), beat).await.expect("extend"));
    tx.commit().await.expect("commit");
    let stored = get_job(store, id).await;
    assert_eq!((stored.status, stored.lease_token), (JobStatus::Running, Some(lease.token)));
    assert_eq!(stored.lease_until, Some(beat.plus_millis(5_000)));
    assert_eq!(stored.attempts, 1, "a heartbeat is not an attempt");

    // Past the original lease, the job is still the worker's.
    assert!(claim(store, T0.plus_millis(2_000), T0.plus_millis(60_000), 5).await.is_empty());
    assert!(claim(store, beat.plus_millis(4_999), T0.plus_millis(60_000), 5).await.is_empty());

    // A worker that stops beating loses the job once the extended lease ends.
    let expiry = beat.plus_millis(5_000);
    let reclaimed = claim(store, expiry, expiry.plus_millis(60_000), 5).await;
    assert_eq!(reclaimed.len(), 1);
    assert_eq!(reclaimed[0].attempts, 2);
    let current = lease_of(&reclaimed[0]);

    let mut tx = store.write().await.expect("begin");
    assert!(
        !tx.jobs().extend_lease(lease, expiry.plus_millis(120_000), expiry).await.expect("extend"),
        "a stale lease token cannot extend"
    );
    let stored = tx.jobs().get(id).await.expect("get").expect("exists");
    assert_eq!(stored.lease_until, Some(expiry.plus_millis(60_000)), "the refused extension changed nothing");
    assert!(tx.jobs().extend_lease(current, expiry.plus_millis(90_000), expiry).await.expect("extend"));
    assert!(tx.jobs().complete(current, expiry).await.expect("complete"));
    assert!(
        !tx.jobs().extend_lease(current, expiry.plus_millis(120_000), expiry).await.expect("extend"),
        "a finished job's lease cannot be extended"
    );
    tx.commit().await.expect("commit");
    assert_eq!(get_job(store, id).await.lease_until, None);
}

async fn retry_release_and_bury_follow_the_lease(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let store = &*fx.store;
    let id = enqueue(store, &job("cycle", T0), T0).await.expect("enqueued");
    let claim_one = |now: Timestamp| async move { claim(store, now, now.plus_millis(30_000), 1).await.pop() };

    let mut tx = store.read().await.expect("begin read");
    let by_kind = tx.jobs().stats(T0.plus_millis(250)).await.expect("stats");
    assert_eq!(by_kind.iter().map(|(kind, _)| kind.as_str()).collect::<Vec<_>>(), ["cycle"], "per kind");
    let stats = QueueStats::total(&by_kind);
    assert_eq!((stats.queued, stats.running, stats.dead, stats.oldest_due_age_ms), (1, 0, 0, 250));
    drop(tx);

    // Release gives the attempt back and makes the job due at once.
    let job = claim_one(T0).await.expect("claimed");
    assert_eq!(job.attempts, 1);
    let mut tx = store.read().await.expect("begin read");
    let stats = QueueStats::total(&tx.jobs().stats(T0.plus_millis(1)).await.expect("stats"));
    assert_eq!((stats.queued, stats.running, stats.oldest_due_age_ms), (0, 1, 0), "a running job is not waiting");
    drop(tx);
    let mut tx = store.write().await.expect("begin");
    assert!(tx.jobs().release(lease_of(&job), T0.plus_millis(5)).await.expect("release"));
    let released = tx.jobs().get(id).await.expect("get").expect("exists");
    assert_eq!((released.status, released.attempts, released.run_at), (JobStatus::Queued, 0, T0.plus_millis(5)));
    assert_eq!((released.lease_token, released.lease_until), (None, None));
    tx.commit().await.expect("commit");
    let job = claim_one(T0.plus_millis(5)).await.expect("claimed again");
    assert_eq!(job.attempts, 1, "a released attempt is not counted");

    // Retry schedules it later with the error recorded; it is not due before then.
    let retry_at = T0.plus_millis(10_000);
    let mut tx = store.write().await.expect("begin");
    assert!(tx.jobs().retry(lease_of(&job), retry_at, "boom", T0.plus_millis(6)).await.expect("retry"));
    let stats = QueueStats::total(&tx.jobs().stats(T0.plus_millis(7)).await.expect("stats"));
    assert_eq!((stats.queued, stats.running, stats.oldest_due_age_ms), (1, 0, 0), "queued but not yet due");
    let stats = QueueStats::total(&tx.jobs().stats(retry_at.plus_millis(1_500)).await.expect("stats"));
    assert_eq!(stats.oldest_due_age_ms, 1_500);
    let retried = tx.jobs().get(id).await.expect("get").expect("exists");
    assert_eq!((retried.status, retried.run_at), (JobStatus::Queued, retry_at));
    assert_eq!(retried.last_error.as_deref(), Some("boom"));
    assert_eq!(retried.lease_token, None);
    tx.commit().await.expect("commit");
    assert!(claim_one(T0.plus_millis(9_999)).await.is_none());
    let job = claim_one(retry_at).await.expect("claimed after the retry delay");
    assert_eq!(job.attempts, 2);
    assert_eq!(job.last_error.as_deref(), Some("boom"), "the last error stays until the next one");

    let mut tx = store.write().await.expect("begin");
    assert!(tx.jobs().bury(lease_of(&job), "gave up", retry_at).await.expect("bury"));
    let stored = tx.jobs().get(id).await.expect("get").expect("exists");
    assert_eq!(stored.status, JobStatus::Dead);
    assert_eq!(stored.last_error.as_deref(), Some("gave up"));
    assert_eq!((stored.lease_token, stored.lease_until), (None, None));
    let stats = QueueStats::total(&tx.jobs().stats(retry_at).await.expect("stats"));
    assert_eq!((stats.queued, stats.running, stats.dead, stats.oldest_due_age_ms), (0, 0, 1, 0));
    // A dead job is never claimed again, and is not pruned as done.
    assert_eq!(tx.jobs().prune_done(retry_at.plus_millis(1)).await.expect("prune"), 0);
    tx.commit().await.expect("commit");
    assert!(claim_one(retry_at.plus_millis(100_000)).await.is_none());
}

async fn a_dedupe_key_admits_one_live_job(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let store = &*fx.store;
    let keyed = NewJob { dedupe_key: Some("sync:tenant-1".into()), ..job("sync", T0) };
    let first = enqueue(store, &keyed, T0).await.expect("first enqueue");
    assert_eq!(enqueue(store, &keyed, T0).await, None, "skipped while the first is queued");

    // The skipped insert leaves the transaction usable.
    let mut tx = store.write().await.expect("begin");
    assert_eq!(tx.jobs().enqueue(&keyed, T0).await.expect("enqueue"), None);
    assert!(tx.jobs().enqueue(&job("other", T0), T0).await.expect("enqueue").is_some());
    tx.commit().await.expect("commit");

    // Still held while running; free again once the job is done.
    let claimed = claim(store, T0, T0.plus_millis(30_000), 10).await;
    assert_eq!(claimed.len(), 2);
    let running = claimed.iter().find(|j| j.id == first).expect("keyed job claimed");
    assert_eq!(enqueue(store, &keyed, T0).await, None, "skipped while the first is running");
    let mut tx = store.write().await.expect("begin");
    assert!(tx.jobs().complete(lease_of(running), T0).await.expect("complete"));
    tx.commit().await.expect("commit");
    let again = enqueue(store, &keyed, T0).await.expect("enqueued once the first is done");
    assert_ne!(again, first);

    // A dead job frees its key too.
    let claimed = claim(store, T0, T0.plus_millis(30_000), 10).await;
    assert_eq!(claimed.iter().map(|j| j.id).collect::<Vec<_>>(), [again]);
    let mut tx = store.write().await.expect("begin");
    assert!(tx.jobs().bury(lease_of(&claimed[0]), "gave up", T0).await.expect("bury"));
    tx.commit().await.expect("commit");
    assert!(enqueue(store, &keyed, T0).await.is_some(), "enqueued once the holder is dead");
}

async fn wait_for_jobs_wakes_promptly_after_an_enqueue_commits(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let peer = fx.peer().await;

    // Nothing enqueued: the wait runs to its timeout (the polling fallback).
    let start = Instant::now();
    fx.store.wait_for_jobs(Duration::from_millis(300)).await;
    assert!(start.elapsed() >= Duration::from_millis(300), "no wake-up before any enqueue");

    let waiter = {
        let store = fx.store.clone();
        tokio::spawn(async move {
            let start = Instant::now();
            store.wait_for_jobs(Duration::from_secs(10)).await;
            start.elapsed()
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let sent = Instant::now();
    enqueue(&*peer, &job("wake", T0), T0).await.expect("enqueued");
    let waited = waiter.await.expect("waiter task");
    let latency = sent.elapsed();
    assert!(waited < Duration::from_secs(3), "woken by the enqueue, not the timeout (waited {waited:?})");
    assert!(latency < Duration::from_secs(3), "wake-up latency {latency:?}");

    // An enqueue committed while nobody waits is not lost: the next wait returns promptly.
    drain_wake_ups(&*fx.store).await;
    enqueue(&*peer, &job("wake-again", T0), T0).await.expect("enqueued");
    let start = Instant::now();
    fx.store.wait_for_jobs(Duration::from_secs(10)).await;
    assert!(start.elapsed() < Duration::from_secs(3), "waited {:?}", start.elapsed());

    // Every waiter wakes, not just one (several workers may wait on one store).
    drain_wake_ups(&*fx.store).await;
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let store = fx.store.clone();
            tokio::spawn(async move {
                let start = Instant::now();
                store.wait_for_jobs(Duration::from_secs(10)).await;
                start.elapsed()
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    enqueue(&*peer, &job("wake-all", T0), T0).await.expect("enqueued");
    for waiter in waiters {
        let waited = waiter.await.expect("waiter task");
        assert!(waited < Duration::from_secs(3), "every waiter is woken (one waited {waited:?})");
    }

    if backend == Backend::Postgres {
        peer.close().await;
    }
}

/// Consumes wake-ups left over from earlier enqueues (spurious wake-ups are allowed), so that the
/// next wait only ends on a new one.
async fn drain_wake_ups(store: &dyn Store) {
    loop {
        let start = Instant::now();
        store.wait_for_jobs(Duration::from_millis(100)).await;
        if start.elapsed() >= Duration::from_millis(100) {
            return;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Transactions

backends!(dropping_a_transaction_rolls_it_back, a_read_transaction_is_one_snapshot, a_read_transaction_refuses_writes);

async fn dropping_a_transaction_rolls_it_back(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let tenant = TenantId(new_id());
    let mut tx = fx.store.write().await.expect("begin");
    tx.customers().insert(&customer(tenant, "c-1", T0)).await.expect("insert");
    let job_id = tx.jobs().enqueue(&job("never", T0), T0).await.expect("enqueue").expect("enqueued");
    tx.settings().get_or_insert("name", "value").await.expect("setting");
    drop(tx);

    let mut tx = fx.store.read().await.expect("begin read");
    let reference = CustomerRef::parse("c-1").expect("valid");
    assert_eq!(tx.customers().get(tenant, &reference).await.expect("get"), None);
    assert_eq!(tx.jobs().get(job_id).await.expect("get"), None);
    assert_eq!(tx.settings().get("name").await.expect("get"), None);
    drop(tx);
    // The rolled-back writer is usable again.
    let mut tx = fx.store.write().await.expect("begin");
    tx.customers().insert(&customer(tenant, "c-1", T0)).await.expect("insert again");
    tx.commit().await.expect("commit");
    assert_eq!(fx.db.count("customers", "").await, 1);
    assert_eq!(fx.db.count("jobs", "").await, 0);
}

async fn a_read_transaction_is_one_snapshot(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let tenant = TenantId(new_id());
    let mut tx = fx.store.write().await.expect("begin");
    for i in 0..2 {
        tx.customers().insert(&customer(tenant, &format!("c-{i}"), T0.plus_millis(i))).await.expect("insert");
    }
    tx.commit().await.expect("commit");

    let all = CustomerFilter::default();
    let mut read = fx.store.read().await.expect("begin read");
    assert_eq!(read.customers().list(tenant, &all, page(0, 10)).await.expect("list").total, 2);

    // A commit made meanwhile is not seen by the open read transaction...
    let mut tx = fx.store.write().await.expect("begin");
    tx.customers().insert(&customer(tenant, "c-2", T0.plus_millis(2))).await.expect("insert");
    tx.commit().await.expect("commit");
    let listed = read.customers().list(tenant, &all, page(0, 10)).await.expect("list");
    assert_eq!((listed.total, listed.items.len()), (2, 2));
    drop(read);

    // ...and is by the next one.
    let mut read = fx.store.read().await.expect("begin read");
    let listed = read.customers().list(tenant, &all, page(0, 10)).await.expect("list");
    assert_eq!((listed.total, listed.items.len()), (3, 3));
}

async fn a_read_transaction_refuses_writes(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let tenant = TenantId(new_id());
    let reference = CustomerRef::parse("c-1").expect("valid");
    let mut tx = fx.store.write().await.expect("begin");
    tx.customers().insert(&customer(tenant, "c-1", T0)).await.expect("insert");
    tx.commit().await.expect("commit");

    // Every write is refused, including those that would change no row, and holding a row.
    let lease = Lease { job_id: new_id(), token: new_id() };
    let scope = IdempotencyScope { tenant: None, operation: "op".into(), key: "k".into() };
    let audit = audit_record(Some(tenant), 0, None, "customer.create");
    let event = Event {
        id: new_id(),
        tenant_id: tenant,
        event_type: "customer.created".into(),
        occurred_at: T0,
        correlation_id: None,
        idempotency_key: None,
        resource: ResourceRef::new("customer", "c-1"),
        data: serde_json::json!({}),
        dispatched_at: None,
    };
    let accepted = accepted_in_reads!(fx.store,
        "customers.insert" => |tx| tx.customers().insert(&customer(tenant, "c-2", T0)),
        "customers.get_for_update" => |tx| tx.customers().get_for_update(tenant, &reference),
        "customers.set_status" => |tx| tx.customers().set_status(tenant, &reference, CustomerStatus::Inactive, T0),
        "events.append" => |tx| tx.events().append(&event),
        "events.mark_dispatched" => |tx| tx.events().mark_dispatched(&[(tenant, new_id())], T0),
        "audit.record" => |tx| tx.audit().record(&audit),
        "idempotency.insert_claim" => |tx| tx.idempotency().insert_claim(&scope, "h", new_id(), T0, T0),
        "idempotency.complete" => |tx| tx.idempotency().complete(&scope, new_id(), &response("x"), T0),
        "idempotency.release" => |tx| tx.idempotency().release(&scope, new_id()),
        "idempotency.prune" => |tx| tx.idempotency().prune(T0),
        "jobs.enqueue" => |tx| tx.jobs().enqueue(&job("k", T0), T0),
        "jobs.claim" => |tx| tx.jobs().claim(T0, T0.plus_millis(1_000), 10),
        "jobs.extend_lease" => |tx| tx.jobs().extend_lease(lease, T0, T0),
        "jobs.complete" => |tx| tx.jobs().complete(lease, T0),
        "jobs.retry" => |tx| tx.jobs().retry(lease, T0, "e", T0),
        "jobs.bury" => |tx| tx.jobs().bury(lease, "e", T0),
        "jobs.release" => |tx| tx.jobs().release(lease, T0),
        "jobs.prune_done" => |tx| tx.jobs().prune_done(T0),
        "settings.get_or_insert" => |tx| tx.settings().get_or_insert("name", "value"),
    );
    assert!(accepted.is_empty(), "a read transaction let these writes through: {accepted:?}");
    assert_eq!(fx.db.count("customers", "").await, 1);
}

// ---------------------------------------------------------------------------------------------
// Customers

backends!(customers_conflict_without_aborting_the_transaction, get_for_update_serialises_changes_of_one_customer);

async fn customers_conflict_without_aborting_the_transaction(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let store = &*fx.store;
    let tenant = TenantId(new_id());
    let other_tenant = TenantId(new_id());
    let mut tx = store.write().await.expect("begin");
    for i in 0..5 {
        tx.customers().insert(&customer(tenant, &format!("c-{i}"), T0.plus_millis(i))).await.expect("insert");
    }
    tx.customers().insert(&customer(other_tenant, "c-0", T0)).await.expect("same ref, other tenant");
    let duplicate = tx.customers().insert(&customer(tenant, "c-0", T0)).await;
    assert!(matches!(duplicate, Err(StoreError::Conflict(_))), "{duplicate:?}");
    // Still usable after the conflict: reads and writes go on, and the commit keeps them.
    let c1 = CustomerRef::parse("c-1").expect("valid");
    assert!(tx.customers().get(tenant, &c1).await.expect("get after the conflict").is_some());
    tx.customers().set_status(tenant, &c1, CustomerStatus::Inactive, T0.plus_millis(100)).await.expect("set status");
    tx.commit().await.expect("commit");

    let mut tx = store.read().await.expect("begin read");
    let got = tx.customers().get(tenant, &c1).await.expect("get").expect("exists");
    assert_eq!(got.status, CustomerStatus::Inactive);
    assert_eq!(got.updated_at, T0.plus_millis(100));
    assert_eq!(got.created_at, T0.plus_millis(1));
    assert_eq!(got.display_name.as_deref(), Some("Customer c-1"));
    assert_eq!(tx.customers().get(TenantId(new_id()), &c1).await.expect("get"), None);
    let c0 = CustomerRef::parse("c-0").expect("valid");
    let first = tx.customers().get(tenant, &c0).await.expect("get").expect("exists");
    assert_eq!(first.created_at, T0, "the duplicate did not replace the original");
    let page1 = tx.customers().list(tenant, &CustomerFilter::default(), page(1, 2)).await.expect("list");
    assert_eq!(page1.total, 5);
    let refs: Vec<_> = page1.items.iter().map(|c| c.customer_ref.as_str().to_owned()).collect();
    assert_eq!(refs, ["c-2", "c-3"], "oldest first");
    let last = tx.customers().list(tenant, &CustomerFilter::default(), page(2, 2)).await.expect("list");
    assert_eq!((last.total, last.items.len()), (5, 1));
    let beyond = tx.customers().list(tenant, &CustomerFilter::default(), page(9, 2)).await.expect("list");
    assert_eq!((beyond.total, beyond.items.len()), (5, 0));
    let inactive = CustomerFilter { status: Some(CustomerStatus::Inactive) };
    let listed = tx.customers().list(tenant, &inactive, page(0, 10)).await.expect("list");
    assert_eq!((listed.total, listed.items.len()), (1, 1));
    assert_eq!(listed.items[0], got);
    // A read transaction refuses writes.
    assert!(tx.customers().insert(&customer(tenant, "c-9", T0)).await.is_err());
}

async fn get_for_update_serialises_changes_of_one_customer(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let tenant = TenantId(new_id());
    let reference = CustomerRef::parse("c-1").expect("valid");
    let mut tx = fx.store.write().await.expect("begin");
    tx.customers().insert(&customer(tenant, "c-1", T0)).await.expect("insert");
    let held = tx.customers().get_for_update(tenant, &reference).await.expect("get");
    assert_eq!(held.map(|c| c.status), Some(CustomerStatus::Active));
    let missing = CustomerRef::parse("c-2").expect("valid");
    assert_eq!(tx.customers().get_for_update(tenant, &missing).await.expect("get"), None);
    assert_eq!(tx.customers().get_for_update(TenantId(new_id()), &reference).await.expect("get"), None);
    tx.commit().await.expect("commit");

    // The first change holds the customer while it works, so the second reads the customer only
    // once the first committed, and starts from it.
    let (first, second) = (reference.clone(), reference.clone());
    common::second_change_waits(
        &fx.store,
        move |tx| {
            Box::pin(async move {
                let got = tx.customers().get_for_update(tenant, &first).await.expect("get").expect("exists");
                assert_eq!(got.status, CustomerStatus::Active);
                first
            })
        },
        move |tx, reference| {
            Box::pin(async move {
                let inactive = T0.plus_millis(1);
                tx.customers().set_status(tenant, &reference, CustomerStatus::Inactive, inactive).await.expect("set");
            })
        },
        move |tx| {
            Box::pin(async move {
                let got = tx.customers().get_for_update(tenant, &second).await.expect("get").expect("exists");
                assert_eq!(got.status, CustomerStatus::Inactive, "the second change sees the first one's outcome");
                assert_eq!(got.updated_at, T0.plus_millis(1));
                tx.customers()
                    .set_status(tenant, &second, CustomerStatus::Active, T0.plus_millis(2))
                    .await
                    .expect("set");
            })
        },
    )
    .await;

    let mut tx = fx.store.read().await.expect("begin read");
    let got = tx.customers().get(tenant, &reference).await.expect("get").expect("exists");
    assert_eq!((got.status, got.updated_at), (CustomerStatus::Active, T0.plus_millis(2)));
}

// ---------------------------------------------------------------------------------------------
// Events

backends!(events_page_newest_first_by_keyset);

async fn events_page_newest_first_by_keyset(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let tenant = TenantId(new_id());
    let mut tx = fx.store.write().await.expect("begin");
    let mut ids = Vec::new();
    let mut events = Vec::new();
    for i in 0..6 {
        let event = Event {
            id: new_id(),
            tenant_id: tenant,
            event_type: if i % 2 == 0 { "customer.status_changed" } else { "webhook.test" }.to_owned(),
            // Two events per instant so that the id breaks ties.
            occurred_at: T0.plus_millis(i / 2),
            correlation_id: Some(format!("corr-{i}")),
            idempotency_key: if i == 0 { Some("key-0".into()) } else { None },
            resource: ResourceRef::new("customer", format!("c-{i}")),
            data: serde_json::json!({ "i": i, "nested": { "ok": true } }),
            dispatched_at: None,
        };
        tx.events().append(&event).await.expect("append");
        ids.push((event.occurred_at, event.id));
        events.push(event);
    }
    // Another tenant's event is never listed.
    let foreign = Event { id: new_id(), tenant_id: TenantId(new_id()), ..events[0].clone() };
    tx.events().append(&foreign).await.expect("append");
    // Appending an event twice conflicts and leaves the transaction usable.
    let twice = tx.events().append(&events[0]).await;
    assert!(matches!(twice, Err(StoreError::Conflict(_))), "{twice:?}");
    assert_eq!(tx.events().get(tenant, events[0].id).await.expect("get").as_ref(), Some(&events[0]));
    tx.commit().await.expect("commit");
    ids.sort();
    ids.reverse();

    let mut tx = fx.store.read().await.expect("begin read");
    let all = EventFilter::default();
    let first = tx.events().list(tenant, &all, KeysetRequest { after: None, limit: 4 }).await.expect("list");
    assert_eq!(first.len(), 4);
    let after = first.last().map(|e| KeysetPosition { at_micros: e.occurred_at.as_micros(), id: e.id });
    let rest = tx.events().list(tenant, &all, KeysetRequest { after, limit: 4 }).await.expect("list");
    assert_eq!(rest.len(), 2);
    let seen: Vec<_> = first.iter().chain(&rest).map(|e| (e.occurred_at, e.id)).collect();
    assert_eq!(seen, ids, "newest first, then by id");
    let after = rest.last().map(|e| KeysetPosition { at_micros: e.occurred_at.as_micros(), id: e.id });
    assert!(tx.events().list(tenant, &all, KeysetRequest { after, limit: 4 }).await.expect("list").is_empty());
    // Every field round-trips.
    let stored: Vec<Event> = first.iter().chain(&rest).cloned().collect();
    for event in &events {
        assert_eq!(stored.iter().find(|e| e.id == event.id), Some(event));
    }

    let typed = EventFilter {
        event_type: Some("webhook.test".into()),
        from: Some(T0.plus_millis(1)),
        to: None,
        ..Default::default()
    };
    let got = tx.events().list(tenant, &typed, KeysetRequest { after: None, limit: 10 }).await.expect("list");
    assert_eq!(got.iter().map(|e| e.id).collect::<Vec<_>>(), [events[5].id, events[3].id]);
    let window = EventFilter {
        event_type: None,
        from: Some(T0.plus_millis(1)),
        to: Some(T0.plus_millis(2)),
        ..Default::default()
    };
    let got = tx.events().list(tenant, &window, KeysetRequest { after: None, limit: 10 }).await.expect("list");
    assert_eq!(got.len(), 2, "from is inclusive, to exclusive");
    assert!(got.iter().all(|e| e.occurred_at == T0.plus_millis(1)));
    let id = events[5].id;
    assert_eq!(tx.events().get(tenant, id).await.expect("get").map(|e| e.id), Some(id));
    assert_eq!(tx.events().get(TenantId(new_id()), id).await.expect("get"), None);
    drop(tx);

    let mut tx = fx.store.write().await.expect("begin");
    let other = events[4].id;
    let marked = tx.events().mark_dispatched(&[(tenant, id), (tenant, other)], T0.plus_millis(10)).await.expect("mark");
    assert_eq!(marked.iter().map(|e| e.id).collect::<Vec<_>>(), [id, other], "in the order asked");
    assert!(marked.iter().all(|e| e.dispatched_at == Some(T0.plus_millis(10))));
    let again = [(tenant, id), (tenant, new_id()), (TenantId(new_id()), events[3].id)];
    let marked = tx.events().mark_dispatched(&again, T0.plus_millis(11)).await.expect("mark twice");
    assert!(marked.is_empty(), "marked already, unknown, or another organisation's: {marked:?}");
    let event = tx.events().get(tenant, id).await.expect("get").expect("exists");
    assert_eq!(event.dispatched_at, Some(T0.plus_millis(10)));
    tx.commit().await.expect("commit");
}

// ---------------------------------------------------------------------------------------------
// Audit

backends!(
    audit_lists_filter_sort_and_search,
    audit_search_ignores_case_beyond_ascii,
    audit_sorts_nulls_first_ascending_and_last_descending,
    audit_batches_walk_every_sort_in_the_lists_order_without_gaps_or_repeats,
    audit_counts_carry_a_sealed_count_forward_exactly,
);

/// Seals the tenant's unsealed records (oldest first) up to `limit` into one block, as the
/// sealer would (the store checks no hash).
async fn seal_some(fx: &Fixture, tenant: TenantId, number: i64, first_seq: i64, limit: u32) -> i64 {
    let mut tx = fx.store.write().await.expect("begin");
    let records = tx.audit().unsealed(Some(tenant), limit).await.expect("unsealed");
    let seals: Vec<(uuid::Uuid, AuditSeal)> = records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            (r.id, AuditSeal { chain_seq: first_seq + i as i64, block_number: number, record_hash: "00".repeat(32) })
        })
        .collect();
    let block = AuditBlock {
        chain_id: tenant.as_uuid(),
        number,
        previous_hash: "00".repeat(32),
        hash: format!("{number:064}"),
        first_seq,
        record_count: seals.len() as i64,
        sealed_at: T0,
        head_signature: String::new(),
    };
    tx.audit().seal_block(Some(tenant), &block, &seals).await.expect("seal");
    tx.commit().await.expect("commit");
    first_seq + seals.len() as i64
}

/// A filter's count over sealed records, kept from an earlier read, plus what was sealed or
/// written since, is the filter's exact total; and it is what the total is made of (a count
/// kept wrong shows through), so the short path is the one taken.
async fn audit_counts_carry_a_sealed_count_forward_exactly(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let tenant = TenantId(new_id());
    let write = |range: std::ops::Range<i64>| {
        let fx = &fx;
        async move {
            let mut tx = fx.store.write().await.expect("begin");
            for i in range {
                let action = if i % 2 == 0 { "customer.create" } else { "customer.update" };
                tx.audit().record(&audit_record(Some(tenant), i, Some("alice"), action)).await.expect("record");
            }
            tx.commit().await.expect("commit");
        }
    };
    let filters = [
        AuditFilter::default(),
        AuditFilter { action: Some("customer.create".into()), ..AuditFilter::default() },
        AuditFilter { query: Some("CUST_1".into()), ..AuditFilter::default() },
    ];
    let full = |filter: &AuditFilter| {
        let fx = &fx;
        let filter = filter.clone();
        async move {
            let mut tx = fx.store.read().await.expect("begin");
            tx.audit().count(tenant, &filter, None).await.expect("count")
        }
    };
    write(0..12).await;
    let mut next_seq = seal_some(&fx, tenant, 1, 1, 8).await;
    let mut kept = Vec::new();
    for filter in &filters {
        let counted = full(filter).await;
        assert_eq!(counted.sealed.through_seq, 8);
        kept.push(counted.sealed);
    }
    // Written since, sealed since, and both.
    for (block, more) in [(2, 12..15), (3, 15..20)] {
        write(more).await;
        next_seq = seal_some(&fx, tenant, block, next_seq, 4).await;
        for (filter, known) in filters.iter().zip(kept.iter_mut()) {
            let exact = full(filter).await;
            let mut tx = fx.store.read().await.expect("begin");
            let carried = tx.audit().count(tenant, filter, Some(*known)).await.expect("count");
            assert_eq!(carried, exact, "{filter:?} carried from {known:?}");
            let listed = tx.audit().list(tenant, filter, &[], page(0, 100)).await.expect("list");
            assert_eq!(listed.total, exact.total, "{filter:?}");
            assert_eq!(listed.items.len() as u64, exact.total, "{filter:?}");
            *known = carried.sealed;
        }
    }
    let mut tx = fx.store.read().await.expect("begin");
    let known = kept[0];
    let skewed = SealedCount { count: known.count + 1_000, ..known };
    let total = full(&filters[0]).await.total;
    assert_eq!(tx.audit().count(tenant, &filters[0], Some(skewed)).await.expect("count").total, total + 1_000);
    // A count from beyond this chain's head (another store's) is not carried.
    let ahead = SealedCount { through_seq: next_seq + 5, count: 3 };
    assert_eq!(tx.audit().count(tenant, &filters[0], Some(ahead)).await.expect("count").total, total);
}

fn audit_record(tenant: Option<TenantId>, i: i64, actor: Option<&str>, action: &str) -> AuditRecord {
    AuditRecord {
        id: new_id(),
        tenant_id: tenant,
        occurred_at: T0.plus_millis(i),
        created_at: T0.plus_millis(i),
        action: action.to_owned(),
        category: "CUSTOMERS".to_owned(),
        source: AuditSource::Api,
        actor_id: actor.map(str::to_owned),
        resource_type: "customer".to_owned(),
        resource_id: Some(format!("Cust_{i}")),
        outcome: if i == 3 { AuditOutcome::Failure } else { AuditOutcome::Success },
        request_id: Some(format!("req-{i}")),
        idempotency_key: None,
        http_status: Some(if i == 3 { 409 } else { 201 }),
        detail: serde_json::json!({ "i": i }),
        seal: None,
    }
}

async fn audit_lists_filter_sort_and_search(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let tenant = TenantId(new_id());
    let mut tx = fx.store.write().await.expect("begin");
    let mut records = Vec::new();
    for i in 0..5 {
        let r = audit_record(Some(tenant), i, Some(if i < 3 { "alice" } else { "bob" }), "customer.create");
        tx.audit().record(&r).await.expect("record");
        records.push(r);
    }
    let platform = audit_record(None, 9, Some("root"), "tenant.create");
    tx.audit().record(&platform).await.expect("record platform");
    // Recording one id twice conflicts and leaves the transaction usable.
    let twice = tx.audit().record(&records[0]).await;
    assert!(matches!(twice, Err(StoreError::Conflict(_))), "{twice:?}");
    tx.commit().await.expect("commit");
    // One an earlier transaction recorded conflicts too: at the call, or at the latest at the
    // commit (PostgreSQL holds the row back until the transaction's next statement).
    let again = {
        let mut tx = fx.store.write().await.expect("begin");
        match tx.audit().record(&records[1]).await {
            Ok(()) => tx.commit().await,
            Err(error) => Err(error),
        }
    };
    assert!(matches!(again, Err(StoreError::Conflict(_))), "{again:?}");

    let mut tx = fx.store.read().await.expect("begin read");
    let got = tx.audit().get(tenant, records[3].id).await.expect("get").expect("exists");
    assert_eq!(got, records[3]);
    assert_eq!(tx.audit().get(TenantId(new_id()), records[3].id).await.expect("get"), None);

    let ids = |page: &tokenops_domain::paging::Page<AuditRecord>| page.items.iter().map(|r| r.id).collect::<Vec<_>>();
    let newest_first = [SortKey { column: "occurred_at", direction: SortDirection::Desc }];
    let all = AuditFilter::default();
    let first = tx.audit().list(tenant, &all, &newest_first, page(0, 2)).await.expect("list");
    assert_eq!(first.total, 5);
    assert_eq!(ids(&first), [records[4].id, records[3].id]);
    let second = tx.audit().list(tenant, &all, &newest_first, page(1, 2)).await.expect("list");
    assert_eq!(ids(&second), [records[2].id, records[1].id]);
    let third = tx.audit().list(tenant, &all, &newest_first, page(2, 2)).await.expect("list");
    assert_eq!((third.total, ids(&third)), (5, vec![records[0].id]));
    let oldest_first = [SortKey { column: "occurred_at", direction: SortDirection::Asc }];
    let listed = tx.audit().list(tenant, &all, &oldest_first, page(0, 10)).await.expect("list");
    assert_eq!(ids(&listed), records.iter().map(|r| r.id).collect::<Vec<_>>());
    // Two keys: actor descending, then oldest first.
    let by_actor_then_time = [
        SortKey { column: "actor_id", direction: SortDirection::Desc },
        SortKey { column: "occurred_at", direction: SortDirection::Asc },
    ];
    let listed = tx.audit().list(tenant, &all, &by_actor_then_time, page(0, 10)).await.expect("list");
    let expected: Vec<_> = [3, 4, 0, 1, 2].iter().map(|&i| records[i].id).collect();
    assert_eq!(ids(&listed), expected);

    let by_actor = AuditFilter { actor_ids: vec!["bob".into(), "carol".into()], ..AuditFilter::default() };
    let listed = tx.audit().list(tenant, &by_actor, &[], page(0, 10)).await.expect("list");
    assert_eq!(listed.total, 2);
    assert!(listed.items.iter().all(|r| r.actor_id.as_deref() == Some("bob")));

    let window = AuditFilter {
        occurred_from: Some(T0.plus_millis(1)),
        occurred_to: Some(T0.plus_millis(4)),
        action: Some("customer.create".into()),
        source: Some("API".into()),
        resource_type: Some("customer".into()),
        ..AuditFilter::default()
    };
    let listed = tx.audit().list(tenant, &window, &oldest_first, page(0, 10)).await.expect("list");
    assert_eq!(ids(&listed), [records[1].id, records[2].id, records[3].id], "from inclusive, to exclusive");
    let exact =
        AuditFilter { request_id: Some("req-2".into()), resource_id: Some("Cust_2".into()), ..AuditFilter::default() };
    let listed = tx.audit().list(tenant, &exact, &[], page(0, 10)).await.expect("list");
    assert_eq!(ids(&listed), [records[2].id]);
    let nothing = AuditFilter { action: Some("tenant.create".into()), ..AuditFilter::default() };
    let listed = tx.audit().list(tenant, &nothing, &[], page(0, 10)).await.expect("list");
    assert_eq!((listed.total, listed.items.len()), (0, 0), "the platform record is not the tenant's");

    // Case-insensitive prefix over identifiers; LIKE wildcards in the query are literal.
    let search = |q: &str| AuditFilter { query: Some(q.to_owned()), ..AuditFilter::default() };
    let listed = tx.audit().list(tenant, &search("cUsT_2"), &[], page(0, 10)).await.expect("list");
    assert_eq!(ids(&listed), [records[2].id]);
    let listed = tx.audit().list(tenant, &search("ALI"), &[], page(0, 10)).await.expect("list");
    assert_eq!(listed.total, 3);
    let prefix = records[1].id.to_string()[..8].to_uppercase();
    let listed = tx.audit().list(tenant, &search(&prefix), &[], page(0, 10)).await.expect("list");
    assert!(listed.items.iter().any(|r| r.id == records[1].id));
    let listed = tx.audit().list(tenant, &search("customer.cr"), &[], page(0, 10)).await.expect("list");
    assert_eq!(listed.total, 5, "the action is searched too");
    let listed = tx.audit().list(tenant, &search("cust%"), &[], page(0, 10)).await.expect("list");
    assert_eq!(listed.total, 0);
    let listed = tx.audit().list(tenant, &search("cust_"), &[], page(0, 10)).await.expect("list");
    assert_eq!(listed.total, 5, "'_' matches itself");
    let listed = tx.audit().list(tenant, &search("ust_"), &[], page(0, 10)).await.expect("list");
    assert_eq!(listed.total, 0, "a prefix, not a substring");
    let listed = tx.audit().list(tenant, &search("req-"), &[], page(0, 10)).await.expect("list");
    assert_eq!(listed.total, 5, "the platform record is not the tenant's");

    // An ASCII query is looked up by its folded range first: a successor that folds ('@' + 1 is
    // 'A', compared as 'a') only widens the range, and the exact prefix still decides; a query
    // beyond ASCII is matched by its case forms alone.
    drop(tx);
    let mut write = fx.store.write().await.expect("begin");
    for (i, actor) in [(10, "Zed@Bank"), (11, "zed[bank"), (12, "zedabank"), (13, "Émile")] {
        write.audit().record(&audit_record(Some(tenant), i, Some(actor), "customer.update")).await.expect("record");
    }
    write.commit().await.expect("commit");
    let mut tx = fx.store.read().await.expect("begin read");
    let actors = |listed: &tokenops_domain::paging::Page<AuditRecord>| {
        listed.items.iter().map(|r| r.actor_id.clone().unwrap_or_default()).collect::<Vec<_>>()
    };
    let listed = tx.audit().list(tenant, &search("zED@"), &[], page(0, 10)).await.expect("list");
    assert_eq!((listed.total, actors(&listed)), (1, vec!["Zed@Bank".to_owned()]));
    let listed = tx.audit().list(tenant, &search("éMI"), &[], page(0, 10)).await.expect("list");
    assert_eq!((listed.total, actors(&listed)), (1, vec!["Émile".to_owned()]));
}

/// An export's batches, two records at a time, meet every record once and in the list's order:
/// ties on the sort key (several records in one microsecond, one actor), missing actors, one
/// direction and mixed ones, and a filter.
async fn audit_batches_walk_every_sort_in_the_lists_order_without_gaps_or_repeats(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let tenant = TenantId(new_id());
    let mut tx = fx.store.write().await.expect("begin");
    for i in 0..9 {
        let actor = [Some("alice"), None, Some("bob")][i % 3];
        let mut r = audit_record(
            Some(tenant),
            (i / 3) as i64,
            actor,
            if i % 2 == 0 { "customer.create" } else { "customer.update" },
        );
        r.outcome = AuditOutcome::Success;
        tx.audit().record(&r).await.expect("record");
    }
    tx.commit().await.expect("commit");
    let key = |column: &'static str, direction: SortDirection| SortKey { column, direction };
    let (asc, desc) = (SortDirection::Asc, SortDirection::Desc);
    let sorts: Vec<Vec<SortKey>> = vec![
        vec![key("occurred_at", desc)],
        vec![key("occurred_at", asc)],
        vec![key("actor_id", asc)],
        vec![key("actor_id", desc), key("occurred_at", asc)],
        vec![key("action", asc), key("resource_id", desc)],
    ];
    let filters =
        [AuditFilter::default(), AuditFilter { action: Some("customer.create".into()), ..AuditFilter::default() }];
    let mut tx = fx.store.read().await.expect("begin read");
    for sort in &sorts {
        for filter in &filters {
            let listed = tx.audit().list(tenant, filter, sort, page(0, 100)).await.expect("list");
            let mut walked = Vec::new();
            let mut last: Option<AuditRecord> = None;
            loop {
                let batch = tx.audit().batch_after(tenant, filter, sort, last.as_ref(), 2).await.expect("batch");
                assert!(batch.len() <= 2);
                walked.extend(batch.iter().map(|r| r.id));
                match batch.last() {
                    Some(r) if batch.len() == 2 => last = Some(r.clone()),
                    _ => break,
                }
            }
            let expected: Vec<_> = listed.items.iter().map(|r| r.id).collect();
            assert_eq!(walked, expected, "sort {sort:?}, filter {filter:?}");
        }
    }
}

async fn audit_search_ignores_case_beyond_ascii(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let tenant = TenantId(new_id());
    let mut record = audit_record(Some(tenant), 0, Some("Émile-Ω"), "customer.create");
    record.resource_id = Some("Straße-1".into());
    record.request_id = Some("Req*[1]?(x)\\d".into());
    let mut tx = fx.store.write().await.expect("begin");
    tx.audit().record(&record).await.expect("record");
    tx.commit().await.expect("commit");

    let mut tx = fx.store.read().await.expect("begin read");
    let mut found = Vec::new();
    let queries = [
        "émi",
        "ÉMI",
        "Émi",
        "éMILE-ω",
        "émile-Ω",
        "sTRASSE",
        "STRAß",
        "straße-1",
        "req*[1]?(X)\\D",
        "req*",
        "re*",
        "req?",
        "%",
        "_",
        ".",
        ".*",
        "(",
        "\\",
        "[",
        "]",
        "?",
        "*",
    ];
    for query in queries {
        let filter = AuditFilter { query: Some(query.to_owned()), ..AuditFilter::default() };
        let listed = tx.audit().list(tenant, &filter, &[], page(0, 10)).await.expect("list");
        assert!(listed.items.iter().all(|r| r.id == record.id));
        if listed.total == 1 {
            found.push(query);
        }
    }
    // Letters match in any case, Unicode included (one character to one: "ß" is not "SS");
    // everything else, wildcard characters of LIKE, GLOB or regular expressions included,
    // matches only itself.
    assert_eq!(found, ["émi", "ÉMI", "Émi", "éMILE-ω", "émile-Ω", "STRAß", "straße-1", "req*[1]?(X)\\D", "req*"]);
}

async fn audit_sorts_nulls_first_ascending_and_last_descending(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let tenant = TenantId(new_id());
    let mut tx = fx.store.write().await.expect("begin");
    let actors = [Some("bob"), None, Some("alice"), None, Some("carol")];
    let mut records = Vec::new();
    for (i, actor) in (0..).zip(actors) {
        let mut r = audit_record(Some(tenant), i, actor, "customer.update");
        if actor.is_none() {
            // A system action: no actor, no resource id.
            r.resource_id = None;
            r.source = AuditSource::Worker;
        }
        tx.audit().record(&r).await.expect("record");
        records.push(r);
    }
    tx.commit().await.expect("commit");

    let mut tx = fx.store.read().await.expect("begin read");
    let list = |column: &'static str, direction: SortDirection| {
        [SortKey { column, direction }, SortKey { column: "occurred_at", direction: SortDirection::Asc }]
    };
    let order = |page: tokenops_domain::paging::Page<AuditRecord>| {
        page.items.iter().map(|r| records.iter().position(|x| x.id == r.id).expect("known")).collect::<Vec<_>>()
    };
    let all = AuditFilter::default();

    let asc = tx.audit().list(tenant, &all, &list("actor_id", SortDirection::Asc), page(0, 10)).await.expect("list");
    assert_eq!(order(asc), [1, 3, 2, 0, 4], "nulls first ascending");
    let desc = tx.audit().list(tenant, &all, &list("actor_id", SortDirection::Desc), page(0, 10)).await.expect("list");
    assert_eq!(order(desc), [4, 0, 2, 1, 3], "nulls last descending");
    let asc = tx.audit().list(tenant, &all, &list("resource_id", SortDirection::Asc), page(0, 10)).await.expect("list");
    assert_eq!(order(asc), [1, 3, 0, 2, 4]);

    // Paging keeps the order across pages.
    let sort = list("actor_id", SortDirection::Desc);
    let mut paged = Vec::new();
    for n in 0..3 {
        let listed = tx.audit().list(tenant, &all, &sort, page(n, 2)).await.expect("list");
        assert_eq!(listed.total, 5);
        paged.extend(order(listed));
    }
    assert_eq!(paged, [4, 0, 2, 1, 3]);

    // Without sort keys the id breaks the tie, newest id first.
    let listed = tx.audit().list(tenant, &all, &[], page(0, 10)).await.expect("list");
    let mut expected: Vec<Uuid> = records.iter().map(|r| r.id).collect();
    expected.sort();
    expected.reverse();
    assert_eq!(listed.items.iter().map(|r| r.id).collect::<Vec<_>>(), expected);
    let worker = AuditFilter { source: Some("WORKER".into()), ..AuditFilter::default() };
    let listed = tx.audit().list(tenant, &worker, &list("occurred_at", SortDirection::Asc), page(0, 10)).await;
    assert_eq!(order(listed.expect("list")), [1, 3]);
}

// ---------------------------------------------------------------------------------------------
// Idempotency

backends!(idempotency_keys_claim_complete_and_fence, idempotency_prune_drops_old_records_and_abandoned_claims);

fn response(id: &str) -> StoredResponse {
    StoredResponse {
        status: 201,
        body: serde_json::json!({ "id": id, "list": [1, 2], "z": null, "a": "first" }),
        headers: vec![("Location".into(), format!("/tenants/{id}")), ("X-Other".into(), "1".into())],
        resource_id: Some(id.into()),
    }
}

async fn idempotency_keys_claim_complete_and_fence(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let platform = IdempotencyScope { tenant: None, operation: "tenant.create".into(), key: "k1".into() };
    let tenant = IdempotencyScope { tenant: Some(TenantId(new_id())), ..platform.clone() };
    let other_operation = IdempotencyScope { operation: "tenant.update".into(), ..platform.clone() };
    let (token, other) = (new_id(), new_id());

    let mut tx = fx.store.write().await.expect("begin");
    assert_eq!(tx.idempotency().get(&platform).await.expect("get"), None);
    tx.idempotency().insert_claim(&platform, "hash", token, T0.plus_millis(1_000), T0).await.expect("claim");
    tx.idempotency().insert_claim(&tenant, "hash", token, T0.plus_millis(1_000), T0).await.expect("claim tenant");
    tx.idempotency()
        .insert_claim(&other_operation, "hash", token, T0.plus_millis(1_000), T0)
        .await
        .expect("same key, other operation");
    let again = tx.idempotency().insert_claim(&platform, "hash-2", other, T0.plus_millis(1_000), T0).await;
    assert!(matches!(again, Err(StoreError::Conflict(_))), "{again:?}");
    // Still usable after the conflict: the caller reads the holder.
    let held = tx.idempotency().get(&platform).await.expect("get").expect("exists");
    assert_eq!(held.state, IdempotencyState::InFlight { token, lease_until: T0.plus_millis(1_000) });
    assert_eq!((held.request_hash.as_str(), held.created_at), ("hash", T0));
    assert_eq!(held.scope, platform);
    tx.commit().await.expect("commit");

    let mut tx = fx.store.write().await.expect("begin");
    // Releasing with a token that does not hold the key changes nothing; taking over is
    // releasing the holder's claim and claiming anew.
    tx.idempotency().release(&platform, other).await.expect("release by a stranger");
    assert!(tx.idempotency().get(&platform).await.expect("get").is_some());
    tx.idempotency().release(&platform, token).await.expect("release");
    assert_eq!(tx.idempotency().get(&platform).await.expect("get"), None);
    tx.idempotency()
        .insert_claim(&platform, "hash", other, T0.plus_millis(5_000), T0.plus_millis(1))
        .await
        .expect("claim anew");
    let stored = response("t-1");
    assert!(!tx.idempotency().complete(&platform, token, &stored, T0).await.expect("fenced"));
    assert!(tx.idempotency().complete(&platform, other, &stored, T0.plus_millis(2)).await.expect("complete"));
    assert!(
        !tx.idempotency().complete(&platform, other, &response("t-2"), T0.plus_millis(3)).await.expect("twice"),
        "a completed key is not completed again"
    );
    tx.idempotency().release(&platform, other).await.expect("release a completed key");
    let done = tx.idempotency().get(&platform).await.expect("get").expect("a completed key is not released");
    assert_eq!(done.state, IdempotencyState::Completed(stored.clone()));
    assert_eq!(done.created_at, T0.plus_millis(1));
    // The body replays with its keys in their original order.
    let IdempotencyState::Completed(replayed) = &done.state else { unreachable!() };
    assert_eq!(replayed.body.to_string(), stored.body.to_string());
    // The completed record hands back the resource id its write named.
    assert_eq!(replayed.resource_id.as_deref(), Some("t-1"));
    // A write that named no resource hands back none.
    let unnamed = StoredResponse { resource_id: None, ..response("t-3") };
    assert!(tx.idempotency().complete(&other_operation, token, &unnamed, T0).await.expect("complete"));
    let done = tx.idempotency().get(&other_operation).await.expect("get").expect("completed");
    assert_eq!(done.state, IdempotencyState::Completed(unnamed));

    tx.idempotency().release(&tenant, token).await.expect("release");
    assert_eq!(tx.idempotency().get(&tenant).await.expect("get"), None);
    assert!(tx.idempotency().get(&other_operation).await.expect("get").is_some(), "scopes are independent");
    tx.commit().await.expect("commit");
}

async fn idempotency_prune_drops_old_records_and_abandoned_claims(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let scope = |key: &str, tenant: Option<TenantId>| IdempotencyScope {
        tenant,
        operation: "customer.create".into(),
        key: key.into(),
    };
    let tenant = Some(TenantId(new_id()));
    let cutoff = T0.plus_millis(10_000);
    let old_done = scope("old-done", None);
    let old_done_tenant = scope("old-done", tenant);
    let recent_done = scope("recent-done", tenant);
    let done_at_cutoff = scope("done-at-cutoff", tenant);
    let abandoned = scope("abandoned", tenant);
    let abandoned_platform = scope("abandoned", None);
    let live = scope("live", tenant);
    let lease_ends_at_cutoff = scope("lease-ends-at-cutoff", tenant);

    let mut tx = fx.store.write().await.expect("begin");
    let token = new_id();
    let claims = [
        (&old_done, (T0, T0.plus_millis(1_000))),
        (&old_done_tenant, (T0.plus_millis(9_999), T0.plus_millis(10_500))),
        (&recent_done, (cutoff.plus_millis(1), cutoff.plus_millis(1_000))),
        (&done_at_cutoff, (cutoff, cutoff.plus_millis(1_000))),
        (&abandoned, (T0, T0.plus_millis(5_000))),
        (&abandoned_platform, (T0.plus_millis(9_000), cutoff.minus_millis(1))),
        // Created long before the cutoff, but its holder is still working on it.
        (&live, (T0, cutoff.plus_millis(60_000))),
        (&lease_ends_at_cutoff, (T0, cutoff)),
    ];
    for (scope, (created, lease_until)) in &claims {
        tx.idempotency().insert_claim(scope, "hash", token, *lease_until, *created).await.expect("claim");
    }
    for done in [&old_done, &old_done_tenant, &recent_done, &done_at_cutoff] {
        // Completed after the cutoff: age counts from the creation.
        assert!(tx.idempotency().complete(done, token, &response("x"), cutoff.plus_millis(5)).await.expect("complete"));
    }
    tx.commit().await.expect("commit");

    let mut tx = fx.store.write().await.expect("begin");
    assert_eq!(tx.idempotency().prune(T0).await.expect("prune"), 0, "nothing ended before T0");
    assert_eq!(tx.idempotency().prune(cutoff).await.expect("prune"), 4);
    for gone in [&old_done, &old_done_tenant, &abandoned, &abandoned_platform] {
        assert_eq!(tx.idempotency().get(gone).await.expect("get"), None, "{gone:?} pruned");
    }
    for kept in [&recent_done, &done_at_cutoff, &live, &lease_ends_at_cutoff] {
        assert!(tx.idempotency().get(kept).await.expect("get").is_some(), "{kept:?} kept");
    }
    assert_eq!(tx.idempotency().prune(cutoff).await.expect("prune again"), 0);
    tx.commit().await.expect("commit");

    // A pruned key can be claimed afresh; the live claim still fences out others.
    let mut tx = fx.store.write().await.expect("begin");
    tx.idempotency()
        .insert_claim(&abandoned, "hash", new_id(), cutoff.plus_millis(1_000), cutoff)
        .await
        .expect("claim");
    let taken = tx.idempotency().insert_claim(&live, "hash", new_id(), cutoff.plus_millis(1_000), cutoff).await;
    assert!(matches!(taken, Err(StoreError::Conflict(_))), "{taken:?}");
    tx.commit().await.expect("commit");
    assert_eq!(fx.db.count("idempotency_records", "").await, 5);
}

// ---------------------------------------------------------------------------------------------
// Settings

backends!(settings_keep_the_first_value);

async fn settings_keep_the_first_value(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let mut tx = fx.store.write().await.expect("begin");
    assert_eq!(tx.settings().get("cursor_key").await.expect("get"), None);
    assert_eq!(tx.settings().get_or_insert("cursor_key", "first").await.expect("insert"), "first");
    assert_eq!(tx.settings().get_or_insert("cursor_key", "second").await.expect("insert"), "first");
    tx.commit().await.expect("commit");
    let mut tx = fx.store.read().await.expect("begin read");
    assert_eq!(tx.settings().get("cursor_key").await.expect("get").as_deref(), Some("first"));
    assert_eq!(tx.settings().get("other").await.expect("get"), None);
    drop(tx);

    // Two writers racing for a new setting (two nodes starting together) agree on one value.
    let peer = fx.peer().await;
    let race = |store: Arc<dyn Store>, value: &'static str| {
        tokio::spawn(async move {
            let mut tx = store.write().await.expect("begin");
            let stored = tx.settings().get_or_insert("signing_key", value).await.expect("insert");
            tx.commit().await.expect("commit");
            stored
        })
    };
    let (a, b) = (race(fx.store.clone(), "a"), race(peer.clone(), "b"));
    let (a, b) = (a.await.expect("writer a"), b.await.expect("writer b"));
    assert_eq!(a, b, "both writers see the first writer's value");
    assert!(a == "a" || a == "b");
    let mut tx = fx.store.read().await.expect("begin read");
    assert_eq!(tx.settings().get("signing_key").await.expect("get"), Some(a));
    drop(tx);
    if backend == Backend::Postgres {
        peer.close().await;
    }
}

/// `live_payload_values`: the payload field of every queued or running job of the kinds asked,
/// and nothing of finished jobs, other kinds, or payloads without the field.
async fn live_payload_values_name_what_queued_and_running_jobs_of_the_kinds_act_on(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let store = &*fx.store;
    let about = |kind: &str, target: &str| NewJob {
        payload: serde_json::json!({ "transactionId": target, "other": 1 }),
        ..job(kind, T0)
    };
    enqueue(store, &about("step.one", "done"), T0).await.expect("enqueued");
    let done = claim(store, T0, T0.plus_millis(30_000), 1).await.pop().expect("claimed");
    let mut tx = store.write().await.expect("begin");
    assert!(tx.jobs().complete(lease_of(&done), T0).await.expect("complete"));
    tx.commit().await.expect("commit");
    enqueue(store, &about("step.one", "running"), T0).await.expect("enqueued");
    assert_eq!(claim(store, T0, T0.plus_millis(30_000), 1).await.len(), 1);
    enqueue(store, &about("step.one", "queued"), T0).await.expect("enqueued");
    enqueue(store, &about("step.two", "later"), T0.plus_millis(60_000)).await.expect("enqueued");
    enqueue(store, &about("elsewhere", "other kind"), T0).await.expect("enqueued");
    enqueue(store, &job("step.one", T0), T0).await.expect("enqueued without the field");

    let mut tx = store.read().await.expect("begin read");
    let mut live = tx.jobs().live_payload_values(&["step.one", "step.two"], "transactionId").await.expect("live");
    live.sort();
    assert_eq!(live, vec!["later".to_owned(), "queued".to_owned(), "running".to_owned()]);
    assert_eq!(tx.jobs().live_payload_values(&["none"], "transactionId").await.expect("live"), Vec::<String>::new());
}

backends!(signing_leases_go_to_one_node_at_a_time_and_change_epoch_with_their_holder);

/// `take_signing_leases`: a wallet's lease is one node's until it expires by the store's clock;
/// its epoch stays while one node keeps it (a lapse nobody took included) and goes up when
/// another takes it.
async fn signing_leases_go_to_one_node_at_a_time_and_change_epoch_with_their_holder(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let take = |node: &'static str, wallets: &[&str], lease_ms: u64| {
        let store = fx.store.clone();
        let wallets: Vec<String> = wallets.iter().map(|w| (*w).to_owned()).collect();
        async move {
            let mut tx = store.write().await.expect("begin");
            let mut held = tx.ledger().take_signing_leases(node, &wallets, lease_ms).await.expect("take");
            tx.commit().await.expect("commit");
            held.sort();
            held
        }
    };
    let held = |pairs: &[(&str, u64)]| pairs.iter().map(|(w, e)| ((*w).to_owned(), *e)).collect::<Vec<_>>();
    assert_eq!(take("a", &["0x01", "0x02"], 60_000).await, held(&[("0x01", 1), ("0x02", 1)]));
    assert_eq!(take("b", &["0x01", "0x03"], 60_000).await, held(&[("0x03", 1)]), "0x01 is a's");
    assert_eq!(take("a", &["0x01"], 60_000).await, held(&[("0x01", 1)]), "renewed, same epoch");
    assert_eq!(take("a", &[], 60_000).await, held(&[]));

    // A short lease lapses: its holder takes it back under the same epoch, another node under
    // the next one, after which the first holder no longer has it.
    assert_eq!(take("a", &["0x04"], 100).await, held(&[("0x04", 1)]));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(take("a", &["0x04"], 100).await, held(&[("0x04", 1)]), "nobody took it meanwhile");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(take("b", &["0x04"], 60_000).await, held(&[("0x04", 2)]), "changed hands");
    assert_eq!(take("a", &["0x04", "0x02"], 60_000).await, held(&[("0x02", 1)]));
}
