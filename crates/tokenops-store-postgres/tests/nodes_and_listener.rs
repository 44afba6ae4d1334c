//! What only the PostgreSQL store has: several nodes on one schema (migrating together under the
//! advisory lock), stores isolated by schema, and the background LISTEN connection (reconnecting
//! after it is killed, stopping on close). The behaviour of the store traits is tested on both
//! backends by the conformance suite (`tokenops-testkit/tests/store_conformance.rs`). Set
//! `TOKENOPS_TEST_POSTGRES_URL` to use another server.

mod common;

use common::{connect, in_fresh_schema};
use std::time::{Duration, Instant};
use tokenops_domain::Timestamp;
use tokenops_store::{NewJob, Store};
use tokenops_store_postgres::{MIGRATIONS, PostgresStore};
use uuid::Uuid;

/// A fixed instant: the store never reads the clock, so the tests pass time in.
const T0: Timestamp = Timestamp::from_micros(1_800_000_000_000_000);

fn job(kind: &str) -> NewJob {
    NewJob {
        kind: kind.to_owned(),
        tenant_id: None,
        payload: serde_json::json!({ "kind": kind }),
        run_at: T0,
        max_attempts: 5,
        dedupe_key: None,
    }
}

async fn enqueue(store: &PostgresStore, new: &NewJob) -> Option<Uuid> {
    let mut tx = store.write().await.expect("begin");
    let id = tx.jobs().enqueue(new, T0).await.expect("enqueue");
    tx.commit().await.expect("commit");
    id
}

/// Waits on `store` in a task of its own; the task yields how long the wait took.
fn spawn_waiter(store: &PostgresStore, timeout: Duration) -> tokio::task::JoinHandle<Duration> {
    let store = store.clone();
    tokio::spawn(async move {
        let start = Instant::now();
        store.wait_for_jobs(timeout).await;
        start.elapsed()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_migrate_one_schema_together() {
    in_fresh_schema(|store, schema| async move {
        // Two nodes starting together: the advisory lock lets exactly one apply each migration.
        let other = connect(&schema).await;
        let (a, b) = tokio::join!(store.migrate(&tokenops_domain::SystemClock), other.migrate(&tokenops_domain::SystemClock));
        assert_eq!(a.expect("migrate") + b.expect("migrate"), MIGRATIONS.len());
        assert_eq!(store.migrate(&tokenops_domain::SystemClock).await.expect("migrate again"), 0);
        assert_eq!(other.migrate(&tokenops_domain::SystemClock).await.expect("migrate again"), 0);
        other.close().await;

        // The tables live in the store's own schema, each migration recorded once.
        let pool = sqlx::PgPool::connect(&common::url()).await.expect("connect");
        let tables: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = $1
             AND table_name IN ('customers', 'events', 'audit_records', 'idempotency_records', 'jobs', 'settings', 'schema_migrations')",
        )
        .bind(&schema)
        .fetch_one(&pool)
        .await
        .expect("count tables");
        assert_eq!(tables, 7);
        let versions: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT COUNT(*) FROM \"{schema}\".schema_migrations"
        )))
        .fetch_one(&pool)
        .await
        .expect("count migrations");
        assert_eq!(versions, i64::try_from(MIGRATIONS.len()).expect("small"));
        pool.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_in_different_schemas_are_isolated() {
    in_fresh_schema(|store, _| async move {
        in_fresh_schema(|neighbour, _| async move {
            store.migrate(&tokenops_domain::SystemClock).await.expect("migrate");
            neighbour.migrate(&tokenops_domain::SystemClock).await.expect("migrate");

            // The neighbour neither sees the job nor is woken by its enqueue (one channel per
            // schema).
            let waiter = spawn_waiter(&neighbour, Duration::from_millis(700));
            tokio::time::sleep(Duration::from_millis(100)).await;
            let id = enqueue(&store, &job("mine")).await.expect("enqueued");
            let mut tx = neighbour.write().await.expect("begin");
            assert_eq!(tx.jobs().get(id).await.expect("get"), None);
            assert!(tx.jobs().claim(T0, T0.plus_millis(1_000), 10).await.expect("claim").is_empty());
            drop(tx);
            let waited = waiter.await.expect("waiter task");
            assert!(waited >= Duration::from_millis(700), "woken by another schema's enqueue after {waited:?}");

            let mut tx = store.read().await.expect("begin read");
            assert!(tx.jobs().get(id).await.expect("get").is_some());
        })
        .await;
    })
    .await;
}

#[tokio::test]
async fn close_stops_the_listener_promptly() {
    in_fresh_schema(|store, schema| async move {
        let other = connect(&schema).await;
        let start = Instant::now();
        other.close().await;
        assert!(start.elapsed() < Duration::from_secs(5), "close took {:?}", start.elapsed());
        // A closed store's wait falls back to its timeout.
        let start = Instant::now();
        other.wait_for_jobs(Duration::from_millis(50)).await;
        assert!(start.elapsed() >= Duration::from_millis(50));
        store.ping().await.expect("the other store is unaffected");
    })
    .await;
}

/// The pids of the backends listening on the store's channel.
async fn listener_pids(admin: &sqlx::PgPool, schema: &str) -> Vec<i32> {
    sqlx::query_scalar("SELECT pid FROM pg_stat_activity WHERE query LIKE $1 AND pid <> pg_backend_pid()")
        .bind(format!("LISTEN \"tokenops_jobs_{schema}\"%"))
        .fetch_all(admin)
        .await
        .expect("list listener backends")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listener_reconnects_after_its_connection_is_killed() {
    in_fresh_schema(|store, schema| async move {
        store.migrate(&tokenops_domain::SystemClock).await.expect("migrate");
        let admin = sqlx::PgPool::connect(&common::url()).await.expect("connect");
        let before = listener_pids(&admin, &schema).await;
        assert_eq!(before.len(), 1, "exactly one listener connection for the schema");
        let killed: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
            .bind(before[0])
            .fetch_one(&admin)
            .await
            .expect("terminate the listener");
        assert!(killed);

        // The task notices, backs off and subscribes again on a new connection.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let now = listener_pids(&admin, &schema).await;
            if now.len() == 1 && now[0] != before[0] {
                break;
            }
            assert!(Instant::now() < deadline, "no new listener within 10 s (listeners: {now:?})");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        admin.close().await;

        // Re-subscribed: an enqueue on another node wakes this one through NOTIFY again.
        let waiter = spawn_waiter(&store, Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(200)).await;
        let other = connect(&schema).await;
        enqueue(&other, &job("after-reconnect")).await.expect("enqueued");
        let waited = waiter.await.expect("waiter task");
        other.close().await;
        assert!(waited < Duration::from_secs(3), "woken by NOTIFY after the reconnect (waited {waited:?})");
    })
    .await;
}
