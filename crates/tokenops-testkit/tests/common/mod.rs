//! What the store tests share: the fixed instant they pass time from (the store never reads the
//! clock), fresh tenants, pages, parsed references, and the race in which a read for update
//! makes a second change wait for the first, and the writes a read transaction lets through.
//! Each test file uses a part of it.
#![allow(dead_code)]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokenops_domain::account::AccountRef;
use tokenops_domain::asset::AssetId;
use tokenops_domain::customer::CustomerRef;
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_domain::{TenantId, Timestamp, new_id};
use tokenops_store::{Store, StoreError, StoreResult, Tx};
use uuid::Uuid;

/// A fixed instant.
pub const T0: Timestamp = Timestamp::from_micros(1_800_000_000_000_000);

pub fn at(seconds: i64) -> Timestamp {
    T0.plus_millis(seconds * 1000)
}

pub fn tenant() -> TenantId {
    TenantId(new_id())
}

pub fn page(page: u64, size: u32) -> PageRequest {
    PageRequest { page, size }
}

pub fn account_ref(text: &str) -> AccountRef {
    AccountRef::parse(text).expect("valid account reference")
}

pub fn customer_ref(text: &str) -> CustomerRef {
    CustomerRef::parse(text).expect("valid customer reference")
}

pub fn currency(code: &str) -> AssetId {
    AssetId::parse(code).expect("a currency")
}

pub fn is_conflict<T: std::fmt::Debug>(outcome: &Result<T, StoreError>) -> bool {
    matches!(outcome, Err(StoreError::Conflict(_)))
}

/// The ids of a page's items, and its total.
pub fn ids_and_total<T>(found: Page<T>, id: impl Fn(&T) -> Uuid) -> (Vec<Uuid>, u64) {
    (found.items.iter().map(id).collect(), found.total)
}

/// A step of a change, run in the change's write transaction.
pub type Step<'t, R> = Pin<Box<dyn Future<Output = R> + Send + 't>>;

/// Inserts `items` in one write transaction, each by `insert`, and commits: a test's rows, set
/// down before what it checks.
pub async fn insert_all<T: Sync>(
    store: &dyn Store,
    items: &[T],
    insert: impl for<'t> Fn(&'t mut dyn Tx, &'t T) -> Step<'t, StoreResult<()>>,
) {
    let mut tx = store.write().await.expect("begin");
    for item in items {
        insert(&mut *tx, item).await.expect("insert");
    }
    tx.commit().await.expect("commit");
}

/// The race a read for update decides: a first change reads (`hold`) and, while it holds what it
/// read for 300 ms, a second change begins; the first then writes (`change`) and commits. The
/// `second` change's read (for update) returns only once the first committed, so it sees the
/// first's outcome; it is committed here, before the first's end is awaited (on SQLite the
/// first's commit is durable only with the group the second's write belongs to).
pub async fn second_change_waits<H: Send + 'static, R>(
    store: &Arc<dyn Store>,
    hold: impl for<'t> FnOnce(&'t mut dyn Tx) -> Step<'t, H> + Send + 'static,
    change: impl for<'t> FnOnce(&'t mut dyn Tx, H) -> Step<'t, ()> + Send + 'static,
    second: impl for<'t> FnOnce(&'t mut dyn Tx) -> Step<'t, R>,
) -> R {
    let (held, holding) = tokio::sync::oneshot::channel();
    let first = {
        let store = store.clone();
        tokio::spawn(async move {
            let mut tx = store.write().await.expect("begin");
            let got = hold(&mut *tx).await;
            held.send(()).expect("signal");
            tokio::time::sleep(Duration::from_millis(300)).await;
            change(&mut *tx, got).await;
            tx.commit().await.expect("commit");
        })
    };
    holding.await.expect("the first change holds the row");

    let start = Instant::now();
    let mut tx = store.write().await.expect("begin");
    let outcome = second(&mut *tx).await;
    assert!(start.elapsed() >= Duration::from_millis(200), "waited for the first ({:?})", start.elapsed());
    tx.commit().await.expect("commit");
    first.await.expect("first change");
    outcome
}

/// The names of the writes, each `name => |tx| call` (the call's future), that a read
/// transaction did not refuse. Each runs in a read transaction of its own: on PostgreSQL the
/// first refusal aborts the transaction.
// As the functions here (`dead_code` above), unused by the test files that check no reads.
#[allow(unused_macros)]
macro_rules! accepted_in_reads {
    ($store:expr, $($name:literal => |$tx:ident| $call:expr),+ $(,)?) => {{
        let mut accepted: Vec<&str> = Vec::new();
        $({
            let mut $tx = $store.read().await.expect("begin read");
            if $call.await.is_ok() {
                accepted.push($name);
            }
        })+
        accepted
    }};
}
#[allow(unused_imports)]
pub(crate) use accepted_in_reads;
