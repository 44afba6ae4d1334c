//! The persistence contract of token contracts and accounts (`tokenops_store::accounts`),
//! checked on both backends: round trips of every field, uniqueness per organisation, tenant
//! scoping, asset codes compared ignoring case, updates of every mutable field, lists (oldest
//! first, then id) with their filters, pages and totals, a customer's accounts in a status, and
//! reads for update. Every test is registered with `backends!`, so it runs as `name::sqlite` and
//! `name::postgres` on a fresh, migrated store reached through the trait object, the way the app
//! sees it.
//!
//! The store never reads the clock: tests pass time in, from the fixed instant `T0`.

use tokenops_domain::account::{Account, AccountFilter, AccountStatus};
use tokenops_domain::asset::AssetId;
use tokenops_domain::chain::Address;
use tokenops_domain::contract::{Contract, ContractFilter, ContractStatus};
use tokenops_domain::paging::PageRequest;
use tokenops_domain::{TenantId, Timestamp, new_id};
use tokenops_store::{Store, StoreError};
use tokenops_testkit::{Backend, StoreFixture, backends};
use uuid::Uuid;

mod common;
use common::{account_ref, at, currency, customer_ref, ids_and_total, insert_all, page, second_change_waits, tenant};

/// A fresh, migrated store per test: the kit's fixture.
type Fixture = StoreFixture;

// ---------------------------------------------------------------------------------------------
// Helpers

fn address(n: u8) -> Address {
    Address::from_bytes([n; 20])
}

/// A PENDING contract being deployed: no address, nothing to adopt, no failure.
fn contract(tenant: TenantId, asset_id: &str, created_at: Timestamp) -> Contract {
    Contract {
        id: new_id(),
        tenant_id: tenant,
        asset_id: currency(asset_id),
        name: format!("{asset_id} token"),
        symbol: format!("t{asset_id}"),
        decimals: 2,
        status: ContractStatus::Pending,
        address: None,
        adopt_address: None,
        failure_reason: None,
        created_at,
        updated_at: created_at,
    }
}

/// A PENDING account: no wallet yet, no failure, first registration.
fn account(tenant: TenantId, reference: &str, customer: &str, asset_id: &str, created_at: Timestamp) -> Account {
    Account {
        id: new_id(),
        tenant_id: tenant,
        account_ref: account_ref(reference),
        customer_ref: customer_ref(customer),
        asset_id: currency(asset_id),
        status: AccountStatus::Pending,
        wallet_address: None,
        failure_reason: None,
        generation: 0,
        provisioned_at: None,
        created_at,
        updated_at: created_at,
    }
}

async fn insert_contracts(store: &dyn Store, contracts: &[Contract]) {
    insert_all(store, contracts, |tx, c| tx.contracts().insert(c)).await
}

async fn insert_accounts(store: &dyn Store, accounts: &[Account]) {
    insert_all(store, accounts, |tx, a| tx.accounts().insert(a)).await
}

async fn get_contract(store: &dyn Store, tenant: TenantId, asset_id: &str) -> Option<Contract> {
    let mut tx = store.read().await.expect("begin read");
    tx.contracts().get(tenant, currency(asset_id)).await.expect("get contract")
}

async fn get_account(store: &dyn Store, tenant: TenantId, reference: &str) -> Option<Account> {
    let mut tx = store.read().await.expect("begin read");
    tx.accounts().get(tenant, &account_ref(reference)).await.expect("get account")
}

/// The ids of a page of contracts, and the total.
async fn list_contracts(
    store: &dyn Store,
    tenant: TenantId,
    filter: ContractFilter,
    request: PageRequest,
) -> (Vec<Uuid>, u64) {
    let mut tx = store.read().await.expect("begin read");
    ids_and_total(tx.contracts().list(tenant, &filter, request).await.expect("list contracts"), |c| c.id)
}

/// The ids of a page of accounts, and the total.
async fn list_accounts(
    store: &dyn Store,
    tenant: TenantId,
    filter: AccountFilter,
    request: PageRequest,
) -> (Vec<Uuid>, u64) {
    let mut tx = store.read().await.expect("begin read");
    ids_and_total(tx.accounts().list(tenant, &filter, request).await.expect("list accounts"), |a| a.id)
}

fn account_ids<'a>(records: impl IntoIterator<Item = &'a Account>) -> Vec<Uuid> {
    records.into_iter().map(|a| a.id).collect()
}

// ---------------------------------------------------------------------------------------------
// The migration

backends!(the_tables_exist_and_start_empty);

async fn the_tables_exist_and_start_empty(backend: Backend) {
    let fx = Fixture::new(backend).await;
    for table in ["contracts", "accounts"] {
        assert_eq!(fx.db.count(table, "").await, 0, "{table}");
    }
    let name = fx.db.strings("SELECT name FROM schema_migrations WHERE version = 5").await;
    assert_eq!(name, vec!["accounts".to_owned()]);
}

// ---------------------------------------------------------------------------------------------
// Token contracts

backends!(
    contracts_round_trip_every_field,
    a_second_contract_for_an_asset_is_a_conflict,
    contracts_are_invisible_to_other_tenants,
    a_contract_update_replaces_every_mutable_field,
    contracts_are_listed_oldest_first_with_filters_and_totals,
);

async fn contracts_round_trip_every_field(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let t = tenant();
    // Every optional field empty, and every one set (with the extreme decimals).
    let pending = Contract { decimals: 0, ..contract(t, "JPY", at(1)) };
    let failed = Contract {
        name: "Euro — tokenised".into(),
        symbol: "tEUR".into(),
        decimals: u8::MAX,
        status: ContractStatus::Failed,
        address: Some(address(0xab)),
        adopt_address: Some(address(0x0c)),
        failure_reason: Some("deployment reverted: out of gas".into()),
        updated_at: at(9),
        ..contract(t, "EUR", at(2))
    };
    insert_contracts(&*fx.store, &[pending.clone(), failed.clone()]).await;

    for (record, spellings) in [(&pending, ["JPY", "jpy", "Jpy"]), (&failed, ["EUR", "eur", "eUr"])] {
        for asset in spellings {
            assert_eq!(get_contract(&*fx.store, t, asset).await.as_ref(), Some(record), "get {asset}");
        }
        let mut tx = fx.store.write().await.expect("begin");
        for asset in spellings {
            let got = tx.contracts().get_for_update(t, currency(asset)).await.expect("get for update");
            assert_eq!(got.as_ref(), Some(record), "get_for_update {asset}");
        }
        tx.commit().await.expect("commit");
    }
    assert_eq!(get_contract(&*fx.store, t, "USD").await, None, "unknown asset");
    // Nothing that is not a currency can be asked for: not a prefix, not nothing.
    assert!(AssetId::parse("EU").is_err(), "not a prefix");
    assert!(AssetId::parse("").is_err());
    let mut tx = fx.store.write().await.expect("begin");
    assert_eq!(tx.contracts().get_for_update(t, currency("usd")).await.expect("get for update"), None);
    tx.commit().await.expect("commit");
}

async fn a_second_contract_for_an_asset_is_a_conflict(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (a, b) = (tenant(), tenant());
    let usd = contract(a, "USD", at(1));
    let mut tx = fx.store.write().await.expect("begin");
    tx.contracts().insert(&usd).await.expect("insert");
    let again = contract(a, "USD", at(2));
    let outcome = tx.contracts().insert(&again).await;
    assert!(matches!(outcome, Err(StoreError::Conflict(_))), "the asset is taken: {outcome:?}");
    // A code given in another case is stored upper-case: the same asset.
    let lower = contract(a, "usd", at(3));
    let outcome = tx.contracts().insert(&lower).await;
    assert!(matches!(outcome, Err(StoreError::Conflict(_))), "the asset is taken in any case: {outcome:?}");
    let same_id = Contract { id: usd.id, ..contract(a, "GBP", at(4)) };
    let outcome = tx.contracts().insert(&same_id).await;
    assert!(matches!(outcome, Err(StoreError::Conflict(_))), "the id is taken: {outcome:?}");
    // The conflicts left the transaction usable; another organisation may have the asset.
    let elsewhere = contract(b, "USD", at(5));
    tx.contracts().insert(&elsewhere).await.expect("the same asset in another organisation");
    let gbp = contract(a, "GBP", at(6));
    tx.contracts().insert(&gbp).await.expect("insert after a conflict");
    tx.commit().await.expect("commit after conflicts");

    assert_eq!(get_contract(&*fx.store, a, "usd").await, Some(usd));
    assert_eq!(get_contract(&*fx.store, b, "USD").await, Some(elsewhere));
    assert_eq!(get_contract(&*fx.store, a, "GBP").await, Some(gbp));
    assert_eq!(fx.db.count("contracts", "").await, 3);

    // Stored upper-case, and found by any spelling.
    let mut tx = fx.store.write().await.expect("begin");
    let chf = contract(b, "chf", at(7));
    tx.contracts().insert(&chf).await.expect("insert a lower-case code");
    tx.commit().await.expect("commit");
    let stored = get_contract(&*fx.store, b, "Chf").await.expect("found ignoring case");
    assert_eq!(stored, Contract { asset_id: currency("CHF"), ..chf });
}

async fn contracts_are_invisible_to_other_tenants(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (a, b) = (tenant(), tenant());
    let usd = contract(a, "USD", at(1));
    insert_contracts(&*fx.store, std::slice::from_ref(&usd)).await;

    assert_eq!(get_contract(&*fx.store, b, "USD").await, None);
    let mut tx = fx.store.write().await.expect("begin");
    assert_eq!(tx.contracts().get_for_update(b, currency("USD")).await.expect("get for update"), None);
    // Another organisation's update of the same id reaches nothing.
    let mallory = Contract {
        tenant_id: b,
        name: "Mallory".into(),
        status: ContractStatus::Inactive,
        address: Some(address(0xee)),
        updated_at: at(60),
        ..usd.clone()
    };
    tx.contracts().update(&mallory).await.expect("update from another tenant");
    tx.commit().await.expect("commit");
    assert_eq!(get_contract(&*fx.store, a, "USD").await, Some(usd.clone()), "unchanged");
    assert_eq!(list_contracts(&*fx.store, b, ContractFilter::default(), page(0, 50)).await, (vec![], 0));
    assert_eq!(list_contracts(&*fx.store, a, ContractFilter::default(), page(0, 50)).await, (vec![usd.id], 1));
}

async fn a_contract_update_replaces_every_mutable_field(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let t = tenant();
    let original = contract(t, "USD", at(1));
    let other = contract(t, "EUR", at(2));
    insert_contracts(&*fx.store, &[original.clone(), other.clone()]).await;

    // Every mutable field, the optional ones from None to Some.
    let changed = Contract {
        name: "US Dollar token".into(),
        symbol: "USDT".into(),
        decimals: 6,
        status: ContractStatus::Active,
        address: Some(address(0x11)),
        adopt_address: Some(address(0x22)),
        failure_reason: Some("an earlier attempt failed".into()),
        updated_at: at(60),
        ..original.clone()
    };
    let mut tx = fx.store.write().await.expect("begin");
    let locked = tx.contracts().get_for_update(t, currency("usd")).await.expect("get for update");
    assert_eq!(locked.as_ref(), Some(&original));
    tx.contracts().update(&changed).await.expect("update");
    // Read back inside the transaction that changed it.
    assert_eq!(tx.contracts().get(t, currency("USD")).await.expect("get"), Some(changed.clone()));
    tx.commit().await.expect("commit");
    assert_eq!(get_contract(&*fx.store, t, "USD").await, Some(changed.clone()));
    assert_eq!(get_contract(&*fx.store, t, "EUR").await, Some(other.clone()), "only the contract with the id");

    // And back: the optional fields are cleared again. What is not mutable (the asset, the
    // creation time) stays as inserted whatever the record says.
    let reverted = Contract { updated_at: at(120), ..original.clone() };
    let mut tx = fx.store.write().await.expect("begin");
    tx.contracts()
        .update(&Contract { asset_id: currency("GBP"), created_at: at(999), ..reverted.clone() })
        .await
        .expect("update");
    tx.commit().await.expect("commit");
    assert_eq!(get_contract(&*fx.store, t, "USD").await, Some(reverted));
    assert_eq!(get_contract(&*fx.store, t, "GBP").await, None);

    // An update of an unknown id changes nothing.
    let mut tx = fx.store.write().await.expect("begin");
    tx.contracts().update(&contract(t, "EUR", at(3))).await.expect("update of an unknown id");
    tx.commit().await.expect("commit");
    assert_eq!(get_contract(&*fx.store, t, "EUR").await, Some(other));
}

async fn contracts_are_listed_oldest_first_with_filters_and_totals(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (t, other) = (tenant(), tenant());
    let with = |c: Contract, status: ContractStatus| Contract { status, ..c };
    // Inserted out of order; two created at the same instant (the id breaks the tie).
    let mut twins = [contract(t, "CHF", at(20)), contract(t, "SEK", at(20))];
    twins.sort_by_key(|c| c.id);
    let contracts = vec![
        with(contract(t, "JPY", at(40)), ContractStatus::Active),
        with(twins[1].clone(), ContractStatus::Active),
        with(contract(t, "USD", at(10)), ContractStatus::Pending),
        with(contract(t, "EUR", at(30)), ContractStatus::Failed),
        with(twins[0].clone(), ContractStatus::Inactive),
    ];
    insert_contracts(&*fx.store, &contracts).await;
    insert_contracts(&*fx.store, &[with(contract(other, "USD", at(1)), ContractStatus::Active)]).await;
    let by_asset = |code: &str| contracts.iter().find(|c| c.asset_id.code() == code).expect("inserted");
    let oldest_first = vec![by_asset("USD").id, twins[0].id, twins[1].id, by_asset("EUR").id, by_asset("JPY").id];

    let all = ContractFilter::default();
    assert_eq!(list_contracts(&*fx.store, t, all.clone(), page(0, 50)).await, (oldest_first.clone(), 5));
    // Pages of two, with the same total, and nothing past the end.
    assert_eq!(list_contracts(&*fx.store, t, all.clone(), page(0, 2)).await, (oldest_first[0..2].to_vec(), 5));
    assert_eq!(list_contracts(&*fx.store, t, all.clone(), page(1, 2)).await, (oldest_first[2..4].to_vec(), 5));
    assert_eq!(list_contracts(&*fx.store, t, all.clone(), page(2, 2)).await, (oldest_first[4..].to_vec(), 5));
    assert_eq!(list_contracts(&*fx.store, t, all.clone(), page(3, 2)).await, (vec![], 5));

    // By asset, in any case.
    for asset in ["EUR", "eur", "Eur"] {
        let filter = ContractFilter { asset_id: Some(currency(asset)), ..ContractFilter::default() };
        assert_eq!(list_contracts(&*fx.store, t, filter, page(0, 50)).await, (vec![by_asset("EUR").id], 1), "{asset}");
    }
    let unknown = ContractFilter { asset_id: Some(currency("GBP")), ..ContractFilter::default() };
    assert_eq!(list_contracts(&*fx.store, t, unknown, page(0, 50)).await, (vec![], 0));

    // By status.
    let active = ContractFilter { status: Some(ContractStatus::Active), ..ContractFilter::default() };
    let expected = vec![twins[1].id, by_asset("JPY").id];
    assert_eq!(list_contracts(&*fx.store, t, active.clone(), page(0, 50)).await, (expected.clone(), 2));
    assert_eq!(list_contracts(&*fx.store, t, active, page(1, 1)).await, (expected[1..].to_vec(), 2));
    for (status, code) in [(ContractStatus::Pending, "USD"), (ContractStatus::Failed, "EUR")] {
        let filter = ContractFilter { status: Some(status), ..ContractFilter::default() };
        assert_eq!(list_contracts(&*fx.store, t, filter, page(0, 50)).await, (vec![by_asset(code).id], 1));
    }

    // Both filters.
    let both = ContractFilter { asset_id: Some(currency("jpy")), status: Some(ContractStatus::Active) };
    assert_eq!(list_contracts(&*fx.store, t, both, page(0, 50)).await, (vec![by_asset("JPY").id], 1));
    let neither = ContractFilter { asset_id: Some(currency("jpy")), status: Some(ContractStatus::Pending) };
    assert_eq!(list_contracts(&*fx.store, t, neither, page(0, 50)).await, (vec![], 0));

    // The other organisation sees only its own.
    let (theirs, total) = list_contracts(&*fx.store, other, ContractFilter::default(), page(0, 50)).await;
    assert_eq!((theirs.len(), total), (1, 1));
}

// ---------------------------------------------------------------------------------------------
// Accounts

backends!(
    accounts_round_trip_every_field,
    a_stored_address_or_asset_that_does_not_parse_is_a_corrupt_row,
    a_second_account_with_a_reference_is_a_conflict,
    accounts_are_invisible_to_other_tenants,
    an_account_update_replaces_every_mutable_field,
    accounts_are_listed_oldest_first_with_filters_and_totals,
    a_customers_accounts_in_a_status_are_selected_oldest_first,
);

async fn a_stored_address_or_asset_that_does_not_parse_is_a_corrupt_row(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let t = tenant();
    let usd = contract(t, "USD", at(1));
    insert_contracts(&*fx.store, std::slice::from_ref(&usd)).await;
    for (n, (column, value)) in
        [("wallet_address", "'0x12'"), ("wallet_address", "'12'"), ("asset_id", "'XYZ'")].into_iter().enumerate()
    {
        let record = account(t, &format!("acc-{n}"), "cust-1", "USD", at(1));
        insert_accounts(&*fx.store, std::slice::from_ref(&record)).await;
        fx.db.execute(&format!("UPDATE accounts SET {column} = {value} WHERE id = '{}'", record.id)).await;
        let mut tx = fx.store.read().await.expect("begin read");
        let read = tx.accounts().get(t, &record.account_ref).await;
        assert!(matches!(read, Err(StoreError::Corrupt(_))), "{column} = {value}: {read:?}");
    }
    fx.db.execute(&format!("UPDATE contracts SET address = '0xnot-an-address' WHERE id = '{}'", usd.id)).await;
    let mut tx = fx.store.read().await.expect("begin read");
    let read = tx.contracts().get(t, currency("USD")).await;
    assert!(matches!(read, Err(StoreError::Corrupt(_))), "contract address: {read:?}");
}

async fn accounts_round_trip_every_field(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let t = tenant();
    // Every optional field empty, and every one set (with the largest generation).
    let pending = account(t, "acc-1", "cust-1", "USD", at(1));
    let provisioned = Account {
        status: AccountStatus::Inactive,
        wallet_address: Some(address(0x5a)),
        failure_reason: Some("a previous registration failed".into()),
        generation: u32::MAX,
        provisioned_at: Some(at(5)),
        updated_at: at(7),
        ..account(t, "Acc.2:x_y-Z", "Cust.2:x_y-Z", "EUR", at(2))
    };
    insert_accounts(&*fx.store, &[pending.clone(), provisioned.clone()]).await;

    for record in [&pending, &provisioned] {
        let reference = record.account_ref.as_str();
        assert_eq!(get_account(&*fx.store, t, reference).await.as_ref(), Some(record), "get {reference}");
        let mut tx = fx.store.write().await.expect("begin");
        let got = tx.accounts().get_for_update(t, &record.account_ref).await.expect("get for update");
        assert_eq!(got.as_ref(), Some(record), "get_for_update {reference}");
        tx.commit().await.expect("commit");
    }
    // References are exact: no other case, no prefix.
    for reference in ["ACC-1", "acc-", "acc.2:x_y-z", "acc-3"] {
        assert_eq!(get_account(&*fx.store, t, reference).await, None, "{reference}");
    }
    let mut tx = fx.store.write().await.expect("begin");
    assert_eq!(tx.accounts().get_for_update(t, &account_ref("acc-3")).await.expect("get for update"), None);
    tx.commit().await.expect("commit");
}

async fn a_second_account_with_a_reference_is_a_conflict(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (a, b) = (tenant(), tenant());
    let first = account(a, "acc-1", "cust-1", "USD", at(1));
    let mut tx = fx.store.write().await.expect("begin");
    tx.accounts().insert(&first).await.expect("insert");
    // The same reference, even for another customer or asset.
    let again = account(a, "acc-1", "cust-2", "EUR", at(2));
    let outcome = tx.accounts().insert(&again).await;
    assert!(matches!(outcome, Err(StoreError::Conflict(_))), "the reference is taken: {outcome:?}");
    let same_id = Account { id: first.id, ..account(a, "acc-2", "cust-1", "USD", at(3)) };
    let outcome = tx.accounts().insert(&same_id).await;
    assert!(matches!(outcome, Err(StoreError::Conflict(_))), "the id is taken: {outcome:?}");
    // The conflicts left the transaction usable; references are case-sensitive; another
    // organisation may have the reference.
    let upper = account(a, "ACC-1", "cust-1", "USD", at(4));
    tx.accounts().insert(&upper).await.expect("another reference by case");
    let elsewhere = account(b, "acc-1", "cust-1", "USD", at(5));
    tx.accounts().insert(&elsewhere).await.expect("the same reference in another organisation");
    tx.commit().await.expect("commit after conflicts");

    assert_eq!(get_account(&*fx.store, a, "acc-1").await, Some(first));
    assert_eq!(get_account(&*fx.store, a, "ACC-1").await, Some(upper));
    assert_eq!(get_account(&*fx.store, b, "acc-1").await, Some(elsewhere));
    assert_eq!(fx.db.count("accounts", "").await, 3);

    // An asset given in lower case is stored and read back as its upper-case code.
    let lower = account(b, "acc-2", "cust-1", "chf", at(6));
    insert_accounts(&*fx.store, std::slice::from_ref(&lower)).await;
    let stored = get_account(&*fx.store, b, "acc-2").await.expect("stored");
    assert_eq!(stored, Account { asset_id: currency("CHF"), ..lower });
}

async fn accounts_are_invisible_to_other_tenants(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (a, b) = (tenant(), tenant());
    let mine = account(a, "acc-1", "cust-1", "USD", at(1));
    insert_accounts(&*fx.store, std::slice::from_ref(&mine)).await;

    assert_eq!(get_account(&*fx.store, b, "acc-1").await, None);
    let mut tx = fx.store.write().await.expect("begin");
    assert_eq!(tx.accounts().get_for_update(b, &mine.account_ref).await.expect("get for update"), None);
    let theirs = tx
        .accounts()
        .for_customer_in_status(b, &mine.customer_ref, AccountStatus::Pending)
        .await
        .expect("for customer in status");
    assert_eq!(theirs, vec![]);
    // Another organisation's update of the same id reaches nothing.
    let mallory = Account {
        tenant_id: b,
        status: AccountStatus::Active,
        wallet_address: Some(address(0xee)),
        generation: 9,
        updated_at: at(60),
        ..mine.clone()
    };
    tx.accounts().update(&mallory).await.expect("update from another tenant");
    tx.commit().await.expect("commit");
    assert_eq!(get_account(&*fx.store, a, "acc-1").await, Some(mine.clone()), "unchanged");
    assert_eq!(list_accounts(&*fx.store, b, AccountFilter::default(), page(0, 50)).await, (vec![], 0));
    let by_customer = AccountFilter { customer_ref: Some(mine.customer_ref.clone()), ..AccountFilter::default() };
    assert_eq!(list_accounts(&*fx.store, b, by_customer, page(0, 50)).await, (vec![], 0));
    assert_eq!(list_accounts(&*fx.store, a, AccountFilter::default(), page(0, 50)).await, (vec![mine.id], 1));
}

async fn an_account_update_replaces_every_mutable_field(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let t = tenant();
    let original = account(t, "acc-1", "cust-1", "USD", at(1));
    let other = account(t, "acc-2", "cust-1", "USD", at(2));
    insert_accounts(&*fx.store, &[original.clone(), other.clone()]).await;

    // Every mutable field, the optional ones from None to Some.
    let changed = Account {
        customer_ref: customer_ref("cust-9"),
        asset_id: currency("EUR"),
        status: AccountStatus::Active,
        wallet_address: Some(address(0x77)),
        failure_reason: Some("kept from an earlier attempt".into()),
        generation: 3,
        provisioned_at: Some(at(30)),
        updated_at: at(60),
        ..original.clone()
    };
    let mut tx = fx.store.write().await.expect("begin");
    let locked = tx.accounts().get_for_update(t, &original.account_ref).await.expect("get for update");
    assert_eq!(locked.as_ref(), Some(&original));
    tx.accounts().update(&changed).await.expect("update");
    // Read back inside the transaction that changed it.
    assert_eq!(tx.accounts().get(t, &original.account_ref).await.expect("get"), Some(changed.clone()));
    tx.commit().await.expect("commit");
    assert_eq!(get_account(&*fx.store, t, "acc-1").await, Some(changed.clone()));
    assert_eq!(get_account(&*fx.store, t, "acc-2").await, Some(other.clone()), "only the account with the id");

    // The new customer and asset are what the lists filter by.
    let by_new = AccountFilter {
        customer_ref: Some(customer_ref("cust-9")),
        asset_id: Some(currency("eur")),
        status: Some(AccountStatus::Active),
    };
    assert_eq!(list_accounts(&*fx.store, t, by_new, page(0, 50)).await, (vec![original.id], 1));

    // And back: the optional fields are cleared again. What is not mutable (the reference, the
    // creation time) stays as inserted whatever the record says; the asset is stored upper-case.
    let reverted = Account { updated_at: at(120), ..original.clone() };
    let mut tx = fx.store.write().await.expect("begin");
    tx.accounts()
        .update(&Account {
            account_ref: account_ref("acc-renamed"),
            asset_id: currency("usd"),
            created_at: at(999),
            ..reverted.clone()
        })
        .await
        .expect("update");
    tx.commit().await.expect("commit");
    assert_eq!(get_account(&*fx.store, t, "acc-1").await, Some(reverted));
    assert_eq!(get_account(&*fx.store, t, "acc-renamed").await, None);

    // An update of an unknown id changes nothing.
    let mut tx = fx.store.write().await.expect("begin");
    let unknown = Account { generation: 5, ..account(t, "acc-2", "cust-2", "JPY", at(3)) };
    tx.accounts().update(&unknown).await.expect("update of an unknown id");
    tx.commit().await.expect("commit");
    assert_eq!(get_account(&*fx.store, t, "acc-2").await, Some(other));
}

async fn accounts_are_listed_oldest_first_with_filters_and_totals(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (t, other) = (tenant(), tenant());
    let with = |a: Account, status: AccountStatus| Account { status, ..a };
    // Two created at the same instant: the id breaks the tie.
    let mut twins = [account(t, "twin-a", "alice", "EUR", at(20)), account(t, "twin-b", "alice", "EUR", at(20))];
    twins.sort_by_key(|a| a.id);
    let (low, high) = (twins[0].clone(), twins[1].clone());
    let a1 = with(account(t, "a1", "alice", "USD", at(10)), AccountStatus::Active);
    let low = with(low, AccountStatus::Active);
    let high = with(high, AccountStatus::Inactive);
    let b1 = with(account(t, "b1", "bob", "USD", at(30)), AccountStatus::Active);
    let b2 = with(account(t, "b2", "bob", "JPY", at(40)), AccountStatus::Pending);
    // Customer references are exact: another case is another customer.
    let upper_bob = with(account(t, "B3", "BOB", "USD", at(50)), AccountStatus::Active);
    // Inserted out of order.
    insert_accounts(&*fx.store, &[b2.clone(), high.clone(), a1.clone(), upper_bob.clone(), b1.clone(), low.clone()])
        .await;
    insert_accounts(&*fx.store, &[with(account(other, "a1", "alice", "USD", at(1)), AccountStatus::Active)]).await;
    let oldest_first = account_ids([&a1, &low, &high, &b1, &b2, &upper_bob]);

    let all = AccountFilter::default();
    assert_eq!(list_accounts(&*fx.store, t, all.clone(), page(0, 50)).await, (oldest_first.clone(), 6));
    // Pages of four, with the same total, and nothing past the end.
    assert_eq!(list_accounts(&*fx.store, t, all.clone(), page(0, 4)).await, (oldest_first[0..4].to_vec(), 6));
    assert_eq!(list_accounts(&*fx.store, t, all.clone(), page(1, 4)).await, (oldest_first[4..].to_vec(), 6));
    assert_eq!(list_accounts(&*fx.store, t, all.clone(), page(2, 4)).await, (vec![], 6));
    assert_eq!(list_accounts(&*fx.store, t, all, page(5, 1)).await, (oldest_first[5..].to_vec(), 6));

    // By customer, exactly.
    let customer = |text: &str| AccountFilter { customer_ref: Some(customer_ref(text)), ..AccountFilter::default() };
    assert_eq!(
        list_accounts(&*fx.store, t, customer("alice"), page(0, 50)).await,
        (account_ids([&a1, &low, &high]), 3)
    );
    assert_eq!(list_accounts(&*fx.store, t, customer("alice"), page(1, 2)).await, (account_ids([&high]), 3));
    assert_eq!(list_accounts(&*fx.store, t, customer("bob"), page(0, 50)).await, (account_ids([&b1, &b2]), 2));
    assert_eq!(list_accounts(&*fx.store, t, customer("BOB"), page(0, 50)).await, (account_ids([&upper_bob]), 1));
    assert_eq!(list_accounts(&*fx.store, t, customer("Alice"), page(0, 50)).await, (vec![], 0));

    // By status.
    let status = |s: AccountStatus| AccountFilter { status: Some(s), ..AccountFilter::default() };
    let active = account_ids([&a1, &low, &b1, &upper_bob]);
    assert_eq!(list_accounts(&*fx.store, t, status(AccountStatus::Active), page(0, 50)).await, (active.clone(), 4));
    assert_eq!(
        list_accounts(&*fx.store, t, status(AccountStatus::Active), page(1, 3)).await,
        (active[3..].to_vec(), 4)
    );
    assert_eq!(list_accounts(&*fx.store, t, status(AccountStatus::Inactive), page(0, 50)).await, (vec![high.id], 1));
    assert_eq!(list_accounts(&*fx.store, t, status(AccountStatus::Pending), page(0, 50)).await, (vec![b2.id], 1));
    assert_eq!(list_accounts(&*fx.store, t, status(AccountStatus::Failed), page(0, 50)).await, (vec![], 0));

    // By asset, in any case.
    let asset = |code: &str| AccountFilter { asset_id: Some(currency(code)), ..AccountFilter::default() };
    let usd = account_ids([&a1, &b1, &upper_bob]);
    for code in ["USD", "usd", "uSd"] {
        assert_eq!(list_accounts(&*fx.store, t, asset(code), page(0, 50)).await, (usd.clone(), 3), "{code}");
    }
    assert_eq!(list_accounts(&*fx.store, t, asset("eur"), page(0, 50)).await, (account_ids([&low, &high]), 2));
    assert_eq!(list_accounts(&*fx.store, t, asset("GBP"), page(0, 50)).await, (vec![], 0));

    // Every filter together.
    let combined = AccountFilter {
        customer_ref: Some(customer_ref("alice")),
        status: Some(AccountStatus::Active),
        asset_id: Some(currency("Eur")),
    };
    assert_eq!(list_accounts(&*fx.store, t, combined, page(0, 50)).await, (vec![low.id], 1));
    let none = AccountFilter {
        customer_ref: Some(customer_ref("bob")),
        status: Some(AccountStatus::Active),
        asset_id: Some(currency("JPY")),
    };
    assert_eq!(list_accounts(&*fx.store, t, none, page(0, 50)).await, (vec![], 0));

    // The other organisation sees only its own.
    let (theirs, total) = list_accounts(&*fx.store, other, customer("alice"), page(0, 50)).await;
    assert_eq!((theirs.len(), total), (1, 1));
}

async fn a_customers_accounts_in_a_status_are_selected_oldest_first(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (t, other) = (tenant(), tenant());
    let with = |a: Account, status: AccountStatus| Account { status, ..a };
    let mut twins = [account(t, "twin-a", "alice", "EUR", at(20)), account(t, "twin-b", "alice", "GBP", at(20))];
    twins.sort_by_key(|a| a.id);
    let [low, high] = twins.map(|a| with(a, AccountStatus::Active));
    let late = with(account(t, "late", "alice", "USD", at(90)), AccountStatus::Active);
    let early = with(account(t, "early", "alice", "USD", at(5)), AccountStatus::Active);
    let inactive = with(account(t, "off", "alice", "USD", at(1)), AccountStatus::Inactive);
    let pending = with(account(t, "pending", "alice", "JPY", at(2)), AccountStatus::Pending);
    let bobs = with(account(t, "bobs", "bob", "USD", at(3)), AccountStatus::Active);
    let upper = with(account(t, "upper", "ALICE", "USD", at(4)), AccountStatus::Active);
    let elsewhere = with(account(other, "late", "alice", "USD", at(0)), AccountStatus::Active);
    insert_accounts(
        &*fx.store,
        &[late.clone(), high.clone(), inactive.clone(), low.clone(), pending.clone(), early.clone()],
    )
    .await;
    insert_accounts(&*fx.store, &[bobs.clone(), upper.clone(), elsewhere.clone()]).await;

    let alice = customer_ref("alice");
    let mut tx = fx.store.write().await.expect("begin");
    let active = tx.accounts().for_customer_in_status(t, &alice, AccountStatus::Active).await.expect("active");
    assert_eq!(active, vec![early.clone(), low.clone(), high.clone(), late.clone()], "whole records, oldest first");
    let found = tx.accounts().for_customer_in_status(t, &alice, AccountStatus::Inactive).await.expect("inactive");
    assert_eq!(found, vec![inactive.clone()]);
    let found = tx.accounts().for_customer_in_status(t, &alice, AccountStatus::Pending).await.expect("pending");
    assert_eq!(found, vec![pending.clone()]);
    let found = tx.accounts().for_customer_in_status(t, &alice, AccountStatus::Failed).await.expect("failed");
    assert_eq!(found, vec![]);
    let found = tx.accounts().for_customer_in_status(t, &customer_ref("ALICE"), AccountStatus::Active).await;
    assert_eq!(found.expect("the upper-case customer"), vec![upper.clone()], "customer references are exact");
    let found = tx.accounts().for_customer_in_status(t, &customer_ref("nobody"), AccountStatus::Active).await;
    assert_eq!(found.expect("unknown customer"), vec![]);
    let found = tx.accounts().for_customer_in_status(other, &alice, AccountStatus::Active).await;
    assert_eq!(found.expect("the other organisation"), vec![elsewhere.clone()]);

    // The cascade: the customer is deactivated, so each of its ACTIVE accounts becomes INACTIVE,
    // in the same transaction.
    for (i, a) in active.iter().enumerate() {
        let off = Account {
            status: AccountStatus::Inactive,
            updated_at: at(100 + i64::try_from(i).expect("small")),
            ..a.clone()
        };
        tx.accounts().update(&off).await.expect("deactivate");
    }
    let found = tx.accounts().for_customer_in_status(t, &alice, AccountStatus::Active).await.expect("active");
    assert_eq!(found, vec![], "none left ACTIVE");
    tx.commit().await.expect("commit");

    let mut tx = fx.store.write().await.expect("begin");
    let found = tx.accounts().for_customer_in_status(t, &alice, AccountStatus::Inactive).await.expect("inactive");
    assert_eq!(account_ids(&found), account_ids([&inactive, &early, &low, &high, &late]));
    tx.commit().await.expect("commit");
    assert_eq!(get_account(&*fx.store, t, "bobs").await, Some(bobs), "another customer is untouched");
    assert_eq!(get_account(&*fx.store, t, "upper").await, Some(upper));
    assert_eq!(get_account(&*fx.store, other, "late").await, Some(elsewhere));
}

// ---------------------------------------------------------------------------------------------
// Reads for update

backends!(what_a_submission_reads_comes_in_one_answer);

/// `OperationStore::submission_reads`: the asset's contract counts only when ACTIVE and in the
/// organisation; the accounts are those named that exist there, whatever their asset or status
/// (the service judges those), and the contract's answer comes even when none matches.
async fn what_a_submission_reads_comes_in_one_answer(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (a, b) = (tenant(), tenant());
    let usd = Contract { status: ContractStatus::Active, ..contract(a, "USD", at(1)) };
    insert_contracts(
        &*fx.store,
        &[usd, contract(a, "EUR", at(2)), Contract { status: ContractStatus::Active, ..contract(b, "CHF", at(3)) }],
    )
    .await;
    let mine = account(a, "acc-1", "cust-1", "USD", at(4));
    let other_asset = account(a, "acc-2", "cust-1", "EUR", at(5));
    let theirs = account(b, "acc-3", "cust-9", "USD", at(6));
    insert_accounts(&*fx.store, &[mine.clone(), other_asset.clone(), theirs]).await;

    let reads = |tenant: TenantId, asset: &'static str, refs: Vec<&'static str>| {
        let store = fx.store.clone();
        async move {
            let mut tx = store.read().await.expect("begin read");
            let refs: Vec<_> = refs.into_iter().map(account_ref).collect();
            let mut found = tx.operations().submission_reads(tenant, currency(asset), &refs).await.expect("reads");
            found.accounts.sort_by(|x, y| x.account_ref.as_str().cmp(y.account_ref.as_str()));
            (found.asset_active, found.accounts)
        }
    };
    assert_eq!(reads(a, "USD", vec!["acc-1", "acc-2"]).await, (true, vec![mine.clone(), other_asset.clone()]));
    assert_eq!(reads(a, "usd", vec!["acc-1"]).await, (true, vec![mine.clone()]), "asset codes ignore case");
    assert_eq!(reads(a, "EUR", vec!["acc-2"]).await, (false, vec![other_asset]), "a PENDING contract is not ACTIVE");
    assert_eq!(reads(a, "USD", vec!["nope", "acc-3"]).await, (true, vec![]), "no match, another's account");
    assert_eq!(reads(a, "USD", vec![]).await, (true, vec![]));
    assert_eq!(reads(a, "CHF", vec!["acc-1"]).await, (false, vec![mine]), "another's contract");
    assert_eq!(reads(a, "GBP", vec![]).await, (false, vec![]), "no contract");
}

backends!(
    reads_for_update_need_a_write_transaction,
    get_for_update_serialises_changes_of_one_contract,
    get_for_update_serialises_changes_of_one_account,
    a_customers_accounts_are_held_until_the_cascade_commits,
);

async fn reads_for_update_need_a_write_transaction(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let t = tenant();
    let usd = contract(t, "USD", at(1));
    let acc = account(t, "acc-1", "cust-1", "USD", at(1));
    insert_contracts(&*fx.store, std::slice::from_ref(&usd)).await;
    insert_accounts(&*fx.store, std::slice::from_ref(&acc)).await;

    // Each in its own read transaction: a refused statement ends a PostgreSQL transaction.
    let mut tx = fx.store.read().await.expect("begin read");
    tx.contracts().get_for_update(t, currency("USD")).await.expect_err("a contract for update in a read transaction");
    drop(tx);
    let mut tx = fx.store.read().await.expect("begin read");
    tx.accounts().get_for_update(t, &acc.account_ref).await.expect_err("an account for update in a read transaction");
    drop(tx);
    let mut tx = fx.store.read().await.expect("begin read");
    tx.accounts()
        .for_customer_in_status(t, &acc.customer_ref, AccountStatus::Pending)
        .await
        .expect_err("a customer's accounts for update in a read transaction");
    drop(tx);
    // The plain reads work there.
    assert_eq!(get_contract(&*fx.store, t, "usd").await, Some(usd));
    assert_eq!(get_account(&*fx.store, t, "acc-1").await, Some(acc));
}

async fn get_for_update_serialises_changes_of_one_contract(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let t = tenant();
    let usd = contract(t, "USD", at(0));
    insert_contracts(&*fx.store, std::slice::from_ref(&usd)).await;

    // The first change holds the contract while it works, so the second reads it only once the
    // first committed, and sees its outcome.
    let switched_off = second_change_waits(
        &fx.store,
        move |tx| {
            Box::pin(async move {
                let got = tx.contracts().get_for_update(t, currency("usd")).await.expect("get").expect("exists");
                assert_eq!(got.status, ContractStatus::Pending);
                got
            })
        },
        |tx, got| {
            Box::pin(async move {
                let deployed =
                    Contract { status: ContractStatus::Active, address: Some(address(0x01)), updated_at: at(1), ..got };
                tx.contracts().update(&deployed).await.expect("update");
            })
        },
        move |tx| {
            Box::pin(async move {
                let got = tx.contracts().get_for_update(t, currency("USD")).await.expect("get").expect("exists");
                assert_eq!(
                    (got.status, got.updated_at),
                    (ContractStatus::Active, at(1)),
                    "the second sees the first's outcome"
                );
                let switched_off = Contract { status: ContractStatus::Inactive, updated_at: at(2), ..got };
                tx.contracts().update(&switched_off).await.expect("update");
                switched_off
            })
        },
    )
    .await;

    let got = get_contract(&*fx.store, t, "USD").await.expect("exists");
    assert_eq!(got, Contract { address: Some(address(0x01)), ..switched_off });
}

async fn get_for_update_serialises_changes_of_one_account(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let t = tenant();
    let acc = account(t, "acc-1", "cust-1", "USD", at(0));
    insert_accounts(&*fx.store, std::slice::from_ref(&acc)).await;

    // The first change holds the account while it works, so the second reads it only once the
    // first committed, and counts on from it.
    let reference = acc.account_ref.clone();
    second_change_waits(
        &fx.store,
        move |tx| {
            Box::pin(async move {
                let got = tx.accounts().get_for_update(t, &reference).await.expect("get").expect("exists");
                assert_eq!(got.generation, 0);
                got
            })
        },
        |tx, got| {
            Box::pin(async move {
                let next = Account { generation: got.generation + 1, updated_at: at(1), ..got };
                tx.accounts().update(&next).await.expect("update");
            })
        },
        move |tx| {
            Box::pin(async move {
                let got = tx.accounts().get_for_update(t, &acc.account_ref).await.expect("get").expect("exists");
                assert_eq!(
                    (got.generation, got.updated_at),
                    (1, at(1)),
                    "the second change sees the first one's outcome"
                );
                let next = Account { generation: got.generation + 1, updated_at: at(2), ..got };
                tx.accounts().update(&next).await.expect("update");
            })
        },
    )
    .await;

    let got = get_account(&*fx.store, t, "acc-1").await.expect("exists");
    assert_eq!((got.generation, got.updated_at), (2, at(2)));
}

async fn a_customers_accounts_are_held_until_the_cascade_commits(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let t = tenant();
    let one = Account { status: AccountStatus::Active, ..account(t, "acc-1", "cust-1", "USD", at(0)) };
    let two = Account { status: AccountStatus::Active, ..account(t, "acc-2", "cust-1", "EUR", at(1)) };
    insert_accounts(&*fx.store, &[one.clone(), two.clone()]).await;

    // The customer is deactivated: the cascade holds its ACTIVE accounts while it works, so a
    // concurrent change of one of them waits, and sees the cascade's outcome.
    let customer = one.customer_ref.clone();
    second_change_waits(
        &fx.store,
        move |tx| {
            Box::pin(async move {
                let active =
                    tx.accounts().for_customer_in_status(t, &customer, AccountStatus::Active).await.expect("select");
                assert_eq!(active.len(), 2);
                active
            })
        },
        |tx, active| {
            Box::pin(async move {
                for a in active {
                    let off = Account { status: AccountStatus::Inactive, updated_at: at(10), ..a };
                    tx.accounts().update(&off).await.expect("deactivate");
                }
            })
        },
        move |tx| {
            Box::pin(async move {
                let got = tx.accounts().get_for_update(t, &two.account_ref).await.expect("get").expect("exists");
                assert_eq!((got.status, got.updated_at), (AccountStatus::Inactive, at(10)), "sees the cascade");
            })
        },
    )
    .await;

    let mut tx = fx.store.write().await.expect("begin");
    let active = tx.accounts().for_customer_in_status(t, &one.customer_ref, AccountStatus::Active).await;
    assert_eq!(active.expect("select"), vec![]);
    tx.commit().await.expect("commit");
}
