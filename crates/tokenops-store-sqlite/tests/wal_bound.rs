//! The WAL's bound: under a steady load some reader always reads from the WAL, so SQLite never
//! starts it over by itself; past its bound the store does, and what was written stays.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokenops_domain::Timestamp;
use tokenops_store::{NewJob, Store};
use tokenops_store_sqlite::SqliteStore;
use uuid::Uuid;

const T0: Timestamp = Timestamp::from_micros(1_800_000_000_000_000);
/// The bound the store is opened with, far below the default, to see it hold in seconds.
const BOUND: u64 = 1024 * 1024;
/// Jobs written, each with a payload of about a kilobyte: some 20 MiB of WAL in all.
const JOBS: usize = 8_000;
const PER_WRITE: usize = 20;
/// Past the bound, an attempt is made after each 1,000 frames (4 MiB) of growth, and the WAL
/// file keeps up to the bound; more means it never started over.
const MOST_WAL: u64 = 12 * 1024 * 1024;

fn wal_len(db: &Path) -> u64 {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(PathBuf::from(wal)).map(|m| m.len()).unwrap_or(0)
}

fn job(n: usize) -> NewJob {
    NewJob {
        kind: "probe".to_owned(),
        tenant_id: None,
        payload: serde_json::json!({ "n": n, "padding": "x".repeat(1_000) }),
        run_at: T0,
        max_attempts: 1,
        dedupe_key: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_starts_over_past_its_bound_while_readers_keep_reading() {
    let dir = std::env::temp_dir().join(format!("tokenops-wal-bound-{}", Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let db = dir.join("store.db");
    let store = SqliteStore::open_with_wal_bound(&db, BOUND).await.expect("open");
    store.migrate(&tokenops_domain::SystemClock).await.expect("migrate");

    // Readers that never pause, as under a steady load.
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for _ in 0..2 {
        let (store, stop) = (store.clone(), stop.clone());
        readers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let mut tx = store.read().await.expect("read");
                tx.jobs().get(Uuid::now_v7()).await.expect("get");
                tx.commit().await.expect("end read");
                tokio::task::yield_now().await;
            }
        }));
    }

    let mut longest = 0;
    let mut ids = Vec::new();
    for start in (0..JOBS).step_by(PER_WRITE) {
        let mut tx = store.write().await.expect("write");
        for n in start..start + PER_WRITE {
            ids.push(tx.jobs().enqueue(&job(n), T0).await.expect("enqueue").expect("no dedupe key"));
        }
        tx.commit().await.expect("commit");
        longest = longest.max(wal_len(&db));
    }
    stop.store(true, Ordering::Relaxed);
    for reader in readers {
        reader.await.expect("reader");
    }

    assert!(longest <= MOST_WAL, "the WAL grew to {longest} bytes against a bound of {BOUND}");
    // Nothing written was lost by starting over.
    let mut tx = store.read().await.expect("read");
    for id in [ids[0], ids[ids.len() / 2], ids[ids.len() - 1]] {
        assert!(tx.jobs().get(id).await.expect("get").is_some(), "job {id} is still there");
    }
    tx.commit().await.expect("end read");
    store.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}
