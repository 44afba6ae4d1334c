//! The approvals persistence contract (`tokenops_store::ApprovalStore`), checked on both
//! backends: requests and tasks read back as written, tenant scoping, the list orders and
//! filters (unresolved first, resolved windows excluding unresolved requests, the approver
//! filter), and the expiry sweep's read across organisations.
//!
//! The store never reads the clock: tests pass time in, from the fixed instant `T0`.

use tokenops_domain::approval::{
    ApprovalRequest, ApprovalRequestFilter, ApprovalSource, ApprovalTask, ApprovalTaskFilter,
};
use tokenops_domain::approval::{ApprovalRequestStatus, ApprovalTaskState};
use tokenops_domain::paging::PageRequest;
use tokenops_domain::{TenantId, new_id};
use tokenops_store::Store;
use tokenops_testkit::{Backend, StoreFixture, backends};
use uuid::Uuid;

mod common;
use common::at;

fn request(tenant: TenantId, created: i64, expires: i64) -> ApprovalRequest {
    ApprovalRequest {
        id: new_id(),
        tenant_id: tenant,
        status: ApprovalRequestStatus::Pending,
        source: ApprovalSource::Manual,
        action: "RELEASE".into(),
        resource_type: Some("payment".into()),
        resource_id: Some(format!("PAY-{created}")),
        initiator: new_id().to_string(),
        title: Some("Release".into()),
        description: None,
        expires_at: at(expires),
        resolved_at: None,
        acted_by: None,
        created_at: at(created),
        updated_at: at(created),
    }
}

fn task(r: &ApprovalRequest, step: u32, approver: &str) -> ApprovalTask {
    ApprovalTask {
        id: new_id(),
        tenant_id: r.tenant_id,
        request_id: r.id,
        step,
        approvers: vec![approver.to_owned()],
        state: ApprovalTaskState::Pending,
        acted_by: None,
        acted_at: None,
        comment: None,
        created_at: r.created_at,
        updated_at: r.created_at,
    }
}

async fn write(store: &dyn Store, requests: &[&ApprovalRequest], tasks: &[&ApprovalTask]) {
    let mut tx = store.write().await.expect("write");
    for r in requests {
        tx.approvals().insert_request(r).await.expect("insert request");
    }
    for t in tasks {
        tx.approvals().insert_task(t).await.expect("insert task");
    }
    tx.commit().await.expect("commit");
}

fn page() -> PageRequest {
    PageRequest { page: 0, size: 20 }
}

backends!(
    requests_and_tasks_round_trip_per_organisation,
    lists_order_and_filter,
    the_sweep_reads_due_pending_requests,
    requests_are_found_by_their_resources
);

async fn requests_and_tasks_round_trip_per_organisation(backend: Backend) {
    let fx = StoreFixture::new(backend).await;
    let (a, b) = (TenantId(new_id()), TenantId(new_id()));
    let r = request(a, 0, 100);
    let (t0, t1) = (task(&r, 0, "#checkers"), task(&r, 1, &format!("user:{}", Uuid::nil())));
    write(&*fx.store, &[&r], &[&t1, &t0]).await;
    let mut tx = fx.store.read().await.expect("read");
    assert_eq!(tx.approvals().get_request(a, r.id).await.expect("get"), Some(r.clone()));
    assert_eq!(tx.approvals().get_request(b, r.id).await.expect("get elsewhere"), None);
    assert_eq!(tx.approvals().get_task(a, t1.id).await.expect("get task"), Some(t1.clone()));
    assert_eq!(tx.approvals().get_task(b, t1.id).await.expect("get task elsewhere"), None);
    assert_eq!(tx.approvals().tasks_of(a, r.id, false).await.expect("tasks"), vec![t0.clone(), t1.clone()]);
    drop(tx);

    let mut decided = r.clone();
    decided.status = ApprovalRequestStatus::Approved;
    decided.resolved_at = Some(at(5));
    decided.acted_by = Some("someone".into());
    decided.updated_at = at(5);
    let mut acted = t0.clone();
    acted.state = ApprovalTaskState::Approved;
    acted.acted_by = Some("someone".into());
    acted.acted_at = Some(at(5));
    acted.comment = Some("fine".into());
    acted.approvers = vec!["#treasury".into()];
    let mut tx = fx.store.write().await.expect("write");
    assert_eq!(tx.approvals().get_request_for_update(a, r.id).await.expect("lock"), Some(r.clone()));
    tx.approvals().update_request(&decided).await.expect("update request");
    tx.approvals().update_task(&acted).await.expect("update task");
    tx.commit().await.expect("commit");
    let mut tx = fx.store.read().await.expect("read");
    assert_eq!(tx.approvals().get_request(a, r.id).await.expect("get"), Some(decided));
    assert_eq!(tx.approvals().get_task(a, t0.id).await.expect("get task"), Some(acted));
}

async fn lists_order_and_filter(backend: Backend) {
    let fx = StoreFixture::new(backend).await;
    let tenant = TenantId(new_id());
    let (old, resolved_late, resolved_early, pending) =
        (request(tenant, 0, 100), request(tenant, 1, 100), request(tenant, 2, 100), request(tenant, 3, 100));
    let mut late = resolved_late.clone();
    late.status = ApprovalRequestStatus::Rejected;
    late.resolved_at = Some(at(50));
    late.acted_by = Some("carol".into());
    let mut early = resolved_early.clone();
    early.status = ApprovalRequestStatus::Approved;
    early.resolved_at = Some(at(40));
    let tasks = [task(&old, 0, "#checkers"), task(&pending, 0, "#checkers"), task(&pending, 1, "#treasury")];
    write(&*fx.store, &[&old, &late, &early, &pending], &tasks.iter().collect::<Vec<_>>()).await;
    write(&*fx.store, &[&request(TenantId(new_id()), 9, 100)], &[]).await;

    let mut tx = fx.store.read().await.expect("read");
    let all = tx.approvals().list_requests(tenant, &ApprovalRequestFilter::default(), page()).await.expect("list");
    let ids: Vec<Uuid> = all.items.iter().map(|r| r.id).collect();
    assert_eq!(ids, vec![pending.id, old.id, late.id, early.id], "unresolved newest first, then resolvedAt descending");
    assert_eq!(all.total, 4);
    let window = ApprovalRequestFilter { resolved_from: Some(at(40)), resolved_to: Some(at(50)), ..Default::default() };
    let found = tx.approvals().list_requests(tenant, &window, page()).await.expect("window");
    assert_eq!(found.items.iter().map(|r| r.id).collect::<Vec<_>>(), vec![early.id], "half-open, unresolved excluded");
    let by = ApprovalRequestFilter { acted_by: Some("carol".into()), ..Default::default() };
    assert_eq!(tx.approvals().list_requests(tenant, &by, page()).await.expect("by").total, 1);
    let status = ApprovalRequestFilter { status: Some(ApprovalRequestStatus::Pending), ..Default::default() };
    assert_eq!(tx.approvals().list_requests(tenant, &status, page()).await.expect("status").total, 2);

    let pending_tasks = ApprovalTaskFilter { state: ApprovalTaskState::Pending, request_id: None, approver: None };
    let found = tx.approvals().list_tasks(tenant, &pending_tasks, page()).await.expect("tasks");
    assert_eq!(found.total, 3);
    assert_eq!(found.items.last().map(|t| t.id), Some(tasks[0].id), "newest first");
    let checkers = ApprovalTaskFilter { approver: Some("#checkers".into()), ..pending_tasks.clone() };
    assert_eq!(tx.approvals().list_tasks(tenant, &checkers, page()).await.expect("approver").total, 2);
    let of_one = ApprovalTaskFilter { request_id: Some(pending.id), ..checkers };
    let found = tx.approvals().list_tasks(tenant, &of_one, page()).await.expect("of one");
    assert_eq!(found.items.iter().map(|t| t.id).collect::<Vec<_>>(), vec![tasks[1].id]);
    let approved = ApprovalTaskFilter { state: ApprovalTaskState::Approved, ..pending_tasks };
    assert_eq!(tx.approvals().list_tasks(tenant, &approved, page()).await.expect("approved").total, 0);
}

async fn the_sweep_reads_due_pending_requests(backend: Backend) {
    let fx = StoreFixture::new(backend).await;
    let (a, b) = (TenantId(new_id()), TenantId(new_id()));
    let (due_a, due_b, later) = (request(a, 0, 10), request(b, 0, 5), request(a, 0, 60));
    let mut done = request(a, 0, 1);
    done.status = ApprovalRequestStatus::Cancelled;
    done.resolved_at = Some(at(1));
    write(&*fx.store, &[&due_a, &due_b, &later, &done], &[]).await;
    let mut tx = fx.store.read().await.expect("read");
    let due = tx.approvals().pending_past_expiry(at(10), 10).await.expect("due");
    assert_eq!(due.iter().map(|r| r.id).collect::<Vec<_>>(), vec![due_b.id, due_a.id], "oldest deadline first");
    assert_eq!(tx.approvals().pending_past_expiry(at(10), 1).await.expect("limited").len(), 1);
    assert!(tx.approvals().pending_past_expiry(at(4), 10).await.expect("none yet").is_empty());
}

async fn requests_are_found_by_their_resources(backend: Backend) {
    let fx = StoreFixture::new(backend).await;
    let (a, b) = (TenantId(new_id()), TenantId(new_id()));
    let (first, second, third) = (request(a, 1, 10), request(a, 2, 10), request(a, 3, 10));
    let mut elsewhere = request(b, 1, 10);
    elsewhere.resource_id = first.resource_id.clone();
    let mut other_type = request(a, 4, 10);
    other_type.resource_type = Some("transaction".into());
    other_type.resource_id = first.resource_id.clone();
    write(&*fx.store, &[&first, &second, &third, &elsewhere, &other_type], &[]).await;
    let mut tx = fx.store.read().await.expect("read");
    let ids = |r: &ApprovalRequest| r.resource_id.clone().expect("resource");
    let wanted = [ids(&first), ids(&third), "PAY-none".to_owned(), "pay-1".to_owned()];
    let mut found: Vec<Uuid> = tx
        .approvals()
        .requests_for_resources(a, "payment", &wanted)
        .await
        .expect("by resource")
        .iter()
        .map(|r| r.id)
        .collect();
    found.sort();
    let mut expected = vec![first.id, third.id];
    expected.sort();
    assert_eq!(found, expected, "this organisation's, of this type, the ids exactly");
    assert!(tx.approvals().requests_for_resources(a, "payment", &[]).await.expect("none asked").is_empty());
}
