//! The identity persistence contract (`tokenops_store::identity`), checked on both backends:
//! organisations, users (email uniqueness, tenant scoping, search, sorting, paging, reads for
//! update), machine clients and their one-time secret reveals, roles (the platform rows, custom
//! roles, names unique ignoring case, holders), approval groups and their members, signing keys,
//! refresh tokens and challenge sessions. Every test is registered with `backends!`, so it runs
//! as `name::sqlite` and `name::postgres` on a fresh, migrated store reached through the trait
//! object, the way the app sees it.
//!
//! The store never reads the clock: tests pass time in, from the fixed instant `T0`.

use std::time::Duration;
use tokenops_domain::identity::{GroupStatus, UserStatus};
use tokenops_domain::paging::{PageRequest, SortDirection, SortKey};
use tokenops_domain::{TenantId, Timestamp, new_id};
use tokenops_store::{
    ChallengeRecord, GroupRecord, MachineClientRecord, RefreshTokenRecord, RoleRecord, SecretRevealRecord,
    SigningKeyRecord, Store, StoreError, TenantRecord, UserFilter, UserRecord,
};
use tokenops_testkit::{Backend, StoreFixture, backends};
use uuid::Uuid;

mod common;
use common::{T0, accepted_in_reads, at, insert_all, is_conflict, second_change_waits, tenant};

// ---------------------------------------------------------------------------------------------
// The fixture

/// A fresh, migrated store per test: the kit's fixture.
type Fixture = StoreFixture;

// ---------------------------------------------------------------------------------------------
// Helpers

fn user(tenant: TenantId, email: &str, first_name: &str, last_name: &str) -> UserRecord {
    UserRecord {
        id: new_id(),
        tenant_id: tenant,
        email: email.to_owned(),
        first_name: first_name.to_owned(),
        last_name: last_name.to_owned(),
        status: UserStatus::Invited,
        role_id: Uuid::from_u128(1),
        password_hash: None,
        temporary_password_hash: Some("$argon2id$v=19$m=19456,t=2,p=1$temp$hash".to_owned()),
        failed_sign_ins: 0,
        first_failed_sign_in_at: None,
        locked_until: None,
        created_at: T0,
        updated_at: T0,
    }
}

async fn insert_users(store: &dyn Store, users: &[UserRecord]) {
    insert_all(store, users, |tx, u| tx.users().insert(u)).await
}

async fn list(
    store: &dyn Store,
    tenant: TenantId,
    filter: UserFilter,
    sort: &[SortKey],
    page: u64,
    size: u32,
) -> (Vec<String>, u64) {
    let mut tx = store.read().await.expect("begin read");
    let found = tx.users().list(tenant, &filter, sort, PageRequest { page, size }).await.expect("list users");
    (found.items.into_iter().map(|u| u.email).collect(), found.total)
}

fn search(text: &str) -> UserFilter {
    UserFilter { search: Some(text.to_owned()), ..UserFilter::default() }
}

fn asc(column: &'static str) -> SortKey {
    SortKey { column, direction: SortDirection::Asc }
}

fn desc(column: &'static str) -> SortKey {
    SortKey { column, direction: SortDirection::Desc }
}

// ---------------------------------------------------------------------------------------------
// Organisations

backends!(tenants_are_inserted_and_read);

async fn tenants_are_inserted_and_read(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let record = TenantRecord {
        id: tenant(),
        name: "Bank A".into(),
        owner_user_id: new_id(),
        created_at: T0,
        updated_at: at(1),
    };
    let mut tx = fx.store.write().await.expect("begin");
    tx.tenants().insert(&record).await.expect("insert tenant");
    let again = TenantRecord { name: "Bank B".into(), ..record.clone() };
    assert!(matches!(tx.tenants().insert(&again).await, Err(StoreError::Conflict(_))), "the id is taken");
    tx.commit().await.expect("commit after a conflict");

    let mut tx = fx.store.read().await.expect("begin read");
    assert_eq!(tx.tenants().get(record.id).await.expect("get"), Some(record));
    assert_eq!(tx.tenants().get(tenant()).await.expect("get unknown"), None);
}

// ---------------------------------------------------------------------------------------------
// Users

backends!(
    users_are_read_within_their_tenant,
    emails_are_unique_across_tenants_ignoring_case,
    an_update_replaces_every_mutable_field,
    users_are_deleted_within_their_tenant,
    users_are_filtered_by_status_role_and_search,
    the_search_is_a_case_insensitive_prefix,
    users_sort_by_the_given_keys_then_id,
    users_are_paged_with_their_total,
);

async fn users_are_read_within_their_tenant(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (a, b) = (tenant(), tenant());
    let ada = user(a, "ada@x.io", "Ada", "Lovelace");
    insert_users(&*fx.store, std::slice::from_ref(&ada)).await;

    let mut tx = fx.store.read().await.expect("begin read");
    assert_eq!(tx.users().get(a, ada.id).await.expect("get"), Some(ada.clone()));
    assert_eq!(tx.users().get(b, ada.id).await.expect("get from another tenant"), None);
    assert_eq!(tx.users().get(a, new_id()).await.expect("get unknown"), None);
    assert_eq!(tx.users().get_any(ada.id).await.expect("get_any"), Some(ada.clone()));
    assert_eq!(tx.users().get_any(new_id()).await.expect("get_any unknown"), None);
    assert_eq!(tx.users().find_by_email("ada@x.io").await.expect("find"), Some(ada.clone()));
    assert_eq!(tx.users().find_by_email("ADA@X.io").await.expect("find ignoring case"), Some(ada.clone()));
    assert_eq!(tx.users().find_by_email("ada@x.i").await.expect("find no prefix"), None);
}

async fn emails_are_unique_across_tenants_ignoring_case(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (a, b) = (tenant(), tenant());
    let mut tx = fx.store.write().await.expect("begin");
    tx.users().insert(&user(a, "a@x.io", "A", "One")).await.expect("insert");
    for (t, email) in [(a, "a@x.io"), (b, "a@x.io"), (b, "A@x.io"), (a, "A@X.IO")] {
        let outcome = tx.users().insert(&user(t, email, "A", "Two")).await;
        assert!(matches!(outcome, Err(StoreError::Conflict(_))), "{email} in another or the same tenant: {outcome:?}");
    }
    // The conflict left the transaction usable; a mixed-case email is stored lower-cased.
    let bob = user(b, "Bob@X.io", "Bob", "Three");
    tx.users().insert(&bob).await.expect("insert after a conflict");
    let same_id = user(b, "other@x.io", "C", "Four");
    tx.users().insert(&UserRecord { id: bob.id, ..same_id }).await.expect_err("the id is taken");
    tx.commit().await.expect("commit");

    let mut tx = fx.store.read().await.expect("begin read");
    let stored = tx.users().get(b, bob.id).await.expect("get").expect("bob exists");
    assert_eq!(stored.email, "bob@x.io");
    assert_eq!(tx.users().find_by_email("BOB@x.io").await.expect("find").map(|u| u.id), Some(bob.id));
    assert_eq!(fx.db.count("users", "").await, 2);
}

async fn an_update_replaces_every_mutable_field(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (a, b) = (tenant(), tenant());
    let original = user(a, "ada@x.io", "Ada", "Lovelace");
    insert_users(&*fx.store, std::slice::from_ref(&original)).await;

    let changed = UserRecord {
        first_name: "Augusta".into(),
        last_name: "King".into(),
        status: UserStatus::Active,
        role_id: Uuid::from_u128(2),
        password_hash: Some("$argon2id$v=19$m=19456,t=2,p=1$salt$chosen".into()),
        temporary_password_hash: None,
        failed_sign_ins: 4,
        first_failed_sign_in_at: Some(at(30)),
        locked_until: Some(at(900)),
        updated_at: at(60),
        ..original.clone()
    };
    let mut tx = fx.store.write().await.expect("begin");
    tx.users().update(&changed).await.expect("update");
    // Another organisation's update of the same id reaches nothing.
    tx.users()
        .update(&UserRecord { tenant_id: b, first_name: "Mallory".into(), ..changed.clone() })
        .await
        .expect("update");
    tx.commit().await.expect("commit");
    let mut tx = fx.store.read().await.expect("begin read");
    assert_eq!(tx.users().get(a, original.id).await.expect("get"), Some(changed.clone()));
    drop(tx);

    // And back: the optional fields are cleared again, the counter reset.
    let reverted = UserRecord { updated_at: at(120), ..original.clone() };
    let mut tx = fx.store.write().await.expect("begin");
    tx.users().update(&reverted).await.expect("update");
    tx.commit().await.expect("commit");
    let mut tx = fx.store.read().await.expect("begin read");
    assert_eq!(tx.users().get_any(original.id).await.expect("get"), Some(reverted));
}

async fn users_are_deleted_within_their_tenant(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (a, b) = (tenant(), tenant());
    let ada = user(a, "ada@x.io", "Ada", "Lovelace");
    let bob = user(a, "bob@x.io", "Bob", "Builder");
    insert_users(&*fx.store, &[ada.clone(), bob.clone()]).await;

    let mut tx = fx.store.write().await.expect("begin");
    assert!(!tx.users().delete(b, ada.id).await.expect("delete from another tenant"));
    assert!(tx.users().delete(a, ada.id).await.expect("delete"));
    assert!(!tx.users().delete(a, ada.id).await.expect("delete again"));
    tx.commit().await.expect("commit");

    let mut tx = fx.store.read().await.expect("begin read");
    assert_eq!(tx.users().get(a, ada.id).await.expect("get"), None);
    assert_eq!(tx.users().find_by_email("ada@x.io").await.expect("find"), None);
    assert_eq!(tx.users().get(a, bob.id).await.expect("get"), Some(bob));
    drop(tx);
    // The email is free again.
    insert_users(&*fx.store, &[user(b, "ada@x.io", "Ada", "Again")]).await;
}

async fn users_are_filtered_by_status_role_and_search(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (a, b) = (tenant(), tenant());
    let admin = Uuid::from_u128(10);
    let viewer = Uuid::from_u128(11);
    let with = |u: UserRecord, status: UserStatus, role: Uuid| UserRecord { status, role_id: role, ..u };
    insert_users(
        &*fx.store,
        &[
            with(user(a, "ann@x.io", "Ann", "Archer"), UserStatus::Active, admin),
            with(user(a, "ben@x.io", "Ben", "Baker"), UserStatus::Active, viewer),
            with(user(a, "cat@x.io", "Cat", "Archer"), UserStatus::Suspended, viewer),
            with(user(a, "dan@x.io", "Dan", "Dyer"), UserStatus::Invited, admin),
            with(user(b, "eve@x.io", "Eve", "Archer"), UserStatus::Active, admin),
        ],
    )
    .await;
    let by_email = [asc("email")];
    let all = list(&*fx.store, a, UserFilter::default(), &by_email, 0, 50).await;
    assert_eq!(all, (vec!["ann@x.io".into(), "ben@x.io".into(), "cat@x.io".into(), "dan@x.io".into()], 4));
    let other = list(&*fx.store, b, UserFilter::default(), &by_email, 0, 50).await;
    assert_eq!(other, (vec!["eve@x.io".into()], 1), "only the tenant's own users");

    let active = UserFilter { status: Some(UserStatus::Active), ..UserFilter::default() };
    assert_eq!(list(&*fx.store, a, active, &by_email, 0, 50).await, (vec!["ann@x.io".into(), "ben@x.io".into()], 2));
    let admins = UserFilter { role_id: Some(admin), ..UserFilter::default() };
    assert_eq!(list(&*fx.store, a, admins, &by_email, 0, 50).await, (vec!["ann@x.io".into(), "dan@x.io".into()], 2));
    let archers = search("arch");
    assert_eq!(list(&*fx.store, a, archers, &by_email, 0, 50).await, (vec!["ann@x.io".into(), "cat@x.io".into()], 2));
    let combined =
        UserFilter { search: Some("ARCHER".into()), status: Some(UserStatus::Suspended), role_id: Some(viewer) };
    assert_eq!(list(&*fx.store, a, combined, &by_email, 0, 50).await, (vec!["cat@x.io".into()], 1));
    let none = UserFilter { status: Some(UserStatus::Invited), role_id: Some(viewer), ..UserFilter::default() };
    assert_eq!(list(&*fx.store, a, none, &by_email, 0, 50).await, (vec![], 0));
}

async fn the_search_is_a_case_insensitive_prefix(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let t = tenant();
    insert_users(
        &*fx.store,
        &[
            user(t, "emile@x.io", "Émile", "Zola"),
            user(t, "zoe@x.io", "Zoë", "Ångström"),
            user(t, "percent@x.io", "100%", "Under_score"),
            user(t, "star@x.io", "Star*", "[Bracket]"),
        ],
    )
    .await;
    let found = |text: &str| {
        let store = fx.store.clone();
        let text = text.to_owned();
        async move { list(&*store, t, search(&text), &[asc("email")], 0, 50).await.0 }
    };
    // First name, last name and email, ignoring case, non-ASCII letters included.
    for text in ["émi", "ÉMILE", "Émile", "eMiLe@", "zola"] {
        assert_eq!(found(text).await, vec!["emile@x.io".to_owned()], "{text}");
    }
    for text in ["ångs", "ÅNGSTRÖM", "zoË", "ZOE@X"] {
        assert_eq!(found(text).await, vec!["zoe@x.io".to_owned()], "{text}");
    }
    assert_eq!(found("z").await, vec!["emile@x.io".to_owned(), "zoe@x.io".to_owned()], "Zola and Zoë");
    // A prefix, not a substring, and not a fuzzy match across accents.
    for text in ["mile", "ola", "x.io", "emile@x.io.", "Emíle"] {
        assert_eq!(found(text).await, Vec::<String>::new(), "{text}");
    }
    // Pattern characters of either store match only themselves.
    assert_eq!(found("100%").await, vec!["percent@x.io".to_owned()]);
    assert_eq!(found("1_0").await, Vec::<String>::new());
    assert_eq!(found("under_").await, vec!["percent@x.io".to_owned()]);
    assert_eq!(found("%").await, Vec::<String>::new());
    assert_eq!(found("_").await, Vec::<String>::new());
    assert_eq!(found("star*").await, vec!["star@x.io".to_owned()]);
    assert_eq!(found("s*").await, Vec::<String>::new());
    assert_eq!(found("[b").await, vec!["star@x.io".to_owned()]);
    assert_eq!(found(".").await, Vec::<String>::new());
    assert_eq!(found("").await.len(), 4, "an empty search matches everyone");
}

async fn users_sort_by_the_given_keys_then_id(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let t = tenant();
    let mut users = vec![
        user(t, "b.smith@x.io", "Bea", "Smith"),
        user(t, "a.smith@x.io", "Al", "Smith"),
        user(t, "jones@x.io", "Zed", "Jones"),
        user(t, "emile@x.io", "Émile", "Zola"),
        user(t, "adams@x.io", "Ann", "Adams"),
    ];
    // Two users with the same name: the id breaks the tie, ascending, whatever the direction.
    let mut twins = vec![user(t, "twin1@x.io", "Tom", "Twin"), user(t, "twin2@x.io", "Tom", "Twin")];
    twins.sort_by_key(|u| u.id);
    let (low, high) = (twins[0].email.clone(), twins[1].email.clone());
    users.extend(twins.into_iter().rev());
    for (i, u) in users.iter_mut().enumerate() {
        u.created_at = at(100 - i64::try_from(i).expect("small"));
    }
    insert_users(&*fx.store, &users).await;

    let names = [asc("last_name"), asc("first_name")];
    let (emails, total) = list(&*fx.store, t, UserFilter::default(), &names, 0, 50).await;
    assert_eq!(total, 7);
    assert_eq!(
        emails,
        ["adams@x.io", "jones@x.io", "a.smith@x.io", "b.smith@x.io", low.as_str(), high.as_str(), "emile@x.io"]
    );
    let names_desc = [desc("last_name"), desc("first_name")];
    let (emails, _) = list(&*fx.store, t, UserFilter::default(), &names_desc, 0, 50).await;
    assert_eq!(
        emails,
        ["emile@x.io", low.as_str(), high.as_str(), "b.smith@x.io", "a.smith@x.io", "jones@x.io", "adams@x.io"]
    );
    // Non-ASCII sorts after ASCII (code point order) on both stores.
    let (emails, _) = list(&*fx.store, t, UserFilter::default(), &[asc("first_name")], 0, 50).await;
    assert_eq!(emails.first().map(String::as_str), Some("a.smith@x.io"));
    assert_eq!(emails.last().map(String::as_str), Some("emile@x.io"));
    let (emails, _) = list(&*fx.store, t, UserFilter::default(), &[asc("created_at")], 0, 50).await;
    let mut expected: Vec<String> = users.iter().rev().map(|u| u.email.clone()).collect();
    assert_eq!(emails, expected);
    expected.reverse();
    let (emails, _) = list(&*fx.store, t, UserFilter::default(), &[desc("created_at")], 0, 50).await;
    assert_eq!(emails, expected);
    // Without keys: by id.
    let (emails, _) = list(&*fx.store, t, UserFilter::default(), &[], 0, 50).await;
    let mut by_id = users.clone();
    by_id.sort_by_key(|u| u.id);
    assert_eq!(emails, by_id.iter().map(|u| u.email.clone()).collect::<Vec<_>>());
}

async fn users_are_paged_with_their_total(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (t, other) = (tenant(), tenant());
    let users: Vec<UserRecord> = (0..5).map(|i| user(t, &format!("u{i}@x.io"), "U", &format!("N{i}"))).collect();
    insert_users(&*fx.store, &users).await;
    insert_users(&*fx.store, &[user(other, "elsewhere@x.io", "E", "N")]).await;
    let order = [asc("last_name")];
    let page = |n: u64, size: u32| list(&*fx.store, t, UserFilter::default(), &order, n, size);
    assert_eq!(page(0, 2).await, (vec!["u0@x.io".into(), "u1@x.io".into()], 5));
    assert_eq!(page(1, 2).await, (vec!["u2@x.io".into(), "u3@x.io".into()], 5));
    assert_eq!(page(2, 2).await, (vec!["u4@x.io".into()], 5));
    assert_eq!(page(3, 2).await, (vec![], 5), "past the end: no items, the same total");
    assert_eq!(page(0, 10).await.0.len(), 5);
    let filtered = list(&*fx.store, t, search("n3"), &order, 0, 1).await;
    assert_eq!(filtered, (vec!["u3@x.io".into()], 1), "the total counts the filtered users");
}

backends!(get_for_update_serialises_changes_of_one_user, users_sort_by_the_name_of_their_role);

async fn get_for_update_serialises_changes_of_one_user(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (a, b) = (tenant(), tenant());
    let ada = user(a, "ada@x.io", "Ada", "Lovelace");
    insert_users(&*fx.store, std::slice::from_ref(&ada)).await;

    let mut tx = fx.store.write().await.expect("begin");
    assert_eq!(tx.users().get_for_update(a, ada.id).await.expect("get"), Some(ada.clone()));
    assert_eq!(tx.users().get_for_update(b, ada.id).await.expect("get from another tenant"), None);
    assert_eq!(tx.users().get_for_update(a, new_id()).await.expect("get unknown"), None);
    tx.commit().await.expect("commit");

    // The first change holds the user while it works, so the second reads the user only once the
    // first committed, and counts on from it.
    let id = ada.id;
    second_change_waits(
        &fx.store,
        move |tx| {
            Box::pin(async move {
                let got = tx.users().get_for_update(a, id).await.expect("get").expect("exists");
                assert_eq!(got.failed_sign_ins, 0);
                got
            })
        },
        |tx, got| {
            Box::pin(async move {
                let failed = UserRecord { failed_sign_ins: got.failed_sign_ins + 1, updated_at: at(1), ..got };
                tx.users().update(&failed).await.expect("update");
            })
        },
        move |tx| {
            Box::pin(async move {
                let got = tx.users().get_for_update(a, id).await.expect("get").expect("exists");
                assert_eq!(
                    (got.failed_sign_ins, got.updated_at),
                    (1, at(1)),
                    "the second change sees the first one's outcome"
                );
                let failed = UserRecord { failed_sign_ins: got.failed_sign_ins + 1, updated_at: at(2), ..got };
                tx.users().update(&failed).await.expect("update");
            })
        },
    )
    .await;

    let mut tx = fx.store.read().await.expect("begin read");
    let got = tx.users().get(a, ada.id).await.expect("get").expect("exists");
    assert_eq!((got.failed_sign_ins, got.updated_at), (2, at(2)));
}

async fn users_sort_by_the_name_of_their_role(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (t, other) = (tenant(), tenant());
    let auditor = custom_role(t, "Auditor", &[], at(1));
    let clerk = custom_role(t, "clerk", &[], at(2));
    let elsewhere = custom_role(other, "Aardvark", &[], at(3));
    insert_roles(&*fx.store, &[auditor.clone(), clerk.clone(), elsewhere.clone()]).await;

    let with_role = |email: &str, role_id: Uuid| UserRecord { role_id, ..user(t, email, "U", email) };
    let mut admins = [with_role("admin1@x.io", ADMIN), with_role("admin2@x.io", ADMIN)];
    admins.sort_by_key(|u| u.id);
    // Without a role the organisation sees (unknown, or another organisation's): no name.
    let mut nameless = [with_role("unknown@x.io", new_id()), with_role("foreign@x.io", elsewhere.id)];
    nameless.sort_by_key(|u| u.id);
    let users = [
        with_role("clerk@x.io", clerk.id),
        with_role("user@x.io", USER),
        admins[1].clone(),
        with_role("super@x.io", SUPER_ADMIN),
        nameless[1].clone(),
        with_role("auditor@x.io", auditor.id),
        admins[0].clone(),
        nameless[0].clone(),
    ];
    insert_users(&*fx.store, &users).await;

    let emails = |users: &[&UserRecord]| users.iter().map(|u| u.email.clone()).collect::<Vec<_>>();
    // The names without regard to case ("clerk" before "SUPER_ADMIN"); no name sorts first
    // ascending, last descending; the id breaks ties, ascending, whatever the direction.
    let (listed, total) = list(&*fx.store, t, UserFilter::default(), &[asc("role_name")], 0, 50).await;
    assert_eq!(total, 8);
    assert_eq!(
        listed,
        emails(&[&nameless[0], &nameless[1], &admins[0], &admins[1], &users[5], &users[0], &users[3], &users[1]])
    );
    let (listed, _) = list(&*fx.store, t, UserFilter::default(), &[desc("role_name")], 0, 50).await;
    assert_eq!(
        listed,
        emails(&[&users[1], &users[3], &users[0], &users[5], &admins[0], &admins[1], &nameless[0], &nameless[1]])
    );
    // With a further key, a filter and paging.
    let (listed, _) = list(&*fx.store, t, UserFilter::default(), &[asc("role_name"), desc("email")], 1, 3).await;
    assert_eq!(listed, ["admin1@x.io", "auditor@x.io", "clerk@x.io"]);
    let admins_only = UserFilter { role_id: Some(ADMIN), ..UserFilter::default() };
    assert_eq!(
        list(&*fx.store, t, admins_only, &[desc("role_name")], 0, 50).await,
        (emails(&[&admins[0], &admins[1]]), 2)
    );
    // Renaming a role moves its holders.
    let mut tx = fx.store.write().await.expect("begin");
    tx.roles()
        .update(&RoleRecord { name: "zealot".into(), updated_at: at(9), ..auditor.clone() })
        .await
        .expect("rename");
    tx.commit().await.expect("commit");
    let (listed, _) = list(&*fx.store, t, UserFilter::default(), &[desc("role_name")], 0, 1).await;
    assert_eq!(listed, emails(&[&users[5]]));
}

// ---------------------------------------------------------------------------------------------
// Machine clients

backends!(machine_clients_are_stored_and_operator_clients_counted);

async fn machine_clients_are_stored_and_operator_clients_counted(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let client = |tenant_id: Option<TenantId>, role_id: Option<Uuid>, active: bool| MachineClientRecord {
        id: new_id(),
        tenant_id,
        name: "integration".into(),
        role_id,
        secret_hash: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".into(),
        active,
        created_at: T0,
    };
    let tenant_client = client(Some(tenant()), Some(Uuid::from_u128(3)), true);
    let operator = client(None, None, true);
    let inactive_operator = client(None, None, false);

    let mut tx = fx.store.write().await.expect("begin");
    assert_eq!(tx.machine_clients().count_operator_clients().await.expect("count"), 0);
    for c in [&tenant_client, &operator, &inactive_operator] {
        tx.machine_clients().insert(c).await.expect("insert client");
    }
    let duplicate = MachineClientRecord { name: "again".into(), ..operator.clone() };
    assert!(matches!(tx.machine_clients().insert(&duplicate).await, Err(StoreError::Conflict(_))));
    tx.commit().await.expect("commit");

    let mut tx = fx.store.read().await.expect("begin read");
    for c in [&tenant_client, &operator, &inactive_operator] {
        assert_eq!(tx.machine_clients().get(c.id).await.expect("get").as_ref(), Some(c));
    }
    assert_eq!(tx.machine_clients().get(new_id()).await.expect("get unknown"), None);
    assert_eq!(tx.machine_clients().count_operator_clients().await.expect("count"), 2);
}

backends!(machine_clients_are_listed_oldest_first_and_switched_on_and_off);

async fn machine_clients_are_listed_oldest_first_and_switched_on_and_off(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (a, b) = (tenant(), tenant());
    let (c3, c1, c2) =
        (client(Some(a), "third", at(3)), client(Some(a), "first", at(1)), client(Some(a), "second", at(2)));
    // Two clients created together: the id breaks the tie.
    let mut twins = [client(Some(a), "twin", at(4)), client(Some(a), "twin", at(4))];
    twins.sort_by_key(|c| c.id);
    let theirs = client(Some(b), "theirs", at(0));
    let operator = MachineClientRecord { role_id: None, ..client(None, "operator", at(0)) };
    let mut tx = fx.store.write().await.expect("begin");
    for c in [&c3, &twins[1], &c1, &operator, &theirs, &twins[0], &c2] {
        tx.machine_clients().insert(c).await.expect("insert client");
    }
    tx.commit().await.expect("commit");

    let mut tx = fx.store.read().await.expect("begin read");
    let page = |n: u64, size: u32| PageRequest { page: n, size };
    let all = tx.machine_clients().list(a, page(0, 10)).await.expect("list");
    assert_eq!(all.total, 5);
    assert_eq!(all.items, vec![c1.clone(), c2.clone(), c3.clone(), twins[0].clone(), twins[1].clone()]);
    let second = tx.machine_clients().list(a, page(1, 2)).await.expect("list");
    assert_eq!((second.items, second.total), (vec![c3.clone(), twins[0].clone()], 5));
    let beyond = tx.machine_clients().list(a, page(3, 2)).await.expect("list");
    assert_eq!((beyond.items.len(), beyond.total), (0, 5));
    let other = tx.machine_clients().list(b, page(0, 10)).await.expect("list");
    assert_eq!((other.items, other.total), (vec![theirs.clone()], 1), "only the tenant's own clients");
    let nobody = tx.machine_clients().list(tenant(), page(0, 10)).await.expect("list");
    assert_eq!((nobody.items.len(), nobody.total), (0, 0));
    drop(tx);

    let mut tx = fx.store.write().await.expect("begin");
    assert!(tx.machine_clients().set_active(a, c1.id, false).await.expect("deactivate"));
    assert!(tx.machine_clients().set_active(a, c1.id, false).await.expect("deactivate again"), "still the tenant's");
    assert!(!tx.machine_clients().set_active(b, c2.id, false).await.expect("another tenant's"));
    assert!(!tx.machine_clients().set_active(a, theirs.id, false).await.expect("another tenant's"));
    assert!(!tx.machine_clients().set_active(a, operator.id, false).await.expect("an operator client"));
    assert!(!tx.machine_clients().set_active(a, new_id(), false).await.expect("unknown"));
    tx.commit().await.expect("commit");

    let mut tx = fx.store.read().await.expect("begin read");
    assert_eq!(
        tx.machine_clients().get(c1.id).await.expect("get"),
        Some(MachineClientRecord { active: false, ..c1.clone() })
    );
    for c in [&c2, &theirs, &operator] {
        assert_eq!(tx.machine_clients().get(c.id).await.expect("get").as_ref(), Some(c), "untouched");
    }
    drop(tx);
    let mut tx = fx.store.write().await.expect("begin");
    assert!(tx.machine_clients().set_active(a, c1.id, true).await.expect("reactivate"));
    tx.commit().await.expect("commit");
    let mut tx = fx.store.read().await.expect("begin read");
    assert_eq!(tx.machine_clients().get(c1.id).await.expect("get"), Some(c1));
}

// ---------------------------------------------------------------------------------------------
// One-time reveals of machine-client secrets

backends!(a_secret_reveal_is_taken_once_and_only_before_it_expires, expired_secret_reveals_are_deleted);

/// What every one-time record (a client secret's reveal, a sign-in challenge) obeys, said once
/// for both: `$taken`, it is taken once and only before it expires, and an expired one is gone;
/// `$expired`, the expired ones are deleted, strictly before the cutoff. `$records` is the
/// transaction's accessor of them, `$make(key, expires_at)` builds one, its keys begin with
/// `$prefix`, and `$table` is its table.
macro_rules! one_time_record_rules {
    ($taken:ident, $expired:ident, $records:ident, $make:ident, $prefix:literal, $table:literal) => {
        async fn $taken(backend: Backend) {
            let fx = Fixture::new(backend).await;
            let (k1, k2, k3) = (concat!($prefix, "1"), concat!($prefix, "2"), concat!($prefix, "3"));
            let (fresh, stale, edge) = ($make(k1, at(300)), $make(k2, at(300)), $make(k3, at(300)));
            let mut tx = fx.store.write().await.expect("begin");
            for r in [&fresh, &stale, &edge] {
                tx.$records().insert(r).await.expect("insert");
            }
            assert!(matches!(tx.$records().insert(&$make(k1, at(600))).await, Err(StoreError::Conflict(_))));
            tx.commit().await.expect("commit after a conflict");

            let mut tx = fx.store.write().await.expect("begin");
            assert_eq!(tx.$records().take(k1, at(299)).await.expect("take"), Some(fresh));
            assert_eq!(tx.$records().take(k1, at(1)).await.expect("take again"), None, "taken once");
            assert_eq!(tx.$records().take(k2, at(301)).await.expect("take expired"), None);
            assert_eq!(tx.$records().take(k3, at(300)).await.expect("take at expiry"), None, "expired at expires_at");
            assert_eq!(tx.$records().take("unknown", T0).await.expect("take unknown"), None);
            tx.commit().await.expect("commit");

            // The expired ones were deleted too.
            assert_eq!(fx.db.count($table, "").await, 0);
            let mut tx = fx.store.write().await.expect("begin");
            assert_eq!(tx.$records().take(k2, T0).await.expect("take"), None);
            tx.commit().await.expect("commit");
        }

        async fn $expired(backend: Backend) {
            let fx = Fixture::new(backend).await;
            let (k1, k2, k3) = (concat!($prefix, "1"), concat!($prefix, "2"), concat!($prefix, "3"));
            let records = [$make(k1, at(100)), $make(k2, at(200)), $make(k3, at(300))];
            let mut tx = fx.store.write().await.expect("begin");
            for r in &records {
                tx.$records().insert(r).await.expect("insert");
            }
            // Expired strictly before `now`.
            assert_eq!(tx.$records().delete_expired(at(100)).await.expect("delete"), 0);
            assert_eq!(tx.$records().delete_expired(at(200)).await.expect("delete"), 1);
            assert_eq!(tx.$records().delete_expired(at(200)).await.expect("delete again"), 0);
            tx.commit().await.expect("commit");

            let mut tx = fx.store.write().await.expect("begin");
            assert_eq!(tx.$records().take(k1, T0).await.expect("take"), None, "deleted");
            assert_eq!(tx.$records().take(k2, T0).await.expect("take"), Some(records[1].clone()));
            assert_eq!(tx.$records().delete_expired(at(10_000)).await.expect("delete"), 1);
            tx.commit().await.expect("commit");
            assert_eq!(fx.db.count($table, "").await, 0);
        }
    };
}

fn reveal(hash: &str, expires_at: Timestamp) -> SecretRevealRecord {
    SecretRevealRecord {
        token_hash: hash.into(),
        client_id: new_id(),
        sealed_secret: format!("sealed:{hash}"),
        expires_at,
        created_at: T0,
    }
}

one_time_record_rules!(
    a_secret_reveal_is_taken_once_and_only_before_it_expires,
    expired_secret_reveals_are_deleted,
    secret_reveals,
    reveal,
    "r",
    "secret_reveals"
);

// ---------------------------------------------------------------------------------------------
// Roles

/// The platform roles' fixed ids, and when they were defined.
const SUPER_ADMIN: Uuid = Uuid::from_u128(0x0000_0000_0000_7000_8000_0000_0000_0001);
const ADMIN: Uuid = Uuid::from_u128(0x0000_0000_0000_7000_8000_0000_0000_0002);
const USER: Uuid = Uuid::from_u128(0x0000_0000_0000_7000_8000_0000_0000_0003);
const PLATFORM_ROLES_DEFINED_AT: Timestamp = Timestamp::from_micros(1_795_219_200_000_000);

fn platform_role(id: Uuid, name: &str, description: &str) -> RoleRecord {
    RoleRecord {
        id,
        tenant_id: None,
        name: name.into(),
        description: description.into(),
        permissions: vec![],
        created_at: PLATFORM_ROLES_DEFINED_AT,
        updated_at: PLATFORM_ROLES_DEFINED_AT,
    }
}

/// The platform roles as the migration inserts them, by id.
fn platform_roles() -> [RoleRecord; 3] {
    [
        platform_role(
            SUPER_ADMIN,
            "SUPER_ADMIN",
            "Owns the organisation: every permission, including creating administrators",
        ),
        platform_role(ADMIN, "ADMIN", "Administers the organisation: users, roles, groups, policies and operations"),
        platform_role(USER, "USER", "Operates the organisation's customers, accounts and token operations"),
    ]
}

fn custom_role(tenant: TenantId, name: &str, permissions: &[&str], created_at: Timestamp) -> RoleRecord {
    RoleRecord {
        id: new_id(),
        tenant_id: Some(tenant),
        name: name.into(),
        description: format!("The {name} role"),
        permissions: permissions.iter().map(|p| (*p).to_owned()).collect(),
        created_at,
        updated_at: created_at,
    }
}

async fn insert_roles(store: &dyn Store, roles: &[RoleRecord]) {
    insert_all(store, roles, |tx, r| tx.roles().insert(r)).await
}

async fn list_roles(store: &dyn Store, tenant: TenantId, sort: &[SortKey], page: u64, size: u32) -> (Vec<String>, u64) {
    let mut tx = store.read().await.expect("begin read");
    let found = tx.roles().list(tenant, sort, PageRequest { page, size }).await.expect("list roles");
    (found.items.into_iter().map(|r| r.name).collect(), found.total)
}

fn client(tenant_id: Option<TenantId>, name: &str, created_at: Timestamp) -> MachineClientRecord {
    MachineClientRecord {
        id: new_id(),
        tenant_id,
        name: name.into(),
        role_id: Some(USER),
        secret_hash: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".into(),
        active: true,
        created_at,
    }
}

backends!(
    platform_roles_are_rows_every_tenant_sees_and_none_changes,
    custom_roles_are_read_changed_and_deleted_within_their_tenant,
    role_names_are_unique_per_tenant_ignoring_case_platform_names_included,
    a_rename_racing_a_new_role_of_that_name_conflicts,
    roles_sort_and_page_with_the_platform_roles,
    role_holders_are_the_tenants_users_and_clients,
);

async fn platform_roles_are_rows_every_tenant_sees_and_none_changes(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (a, b) = (tenant(), tenant());
    let [super_admin, admin, user_role] = platform_roles();
    for t in [a, b] {
        let mut tx = fx.store.read().await.expect("begin read");
        let listed = tx.roles().list(t, &[asc("name")], PageRequest { page: 0, size: 10 }).await.expect("list");
        assert_eq!(listed.total, 3);
        assert_eq!(listed.items, vec![admin.clone(), super_admin.clone(), user_role.clone()]);
        for role in platform_roles() {
            assert_eq!(tx.roles().get(t, role.id).await.expect("get").as_ref(), Some(&role));
        }
        for name in ["admin", "Super_Admin", "USER", "uSeR"] {
            let found = tx.roles().find_by_name(t, name).await.expect("find").map(|r| r.id);
            assert!(found.is_some(), "{name}");
        }
        assert_eq!(tx.roles().find_by_name(t, "SUPER").await.expect("find a prefix"), None);
        assert_eq!(tx.roles().find_by_name(t, "ADMIN ").await.expect("find"), None);
    }

    // Neither an update nor a delete in any organisation's name reaches a platform row.
    let mut tx = fx.store.write().await.expect("begin");
    let changed = RoleRecord {
        tenant_id: Some(a),
        description: "Changed".into(),
        permissions: vec!["customers.read".into()],
        updated_at: at(1),
        ..admin.clone()
    };
    tx.roles().update(&changed).await.expect("update: nothing");
    assert!(
        tx.roles().update(&RoleRecord { description: "Changed".into(), ..admin.clone() }).await.is_err(),
        "no tenant"
    );
    assert!(tx.roles().insert(&RoleRecord { id: new_id(), name: "PLATFORM".into(), ..admin.clone() }).await.is_err());
    for role in platform_roles() {
        assert!(!tx.roles().delete(a, role.id).await.expect("delete"), "{}", role.name);
    }
    assert_eq!(tx.roles().get_for_update(a, ADMIN).await.expect("get for update"), Some(admin.clone()));
    tx.commit().await.expect("commit");

    let mut tx = fx.store.read().await.expect("begin read");
    for t in [a, b] {
        for role in platform_roles() {
            assert_eq!(tx.roles().get(t, role.id).await.expect("get").as_ref(), Some(&role), "unchanged");
        }
    }
    assert_eq!(fx.db.count("roles", "").await, 3);
}

async fn custom_roles_are_read_changed_and_deleted_within_their_tenant(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (a, b) = (tenant(), tenant());
    // Permissions keep the order given.
    let auditor = custom_role(a, "Auditor", &["customers.read", "audit.read", "customers.create"], at(1));
    let empty = custom_role(a, "Nobody", &[], at(2));
    insert_roles(&*fx.store, &[auditor.clone(), empty.clone()]).await;

    let mut tx = fx.store.read().await.expect("begin read");
    assert_eq!(tx.roles().get(a, auditor.id).await.expect("get"), Some(auditor.clone()));
    assert_eq!(tx.roles().get(a, empty.id).await.expect("get"), Some(empty.clone()));
    assert_eq!(tx.roles().find_by_name(a, "AUDITOR").await.expect("find"), Some(auditor.clone()));
    assert_eq!(tx.roles().get(b, auditor.id).await.expect("get from another tenant"), None);
    assert_eq!(tx.roles().find_by_name(b, "Auditor").await.expect("find from another tenant"), None);
    assert_eq!(tx.roles().get(a, new_id()).await.expect("get unknown"), None);
    let theirs = tx.roles().list(b, &[asc("name")], PageRequest { page: 0, size: 10 }).await.expect("list");
    assert_eq!(theirs.total, 3, "only the platform roles");
    drop(tx);

    let changed = RoleRecord {
        name: "Inspector".into(),
        description: "Inspects".into(),
        permissions: vec!["audit.read".into()],
        updated_at: at(10),
        ..auditor.clone()
    };
    let mut tx = fx.store.write().await.expect("begin");
    assert_eq!(tx.roles().get_for_update(a, auditor.id).await.expect("get for update"), Some(auditor.clone()));
    assert_eq!(tx.roles().get_for_update(b, auditor.id).await.expect("get for update"), None);
    // Another organisation's update of the same id reaches nothing.
    tx.roles()
        .update(&RoleRecord { tenant_id: Some(b), name: "Mallory".into(), ..changed.clone() })
        .await
        .expect("update");
    tx.roles().update(&changed).await.expect("update");
    tx.commit().await.expect("commit");

    let mut tx = fx.store.read().await.expect("begin read");
    assert_eq!(tx.roles().get(a, auditor.id).await.expect("get"), Some(changed.clone()));
    assert_eq!(tx.roles().find_by_name(a, "inspector").await.expect("find"), Some(changed.clone()));
    assert_eq!(tx.roles().find_by_name(a, "auditor").await.expect("find the old name"), None);
    drop(tx);

    let mut tx = fx.store.write().await.expect("begin");
    assert!(!tx.roles().delete(b, auditor.id).await.expect("delete from another tenant"));
    assert!(tx.roles().delete(a, auditor.id).await.expect("delete"));
    assert!(!tx.roles().delete(a, auditor.id).await.expect("delete again"));
    tx.commit().await.expect("commit");
    let mut tx = fx.store.read().await.expect("begin read");
    assert_eq!(tx.roles().get(a, auditor.id).await.expect("get"), None);
    assert_eq!(tx.roles().get(a, empty.id).await.expect("get"), Some(empty));
    drop(tx);
    // The name is free again.
    insert_roles(&*fx.store, &[custom_role(a, "inspector", &[], at(20))]).await;
}

async fn role_names_are_unique_per_tenant_ignoring_case_platform_names_included(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (a, b) = (tenant(), tenant());
    let auditor = custom_role(a, "Auditor", &[], at(1));
    let treasurer = custom_role(a, "Trésorier", &[], at(2));
    let mut tx = fx.store.write().await.expect("begin");
    tx.roles().insert(&auditor).await.expect("insert");
    tx.roles().insert(&treasurer).await.expect("insert");
    for name in ["Auditor", "AUDITOR", "auditor", "TRÉSORIER", "trésorier", "ADMIN", "admin", "Super_Admin", "user"] {
        let outcome = tx.roles().insert(&custom_role(a, name, &[], at(3))).await;
        assert!(is_conflict(&outcome), "{name}: {outcome:?}");
    }
    assert!(is_conflict(&tx.roles().insert(&custom_role(b, "ADMIN", &[], at(3))).await), "in every organisation");
    assert!(is_conflict(&tx.roles().insert(&RoleRecord { name: "Other".into(), ..auditor.clone() }).await), "the id");
    // Full Unicode case mappings: "ß" upper-cases to "SS".
    tx.roles().insert(&custom_role(a, "Straße", &[], at(3))).await.expect("insert");
    assert!(is_conflict(&tx.roles().insert(&custom_role(a, "STRASSE", &[], at(3))).await));
    // Not a prefix, and not across accents.
    tx.roles().insert(&custom_role(a, "Audit", &[], at(3))).await.expect("a prefix is another name");
    tx.roles().insert(&custom_role(a, "Tresorier", &[], at(3))).await.expect("without the accent");
    // Another organisation may use the name; the transaction went on after every conflict.
    tx.roles().insert(&custom_role(b, "AUDITOR", &[], at(3))).await.expect("another tenant");
    tx.commit().await.expect("commit");

    // Renames: into another role's name, or a platform name, conflict; a change of case does not.
    let mut tx = fx.store.write().await.expect("begin");
    for name in ["ADMIN", "super_admin", "trésorier", "straße", "audit"] {
        let outcome = tx.roles().update(&RoleRecord { name: name.into(), updated_at: at(5), ..auditor.clone() }).await;
        assert!(is_conflict(&outcome), "{name}: {outcome:?}");
    }
    let recased = RoleRecord { name: "AUDITOR".into(), updated_at: at(6), ..auditor.clone() };
    tx.roles().update(&recased).await.expect("a change of case");
    assert_eq!(tx.roles().get(a, auditor.id).await.expect("get after the conflicts"), Some(recased.clone()));
    tx.commit().await.expect("commit");

    let mut tx = fx.store.read().await.expect("begin read");
    assert_eq!(tx.roles().find_by_name(a, "auditor").await.expect("find"), Some(recased));
    assert_eq!(tx.roles().find_by_name(a, "TRÉSORIER").await.expect("find"), Some(treasurer));
    assert_eq!(tx.roles().find_by_name(a, "strasse").await.expect("find").map(|r| r.name), Some("Straße".into()));
    assert_eq!(tx.roles().find_by_name(b, "auditor").await.expect("find").map(|r| r.name), Some("AUDITOR".into()));
    assert_eq!(fx.db.count("roles", "").await, 3 + 6);
}

async fn a_rename_racing_a_new_role_of_that_name_conflicts(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let t = tenant();
    let auditor = custom_role(t, "Auditor", &[], at(1));
    insert_roles(&*fx.store, std::slice::from_ref(&auditor)).await;

    // One change creates "Ops" and holds on before it commits...
    let (held, holding) = tokio::sync::oneshot::channel();
    let first = {
        let store = fx.store.clone();
        tokio::spawn(async move {
            let mut tx = store.write().await.expect("begin");
            tx.roles().insert(&custom_role(t, "Ops", &[], at(2))).await.expect("insert");
            held.send(()).expect("signal");
            tokio::time::sleep(Duration::from_millis(300)).await;
            tx.commit().await.expect("commit");
        })
    };
    holding.await.expect("the first change holds");

    // ...while another renames a role to "ops": it conflicts once the first commits, and its
    // transaction goes on.
    let mut tx = fx.store.write().await.expect("begin");
    let outcome = tx.roles().update(&RoleRecord { name: "ops".into(), updated_at: at(3), ..auditor.clone() }).await;
    assert!(is_conflict(&outcome), "{outcome:?}");
    let renamed = RoleRecord { name: "Operators".into(), updated_at: at(4), ..auditor.clone() };
    tx.roles().update(&renamed).await.expect("update after the conflict");
    tx.commit().await.expect("commit");
    first.await.expect("first change");

    let (names, total) = list_roles(&*fx.store, t, &[asc("name")], 0, 10).await;
    assert_eq!(
        (names, total),
        (vec!["ADMIN".into(), "Operators".into(), "Ops".into(), "SUPER_ADMIN".into(), "USER".into()], 5)
    );
}

async fn roles_sort_and_page_with_the_platform_roles(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (t, other) = (tenant(), tenant());
    let mut roles = vec![
        custom_role(t, "Clerk", &[], at(2)),
        custom_role(t, "approver", &[], at(3)),
        custom_role(t, "Auditor", &[], at(1)),
        custom_role(other, "Zeta", &[], at(0)),
    ];
    roles[0].description = "b".into();
    roles[1].description = "a".into();
    roles[2].description = "c".into();
    roles[1].updated_at = at(30);
    insert_roles(&*fx.store, &roles).await;

    let names = |list: &[&str]| list.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
    // Without regard to case: "approver" among the capitals, not after them.
    let by_name = names(&["ADMIN", "approver", "Auditor", "Clerk", "SUPER_ADMIN", "USER"]);
    assert_eq!(list_roles(&*fx.store, t, &[asc("name")], 0, 10).await, (by_name.clone(), 6));
    let mut reversed = by_name.clone();
    reversed.reverse();
    assert_eq!(list_roles(&*fx.store, t, &[desc("name")], 0, 10).await, (reversed, 6));
    // The platform roles were defined before T0, together: their ids break the tie.
    let by_created = names(&["SUPER_ADMIN", "ADMIN", "USER", "Auditor", "Clerk", "approver"]);
    assert_eq!(list_roles(&*fx.store, t, &[asc("created_at")], 0, 10).await.0, by_created);
    let by_updated = names(&["approver", "Clerk", "Auditor", "ADMIN", "SUPER_ADMIN", "USER"]);
    assert_eq!(list_roles(&*fx.store, t, &[desc("updated_at"), asc("name")], 0, 10).await.0, by_updated);
    let by_description = names(&["approver", "ADMIN", "Clerk", "Auditor", "USER", "SUPER_ADMIN"]);
    assert_eq!(list_roles(&*fx.store, t, &[asc("description")], 0, 10).await.0, by_description);
    // Without keys: by id (the platform ids are the lowest).
    let (by_id, _) = list_roles(&*fx.store, t, &[], 0, 10).await;
    assert_eq!(by_id[..3], names(&["SUPER_ADMIN", "ADMIN", "USER"]));
    // Pages, with the total across them.
    assert_eq!(list_roles(&*fx.store, t, &[asc("name")], 0, 4).await, (by_name[..4].to_vec(), 6));
    assert_eq!(list_roles(&*fx.store, t, &[asc("name")], 1, 4).await, (by_name[4..].to_vec(), 6));
    assert_eq!(list_roles(&*fx.store, t, &[asc("name")], 2, 4).await, (vec![], 6));
    assert_eq!(
        list_roles(&*fx.store, other, &[asc("name")], 0, 10).await,
        (names(&["ADMIN", "SUPER_ADMIN", "USER", "Zeta"]), 4)
    );
    // A column the list does not sort by is refused, not placed in SQL.
    let mut tx = fx.store.read().await.expect("begin read");
    assert!(tx.roles().list(t, &[asc("tenant_id")], PageRequest { page: 0, size: 10 }).await.is_err());
}

async fn role_holders_are_the_tenants_users_and_clients(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (a, b) = (tenant(), tenant());
    let auditor = custom_role(a, "Auditor", &[], at(1));
    insert_roles(&*fx.store, std::slice::from_ref(&auditor)).await;
    let with_role = |t: TenantId, email: &str, role_id: Uuid| UserRecord { role_id, ..user(t, email, "U", "N") };
    insert_users(
        &*fx.store,
        &[
            with_role(a, "a1@x.io", auditor.id),
            UserRecord { status: UserStatus::Suspended, ..with_role(a, "a2@x.io", auditor.id) },
            with_role(a, "a3@x.io", ADMIN),
            with_role(b, "b1@x.io", ADMIN),
            with_role(b, "b2@x.io", ADMIN),
        ],
    )
    .await;
    let holding = |t: TenantId, role_id: Uuid, active: bool| MachineClientRecord {
        role_id: Some(role_id),
        active,
        ..client(Some(t), "integration", T0)
    };
    let mut tx = fx.store.write().await.expect("begin");
    for c in [
        holding(a, auditor.id, true),
        holding(a, auditor.id, false),
        holding(a, USER, true),
        holding(b, ADMIN, true),
        MachineClientRecord { role_id: None, ..client(None, "operator", T0) },
    ] {
        tx.machine_clients().insert(&c).await.expect("insert client");
    }
    // In a write transaction too.
    assert_eq!(tx.roles().count_holders(a, auditor.id).await.expect("count"), 3);
    tx.commit().await.expect("commit");

    let mut tx = fx.store.read().await.expect("begin read");
    assert_eq!(
        tx.roles().count_holders(a, auditor.id).await.expect("count"),
        3,
        "users whatever their status, and enabled clients (a disabled one can never use the role again)"
    );
    assert_eq!(tx.roles().count_holders(a, ADMIN).await.expect("count"), 1, "not another tenant's");
    assert_eq!(tx.roles().count_holders(b, ADMIN).await.expect("count"), 3);
    assert_eq!(tx.roles().count_holders(a, USER).await.expect("count"), 1);
    assert_eq!(tx.roles().count_holders(b, auditor.id).await.expect("count"), 0);
    assert_eq!(tx.roles().count_holders(a, SUPER_ADMIN).await.expect("count"), 0);
    assert_eq!(tx.roles().count_holders(a, new_id()).await.expect("count"), 0);
}

// ---------------------------------------------------------------------------------------------
// Approval groups

fn group(tenant: TenantId, key: &str, name: &str, created_at: Timestamp) -> GroupRecord {
    GroupRecord {
        id: new_id(),
        tenant_id: tenant,
        key: key.into(),
        name: name.into(),
        status: GroupStatus::Active,
        created_at,
        updated_at: created_at,
    }
}

async fn insert_groups(store: &dyn Store, groups: &[GroupRecord]) {
    insert_all(store, groups, |tx, g| tx.groups().insert(g)).await
}

async fn list_groups(
    store: &dyn Store,
    tenant: TenantId,
    sort: &[SortKey],
    page: u64,
    size: u32,
) -> (Vec<String>, u64) {
    let mut tx = store.read().await.expect("begin read");
    let found = tx.groups().list(tenant, sort, PageRequest { page, size }).await.expect("list groups");
    (found.items.into_iter().map(|g| g.key).collect(), found.total)
}

async fn members(store: &dyn Store, tenant: TenantId, group_id: Uuid, page: u64, size: u32) -> (Vec<String>, u64) {
    let mut tx = store.read().await.expect("begin read");
    let found = tx.groups().list_members(tenant, group_id, PageRequest { page, size }).await.expect("list members");
    (found.items.into_iter().map(|u| u.email).collect(), found.total)
}

backends!(
    groups_are_read_and_changed_within_their_tenant,
    group_keys_are_unique_per_tenant_ignoring_case,
    groups_sort_and_page,
    members_are_added_and_removed_once_within_the_tenant,
    members_are_listed_by_name_with_their_total,
    a_users_groups_are_listed_by_key_and_left_together,
);

async fn groups_are_read_and_changed_within_their_tenant(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (a, b) = (tenant(), tenant());
    let treasury = group(a, "treasury", "Treasury", at(1));
    insert_groups(&*fx.store, std::slice::from_ref(&treasury)).await;

    let mut tx = fx.store.read().await.expect("begin read");
    assert_eq!(tx.groups().get(a, treasury.id).await.expect("get"), Some(treasury.clone()));
    assert_eq!(tx.groups().get(b, treasury.id).await.expect("get from another tenant"), None);
    assert_eq!(tx.groups().get(a, new_id()).await.expect("get unknown"), None);
    for key in ["treasury", "TREASURY", "Treasury"] {
        assert_eq!(tx.groups().find_by_key(a, key).await.expect("find"), Some(treasury.clone()), "{key}");
    }
    assert_eq!(tx.groups().find_by_key(a, "treas").await.expect("find a prefix"), None);
    assert_eq!(tx.groups().find_by_key(b, "treasury").await.expect("find from another tenant"), None);
    drop(tx);

    // Name, status and updated_at change; the key and the creation stay.
    let changed = GroupRecord {
        key: "renamed".into(),
        name: "Treasury desk".into(),
        status: GroupStatus::Inactive,
        created_at: at(50),
        updated_at: at(60),
        ..treasury.clone()
    };
    let mut tx = fx.store.write().await.expect("begin");
    assert_eq!(tx.groups().get_for_update(a, treasury.id).await.expect("get for update"), Some(treasury.clone()));
    assert_eq!(tx.groups().get_for_update(b, treasury.id).await.expect("get for update"), None);
    // Another organisation's update of the same id reaches nothing.
    tx.groups().update(&GroupRecord { tenant_id: b, name: "Mallory".into(), ..changed.clone() }).await.expect("update");
    tx.groups().update(&changed).await.expect("update");
    tx.commit().await.expect("commit");

    let expected = GroupRecord { key: treasury.key.clone(), created_at: treasury.created_at, ..changed };
    let mut tx = fx.store.read().await.expect("begin read");
    assert_eq!(tx.groups().get(a, treasury.id).await.expect("get"), Some(expected.clone()));
    assert_eq!(tx.groups().find_by_key(a, "TREASURY").await.expect("find"), Some(expected));
    assert_eq!(tx.groups().find_by_key(a, "renamed").await.expect("find"), None);
}

async fn group_keys_are_unique_per_tenant_ignoring_case(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (a, b) = (tenant(), tenant());
    let treasury = group(a, "Treasury", "Treasury", at(1));
    let mut tx = fx.store.write().await.expect("begin");
    tx.groups().insert(&treasury).await.expect("insert");
    tx.groups().insert(&group(a, "Équipe", "Team", at(1))).await.expect("insert");
    for key in ["Treasury", "TREASURY", "treasury", "ÉQUIPE", "équipe"] {
        let outcome = tx.groups().insert(&group(a, key, "Other", at(2))).await;
        assert!(is_conflict(&outcome), "{key}: {outcome:?}");
    }
    assert!(is_conflict(&tx.groups().insert(&GroupRecord { key: "other".into(), ..treasury.clone() }).await), "the id");
    tx.groups().insert(&group(a, "Treasury-2", "Other", at(2))).await.expect("another key");
    tx.groups().insert(&group(a, "Equipe", "Other", at(2))).await.expect("without the accent");
    // Another organisation may use the key; the transaction went on after every conflict.
    let theirs = group(b, "TREASURY", "Theirs", at(2));
    tx.groups().insert(&theirs).await.expect("another tenant");
    tx.commit().await.expect("commit");

    let mut tx = fx.store.read().await.expect("begin read");
    assert_eq!(tx.groups().find_by_key(a, "treasury").await.expect("find"), Some(treasury));
    assert_eq!(tx.groups().find_by_key(b, "treasury").await.expect("find"), Some(theirs));
    assert_eq!(fx.db.count("approval_groups", "").await, 5);
}

async fn groups_sort_and_page(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (t, other) = (tenant(), tenant());
    let mut groups = vec![
        group(t, "payments", "Payments", at(3)),
        group(t, "Board", "the board", at(1)),
        group(t, "audit", "Audit", at(2)),
        group(t, "ops", "Operations", at(4)),
        group(other, "zz", "Elsewhere", at(0)),
    ];
    groups[0].status = GroupStatus::Inactive;
    groups[3].status = GroupStatus::Inactive;
    insert_groups(&*fx.store, &groups).await;

    let keys = |list: &[&str]| list.iter().map(|k| (*k).to_owned()).collect::<Vec<_>>();
    let by_key = keys(&["audit", "Board", "ops", "payments"]);
    assert_eq!(list_groups(&*fx.store, t, &[asc("key")], 0, 10).await, (by_key.clone(), 4));
    let mut reversed = by_key.clone();
    reversed.reverse();
    assert_eq!(list_groups(&*fx.store, t, &[desc("key")], 0, 10).await, (reversed, 4));
    assert_eq!(list_groups(&*fx.store, t, &[asc("name")], 0, 10).await.0, keys(&["audit", "ops", "payments", "Board"]));
    let by_status = keys(&["audit", "Board", "ops", "payments"]);
    assert_eq!(list_groups(&*fx.store, t, &[asc("status"), asc("key")], 0, 10).await.0, by_status);
    let by_status_desc = keys(&["ops", "payments", "audit", "Board"]);
    assert_eq!(list_groups(&*fx.store, t, &[desc("status"), asc("key")], 0, 10).await.0, by_status_desc);
    assert_eq!(
        list_groups(&*fx.store, t, &[asc("created_at")], 0, 10).await.0,
        keys(&["Board", "audit", "payments", "ops"])
    );
    assert_eq!(
        list_groups(&*fx.store, t, &[desc("updated_at")], 0, 10).await.0,
        keys(&["ops", "payments", "audit", "Board"])
    );
    let mut by_id: Vec<&GroupRecord> = groups[..4].iter().collect();
    by_id.sort_by_key(|g| g.id);
    let ids = by_id.iter().map(|g| g.key.clone()).collect::<Vec<_>>();
    assert_eq!(list_groups(&*fx.store, t, &[], 0, 10).await.0, ids);
    assert_eq!(list_groups(&*fx.store, t, &[asc("id")], 0, 10).await.0, ids);
    // Pages, with the total across them; only the tenant's own groups.
    assert_eq!(list_groups(&*fx.store, t, &[asc("key")], 0, 3).await, (by_key[..3].to_vec(), 4));
    assert_eq!(list_groups(&*fx.store, t, &[asc("key")], 1, 3).await, (by_key[3..].to_vec(), 4));
    assert_eq!(list_groups(&*fx.store, t, &[asc("key")], 2, 3).await, (vec![], 4));
    assert_eq!(list_groups(&*fx.store, other, &[asc("key")], 0, 10).await, (keys(&["zz"]), 1));
    assert_eq!(list_groups(&*fx.store, tenant(), &[asc("key")], 0, 10).await, (vec![], 0));
    // A column the list does not sort by is refused, not placed in SQL.
    let mut tx = fx.store.read().await.expect("begin read");
    assert!(tx.groups().list(t, &[asc("key_folded")], PageRequest { page: 0, size: 10 }).await.is_err());
}

async fn members_are_added_and_removed_once_within_the_tenant(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (a, b) = (tenant(), tenant());
    let (ours, theirs) = (group(a, "treasury", "Treasury", at(1)), group(b, "treasury", "Treasury", at(1)));
    insert_groups(&*fx.store, &[ours.clone(), theirs.clone()]).await;
    let (ada, bob) = (user(a, "ada@x.io", "Ada", "Lovelace"), user(b, "bob@x.io", "Bob", "Builder"));
    insert_users(&*fx.store, &[ada.clone(), bob.clone()]).await;

    let mut tx = fx.store.write().await.expect("begin");
    assert!(tx.groups().add_member(a, ours.id, ada.id, at(2)).await.expect("add"));
    assert!(!tx.groups().add_member(a, ours.id, ada.id, at(3)).await.expect("add again"), "a member already");
    // Nothing crosses organisations: another's user, another's group, an unknown one.
    assert!(!tx.groups().add_member(a, ours.id, bob.id, at(2)).await.expect("another tenant's user"));
    assert!(!tx.groups().add_member(a, theirs.id, ada.id, at(2)).await.expect("another tenant's group"));
    assert!(!tx.groups().add_member(b, ours.id, ada.id, at(2)).await.expect("in another tenant's name"));
    assert!(!tx.groups().add_member(a, ours.id, new_id(), at(2)).await.expect("an unknown user"));
    assert!(!tx.groups().add_member(a, new_id(), ada.id, at(2)).await.expect("an unknown group"));
    tx.commit().await.expect("commit");
    assert_eq!(members(&*fx.store, a, ours.id, 0, 10).await, (vec!["ada@x.io".into()], 1));
    assert_eq!(members(&*fx.store, b, ours.id, 0, 10).await, (vec![], 0), "not through another tenant");
    assert_eq!(members(&*fx.store, b, theirs.id, 0, 10).await, (vec![], 0));
    assert_eq!(fx.db.count("approval_group_members", "").await, 1);

    let mut tx = fx.store.write().await.expect("begin");
    assert!(!tx.groups().remove_member(b, ours.id, ada.id).await.expect("remove in another tenant's name"));
    assert!(!tx.groups().remove_member(a, theirs.id, ada.id).await.expect("remove from another group"));
    assert!(tx.groups().remove_member(a, ours.id, ada.id).await.expect("remove"));
    assert!(!tx.groups().remove_member(a, ours.id, ada.id).await.expect("remove again"), "not a member");
    assert!(tx.groups().add_member(a, ours.id, ada.id, at(4)).await.expect("add back"));
    tx.commit().await.expect("commit");
    assert_eq!(members(&*fx.store, a, ours.id, 0, 10).await, (vec!["ada@x.io".into()], 1));
}

async fn members_are_listed_by_name_with_their_total(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let t = tenant();
    let (treasury, board) = (group(t, "treasury", "Treasury", at(1)), group(t, "board", "Board", at(1)));
    insert_groups(&*fx.store, &[treasury.clone(), board.clone()]).await;
    let mut twins = [user(t, "twin1@x.io", "Tom", "Twin"), user(t, "twin2@x.io", "Tom", "Twin")];
    twins.sort_by_key(|u| u.id);
    let users = vec![
        user(t, "zoe@x.io", "Zoe", "Adams"),
        twins[1].clone(),
        user(t, "ann.z@x.io", "Ann", "Zed"),
        user(t, "emile@x.io", "Émile", "Zola"),
        twins[0].clone(),
        user(t, "ann.b@x.io", "Ann", "Baker"),
        user(t, "outsider@x.io", "Aaron", "Outside"),
    ];
    insert_users(&*fx.store, &users).await;
    let mut tx = fx.store.write().await.expect("begin");
    for u in &users[..6] {
        assert!(tx.groups().add_member(t, treasury.id, u.id, at(2)).await.expect("add"));
    }
    assert!(tx.groups().add_member(t, board.id, users[6].id, at(2)).await.expect("add"));
    tx.commit().await.expect("commit");

    // First name, then last name, then id; code point order (non-ASCII last).
    let (low, high) = (twins[0].email.clone(), twins[1].email.clone());
    let all: Vec<String> = ["ann.b@x.io", "ann.z@x.io", low.as_str(), high.as_str(), "zoe@x.io", "emile@x.io"]
        .iter()
        .map(|e| (*e).to_owned())
        .collect();
    assert_eq!(members(&*fx.store, t, treasury.id, 0, 10).await, (all.clone(), 6));
    assert_eq!(members(&*fx.store, t, treasury.id, 0, 4).await, (all[..4].to_vec(), 6));
    assert_eq!(members(&*fx.store, t, treasury.id, 1, 4).await, (all[4..].to_vec(), 6));
    assert_eq!(members(&*fx.store, t, treasury.id, 2, 4).await, (vec![], 6));
    assert_eq!(members(&*fx.store, t, board.id, 0, 10).await, (vec!["outsider@x.io".into()], 1));
    assert_eq!(members(&*fx.store, t, new_id(), 0, 10).await, (vec![], 0));
    // The members are the users as stored.
    let mut tx = fx.store.read().await.expect("begin read");
    let listed = tx.groups().list_members(t, board.id, PageRequest { page: 0, size: 1 }).await.expect("list");
    assert_eq!(listed.items, vec![users[6].clone()]);
}

async fn a_users_groups_are_listed_by_key_and_left_together(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let (a, b) = (tenant(), tenant());
    let groups =
        [group(a, "beta", "Beta", at(1)), group(a, "Alpha", "Alpha", at(2)), group(a, "gamma", "Gamma", at(3))];
    let theirs = group(b, "delta", "Delta", at(1));
    insert_groups(&*fx.store, &groups).await;
    insert_groups(&*fx.store, std::slice::from_ref(&theirs)).await;
    let (ada, bob) = (user(a, "ada@x.io", "Ada", "Lovelace"), user(a, "bob@x.io", "Bob", "Builder"));
    insert_users(&*fx.store, &[ada.clone(), bob.clone()]).await;
    let mut tx = fx.store.write().await.expect("begin");
    for g in &groups {
        assert!(tx.groups().add_member(a, g.id, ada.id, at(5)).await.expect("add"));
    }
    assert!(tx.groups().add_member(a, groups[0].id, bob.id, at(5)).await.expect("add"));
    // Code point order of the keys: "Alpha" before "beta".
    let expected = vec![groups[1].id, groups[0].id, groups[2].id];
    assert_eq!(tx.groups().groups_of(a, ada.id).await.expect("groups of"), expected, "in the write transaction");
    tx.commit().await.expect("commit");

    let mut tx = fx.store.read().await.expect("begin read");
    assert_eq!(tx.groups().groups_of(a, ada.id).await.expect("groups of"), expected);
    assert_eq!(tx.groups().groups_of(a, bob.id).await.expect("groups of"), vec![groups[0].id]);
    assert_eq!(tx.groups().groups_of(b, ada.id).await.expect("in another tenant's name"), Vec::<Uuid>::new());
    assert_eq!(tx.groups().groups_of(a, new_id()).await.expect("unknown user"), Vec::<Uuid>::new());
    drop(tx);

    let mut tx = fx.store.write().await.expect("begin");
    assert_eq!(tx.groups().remove_user(b, ada.id).await.expect("remove in another tenant's name"), 0);
    assert_eq!(tx.groups().remove_user(a, ada.id).await.expect("remove"), 3);
    assert_eq!(tx.groups().remove_user(a, ada.id).await.expect("remove again"), 0);
    tx.commit().await.expect("commit");

    let mut tx = fx.store.read().await.expect("begin read");
    assert_eq!(tx.groups().groups_of(a, ada.id).await.expect("groups of"), Vec::<Uuid>::new());
    assert_eq!(tx.groups().groups_of(a, bob.id).await.expect("groups of"), vec![groups[0].id], "others stay");
    drop(tx);
    assert_eq!(members(&*fx.store, a, groups[0].id, 0, 10).await, (vec!["bob@x.io".into()], 1));
    assert_eq!(members(&*fx.store, a, groups[1].id, 0, 10).await, (vec![], 0));
}

// ---------------------------------------------------------------------------------------------
// Signing keys

backends!(signing_keys_are_listed_oldest_first_and_retired);

async fn signing_keys_are_listed_oldest_first_and_retired(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let key = |kid: &str, created_at: Timestamp| SigningKeyRecord {
        kid: kid.into(),
        sealed_key: format!("sealed:{kid}"),
        created_at,
        retire_at: None,
    };
    // Inserted out of order; "k-b" and "k-a" share their creation time, the kid breaks the tie.
    let (newest, b, a, oldest) = (key("k-0", at(30)), key("k-b", at(20)), key("k-a", at(20)), key("k-z", at(10)));
    let mut tx = fx.store.write().await.expect("begin");
    for k in [&newest, &b, &a, &oldest] {
        tx.signing_keys().insert(k).await.expect("insert key");
    }
    assert!(matches!(tx.signing_keys().insert(&key("k-a", at(40))).await, Err(StoreError::Conflict(_))));
    tx.commit().await.expect("commit");

    let mut tx = fx.store.read().await.expect("begin read");
    let listed = tx.signing_keys().list().await.expect("list");
    assert_eq!(listed, vec![oldest.clone(), a.clone(), b.clone(), newest.clone()]);
    drop(tx);

    let mut tx = fx.store.write().await.expect("begin");
    tx.signing_keys().set_retire_at("k-z", at(100)).await.expect("retire");
    tx.signing_keys().set_retire_at("k-a", at(200)).await.expect("retire");
    tx.signing_keys().set_retire_at("unknown", at(100)).await.expect("retire unknown: nothing");
    let listed = tx.signing_keys().list().await.expect("list");
    assert_eq!(listed[0].retire_at, Some(at(100)));
    assert_eq!(listed[1].retire_at, Some(at(200)));
    assert_eq!((listed[2].retire_at, listed[3].retire_at), (None, None));
    // Retired strictly before the cutoff; never a key without a retirement.
    assert_eq!(tx.signing_keys().delete_retired(at(100)).await.expect("delete"), 0);
    assert_eq!(tx.signing_keys().delete_retired(at(150)).await.expect("delete"), 1);
    assert_eq!(tx.signing_keys().delete_retired(at(150)).await.expect("delete again"), 0);
    tx.commit().await.expect("commit");

    let mut tx = fx.store.write().await.expect("begin");
    assert_eq!(tx.signing_keys().delete_retired(at(10_000)).await.expect("delete"), 1);
    let kids: Vec<String> = tx.signing_keys().list().await.expect("list").into_iter().map(|k| k.kid).collect();
    assert_eq!(kids, ["k-b", "k-0"]);
    tx.commit().await.expect("commit");
}

// ---------------------------------------------------------------------------------------------
// Refresh tokens and challenges

backends!(refresh_tokens_are_revoked_per_user, a_challenge_is_taken_once_and_only_before_it_expires);

async fn refresh_tokens_are_revoked_per_user(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let t = tenant();
    let (ada, bob) = (new_id(), new_id());
    let token = |hash: &str, user_id: Uuid, revoked_at: Option<Timestamp>| RefreshTokenRecord {
        token_hash: hash.into(),
        user_id,
        tenant_id: t,
        expires_at: at(3600),
        revoked_at,
        created_at: T0,
    };
    let (live1, live2, revoked, bobs) =
        (token("h1", ada, None), token("h2", ada, None), token("h3", ada, Some(at(5))), token("h4", bob, None));
    let mut tx = fx.store.write().await.expect("begin");
    for r in [&live1, &live2, &revoked, &bobs] {
        tx.refresh_tokens().insert(r).await.expect("insert token");
    }
    assert!(matches!(tx.refresh_tokens().insert(&token("h1", bob, None)).await, Err(StoreError::Conflict(_))));
    tx.commit().await.expect("commit");

    let mut tx = fx.store.read().await.expect("begin read");
    assert_eq!(tx.refresh_tokens().get("h1").await.expect("get"), Some(live1.clone()));
    assert_eq!(tx.refresh_tokens().get("h3").await.expect("get"), Some(revoked.clone()));
    assert_eq!(tx.refresh_tokens().get("unknown").await.expect("get unknown"), None);
    drop(tx);

    let mut tx = fx.store.write().await.expect("begin");
    assert_eq!(tx.refresh_tokens().revoke_for_user(ada, at(60)).await.expect("revoke"), 2, "the live ones");
    assert_eq!(tx.refresh_tokens().revoke_for_user(ada, at(90)).await.expect("revoke again"), 0);
    tx.commit().await.expect("commit");

    let mut tx = fx.store.read().await.expect("begin read");
    assert_eq!(tx.refresh_tokens().get("h1").await.expect("get").and_then(|r| r.revoked_at), Some(at(60)));
    assert_eq!(tx.refresh_tokens().get("h2").await.expect("get").and_then(|r| r.revoked_at), Some(at(60)));
    assert_eq!(tx.refresh_tokens().get("h3").await.expect("get"), Some(revoked), "keeps its first revocation");
    assert_eq!(tx.refresh_tokens().get("h4").await.expect("get"), Some(bobs), "another user's token is untouched");
}

backends!(expired_refresh_tokens_are_deleted, expired_challenges_are_deleted);

async fn expired_refresh_tokens_are_deleted(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let t = tenant();
    let token = |hash: &str, expires_at: Timestamp, revoked_at: Option<Timestamp>| RefreshTokenRecord {
        token_hash: hash.into(),
        user_id: new_id(),
        tenant_id: t,
        expires_at,
        revoked_at,
        created_at: T0,
    };
    let tokens = [token("h1", at(100), None), token("h2", at(200), Some(at(50))), token("h3", at(300), Some(at(60)))];
    let mut tx = fx.store.write().await.expect("begin");
    for r in &tokens {
        tx.refresh_tokens().insert(r).await.expect("insert token");
    }
    // Expired strictly before the cutoff, revoked or not.
    assert_eq!(tx.refresh_tokens().delete_expired(at(100)).await.expect("delete"), 0);
    assert_eq!(tx.refresh_tokens().delete_expired(at(201)).await.expect("delete"), 2);
    assert_eq!(tx.refresh_tokens().delete_expired(at(201)).await.expect("delete again"), 0);
    tx.commit().await.expect("commit");

    let mut tx = fx.store.read().await.expect("begin read");
    assert_eq!(tx.refresh_tokens().get("h1").await.expect("get"), None);
    assert_eq!(tx.refresh_tokens().get("h2").await.expect("get"), None);
    assert_eq!(tx.refresh_tokens().get("h3").await.expect("get"), Some(tokens[2].clone()));
}

fn challenge(hash: &str, expires_at: Timestamp) -> ChallengeRecord {
    ChallengeRecord { session_hash: hash.into(), user_id: new_id(), expires_at }
}

one_time_record_rules!(
    a_challenge_is_taken_once_and_only_before_it_expires,
    expired_challenges_are_deleted,
    challenges,
    challenge,
    "s",
    "challenges"
);

// ---------------------------------------------------------------------------------------------
// Read transactions

backends!(a_read_transaction_refuses_the_organisation_writes);

async fn a_read_transaction_refuses_the_organisation_writes(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let t = tenant();
    let role = custom_role(t, "Auditor", &[], at(1));
    let treasury = group(t, "treasury", "Treasury", at(1));
    let ada = user(t, "ada@x.io", "Ada", "Lovelace");
    let integration = client(Some(t), "integration", at(1));
    insert_roles(&*fx.store, std::slice::from_ref(&role)).await;
    insert_groups(&*fx.store, std::slice::from_ref(&treasury)).await;
    insert_users(&*fx.store, std::slice::from_ref(&ada)).await;
    let mut tx = fx.store.write().await.expect("begin");
    tx.machine_clients().insert(&integration).await.expect("insert client");
    assert!(tx.groups().add_member(t, treasury.id, ada.id, at(2)).await.expect("add"));
    tx.secret_reveals().insert(&reveal("r1", at(300))).await.expect("insert reveal");
    tx.commit().await.expect("commit");

    // Every write is refused, including those that would change no row, and holding a row.
    let renamed = RoleRecord { name: "Inspector".into(), ..role.clone() };
    let accepted = accepted_in_reads!(fx.store,
        "users.get_for_update" => |tx| tx.users().get_for_update(t, ada.id),
        "machine_clients.set_active" => |tx| tx.machine_clients().set_active(t, integration.id, false),
        "secret_reveals.insert" => |tx| tx.secret_reveals().insert(&reveal("r2", at(300))),
        "secret_reveals.take" => |tx| tx.secret_reveals().take("r1", T0),
        "secret_reveals.delete_expired" => |tx| tx.secret_reveals().delete_expired(T0),
        "roles.insert" => |tx| tx.roles().insert(&custom_role(t, "Clerk", &[], at(2))),
        "roles.get_for_update" => |tx| tx.roles().get_for_update(t, role.id),
        "roles.update" => |tx| tx.roles().update(&renamed),
        "roles.delete" => |tx| tx.roles().delete(t, new_id()),
        "groups.insert" => |tx| tx.groups().insert(&group(t, "board", "Board", at(2))),
        "groups.get_for_update" => |tx| tx.groups().get_for_update(t, treasury.id),
        "groups.update" => |tx| tx.groups().update(&treasury),
        "groups.add_member" => |tx| tx.groups().add_member(t, treasury.id, ada.id, at(3)),
        "groups.remove_member" => |tx| tx.groups().remove_member(t, treasury.id, ada.id),
        "groups.remove_user" => |tx| tx.groups().remove_user(t, ada.id),
        "refresh_tokens.delete_expired" => |tx| tx.refresh_tokens().delete_expired(T0),
        "challenges.delete_expired" => |tx| tx.challenges().delete_expired(T0),
    );
    assert!(accepted.is_empty(), "a read transaction let these writes through: {accepted:?}");
    // Nothing changed.
    let mut tx = fx.store.read().await.expect("begin read");
    assert_eq!(tx.roles().get(t, role.id).await.expect("get"), Some(role));
    assert_eq!(tx.machine_clients().get(integration.id).await.expect("get"), Some(integration));
    assert_eq!(tx.groups().groups_of(t, ada.id).await.expect("groups of"), vec![treasury.id]);
    assert_eq!(fx.db.count("secret_reveals", "").await, 1);
}
