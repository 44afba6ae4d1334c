//! The webhooks persistence contract (`tokenops_store::WebhookStore`), checked on both backends:
//! registrations and deliveries read back as written, tenant scoping, the one live registration
//! per URL (a deleted one frees it), the list order, queued deliveries, the replay count, the
//! event list's delivery filters (latest generation), and the delivery signing keys.

use tokenops_domain::event::{Event, EventFilter, ResourceRef};
use tokenops_domain::paging::KeysetRequest;
use tokenops_domain::webhook::{
    AttemptResult, Delivery, DeliveryStatus, FailureClass, SignatureScheme, Webhook, WebhookFilter, WebhookStatus,
};
use tokenops_domain::{TenantId, Timestamp, new_id};
use tokenops_store::{Store, StoreError, WebhookSigningKeyRecord};
use tokenops_testkit::{Backend, StoreFixture, backends};

const T0: Timestamp = Timestamp::from_micros(1_800_000_000_000_000);

fn at(seconds: i64) -> Timestamp {
    T0.plus_millis(seconds * 1000)
}

fn webhook(tenant: TenantId, url: &str, created: i64) -> Webhook {
    Webhook {
        id: new_id(),
        tenant_id: tenant,
        url: url.to_owned(),
        signature_scheme: SignatureScheme::HmacSha256,
        event_types: vec!["webhook.test".into(), "transaction.confirmed".into()],
        status: WebhookStatus::Active,
        consecutive_failures: 0,
        sealed_secret: Some("sealed".into()),
        sealed_previous_secret: None,
        previous_secret_expires_at: None,
        created_at: at(created),
        updated_at: at(created),
        deleted_at: None,
        past_subscriptions: Vec::new(),
    }
}

fn event(tenant: TenantId, second: i64) -> Event {
    Event {
        id: new_id(),
        tenant_id: tenant,
        event_type: "webhook.test".into(),
        occurred_at: at(second),
        correlation_id: None,
        idempotency_key: None,
        resource: ResourceRef::new("webhook", "x"),
        data: serde_json::json!({}),
        dispatched_at: None,
    }
}

async fn insert(store: &dyn Store, hooks: &[&Webhook]) {
    let mut tx = store.write().await.expect("write");
    for w in hooks {
        tx.webhooks().insert(w).await.expect("insert");
    }
    tx.commit().await.expect("commit");
}

backends!(
    registrations_round_trip_and_urls_are_unique_while_live,
    deliveries_filters_and_replay_count,
    signing_keys_round_trip
);

async fn registrations_round_trip_and_urls_are_unique_while_live(backend: Backend) {
    let fx = StoreFixture::new(backend).await;
    let (a, b) = (TenantId(new_id()), TenantId(new_id()));
    let first = webhook(a, "https://one.example/h", 0);
    let second = webhook(a, "https://two.example/h", 1);
    let other = webhook(b, "https://one.example/h", 2);
    insert(&*fx.store, &[&first, &second, &other]).await;

    let mut tx = fx.store.write().await.expect("write");
    let dup = webhook(a, "https://one.example/h", 3);
    assert!(matches!(tx.webhooks().insert(&dup).await, Err(StoreError::Conflict(_))));
    drop(tx);

    let mut tx = fx.store.read().await.expect("read");
    assert_eq!(tx.webhooks().get(a, first.id).await.expect("get"), Some(first.clone()));
    assert_eq!(tx.webhooks().get(b, first.id).await.expect("get"), None, "another organisation's");
    assert_eq!(
        tx.webhooks().find_by_url(a, "https://one.example/h").await.expect("find").map(|w| w.id),
        Some(first.id)
    );
    let all = WebhookFilter::default();
    let listed = tx.webhooks().list(a, all, KeysetRequest { after: None, limit: 10 }).await.expect("list");
    assert_eq!(listed.iter().map(|w| w.id).collect::<Vec<_>>(), [second.id, first.id], "newest first");
    // Created in a half-open window: `from` inclusive, `to` exclusive.
    for (from, to, expected) in [
        (Some(1), None, vec![second.id]),
        (None, Some(1), vec![first.id]),
        (Some(0), Some(1), vec![first.id]),
        (Some(2), None, vec![]),
    ] {
        let window = WebhookFilter { from: from.map(at), to: to.map(at) };
        let listed = tx.webhooks().list(a, window, KeysetRequest { after: None, limit: 10 }).await.expect("list");
        assert_eq!(listed.iter().map(|w| w.id).collect::<Vec<_>>(), expected, "{from:?}..{to:?}");
    }
    drop(tx);

    let mut deleted = first.clone();
    deleted.deleted_at = Some(at(5));
    deleted.status = WebhookStatus::Inactive;
    deleted.consecutive_failures = 3;
    deleted.keep_past_subscription(vec!["transaction.failed".into()], true, at(4));
    assert_eq!(deleted.past_subscriptions.len(), 1);
    let mut tx = fx.store.write().await.expect("write");
    tx.webhooks().update(&deleted).await.expect("update");
    tx.webhooks().insert(&dup).await.expect("a deleted registration frees its URL");
    tx.commit().await.expect("commit");
    let mut tx = fx.store.read().await.expect("read");
    assert_eq!(tx.webhooks().get(a, first.id).await.expect("get"), None);
    assert_eq!(tx.webhooks().get_any(a, first.id).await.expect("get"), Some(deleted));
    assert_eq!(
        tx.webhooks().live(a).await.expect("live").iter().map(|w| w.id).collect::<Vec<_>>(),
        [second.id, dup.id]
    );
}

async fn deliveries_filters_and_replay_count(backend: Backend) {
    let fx = StoreFixture::new(backend).await;
    let a = TenantId(new_id());
    let hook = webhook(a, "https://one.example/h", 0);
    insert(&*fx.store, &[&hook]).await;
    let (e1, e2) = (event(a, 1), event(a, 2));
    let mut first = Delivery::new(a, e1.id, hook.id, 1, new_id(), at(1));
    let parked = AttemptResult::Park { class: FailureClass::Rejected, status: Some(410), reason: "gone".into() };
    first.record_attempt(parked, at(3));
    let queued = Delivery::new(a, e2.id, hook.id, 1, new_id(), at(2));
    let mut tx = fx.store.write().await.expect("write");
    tx.events().append(&e1).await.expect("event");
    tx.events().append(&e2).await.expect("event");
    tx.webhooks().insert_delivery(&first).await.expect("delivery");
    tx.webhooks().insert_delivery(&queued).await.expect("delivery");
    tx.commit().await.expect("commit");

    let mut tx = fx.store.read().await.expect("read");
    assert_eq!(tx.webhooks().get_delivery(a, first.id).await.expect("get"), Some(first.clone()));
    assert_eq!(
        tx.webhooks().queued_of(a, hook.id).await.expect("queued").iter().map(|d| d.id).collect::<Vec<_>>(),
        [queued.id]
    );
    let window = KeysetRequest { after: None, limit: 10 };
    let parked_filter = EventFilter { delivery_status: Some("PARKED".into()), ..Default::default() };
    let got = tx.events().list(a, &parked_filter, window).await.expect("list");
    assert_eq!(got.iter().map(|e| e.id).collect::<Vec<_>>(), [e1.id]);
    let by_hook = EventFilter { webhook_id: Some(hook.id), ..Default::default() };
    assert_eq!(tx.events().list(a, &by_hook, window).await.expect("list").len(), 2);
    assert_eq!(tx.webhooks().replays_since(a, at(0)).await.expect("count"), 0);
    drop(tx);

    // A replay: generation 2 of the parked delivery; the filter follows the latest generation.
    let replay = Delivery::new(a, e1.id, hook.id, 2, new_id(), at(10));
    let mut tx = fx.store.write().await.expect("write");
    tx.webhooks().insert_delivery(&replay).await.expect("replay");
    let again = Delivery::new(a, e1.id, hook.id, 2, new_id(), at(10));
    assert!(matches!(tx.webhooks().insert_delivery(&again).await, Err(StoreError::Conflict(_))));
    drop(tx);
    let mut tx = fx.store.write().await.expect("write");
    tx.webhooks().insert_delivery(&replay).await.expect("replay");
    tx.commit().await.expect("commit");
    let mut tx = fx.store.read().await.expect("read");
    assert!(tx.events().list(a, &parked_filter, window).await.expect("list").is_empty());
    let pending = EventFilter { delivery_status: Some("PENDING".into()), ..Default::default() };
    assert_eq!(tx.events().list(a, &pending, window).await.expect("list").len(), 2);
    assert_eq!(tx.webhooks().replays_since(a, at(10)).await.expect("count"), 1);
    assert_eq!(tx.webhooks().replays_since(a, at(11)).await.expect("count"), 0);
    let all = tx.webhooks().deliveries_of(a, &[e1.id, e2.id]).await.expect("of");
    assert_eq!(all.len(), 3);
    assert_eq!(all.iter().filter(|d| d.status == DeliveryStatus::Parked).count(), 1);
    assert!(tx.webhooks().deliveries_of(TenantId(new_id()), &[e1.id]).await.expect("of").is_empty());
}

async fn signing_keys_round_trip(backend: Backend) {
    let fx = StoreFixture::new(backend).await;
    let key =
        WebhookSigningKeyRecord { kid: "k1".into(), sealed_key: "sealed".into(), created_at: at(0), retire_at: None };
    let mut tx = fx.store.write().await.expect("write");
    assert!(tx.webhooks().signing_keys().await.expect("keys").is_empty());
    tx.webhooks().insert_signing_key(&key).await.expect("insert");
    tx.commit().await.expect("commit");
    let mut tx = fx.store.read().await.expect("read");
    assert_eq!(tx.webhooks().signing_keys().await.expect("keys"), vec![key.clone()]);
    drop(tx);

    // Rotation: the old key retires once, the new one is stored beside it; past its time the
    // retired key is deleted.
    let mut tx = fx.store.write().await.expect("write");
    assert!(tx.webhooks().retire_signing_key("k1", at(10)).await.expect("retire"));
    assert!(!tx.webhooks().retire_signing_key("k1", at(20)).await.expect("retire"), "retiring already");
    let next =
        WebhookSigningKeyRecord { kid: "k2".into(), sealed_key: "s2".into(), created_at: at(1), retire_at: None };
    tx.webhooks().insert_signing_key(&next).await.expect("insert");
    assert_eq!(tx.webhooks().delete_retired_signing_keys(at(9)).await.expect("delete"), 0);
    tx.commit().await.expect("commit");
    let mut tx = fx.store.read().await.expect("read");
    let retired = WebhookSigningKeyRecord { retire_at: Some(at(10)), ..key };
    assert_eq!(tx.webhooks().signing_keys().await.expect("keys"), vec![retired, next.clone()]);
    drop(tx);
    let mut tx = fx.store.write().await.expect("write");
    assert_eq!(tx.webhooks().delete_retired_signing_keys(at(10)).await.expect("delete"), 1);
    tx.commit().await.expect("commit");
    let mut tx = fx.store.read().await.expect("read");
    assert_eq!(tx.webhooks().signing_keys().await.expect("keys"), vec![next]);
}
