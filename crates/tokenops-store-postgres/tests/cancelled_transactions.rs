//! A transaction whose caller gives up while it begins (a request cut off by its client, a job
//! stopped by shutdown) must not leave its connection inside a transaction for the next caller.
//! Set `TOKENOPS_TEST_POSTGRES_URL` to use another server.

mod common;

use common::in_fresh_schema;
use std::time::{Duration, Instant};
use tokenops_domain::Timestamp;
use tokenops_store::{NewJob, Store};

const T0: Timestamp = Timestamp::from_micros(1_800_000_000_000_000);
/// Reads given up on, each a little later than the one before.
const GIVEN_UP: u32 = 200;
/// The store's pool size.
const POOL_CONNECTIONS: usize = 10;
/// How much later each one is given up on: 200 steps span more than a `BEGIN`'s round trip.
const STEP: Duration = Duration::from_micros(4);

fn job(n: u32) -> NewJob {
    NewJob {
        kind: "probe".to_owned(),
        tenant_id: None,
        payload: serde_json::json!({ "n": n }),
        run_at: T0,
        max_attempts: 1,
        dedupe_key: None,
    }
}

/// Spins (rather than sleeps, whose granularity is a millisecond) for `delay`.
fn spin(delay: Duration) {
    let start = Instant::now();
    while start.elapsed() < delay {
        std::hint::spin_loop();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_given_up_while_it_begins_leaves_its_connection_clean() {
    in_fresh_schema(|store, _schema| async move {
        store.migrate(&tokenops_domain::SystemClock).await.expect("migrate");
        let mut given_up = 0;
        for n in 0..GIVEN_UP {
            let reader = store.clone();
            let read = tokio::spawn(async move { reader.read().await.map(drop) });
            // Spun on a blocking thread, so that this runtime's workers run the read meanwhile.
            tokio::task::spawn_blocking(move || spin(STEP * n)).await.expect("spin");
            read.abort();
            if read.await.is_err() {
                given_up += 1;
            }

            // A read-only transaction left open on a connection would refuse the write that
            // next uses it, and would hide that write from reads. As many writes at once as the
            // pool has connections use every connection.
            let mut writes = Vec::new();
            for _ in 0..POOL_CONNECTIONS {
                writes.push(store.write().await.expect("begin write"));
            }
            for mut tx in writes {
                let id = tx.jobs().enqueue(&job(n), T0).await.expect("a write after a given-up read");
                tx.commit().await.expect("commit");
                let id = id.expect("a job without a dedupe key is always enqueued");
                let mut tx = store.read().await.expect("begin read");
                let seen = tx.jobs().get(id).await.expect("a read after a given-up read");
                tx.commit().await.expect("end read");
                assert!(seen.is_some(), "job {id} was committed, so a later read sees it");
            }
        }
        assert!(given_up > 0, "some reads were given up before they began");
    })
    .await;
}
