//! A server that cannot be reached is `StoreError::Unavailable`, not a generic failure: the job
//! runner keeps trying to record a failed run while the store is down, and only then. The pool's
//! acquire bound keeps the wait short.

use std::time::{Duration, Instant};
use tokenops_store_postgres::PostgresStore;

#[tokio::test]
async fn a_server_that_cannot_be_reached_is_unavailable_within_the_acquire_bound() {
    // Port 1 on loopback: nothing listens there, every connection is refused.
    let started = Instant::now();
    let error = PostgresStore::connect("postgres://postgres@127.0.0.1:1/postgres", None)
        .await
        .expect_err("no server on port 1");
    assert!(error.is_unavailable(), "classified as unreachable: {error}");
    assert!(started.elapsed() < Duration::from_secs(15), "bounded: {:?}", started.elapsed());
}
