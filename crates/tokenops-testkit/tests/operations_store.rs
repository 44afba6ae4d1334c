//! The persistence contract of token operations, locks, breaks and positions
//! (`tokenops_store::operations`), checked on both backends: round trips of every field, ids
//! unique (a duplicate is a conflict that leaves the transaction usable), tenant scoping,
//! updates of exactly the mutable fields, lists (newest first, then id) with every filter, their
//! pages and totals, keyset walks, the expiry sweep's selection, break filters, positions
//! accumulating, and reads for update. Every test is registered with `backends!`, so it runs as
//! `name::sqlite` and `name::postgres` on a fresh, migrated store reached through the trait
//! object, the way the app sees it.
//!
//! The store never reads the clock: tests pass time in, from the fixed instant `T0`.

use serde_json::json;
use tokenops_domain::asset::Amount;
use tokenops_domain::chain::TxHash;
use tokenops_domain::operation::{
    Break, BreakFilter, BreakReason, FailureCode, Lock, LockStatus, NewOperation, Operation, OperationFilter,
    OperationState, TxType,
};
use tokenops_domain::paging::{KeysetPosition, KeysetRequest, PageRequest};
use tokenops_domain::{TenantId, Timestamp, new_id};
use tokenops_store::{InFlight, Position, PositionChange, Store, StoreError};
use tokenops_testkit::{Backend, StoreFixture, backends};
use uuid::Uuid;

mod common;
use common::{
    account_ref, at, currency, customer_ref, ids_and_total, insert_all, is_conflict, page, second_change_waits, tenant,
};

/// A fresh, migrated store per test: the kit's fixture.
type Fixture = StoreFixture;

// ---------------------------------------------------------------------------------------------
// Helpers

fn units(minor_units: u128) -> Amount {
    Amount::from_minor_units(minor_units).expect("a positive amount")
}

/// A transaction hash of 32 `byte`s.
fn hash(byte: u8) -> TxHash {
    TxHash::from_bytes([byte; 32])
}

fn small(n: usize) -> i64 {
    i64::try_from(n).expect("small")
}

/// A SUBMITTED transfer-shaped operation with every optional field empty.
fn operation(tenant: TenantId, account: &str, created_at: Timestamp) -> Operation {
    Operation::submitted(
        NewOperation {
            id: new_id(),
            tenant_id: tenant,
            tx_type: TxType::Mint,
            asset_id: currency("USD"),
            account_ref: account_ref(account),
            customer_ref: customer_ref("cust-1"),
            counterparty_ref: None,
            amount: units(100),
            params: json!({}),
            lock_id: None,
            submitted_by: "user-1".into(),
            idempotency_key: None,
            correlation_id: None,
        },
        created_at,
    )
}

/// A PENDING lock with no counterparty, no expiry and nothing completing it.
fn lock(tenant: TenantId, account: &str, created_at: Timestamp) -> Lock {
    Lock {
        id: new_id(),
        tenant_id: tenant,
        account_ref: account_ref(account),
        counterparty_ref: None,
        asset_id: currency("USD"),
        amount: units(50),
        expires_at: None,
        status: LockStatus::Pending,
        completed_by: None,
        created_at,
        updated_at: created_at,
    }
}

fn a_break(tenant: TenantId, account: &str, reason: BreakReason, detected_at: Timestamp) -> Break {
    Break {
        id: new_id(),
        tenant_id: tenant,
        transaction_id: None,
        account_ref: account_ref(account),
        asset_id: currency("USD"),
        reason,
        detail: format!("{} on {account}", reason.as_str()),
        detected_at,
    }
}

async fn insert_operations(store: &dyn Store, operations: &[Operation]) {
    insert_all(store, operations, |tx, o| tx.operations().insert(o)).await
}

async fn insert_locks(store: &dyn Store, locks: &[Lock]) {
    insert_all(store, locks, |tx, l| tx.locks().insert(l)).await
}

async fn insert_breaks(store: &dyn Store, breaks: &[Break]) {
    insert_all(store, breaks, |tx, b| tx.breaks().insert(b)).await
}

async fn get_operation(store: &dyn Store, tenant: TenantId, id: Uuid) -> Option<Operation> {
    let mut tx = store.read().await.expect("begin read");
    tx.operations().get(tenant, id).await.expect("get operation")
}

async fn get_lock(store: &dyn Store, tenant: TenantId, id: Uuid) -> Option<Lock> {
    let mut tx = store.read().await.expect("begin read");
    tx.locks().get(tenant, id).await.expect("get lock")
}

async fn position(store: &dyn Store, tenant: TenantId, account: &str) -> Position {
    let mut tx = store.read().await.expect("begin read");
    tx.positions().get(tenant, &account_ref(account)).await.expect("get position")
}

async fn apply(store: &dyn Store, tenant: TenantId, account: &str, total: i64, held: i64, now: Timestamp) {
    let mut tx = store.write().await.expect("begin");
    tx.positions().apply(tenant, &account_ref(account), total, held, now).await.expect("apply");
    tx.commit().await.expect("commit");
}

/// The ids of a page of operations, and the total.
async fn list_operations(
    store: &dyn Store,
    tenant: TenantId,
    filter: &OperationFilter,
    request: PageRequest,
) -> (Vec<Uuid>, u64) {
    let mut tx = store.read().await.expect("begin read");
    ids_and_total(tx.operations().list(tenant, filter, request).await.expect("list operations"), |o| o.id)
}

/// Every operation the filter selects, by walking `list_after` `limit` at a time: checks that
/// no page is longer than asked and that every page but the last is full.
async fn walk_operations(store: &dyn Store, tenant: TenantId, filter: &OperationFilter, limit: u32) -> Vec<Uuid> {
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let mut tx = store.read().await.expect("begin read");
        let found =
            tx.operations().list_after(tenant, filter, KeysetRequest { after, limit }).await.expect("list after");
        assert!(found.len() <= limit as usize, "a page of at most {limit}");
        let Some(last) = found.last() else { break };
        after = Some(KeysetPosition { at_micros: last.created_at.as_micros(), id: last.id });
        let full = found.len() == limit as usize;
        seen.extend(found.iter().map(|o| o.id));
        if !full {
            break;
        }
        assert!(seen.len() <= 1000, "the walk ends");
    }
    seen
}

/// The ids of a page of an account's locks, and the total.
async fn list_locks(
    store: &dyn Store,
    tenant: TenantId,
    account: &str,
    status: Option<LockStatus>,
    request: PageRequest,
) -> (Vec<Uuid>, u64) {
    let mut tx = store.read().await.expect("begin read");
    let found = tx.locks().list_for_account(tenant, &account_ref(account), status, request).await.expect("list locks");
    ids_and_total(found, |l| l.id)
}

async fn expired(store: &dyn Store, now: Timestamp, limit: u32) -> Vec<Lock> {
    let mut tx = store.read().await.expect("begin read");
    tx.locks().expired(now, limit).await.expect("expired locks")
}

/// The ids of a page of breaks, and the total.
async fn list_breaks(
    store: &dyn Store,
    tenant: TenantId,
    filter: &BreakFilter,
    request: PageRequest,
) -> (Vec<Uuid>, u64) {
    let mut tx = store.read().await.expect("begin read");
    ids_and_total(tx.breaks().list(tenant, filter, request).await.expect("list breaks"), |b| b.id)
}

/// Ids in list order: newest first, then the greater id first.
fn newest_first<'a, T: 'a>(items: impl IntoIterator<Item = &'a T>, key: impl Fn(&T) -> (Timestamp, Uuid)) -> Vec<Uuid> {
    let mut keys: Vec<(Timestamp, Uuid)> = items.into_iter().map(key).collect();
    keys.sort_by(|a, b| b.cmp(a));
    keys.into_iter().map(|(_, id)| id).collect()
}

fn operation_key(o: &Operation) -> (Timestamp, Uuid) {
    (o.created_at, o.id)
}

fn lock_key(l: &Lock) -> (Timestamp, Uuid) {
    (l.created_at, l.id)
}

fn break_key(b: &Break) -> (Timestamp, Uuid) {
    (b.detected_at, b.id)
}

// ---------------------------------------------------------------------------------------------
// The migration

backends!(the_tables_exist_and_start_empty);

async fn the_tables_exist_and_start_empty(backend: Backend) {
    let fx = Fixture::new(backend).await;
    for table in ["operations", "locks", "breaks", "positions"] {
        assert_eq!(fx.db.count(table, "").await, 0, "{table}");
    }
    let name = fx.db.strings("SELECT name FROM schema_migrations WHERE version = 6").await;
    assert_eq!(name, vec!["operations".to_owned()]);
}

// ---------------------------------------------------------------------------------------------
// Operations

backends!(
    operations_round_trip_every_field,
    a_stored_value_that_does_not_parse_is_a_corrupt_row,
    every_type_state_and_failure_code_is_stored,
    a_duplicate_operation_id_is_a_conflict,
    operations_are_invisible_to_other_tenants,
    get_many_reads_several_operations_in_the_order_asked,
    an_operation_update_replaces_exactly_the_mutable_fields,
    operations_are_listed_newest_first_with_filters_and_totals,
    every_filter_combination_lists_and_walks_alike,
    keyset_walks_cross_equal_timestamps_without_gaps_or_duplicates,
    the_resume_sweep_selects_unchanged_in_flight_operations_of_every_organisation,
);

/// `in_flight_unchanged_since`: the operations a pipeline job carries (SUBMITTED,
/// PENDING_SETTLEMENT, SETTLING) unchanged since before the instant, of every organisation
/// (walked one by one), least recently changed first, up to the limit.
async fn the_resume_sweep_selects_unchanged_in_flight_operations_of_every_organisation(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let in_state = |tenant: TenantId, state: OperationState, changed: i64| Operation {
        state,
        updated_at: at(changed),
        ..operation(tenant, "acc-1", at(0))
    };
    let mut tenants = [tenant(), tenant(), tenant()];
    tenants.sort_by_key(|t| t.as_uuid());
    let [first, middle, last] = tenants;
    let mut records = vec![
        in_state(last, OperationState::Submitted, 1),
        in_state(first, OperationState::Settling, 4),
        in_state(middle, OperationState::PendingSettlement, 2),
        in_state(first, OperationState::Submitted, 3),
        // Changed at the instant itself: not before it.
        in_state(middle, OperationState::Submitted, 10),
    ];
    let wanted: Vec<Uuid> = {
        let mut due = records[..4].to_vec();
        due.sort_by_key(|o| o.updated_at);
        due.iter().map(|o| o.id).collect()
    };
    // No job carries these states: waiting for approvers, or finished.
    for state in
        [OperationState::AwaitingApproval, OperationState::Confirmed, OperationState::Failed, OperationState::Cancelled]
    {
        records.push(in_state(middle, state, 0));
    }
    insert_operations(&*fx.store, &records).await;

    let found = |before: Timestamp, limit: u32| {
        let store = fx.store.clone();
        async move {
            let mut tx = store.read().await.expect("read");
            let found = tx.operations().in_flight_unchanged_since(before, limit).await.expect("in flight");
            found.iter().map(|o| o.id).collect::<Vec<_>>()
        }
    };
    assert_eq!(found(at(10), 100).await, wanted, "every organisation, least recently changed first");
    assert_eq!(found(at(10), 2).await, wanted[..2].to_vec(), "up to the limit");
    assert_eq!(found(at(3), 100).await, wanted[..2].to_vec());
    assert_eq!(found(at(1), 100).await, Vec::<Uuid>::new());
    let mut tx = fx.store.read().await.expect("read");
    let seen = tx.operations().in_flight_unchanged_since(at(2), 1).await.expect("in flight");
    let first = &records[0];
    let expected =
        InFlight { tenant_id: first.tenant_id, id: first.id, state: first.state, updated_at: first.updated_at };
    assert_eq!(seen, vec![expected], "what the sweep needs of each");
}

async fn operations_round_trip_every_field(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let t = tenant();
    // Every optional field empty, and every one set (with the extreme amount and block number).
    let bare = operation(t, "acc-1", at(1));
    let full = Operation {
        tx_type: TxType::Transfer,
        asset_id: currency("EUR"),
        customer_ref: customer_ref("Cust.2:x_y-Z"),
        counterparty_ref: Some(account_ref("Acc.9:x_y-Z")),
        amount: units(i64::MAX as u128),
        params: json!({
            "reference": "invoice 42 — ünïcode",
            "count": 7,
            "big": u64::MAX,
            "negative": -12,
            "ratio": 0.25,
            "urgent": true,
            "none": null,
            "lockId": "0198c7a2-0000-7000-8000-000000000001",
        }),
        lock_id: Some(new_id()),
        state: OperationState::Failed,
        tx_hash: Some(hash(0xab)),
        block_number: Some(i64::MAX as u64),
        failure_code: Some(FailureCode::ChainFailed),
        reason_code: Some("EXECUTION_REVERTED".into()),
        revert_reason: Some("InsufficientAvailableBalance(1, 2)".into()),
        signed_transaction: Some(format!("0x02f8{}", "cd".repeat(100))),
        submitted_by: "subject|with:odd chars".into(),
        idempotency_key: Some("idem-key-1".into()),
        correlation_id: Some("corr-1".into()),
        updated_at: at(9),
        ..operation(t, "Acc.2:x_y-Z", at(2))
    };
    let smallest = Operation { amount: units(1), block_number: Some(0), ..operation(t, "acc-3", at(3)) };
    insert_operations(&*fx.store, &[bare.clone(), full.clone(), smallest.clone()]).await;

    for record in [&bare, &full, &smallest] {
        assert_eq!(get_operation(&*fx.store, t, record.id).await.as_ref(), Some(record), "get");
        let mut tx = fx.store.write().await.expect("begin");
        let got = tx.operations().get_for_update(t, record.id).await.expect("get for update");
        assert_eq!(got.as_ref(), Some(record), "get_for_update");
        tx.commit().await.expect("commit");
    }
    // The same records through the lists.
    let mut tx = fx.store.read().await.expect("begin read");
    let listed = tx.operations().list(t, &OperationFilter::default(), page(0, 10)).await.expect("list");
    assert_eq!(listed.items, vec![smallest.clone(), full.clone(), bare.clone()]);
    let window = KeysetRequest { after: None, limit: 10 };
    let walked = tx.operations().list_after(t, &OperationFilter::default(), window).await.expect("list after");
    assert_eq!(walked, listed.items);
    drop(tx);

    // The params object comes back as the same JSON value.
    let stored = get_operation(&*fx.store, t, full.id).await.expect("stored");
    assert_eq!(stored.params["big"], json!(u64::MAX));
    assert_eq!(stored.params["reference"], json!("invoice 42 — ünïcode"));

    // An asset given in lower case is stored and read back as its upper-case code.
    let lower = Operation { asset_id: currency("chf"), ..operation(t, "acc-4", at(4)) };
    insert_operations(&*fx.store, std::slice::from_ref(&lower)).await;
    let stored = get_operation(&*fx.store, t, lower.id).await.expect("stored");
    assert_eq!(stored, Operation { asset_id: currency("CHF"), ..lower });

    // Unknown ids are none.
    assert_eq!(get_operation(&*fx.store, t, new_id()).await, None);
    let mut tx = fx.store.write().await.expect("begin");
    assert_eq!(tx.operations().get_for_update(t, new_id()).await.expect("get for update"), None);
    tx.commit().await.expect("commit");
}

async fn every_type_state_and_failure_code_is_stored(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let t = tenant();
    let mut records = Vec::new();
    for (i, tx_type) in TxType::ALL.into_iter().enumerate() {
        records.push(Operation { tx_type, ..operation(t, "acc-1", at(small(i))) });
    }
    for (i, state) in OperationState::ALL.into_iter().enumerate() {
        records.push(Operation { state, ..operation(t, "acc-2", at(small(i))) });
    }
    for (i, code) in FailureCode::ALL.into_iter().enumerate() {
        records.push(Operation {
            state: OperationState::Failed,
            failure_code: Some(code),
            ..operation(t, "acc-3", at(small(i)))
        });
    }
    insert_operations(&*fx.store, &records).await;
    for record in &records {
        assert_eq!(get_operation(&*fx.store, t, record.id).await.as_ref(), Some(record));
    }
    // Each state and type is also what the filters find.
    for state in OperationState::ALL {
        let filter = OperationFilter { state: Some(state), ..OperationFilter::default() };
        let expected = newest_first(records.iter().filter(|o| o.state == state), operation_key);
        assert_eq!(list_operations(&*fx.store, t, &filter, page(0, 50)).await.0, expected, "{state:?}");
    }
    for tx_type in TxType::ALL {
        let filter = OperationFilter { tx_type: Some(tx_type), ..OperationFilter::default() };
        let expected = newest_first(records.iter().filter(|o| o.tx_type == tx_type), operation_key);
        assert_eq!(list_operations(&*fx.store, t, &filter, page(0, 50)).await.0, expected, "{tx_type:?}");
    }
}

async fn a_duplicate_operation_id_is_a_conflict(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (a, b) = (tenant(), tenant());
    let first = operation(a, "acc-1", at(1));
    let mut tx = fx.store.write().await.expect("begin");
    tx.operations().insert(&first).await.expect("insert");
    let again = Operation { id: first.id, ..operation(a, "acc-2", at(2)) };
    let outcome = tx.operations().insert(&again).await;
    assert!(is_conflict(&outcome), "the id is taken: {outcome:?}");
    let elsewhere = Operation { id: first.id, ..operation(b, "acc-1", at(3)) };
    let outcome = tx.operations().insert(&elsewhere).await;
    assert!(is_conflict(&outcome), "the id is taken in every organisation: {outcome:?}");
    // The conflicts left the transaction usable.
    let second = operation(a, "acc-1", at(4));
    tx.operations().insert(&second).await.expect("insert after a conflict");
    assert_eq!(tx.operations().get(a, first.id).await.expect("get"), Some(first.clone()));
    tx.commit().await.expect("commit after conflicts");

    assert_eq!(get_operation(&*fx.store, a, first.id).await, Some(first.clone()));
    assert_eq!(get_operation(&*fx.store, a, second.id).await, Some(second));
    assert_eq!(fx.db.count("operations", "").await, 2);

    // An id an earlier transaction stored conflicts too: at the call, or at the latest at the
    // commit (PostgreSQL holds the row back until the transaction's next statement).
    let again = {
        let mut tx = fx.store.write().await.expect("begin");
        match tx.operations().insert(&Operation { id: first.id, ..operation(b, "acc-3", at(5)) }).await {
            Ok(()) => tx.commit().await,
            Err(error) => Err(error),
        }
    };
    assert!(is_conflict(&again), "the id is stored: {again:?}");
    assert_eq!(fx.db.count("operations", "").await, 2);
}

/// `get_many` answers in the order asked, `None` for an unknown id or one of another
/// organisation, and (for update) holds the rows as `get_for_update` does.
async fn get_many_reads_several_operations_in_the_order_asked(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (mine, other) = (tenant(), tenant());
    let first = operation(mine, "acc-1", at(1));
    let second = operation(mine, "acc-2", at(2));
    let foreign = operation(other, "acc-3", at(3));
    insert_operations(fx.store.as_ref(), &[first.clone(), second.clone(), foreign.clone()]).await;
    let asked = [(mine, second.id), (mine, new_id()), (mine, foreign.id), (mine, first.id)];
    for for_update in [false, true] {
        let mut tx = fx.store.write().await.expect("begin");
        let found = tx.operations().get_many(&asked, for_update).await.expect("get many");
        tx.commit().await.expect("commit");
        let ids: Vec<Option<Uuid>> = found.iter().map(|o| o.as_ref().map(|o| o.id)).collect();
        assert_eq!(ids, vec![Some(second.id), None, None, Some(first.id)], "for update: {for_update}");
        assert_eq!(found[0].as_ref(), Some(&second), "every field");
    }
    let mut tx = fx.store.read().await.expect("begin read");
    assert!(tx.operations().get_many(&[], false).await.expect("none asked").is_empty());
}

async fn a_stored_value_that_does_not_parse_is_a_corrupt_row(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let t = tenant();
    for (column, value) in [("asset_id", "'XYZ'"), ("asset_id", "'usd'"), ("amount", "0"), ("tx_hash", "'0xbad'")] {
        let record = operation(t, "acc-1", at(1));
        insert_operations(&*fx.store, std::slice::from_ref(&record)).await;
        fx.db.execute(&format!("UPDATE operations SET {column} = {value} WHERE id = '{}'", record.id)).await;
        let mut tx = fx.store.read().await.expect("begin read");
        let read = tx.operations().get(t, record.id).await;
        assert!(matches!(read, Err(StoreError::Corrupt(_))), "{column} = {value}: {read:?}");
    }
}

async fn operations_are_invisible_to_other_tenants(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (a, b) = (tenant(), tenant());
    let mine = Operation { counterparty_ref: Some(account_ref("acc-2")), ..operation(a, "acc-1", at(1)) };
    insert_operations(&*fx.store, std::slice::from_ref(&mine)).await;

    assert_eq!(get_operation(&*fx.store, b, mine.id).await, None);
    let mut tx = fx.store.write().await.expect("begin");
    assert_eq!(tx.operations().get_for_update(b, mine.id).await.expect("get for update"), None);
    // Another organisation's update of the same id reaches nothing.
    let mallory = Operation {
        tenant_id: b,
        state: OperationState::Confirmed,
        tx_hash: Some(hash(0xba)),
        updated_at: at(60),
        ..mine.clone()
    };
    tx.operations().update(&mallory).await.expect("update from another tenant");
    tx.commit().await.expect("commit");
    assert_eq!(get_operation(&*fx.store, a, mine.id).await, Some(mine.clone()), "unchanged");

    let by_account = OperationFilter { account_ref: Some(account_ref("acc-1")), ..OperationFilter::default() };
    let by_counterparty =
        OperationFilter { counterparty_ref: Some(account_ref("acc-2")), ..OperationFilter::default() };
    for filter in [OperationFilter::default(), by_account, by_counterparty] {
        assert_eq!(list_operations(&*fx.store, b, &filter, page(0, 50)).await, (vec![], 0), "{filter:?}");
        assert_eq!(walk_operations(&*fx.store, b, &filter, 10).await, Vec::<Uuid>::new(), "{filter:?}");
        assert_eq!(list_operations(&*fx.store, a, &filter, page(0, 50)).await, (vec![mine.id], 1), "{filter:?}");
    }
}

async fn an_operation_update_replaces_exactly_the_mutable_fields(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let t = tenant();
    let original = Operation {
        tx_type: TxType::Lock,
        counterparty_ref: Some(account_ref("acc-2")),
        params: json!({ "note": "original" }),
        idempotency_key: Some("key-1".into()),
        correlation_id: Some("corr-1".into()),
        ..operation(t, "acc-1", at(1))
    };
    let other = operation(t, "acc-1", at(2));
    insert_operations(&*fx.store, &[original.clone(), other.clone()]).await;

    // Every mutable field, the optional ones from None to Some.
    let settled = Operation {
        state: OperationState::Failed,
        tx_hash: Some(hash(0x12)),
        block_number: Some(u64::try_from(i64::MAX).expect("fits")),
        failure_code: Some(FailureCode::RetryExhausted),
        reason_code: Some("TIMEOUT".into()),
        revert_reason: Some("HoldExpired".into()),
        signed_transaction: Some("0x02f8aa".into()),
        updated_at: at(60),
        ..original.clone()
    };
    // What is not mutable stays as inserted whatever the record says.
    let attempt = Operation {
        tx_type: TxType::Burn,
        asset_id: currency("JPY"),
        account_ref: account_ref("acc-renamed"),
        customer_ref: customer_ref("cust-9"),
        counterparty_ref: None,
        amount: units(999),
        params: json!({ "note": "changed" }),
        lock_id: Some(new_id()),
        submitted_by: "someone-else".into(),
        idempotency_key: None,
        correlation_id: Some("corr-2".into()),
        created_at: at(999),
        ..settled.clone()
    };
    let mut tx = fx.store.write().await.expect("begin");
    let locked = tx.operations().get_for_update(t, original.id).await.expect("get for update");
    assert_eq!(locked.as_ref(), Some(&original));
    tx.operations().update(&attempt).await.expect("update");
    // Read back inside the transaction that changed it.
    assert_eq!(tx.operations().get(t, original.id).await.expect("get"), Some(settled.clone()));
    tx.commit().await.expect("commit");
    assert_eq!(get_operation(&*fx.store, t, original.id).await, Some(settled.clone()));
    assert_eq!(get_operation(&*fx.store, t, other.id).await, Some(other.clone()), "only the operation with the id");

    // The new state is what the lists filter by.
    let failed = OperationFilter { state: Some(OperationState::Failed), ..OperationFilter::default() };
    assert_eq!(list_operations(&*fx.store, t, &failed, page(0, 50)).await, (vec![original.id], 1));
    let submitted = OperationFilter { state: Some(OperationState::Submitted), ..OperationFilter::default() };
    assert_eq!(list_operations(&*fx.store, t, &submitted, page(0, 50)).await, (vec![other.id], 1));

    // And back: the optional fields are cleared again.
    let cleared = Operation { state: OperationState::Cancelled, updated_at: at(120), ..original.clone() };
    let mut tx = fx.store.write().await.expect("begin");
    tx.operations().update(&cleared).await.expect("update");
    tx.commit().await.expect("commit");
    assert_eq!(get_operation(&*fx.store, t, original.id).await, Some(cleared));

    // An update of an unknown id changes nothing.
    let mut tx = fx.store.write().await.expect("begin");
    let unknown = Operation { state: OperationState::Confirmed, ..operation(t, "acc-1", at(3)) };
    tx.operations().update(&unknown).await.expect("update of an unknown id");
    tx.commit().await.expect("commit");
    assert_eq!(get_operation(&*fx.store, t, unknown.id).await, None);
    assert_eq!(get_operation(&*fx.store, t, other.id).await, Some(other));
    assert_eq!(fx.db.count("operations", "").await, 2);
}

async fn operations_are_listed_newest_first_with_filters_and_totals(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (t, other) = (tenant(), tenant());
    let op = |account: &str, counterparty: Option<&str>, tx_type: TxType, state: OperationState, s: i64| Operation {
        tx_type,
        state,
        counterparty_ref: counterparty.map(account_ref),
        ..operation(t, account, at(s))
    };
    use OperationState::{Confirmed, Settling, Submitted};
    // Two created at the same instant: the greater id is listed first.
    let mut twins = [
        op("alice", Some("bob"), TxType::Transfer, Confirmed, 20),
        op("carol", Some("alice"), TxType::Transfer, Settling, 20),
    ];
    twins.sort_by_key(|o| o.id);
    let [low, high] = twins;
    let (alice_to_bob, carol_to_alice) =
        if low.account_ref.as_str() == "alice" { (&low, &high) } else { (&high, &low) };
    let a1 = op("alice", None, TxType::Mint, Confirmed, 10);
    let b1 = op("bob", Some("alice"), TxType::Lock, Submitted, 30);
    let b2 = op("bob", Some("carol"), TxType::Transfer, Confirmed, 40);
    // An account paying itself is listed once for it.
    let selfish = op("alice", Some("alice"), TxType::Transfer, Settling, 50);
    // References are exact: another case is another account.
    let upper = op("ALICE", Some("BOB"), TxType::Transfer, Confirmed, 60);
    let c1 = op("carol", None, TxType::Burn, Submitted, 5);
    // Inserted out of order.
    let all =
        [b2.clone(), high.clone(), a1.clone(), upper.clone(), selfish.clone(), b1.clone(), low.clone(), c1.clone()];
    insert_operations(&*fx.store, &all).await;
    let theirs = Operation { counterparty_ref: Some(account_ref("alice")), ..operation(other, "alice", at(1)) };
    insert_operations(&*fx.store, &[theirs]).await;
    let ids = |records: &[&Operation]| records.iter().map(|o| o.id).collect::<Vec<_>>();

    let everything = OperationFilter::default();
    let newest = ids(&[&upper, &selfish, &b2, &b1, &high, &low, &a1, &c1]);
    assert_eq!(list_operations(&*fx.store, t, &everything, page(0, 50)).await, (newest.clone(), 8));
    // Pages of three, with the same total, and nothing past the end.
    assert_eq!(list_operations(&*fx.store, t, &everything, page(0, 3)).await, (newest[0..3].to_vec(), 8));
    assert_eq!(list_operations(&*fx.store, t, &everything, page(1, 3)).await, (newest[3..6].to_vec(), 8));
    assert_eq!(list_operations(&*fx.store, t, &everything, page(2, 3)).await, (newest[6..].to_vec(), 8));
    assert_eq!(list_operations(&*fx.store, t, &everything, page(3, 3)).await, (vec![], 8));
    assert_eq!(list_operations(&*fx.store, t, &everything, page(7, 1)).await, (newest[7..].to_vec(), 8));
    assert_eq!(list_operations(&*fx.store, t, &everything, page(u64::MAX, 50)).await, (vec![], 8));

    // By originating account, and by counterparty: references are exact.
    let account = |text: &str| OperationFilter { account_ref: Some(account_ref(text)), ..OperationFilter::default() };
    let paid_to =
        |text: &str| OperationFilter { counterparty_ref: Some(account_ref(text)), ..OperationFilter::default() };
    let alices = ids(&[&selfish, alice_to_bob, &a1]);
    assert_eq!(list_operations(&*fx.store, t, &account("alice"), page(0, 50)).await, (alices.clone(), 3));
    assert_eq!(list_operations(&*fx.store, t, &account("alice"), page(0, 2)).await, (alices[0..2].to_vec(), 3));
    assert_eq!(list_operations(&*fx.store, t, &account("alice"), page(1, 2)).await, (alices[2..].to_vec(), 3));
    assert_eq!(list_operations(&*fx.store, t, &account("alice"), page(2, 2)).await, (vec![], 3));
    assert_eq!(list_operations(&*fx.store, t, &account("bob"), page(0, 50)).await, (ids(&[&b2, &b1]), 2));
    assert_eq!(list_operations(&*fx.store, t, &account("carol"), page(0, 50)).await, (ids(&[carol_to_alice, &c1]), 2));
    assert_eq!(list_operations(&*fx.store, t, &account("ALICE"), page(0, 50)).await, (ids(&[&upper]), 1));
    assert_eq!(list_operations(&*fx.store, t, &account("BOB"), page(0, 50)).await, (vec![], 0));
    assert_eq!(list_operations(&*fx.store, t, &account("Alice"), page(0, 50)).await, (vec![], 0));
    assert_eq!(list_operations(&*fx.store, t, &account("alic"), page(0, 50)).await, (vec![], 0), "not a prefix");
    let paid_to_alice = ids(&[&selfish, &b1, carol_to_alice]);
    assert_eq!(list_operations(&*fx.store, t, &paid_to("alice"), page(0, 50)).await, (paid_to_alice.clone(), 3));
    assert_eq!(list_operations(&*fx.store, t, &paid_to("alice"), page(1, 2)).await, (paid_to_alice[2..].to_vec(), 3));
    assert_eq!(list_operations(&*fx.store, t, &paid_to("bob"), page(0, 50)).await, (ids(&[alice_to_bob]), 1));
    assert_eq!(list_operations(&*fx.store, t, &paid_to("BOB"), page(0, 50)).await, (ids(&[&upper]), 1));
    let both = OperationFilter { counterparty_ref: Some(account_ref("alice")), ..account("bob") };
    assert_eq!(list_operations(&*fx.store, t, &both, page(0, 50)).await, (ids(&[&b1]), 1));

    // By state, by type.
    let state = |s: OperationState| OperationFilter { state: Some(s), ..OperationFilter::default() };
    let confirmed = ids(&[&upper, &b2, &low, &a1]);
    assert_eq!(list_operations(&*fx.store, t, &state(Confirmed), page(0, 50)).await, (confirmed.clone(), 4));
    assert_eq!(list_operations(&*fx.store, t, &state(Confirmed), page(1, 3)).await, (confirmed[3..].to_vec(), 4));
    assert_eq!(list_operations(&*fx.store, t, &state(Settling), page(0, 50)).await, (ids(&[&selfish, &high]), 2));
    assert_eq!(list_operations(&*fx.store, t, &state(OperationState::Failed), page(0, 50)).await, (vec![], 0));
    let kind = |k: TxType| OperationFilter { tx_type: Some(k), ..OperationFilter::default() };
    let transfers = ids(&[&upper, &selfish, &b2, &high, &low]);
    assert_eq!(list_operations(&*fx.store, t, &kind(TxType::Transfer), page(0, 50)).await, (transfers, 5));
    assert_eq!(list_operations(&*fx.store, t, &kind(TxType::Lock), page(0, 50)).await, (ids(&[&b1]), 1));
    assert_eq!(list_operations(&*fx.store, t, &kind(TxType::Release), page(0, 50)).await, (vec![], 0));

    // By submission time: half-open, the start included and the end left out.
    let window = |from: i64, to: i64| OperationFilter {
        created_from: Some(at(from)),
        created_to: Some(at(to)),
        ..OperationFilter::default()
    };
    assert_eq!(list_operations(&*fx.store, t, &window(20, 50), page(0, 50)).await, (ids(&[&b2, &b1, &high, &low]), 4));
    assert_eq!(list_operations(&*fx.store, t, &window(20, 50), page(0, 1)).await, (ids(&[&b2]), 4));
    assert_eq!(list_operations(&*fx.store, t, &window(21, 30), page(0, 50)).await, (vec![], 0));
    let from_only = OperationFilter { created_from: Some(at(50)), ..OperationFilter::default() };
    assert_eq!(list_operations(&*fx.store, t, &from_only, page(0, 50)).await, (ids(&[&upper, &selfish]), 2));
    let to_only = OperationFilter { created_to: Some(at(10)), ..OperationFilter::default() };
    assert_eq!(list_operations(&*fx.store, t, &to_only, page(0, 50)).await, (ids(&[&c1]), 1));

    // Every filter together.
    let combined = OperationFilter {
        account_ref: Some(account_ref("alice")),
        state: Some(Settling),
        tx_type: Some(TxType::Transfer),
        ..OperationFilter::default()
    };
    assert_eq!(list_operations(&*fx.store, t, &combined, page(0, 50)).await, (ids(&[&selfish]), 1));
    let as_counterparty =
        OperationFilter { account_ref: None, counterparty_ref: Some(account_ref("alice")), ..combined };
    assert_eq!(
        list_operations(&*fx.store, t, &as_counterparty, page(0, 50)).await,
        (ids(&[&selfish, carol_to_alice]), 2)
    );
    let lock_to_alice = OperationFilter {
        counterparty_ref: Some(account_ref("alice")),
        tx_type: Some(TxType::Lock),
        ..OperationFilter::default()
    };
    assert_eq!(list_operations(&*fx.store, t, &lock_to_alice, page(0, 50)).await, (ids(&[&b1]), 1));

    // The other organisation sees only its own.
    assert_eq!(list_operations(&*fx.store, other, &paid_to("alice"), page(0, 50)).await.1, 1);
    assert_eq!(list_operations(&*fx.store, other, &account("alice"), page(0, 50)).await.1, 1);
    assert_eq!(list_operations(&*fx.store, other, &everything, page(0, 50)).await.1, 1);
}

/// A varied data set: every filter combination must list (in pages of any size) and walk (in
/// keyset windows of any size) exactly the operations it selects, newest first.
async fn every_filter_combination_lists_and_walks_alike(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (t, other) = (tenant(), tenant());
    const N: usize = 30;
    // Ids handed out in a scrambled order, so that among equal timestamps the id order is not
    // the creation order.
    let ids: Vec<Uuid> = (0..N).map(|_| new_id()).collect();
    let accounts = ["alice", "bob", "carol", "ALICE"];
    let mut records = Vec::new();
    for i in 0..N {
        let account = accounts[i % 4];
        let counterparty = match i % 5 {
            0 => None,
            1 => Some("alice"),
            2 => Some("bob"),
            3 => Some("dave"),
            _ => Some(account),
        };
        records.push(Operation {
            id: ids[(i * 7) % N],
            tx_type: TxType::ALL[i % 6],
            state: OperationState::ALL[i % 7],
            counterparty_ref: counterparty.map(account_ref),
            // Three at each instant.
            ..operation(t, account, at(small(i / 3)))
        });
    }
    // Inserted newest first, in two transactions, with decoys in another organisation.
    let mut shuffled = records.clone();
    shuffled.reverse();
    insert_operations(&*fx.store, &shuffled[..N / 2]).await;
    insert_operations(&*fx.store, &shuffled[N / 2..]).await;
    let decoys: Vec<Operation> =
        records.iter().map(|o| Operation { id: new_id(), tenant_id: other, ..o.clone() }).collect();
    insert_operations(&*fx.store, &decoys).await;

    let states = [None, Some(OperationState::Submitted), Some(OperationState::Confirmed)];
    let types = [None, Some(TxType::Transfer), Some(TxType::Lock)];
    let account_filters = [None, Some("alice"), Some("bob"), Some("dave"), Some("ALICE"), Some("nobody")];
    let mut non_empty = 0;
    for state in states {
        for tx_type in types {
            for (account, counterparty) in account_filters.iter().flat_map(|a| account_filters.map(|c| (*a, c))) {
                let filter = OperationFilter {
                    state,
                    tx_type,
                    account_ref: account.map(account_ref),
                    counterparty_ref: counterparty.map(account_ref),
                    ..OperationFilter::default()
                };
                let selected = records.iter().filter(|o| {
                    state.is_none_or(|s| o.state == s)
                        && tx_type.is_none_or(|k| o.tx_type == k)
                        && account.is_none_or(|a| o.account_ref.as_str() == a)
                        && counterparty.is_none_or(|c| o.counterparty_ref.as_ref().is_some_and(|r| r.as_str() == c))
                });
                let expected = newest_first(selected, operation_key);
                if !expected.is_empty() {
                    non_empty += 1;
                }
                let total = expected.len() as u64;
                let label = format!("{filter:?}");
                assert_eq!(
                    list_operations(&*fx.store, t, &filter, page(0, 100)).await,
                    (expected.clone(), total),
                    "{label}"
                );
                for size in [4, 7] {
                    let mut listed = Vec::new();
                    for n in 0.. {
                        let (ids, page_total) = list_operations(&*fx.store, t, &filter, page(n, size)).await;
                        assert_eq!(page_total, total, "{label}");
                        if ids.is_empty() {
                            break;
                        }
                        listed.extend(ids);
                    }
                    assert_eq!(listed, expected, "pages of {size}: {label}");
                }
                for limit in [1, 4, 7] {
                    assert_eq!(
                        walk_operations(&*fx.store, t, &filter, limit).await,
                        expected,
                        "walk of {limit}: {label}"
                    );
                }
            }
        }
    }
    assert!(non_empty >= 20, "the data set exercises the filters ({non_empty} non-empty lists)");
}

async fn keyset_walks_cross_equal_timestamps_without_gaps_or_duplicates(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let t = tenant();
    // Ten at one instant, then singles around it; alice is paid by every other one.
    let mut records = Vec::new();
    for i in 0..10 {
        let counterparty = (i % 2 == 0).then(|| account_ref("alice"));
        let account = if i % 2 == 0 { "bob" } else { "alice" };
        records.push(Operation { counterparty_ref: counterparty, ..operation(t, account, at(5)) });
    }
    records.push(operation(t, "alice", at(4)));
    records.push(operation(t, "alice", at(6)));
    records.push(Operation { counterparty_ref: Some(account_ref("alice")), ..operation(t, "bob", at(6)) });
    insert_operations(&*fx.store, &records).await;

    let everything = OperationFilter::default();
    // Paid to alice: every other one of the run, and one after it.
    let alice = OperationFilter { counterparty_ref: Some(account_ref("alice")), ..OperationFilter::default() };
    let paid_to_alice: Vec<Operation> = records.iter().filter(|o| o.counterparty_ref.is_some()).cloned().collect();
    for (filter, selected) in [(&everything, &records), (&alice, &paid_to_alice)] {
        let expected = newest_first(selected, operation_key);
        for limit in [1, 2, 3, 5, 13, 14, 100] {
            let walked = walk_operations(&*fx.store, t, filter, limit).await;
            assert_eq!(walked, expected, "limit {limit}, {filter:?}");
        }
    }

    // A window starting inside the run of equal timestamps continues strictly after its position.
    let expected = newest_first(&records, operation_key);
    let mut tx = fx.store.read().await.expect("begin read");
    for (i, id) in expected.iter().enumerate() {
        let record = records.iter().find(|o| o.id == *id).expect("known");
        let after = Some(KeysetPosition { at_micros: record.created_at.as_micros(), id: record.id });
        let found = tx.operations().list_after(t, &everything, KeysetRequest { after, limit: 4 }).await.expect("after");
        let found: Vec<Uuid> = found.into_iter().map(|o| o.id).collect();
        assert_eq!(found, expected[i + 1..].iter().take(4).copied().collect::<Vec<_>>(), "after #{i}");
    }
    // A position that is no row's still splits the list by (created_at, id).
    let between = KeysetPosition { at_micros: at(5).as_micros(), id: Uuid::max() };
    let found = tx.operations().list_after(t, &everything, KeysetRequest { after: Some(between), limit: 100 }).await;
    let found: Vec<Uuid> = found.expect("after").into_iter().map(|o| o.id).collect();
    assert_eq!(found, expected[2..].to_vec(), "all ten at the instant, then the older one");
    let window =
        KeysetRequest { after: Some(KeysetPosition { at_micros: at(5).as_micros(), id: Uuid::nil() }), limit: 100 };
    let found = tx.operations().list_after(t, &everything, window).await.expect("after");
    assert_eq!(found.into_iter().map(|o| o.id).collect::<Vec<_>>(), expected[12..].to_vec(), "only the older one");
    let found = tx.operations().list_after(t, &everything, KeysetRequest { after: None, limit: 0 }).await;
    assert_eq!(found.expect("an empty window").len(), 0);
}

// ---------------------------------------------------------------------------------------------
// Locks

backends!(
    locks_round_trip_every_field,
    a_duplicate_lock_id_is_a_conflict,
    locks_are_invisible_to_other_tenants,
    a_lock_update_replaces_exactly_the_mutable_fields,
    an_accounts_locks_are_listed_newest_first_by_status,
    the_expiry_sweep_selects_active_uncompleted_expired_locks_soonest_first,
);

async fn locks_round_trip_every_field(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let t = tenant();
    let bare = lock(t, "acc-1", at(1));
    let full = Lock {
        counterparty_ref: Some(account_ref("Acc.9:x_y-Z")),
        asset_id: currency("EUR"),
        amount: units(i64::MAX as u128),
        expires_at: Some(at(3600)),
        status: LockStatus::Active,
        completed_by: Some(new_id()),
        updated_at: at(7),
        ..lock(t, "Acc.2:x_y-Z", at(2))
    };
    let mut records = vec![bare, full];
    for (i, status) in LockStatus::ALL.into_iter().enumerate() {
        records.push(Lock { status, ..lock(t, "acc-3", at(small(10 + i))) });
    }
    insert_locks(&*fx.store, &records).await;
    for record in &records {
        assert_eq!(get_lock(&*fx.store, t, record.id).await.as_ref(), Some(record), "get");
        let mut tx = fx.store.write().await.expect("begin");
        let got = tx.locks().get_for_update(t, record.id).await.expect("get for update");
        assert_eq!(got.as_ref(), Some(record), "get_for_update");
        tx.commit().await.expect("commit");
    }
    let lower = Lock { asset_id: currency("chf"), ..lock(t, "acc-4", at(4)) };
    insert_locks(&*fx.store, std::slice::from_ref(&lower)).await;
    assert_eq!(get_lock(&*fx.store, t, lower.id).await, Some(Lock { asset_id: currency("CHF"), ..lower }));
    assert_eq!(get_lock(&*fx.store, t, new_id()).await, None);
}

async fn a_duplicate_lock_id_is_a_conflict(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (a, b) = (tenant(), tenant());
    let first = lock(a, "acc-1", at(1));
    let mut tx = fx.store.write().await.expect("begin");
    tx.locks().insert(&first).await.expect("insert");
    let outcome = tx.locks().insert(&Lock { id: first.id, ..lock(a, "acc-2", at(2)) }).await;
    assert!(is_conflict(&outcome), "the id is taken: {outcome:?}");
    let outcome = tx.locks().insert(&Lock { id: first.id, ..lock(b, "acc-1", at(3)) }).await;
    assert!(is_conflict(&outcome), "the id is taken in every organisation: {outcome:?}");
    // The conflicts left the transaction usable.
    let second = lock(a, "acc-1", at(4));
    tx.locks().insert(&second).await.expect("insert after a conflict");
    tx.commit().await.expect("commit after conflicts");
    assert_eq!(get_lock(&*fx.store, a, first.id).await, Some(first));
    assert_eq!(get_lock(&*fx.store, a, second.id).await, Some(second));
    assert_eq!(fx.db.count("locks", "").await, 2);
}

async fn locks_are_invisible_to_other_tenants(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (a, b) = (tenant(), tenant());
    let mine = lock(a, "acc-1", at(1));
    insert_locks(&*fx.store, std::slice::from_ref(&mine)).await;
    assert_eq!(get_lock(&*fx.store, b, mine.id).await, None);
    let mut tx = fx.store.write().await.expect("begin");
    assert_eq!(tx.locks().get_for_update(b, mine.id).await.expect("get for update"), None);
    let mallory = Lock { tenant_id: b, status: LockStatus::Released, completed_by: Some(new_id()), ..mine.clone() };
    tx.locks().update(&mallory).await.expect("update from another tenant");
    tx.commit().await.expect("commit");
    assert_eq!(get_lock(&*fx.store, a, mine.id).await, Some(mine.clone()), "unchanged");
    assert_eq!(list_locks(&*fx.store, b, "acc-1", None, page(0, 50)).await, (vec![], 0));
    assert_eq!(list_locks(&*fx.store, a, "acc-1", None, page(0, 50)).await, (vec![mine.id], 1));
}

async fn a_lock_update_replaces_exactly_the_mutable_fields(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let t = tenant();
    let original = Lock {
        counterparty_ref: Some(account_ref("acc-2")),
        expires_at: Some(at(100)),
        status: LockStatus::Active,
        ..lock(t, "acc-1", at(1))
    };
    let other = lock(t, "acc-1", at(2));
    insert_locks(&*fx.store, &[original.clone(), other.clone()]).await;

    let completing =
        Lock { status: LockStatus::Released, completed_by: Some(new_id()), updated_at: at(50), ..original.clone() };
    let attempt = Lock {
        account_ref: account_ref("acc-9"),
        counterparty_ref: None,
        asset_id: currency("JPY"),
        amount: units(1),
        expires_at: None,
        created_at: at(999),
        ..completing.clone()
    };
    let mut tx = fx.store.write().await.expect("begin");
    assert_eq!(tx.locks().get_for_update(t, original.id).await.expect("get for update"), Some(original.clone()));
    tx.locks().update(&attempt).await.expect("update");
    assert_eq!(tx.locks().get(t, original.id).await.expect("get"), Some(completing.clone()));
    tx.commit().await.expect("commit");
    assert_eq!(get_lock(&*fx.store, t, original.id).await, Some(completing.clone()));
    assert_eq!(get_lock(&*fx.store, t, other.id).await, Some(other.clone()), "only the lock with the id");
    assert_eq!(
        list_locks(&*fx.store, t, "acc-1", Some(LockStatus::Released), page(0, 50)).await,
        (vec![original.id], 1)
    );

    // And back: completed_by is cleared again.
    let reverted = Lock { updated_at: at(60), ..original.clone() };
    let mut tx = fx.store.write().await.expect("begin");
    tx.locks().update(&reverted).await.expect("update");
    tx.commit().await.expect("commit");
    assert_eq!(get_lock(&*fx.store, t, original.id).await, Some(reverted));

    // An update of an unknown id changes nothing.
    let mut tx = fx.store.write().await.expect("begin");
    tx.locks().update(&Lock { status: LockStatus::Failed, ..lock(t, "acc-1", at(3)) }).await.expect("update");
    tx.commit().await.expect("commit");
    assert_eq!(fx.db.count("locks", "").await, 2);
    assert_eq!(get_lock(&*fx.store, t, other.id).await, Some(other));
}

async fn an_accounts_locks_are_listed_newest_first_by_status(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (t, other) = (tenant(), tenant());
    let with = |l: Lock, status: LockStatus| Lock { status, ..l };
    let mut twins = [lock(t, "alice", at(20)), lock(t, "alice", at(20))];
    twins.sort_by_key(|l| l.id);
    let [low, high] = twins;
    let low = with(low, LockStatus::Active);
    let high = with(high, LockStatus::Released);
    let a1 = with(lock(t, "alice", at(10)), LockStatus::Active);
    let a2 = with(lock(t, "alice", at(30)), LockStatus::Pending);
    let a3 = with(lock(t, "alice", at(40)), LockStatus::Active);
    // Alice as the counterparty of bob's lock: not hers.
    let bobs =
        Lock { counterparty_ref: Some(account_ref("alice")), ..with(lock(t, "bob", at(50)), LockStatus::Active) };
    let upper = with(lock(t, "ALICE", at(60)), LockStatus::Active);
    insert_locks(
        &*fx.store,
        &[a2.clone(), high.clone(), bobs.clone(), a1.clone(), upper.clone(), a3.clone(), low.clone()],
    )
    .await;
    insert_locks(&*fx.store, &[with(lock(other, "alice", at(1)), LockStatus::Active)]).await;
    let records = [a1, low, high, a2, a3, bobs, upper];

    for account in ["alice", "bob", "ALICE", "nobody"] {
        for status in std::iter::once(None).chain(LockStatus::ALL.map(Some)) {
            let selected =
                records.iter().filter(|l| l.account_ref.as_str() == account && status.is_none_or(|s| l.status == s));
            let expected = newest_first(selected, lock_key);
            let total = expected.len() as u64;
            assert_eq!(
                list_locks(&*fx.store, t, account, status, page(0, 50)).await,
                (expected.clone(), total),
                "{account} {status:?}"
            );
            let mut listed = Vec::new();
            for n in 0..=expected.len() as u64 {
                let (ids, page_total) = list_locks(&*fx.store, t, account, status, page(n, 2)).await;
                assert_eq!(page_total, total);
                listed.extend(ids);
            }
            assert_eq!(listed, expected, "pages of two: {account} {status:?}");
        }
    }
    let (alices, total) = list_locks(&*fx.store, t, "alice", None, page(0, 50)).await;
    assert_eq!((alices.len(), total), (5, 5), "alice's own five");
    let (active, total) = list_locks(&*fx.store, t, "alice", Some(LockStatus::Active), page(0, 50)).await;
    assert_eq!((active.len(), total), (3, 3));
    assert_eq!(list_locks(&*fx.store, other, "alice", None, page(0, 50)).await.1, 1);
}

async fn the_expiry_sweep_selects_active_uncompleted_expired_locks_soonest_first(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (a, b) = (tenant(), tenant());
    let active = |tenant: TenantId, expires: Option<i64>| Lock {
        status: LockStatus::Active,
        expires_at: expires.map(at),
        ..lock(tenant, "acc-1", at(0))
    };
    let due_now = active(a, Some(10));
    let mut twins = [active(a, Some(7)), active(b, Some(7))];
    twins.sort_by_key(|l| l.id);
    let [twin_low, twin_high] = twins;
    let elsewhere = active(b, Some(3));
    let not_yet = active(a, Some(11));
    let no_expiry = active(a, None);
    let completing = Lock { completed_by: Some(new_id()), ..active(a, Some(1)) };
    let mut others = Vec::new();
    for status in LockStatus::ALL.into_iter().filter(|s| *s != LockStatus::Active) {
        others.push(Lock { status, ..active(a, Some(2)) });
    }
    let mut records =
        vec![due_now.clone(), twin_high.clone(), not_yet.clone(), elsewhere.clone(), no_expiry, completing];
    records.push(twin_low.clone());
    records.extend(others);
    insert_locks(&*fx.store, &records).await;

    let ids = |found: &[Lock]| found.iter().map(|l| l.id).collect::<Vec<_>>();
    let due = vec![elsewhere.id, twin_low.id, twin_high.id, due_now.id];
    // The expiry is inclusive; any organisation; soonest first, then by id.
    assert_eq!(ids(&expired(&*fx.store, at(10), 100).await), due);
    assert_eq!(expired(&*fx.store, at(10), 100).await[0], elsewhere, "whole records");
    assert_eq!(ids(&expired(&*fx.store, at(10), 2).await), due[..2].to_vec(), "up to the limit");
    assert_eq!(ids(&expired(&*fx.store, at(10), 0).await), Vec::<Uuid>::new());
    assert_eq!(ids(&expired(&*fx.store, at(9), 100).await), due[..3].to_vec());
    assert_eq!(ids(&expired(&*fx.store, at(3), 100).await), due[..1].to_vec());
    assert_eq!(
        ids(&expired(&*fx.store, at(2), 100).await),
        Vec::<Uuid>::new(),
        "other statuses and completing locks are not due"
    );
    let mut later = due.clone();
    later.push(not_yet.id);
    assert_eq!(ids(&expired(&*fx.store, at(1_000_000), 100).await), later, "never one without an expiry");

    // Once something completes a lock, or it is no longer ACTIVE, the sweep leaves it.
    let mut tx = fx.store.write().await.expect("begin");
    let claimed = Lock { completed_by: Some(new_id()), updated_at: at(10), ..elsewhere.clone() };
    tx.locks().update(&claimed).await.expect("claim");
    let released = Lock { status: LockStatus::Expired, updated_at: at(10), ..twin_low.clone() };
    tx.locks().update(&released).await.expect("expire");
    // The sweep reads in the write transaction too.
    assert_eq!(ids(&tx.locks().expired(at(10), 100).await.expect("expired")), vec![twin_high.id, due_now.id]);
    tx.commit().await.expect("commit");
    assert_eq!(ids(&expired(&*fx.store, at(10), 100).await), vec![twin_high.id, due_now.id]);
}

// ---------------------------------------------------------------------------------------------
// Breaks

backends!(breaks_round_trip_and_conflict, breaks_are_listed_newest_first_with_filters_and_totals);

async fn breaks_round_trip_and_conflict(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (a, b) = (tenant(), tenant());
    let bare = a_break(a, "acc-1", BreakReason::BalanceMismatch, at(1));
    let full = Break {
        transaction_id: Some(new_id()),
        asset_id: currency("eur"),
        detail: "expected 100, ledger says 90 — ünïcode".into(),
        ..a_break(a, "Acc.2:x_y-Z", BreakReason::ChainFailed, at(2))
    };
    insert_breaks(&*fx.store, &[bare.clone(), full.clone()]).await;
    let mut records = Vec::new();
    for (i, reason) in BreakReason::ALL.into_iter().enumerate() {
        records.push(a_break(a, "acc-3", reason, at(small(10 + i))));
    }
    insert_breaks(&*fx.store, &records).await;

    let mut tx = fx.store.read().await.expect("begin read");
    let listed = tx.breaks().list(a, &BreakFilter::default(), page(0, 50)).await.expect("list");
    drop(tx);
    let stored_full = Break { asset_id: currency("EUR"), ..full.clone() };
    let mut expected: Vec<Break> = records.iter().rev().cloned().collect();
    expected.push(stored_full);
    expected.push(bare.clone());
    assert_eq!(listed.items, expected, "whole records, newest first");

    // Ids are unique in every organisation; a conflict leaves the transaction usable.
    let mut tx = fx.store.write().await.expect("begin");
    let outcome =
        tx.breaks().insert(&Break { id: bare.id, ..a_break(b, "acc-1", BreakReason::ChainFailed, at(3)) }).await;
    assert!(is_conflict(&outcome), "the id is taken: {outcome:?}");
    let later = a_break(b, "acc-1", BreakReason::RetryExhausted, at(4));
    tx.breaks().insert(&later).await.expect("insert after a conflict");
    tx.commit().await.expect("commit");
    assert_eq!(fx.db.count("breaks", "").await, 6);
    let mut tx = fx.store.read().await.expect("begin read");
    let theirs = tx.breaks().list(b, &BreakFilter::default(), page(0, 50)).await.expect("list");
    assert_eq!((theirs.items, theirs.total), (vec![later], 1), "each organisation sees its own");
}

async fn breaks_are_listed_newest_first_with_filters_and_totals(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (t, other) = (tenant(), tenant());
    let reasons = BreakReason::ALL;
    let accounts = ["alice", "bob", "ALICE"];
    let mut records = Vec::new();
    for i in 0..24 {
        // Two at each instant, from 10 s to 21 s; every reason with every account.
        records.push(a_break(t, accounts[i % 3], reasons[(i / 3) % 3], at(10 + small(i / 2))));
    }
    let mut shuffled = records.clone();
    shuffled.reverse();
    insert_breaks(&*fx.store, &shuffled).await;
    insert_breaks(&*fx.store, &[a_break(other, "alice", BreakReason::ChainFailed, at(15))]).await;

    let bounds = [None, Some(at(10)), Some(at(13)), Some(at(21)), Some(at(22))];
    let mut checked = 0;
    for reason in std::iter::once(None).chain(reasons.map(Some)) {
        for account in [None, Some("alice"), Some("ALICE"), Some("nobody")] {
            for from in bounds {
                for to in bounds {
                    let filter = BreakFilter { reason, account_ref: account.map(account_ref), from, to };
                    let selected = records.iter().filter(|b| {
                        reason.is_none_or(|r| b.reason == r)
                            && account.is_none_or(|a| b.account_ref.as_str() == a)
                            && from.is_none_or(|f| b.detected_at >= f)
                            && to.is_none_or(|t| b.detected_at < t)
                    });
                    let expected = newest_first(selected, break_key);
                    let total = expected.len() as u64;
                    assert_eq!(
                        list_breaks(&*fx.store, t, &filter, page(0, 100)).await,
                        (expected.clone(), total),
                        "{filter:?}"
                    );
                    if expected.len() > 3 {
                        checked += 1;
                        let (first, page_total) = list_breaks(&*fx.store, t, &filter, page(0, 3)).await;
                        assert_eq!((first, page_total), (expected[..3].to_vec(), total));
                        let (second, _) = list_breaks(&*fx.store, t, &filter, page(1, 3)).await;
                        assert_eq!(second, expected[3..expected.len().min(6)].to_vec());
                    }
                }
            }
        }
    }
    assert!(checked >= 10, "the data set exercises the filters ({checked} paged lists)");

    // The bounds, explicitly: from is inclusive, to exclusive.
    let window = |from: i64, to: i64| BreakFilter { from: Some(at(from)), to: Some(at(to)), ..BreakFilter::default() };
    let at_13: Vec<Uuid> = newest_first(records.iter().filter(|b| b.detected_at == at(13)), break_key);
    assert_eq!(at_13.len(), 2);
    assert_eq!(list_breaks(&*fx.store, t, &window(13, 14), page(0, 50)).await, (at_13, 2));
    assert_eq!(list_breaks(&*fx.store, t, &window(13, 13), page(0, 50)).await, (vec![], 0));
    assert_eq!(list_breaks(&*fx.store, other, &window(15, 16), page(0, 50)).await.1, 1);
}

// ---------------------------------------------------------------------------------------------
// Positions

backends!(
    positions_accumulate_in_the_callers_transaction,
    several_positions_move_in_one_call,
    an_overflowing_position_stays_at_its_bound
);

async fn positions_accumulate_in_the_callers_transaction(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (t, other) = (tenant(), tenant());
    // An account never touched is at zero, in a read and in a write transaction.
    assert_eq!(position(&*fx.store, t, "alice").await, Position::default());
    let mut tx = fx.store.write().await.expect("begin");
    assert_eq!(tx.positions().get(t, &account_ref("alice")).await.expect("get"), Position { total: 0, held: 0 });
    tx.commit().await.expect("commit");
    assert_eq!(fx.db.count("positions", "").await, 0, "reading creates nothing");

    apply(&*fx.store, t, "alice", 100, 0, at(1)).await;
    assert_eq!(position(&*fx.store, t, "alice").await, Position { total: 100, held: 0 });
    apply(&*fx.store, t, "alice", -30, 20, at(2)).await;
    apply(&*fx.store, t, "alice", 0, -5, at(3)).await;
    assert_eq!(position(&*fx.store, t, "alice").await, Position { total: 70, held: 15 });

    // Several moves in one transaction, each seen by the next; a transfer moves two accounts.
    let mut tx = fx.store.write().await.expect("begin");
    tx.positions().apply(t, &account_ref("alice"), -20, 0, at(4)).await.expect("debit");
    tx.positions().apply(t, &account_ref("bob"), 20, 0, at(4)).await.expect("credit");
    tx.positions().apply(t, &account_ref("alice"), 0, -15, at(4)).await.expect("release");
    assert_eq!(tx.positions().get(t, &account_ref("alice")).await.expect("get"), Position { total: 50, held: 0 });
    assert_eq!(tx.positions().get(t, &account_ref("bob")).await.expect("get"), Position { total: 20, held: 0 });
    tx.commit().await.expect("commit");
    assert_eq!(position(&*fx.store, t, "alice").await, Position { total: 50, held: 0 });
    assert_eq!(position(&*fx.store, t, "bob").await, Position { total: 20, held: 0 });

    // A transaction rolled back moves nothing.
    let mut tx = fx.store.write().await.expect("begin");
    tx.positions().apply(t, &account_ref("alice"), 1_000, 1_000, at(5)).await.expect("apply");
    tx.positions().apply(t, &account_ref("carol"), 1_000, 0, at(5)).await.expect("apply");
    drop(tx);
    assert_eq!(position(&*fx.store, t, "alice").await, Position { total: 50, held: 0 });
    assert_eq!(position(&*fx.store, t, "carol").await, Position::default());

    // Positions are per organisation and per exact reference.
    assert_eq!(position(&*fx.store, other, "alice").await, Position::default());
    assert_eq!(position(&*fx.store, t, "ALICE").await, Position::default());
    apply(&*fx.store, other, "alice", 7, 7, at(6)).await;
    assert_eq!(position(&*fx.store, other, "alice").await, Position { total: 7, held: 7 });
    assert_eq!(position(&*fx.store, t, "alice").await, Position { total: 50, held: 0 });

    // The whole i64 range, and back to zero (the row stays, at zero).
    apply(&*fx.store, t, "whale", i64::MAX, i64::MAX, at(7)).await;
    assert_eq!(position(&*fx.store, t, "whale").await, Position { total: i64::MAX, held: i64::MAX });
    apply(&*fx.store, t, "whale", -i64::MAX, -i64::MAX, at(8)).await;
    assert_eq!(position(&*fx.store, t, "whale").await, Position::default());
    apply(&*fx.store, t, "debtor", -5, 0, at(9)).await;
    assert_eq!(position(&*fx.store, t, "debtor").await, Position { total: -5, held: 0 }, "deltas are signed");
    assert_eq!(fx.db.count("positions", "").await, 5);
}

async fn several_positions_move_in_one_call(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (t, other) = (tenant(), tenant());
    apply(&*fx.store, t, "alice", 100, 10, at(1)).await;
    let change = |tenant, account: &str, total_delta, held_delta| PositionChange {
        tenant,
        account_ref: account_ref(account),
        total_delta,
        held_delta,
    };
    let mut tx = fx.store.write().await.expect("begin");
    tx.positions().apply_all(&[], at(2)).await.expect("nothing to apply");
    let changes = [change(t, "alice", -30, -10), change(t, "bob", 30, 0), change(other, "alice", 5, 5)];
    tx.positions().apply_all(&changes, at(2)).await.expect("apply all");
    tx.commit().await.expect("commit");
    assert_eq!(position(&*fx.store, t, "alice").await, Position { total: 70, held: 0 });
    assert_eq!(position(&*fx.store, t, "bob").await, Position { total: 30, held: 0 });
    assert_eq!(position(&*fx.store, other, "alice").await, Position { total: 5, held: 5 });

    // A sum past the range stays at its bound (the ledger moved the value; reconciliation
    // reports what the position cannot say), and the call's other changes apply.
    let mut tx = fx.store.write().await.expect("begin");
    let changes = [change(t, "bob", 1, 0), change(t, "alice", i64::MAX, 0)];
    tx.positions().apply_all(&changes, at(3)).await.expect("apply all");
    tx.commit().await.expect("commit");
    assert_eq!(position(&*fx.store, t, "bob").await, Position { total: 31, held: 0 });
    assert_eq!(position(&*fx.store, t, "alice").await, Position { total: i64::MAX, held: 0 });
}

async fn an_overflowing_position_stays_at_its_bound(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let t = tenant();
    apply(&*fx.store, t, "whale", i64::MAX - 1, -i64::MAX + 1, at(1)).await;
    apply(&*fx.store, t, "whale", 2, -2, at(2)).await;
    assert_eq!(position(&*fx.store, t, "whale").await, Position { total: i64::MAX, held: -i64::MAX });
    apply(&*fx.store, t, "whale", i64::MAX, -i64::MAX, at(3)).await;
    assert_eq!(position(&*fx.store, t, "whale").await, Position { total: i64::MAX, held: -i64::MAX });
    // Away from the bound, sums are exact again.
    apply(&*fx.store, t, "whale", -10, 10, at(4)).await;
    assert_eq!(position(&*fx.store, t, "whale").await, Position { total: i64::MAX - 10, held: -i64::MAX + 10 });
}

// ---------------------------------------------------------------------------------------------
// Reads for update

backends!(
    reads_for_update_need_a_write_transaction,
    get_for_update_serialises_changes_of_one_operation,
    get_for_update_serialises_changes_of_one_lock,
);

async fn reads_for_update_need_a_write_transaction(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let t = tenant();
    let op = operation(t, "acc-1", at(1));
    let held = lock(t, "acc-1", at(1));
    insert_operations(&*fx.store, std::slice::from_ref(&op)).await;
    insert_locks(&*fx.store, std::slice::from_ref(&held)).await;

    // Each in its own read transaction: a refused statement ends a PostgreSQL transaction.
    let mut tx = fx.store.read().await.expect("begin read");
    tx.operations().get_for_update(t, op.id).await.expect_err("an operation for update in a read transaction");
    drop(tx);
    let mut tx = fx.store.read().await.expect("begin read");
    tx.locks().get_for_update(t, held.id).await.expect_err("a lock for update in a read transaction");
    drop(tx);
    // Inside a write transaction they read, and the plain reads work in both.
    let mut tx = fx.store.write().await.expect("begin");
    assert_eq!(tx.operations().get_for_update(t, op.id).await.expect("get for update"), Some(op.clone()));
    assert_eq!(tx.locks().get_for_update(t, held.id).await.expect("get for update"), Some(held.clone()));
    tx.commit().await.expect("commit");
    assert_eq!(get_operation(&*fx.store, t, op.id).await, Some(op));
    assert_eq!(get_lock(&*fx.store, t, held.id).await, Some(held));
}

async fn get_for_update_serialises_changes_of_one_operation(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let t = tenant();
    let op = operation(t, "acc-1", at(0));
    insert_operations(&*fx.store, std::slice::from_ref(&op)).await;

    // The first change holds the operation while it works, so the second reads it only once the
    // first committed, and moves on from its state.
    let id = op.id;
    let next = second_change_waits(
        &fx.store,
        move |tx| {
            Box::pin(async move {
                let got = tx.operations().get_for_update(t, id).await.expect("get").expect("exists");
                assert_eq!(got.state, OperationState::Submitted);
                got
            })
        },
        |tx, got| {
            Box::pin(async move {
                let next = Operation { state: OperationState::PendingSettlement, updated_at: at(1), ..got };
                tx.operations().update(&next).await.expect("update");
            })
        },
        move |tx| {
            Box::pin(async move {
                let got = tx.operations().get_for_update(t, id).await.expect("get").expect("exists");
                assert_eq!(
                    (got.state, got.updated_at),
                    (OperationState::PendingSettlement, at(1)),
                    "sees the first's outcome"
                );
                let next =
                    Operation { state: OperationState::Settling, tx_hash: Some(hash(0xac)), updated_at: at(2), ..got };
                tx.operations().update(&next).await.expect("update");
                next
            })
        },
    )
    .await;
    assert_eq!(get_operation(&*fx.store, t, op.id).await, Some(next));
}

async fn get_for_update_serialises_changes_of_one_lock(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let t = tenant();
    let held = Lock { status: LockStatus::Active, expires_at: Some(at(5)), ..lock(t, "acc-1", at(0)) };
    insert_locks(&*fx.store, std::slice::from_ref(&held)).await;

    // A RELEASE claims the lock while it works,
    let release = new_id();
    // ...so the expiry sweep's change waits, and finds it already being completed.
    let id = held.id;
    second_change_waits(
        &fx.store,
        move |tx| {
            Box::pin(async move {
                let got = tx.locks().get_for_update(t, id).await.expect("get").expect("exists");
                assert_eq!(got.completed_by, None);
                got
            })
        },
        move |tx, got| {
            Box::pin(async move {
                let next = Lock { completed_by: Some(release), updated_at: at(1), ..got };
                tx.locks().update(&next).await.expect("update");
            })
        },
        move |tx| {
            Box::pin(async move {
                let got = tx.locks().get_for_update(t, id).await.expect("get").expect("exists");
                assert_eq!(got.completed_by, Some(release), "sees the release's claim");
                assert_eq!(tx.locks().expired(at(10), 10).await.expect("expired"), vec![], "nothing left to sweep");
            })
        },
    )
    .await;
}
