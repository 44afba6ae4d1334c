//! The identity persistence contract (`tokenops_store::identity`), checked on both backends:
//! organisations, users (email uniqueness, tenant scoping, search, sorting, paging), machine
//! clients, signing keys, refresh tokens and challenge sessions. Every test is registered with
//! `backends!`, so it runs as `name::sqlite` and `name::postgres` on a fresh, migrated store
//! reached through the trait object, the way the app sees it.
//!
//! The store never reads the clock: tests pass time in, from the fixed instant `T0`.

use tokenops_domain::paging::{PageRequest, SortDirection, SortKey};
use tokenops_domain::{TenantId, Timestamp, new_id};
use tokenops_store::{
    ChallengeRecord, MachineClientRecord, RefreshTokenRecord, SigningKeyRecord, Store, StoreError, TenantRecord,
    UserFilter, UserRecord, UserStatus,
};
use tokenops_testkit::{Backend, StoreFixture, backends};
use uuid::Uuid;

/// A fixed instant.
const T0: Timestamp = Timestamp::from_micros(1_800_000_000_000_000);

// ---------------------------------------------------------------------------------------------
// The fixture

/// A fresh, migrated store per test: the kit's fixture.
type Fixture = StoreFixture;

// ---------------------------------------------------------------------------------------------
// Helpers

fn at(seconds: i64) -> Timestamp {
    T0.plus_millis(seconds * 1000)
}

fn tenant() -> TenantId {
    TenantId(new_id())
}

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
    let mut tx = store.write().await.expect("begin");
    for u in users {
        tx.users().insert(u).await.expect("insert user");
    }
    tx.commit().await.expect("commit");
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

async fn a_challenge_is_taken_once_and_only_before_it_expires(backend: Backend) {
    let fx = Fixture::new(backend).await;
    let challenge = |hash: &str, expires_at: Timestamp| ChallengeRecord {
        session_hash: hash.into(),
        user_id: new_id(),
        expires_at,
    };
    let (fresh, stale, edge) = (challenge("s1", at(300)), challenge("s2", at(300)), challenge("s3", at(300)));
    let mut tx = fx.store.write().await.expect("begin");
    for c in [&fresh, &stale, &edge] {
        tx.challenges().insert(c).await.expect("insert challenge");
    }
    assert!(matches!(tx.challenges().insert(&challenge("s1", at(600))).await, Err(StoreError::Conflict(_))));
    tx.commit().await.expect("commit");

    let mut tx = fx.store.write().await.expect("begin");
    assert_eq!(tx.challenges().take("s1", at(299)).await.expect("take"), Some(fresh));
    assert_eq!(tx.challenges().take("s1", at(1)).await.expect("take again"), None, "taken once");
    assert_eq!(tx.challenges().take("s2", at(301)).await.expect("take expired"), None);
    assert_eq!(tx.challenges().take("s3", at(300)).await.expect("take at expiry"), None, "expired at expires_at");
    assert_eq!(tx.challenges().take("unknown", T0).await.expect("take unknown"), None);
    tx.commit().await.expect("commit");

    // The expired ones were deleted too.
    assert_eq!(fx.db.count("challenges", "").await, 0);
    let mut tx = fx.store.write().await.expect("begin");
    assert_eq!(tx.challenges().take("s2", T0).await.expect("take"), None);
    tx.commit().await.expect("commit");
}
