//! The persistence contract of scripts, their versions, automations and executions, on both
//! backends: round trips of every field, a script's name unique among those not deleted, who
//! imports a name, versions written once, lists with filters and sort, due scheduled
//! automations and event listeners, and a run recorded once per planned instant or event.

use serde_json::json;
use tokenops_domain::automation::{
    Automation, AutomationFilter, AutomationStatus, Execution, ExecutionFilter, ExecutionStatus, Trigger, TriggerType,
};
use tokenops_domain::paging::{PageRequest, SortDirection, SortKey};
use tokenops_domain::script::{ResolvedDependency, Script, ScriptFilter, ScriptStatus};
use tokenops_domain::{TenantId, new_id};
use tokenops_store::StoreError;
use tokenops_testkit::{Backend, StoreFixture, backends};
use uuid::Uuid;

mod common;
use common::at;

fn page(size: u32) -> PageRequest {
    PageRequest { page: 0, size }
}

const NEWEST_FIRST: [SortKey; 1] = [SortKey { column: "created_at", direction: SortDirection::Desc }];

fn script(tenant: TenantId, name: &str, imports: &[&str], second: i64) -> Script {
    let id = new_id();
    Script {
        id,
        tenant_id: tenant,
        name: name.to_owned(),
        description: Some(format!("about {name}")),
        status: ScriptStatus::Draft,
        version: 1,
        source: format!("// {name}\n42"),
        parameters: json!([{ "name": "target", "type": "DECIMAL", "default": "10.00" }]),
        imports: imports.iter().map(|s| s.to_string()).collect(),
        dependencies: Vec::new(),
        root_script_id: id,
        cloned_from: None,
        created_by: "user-1".into(),
        created_at: at(second),
        updated_at: at(second),
        published_at: None,
    }
}

fn automation(tenant: TenantId, script: &Script, trigger: Trigger, second: i64) -> Automation {
    Automation {
        id: new_id(),
        tenant_id: tenant,
        name: Some("sweep".into()),
        script_id: script.id,
        root_script_id: script.root_script_id,
        user_id: "user-1".into(),
        creator_permissions: vec!["transaction:submit".into()],
        trigger,
        status: AutomationStatus::Active,
        parameters: json!({ "target": "10.00" }),
        consecutive_failures: 0,
        next_run_at: None,
        created_at: at(second),
        updated_at: at(second),
    }
}

fn execution(tenant: TenantId, automation: Uuid, second: i64) -> Execution {
    Execution::queued(tenant, automation, TriggerType::OnDemand, json!({ "target": "10.00" }), at(second))
}

backends!(
    scripts_round_trip_keep_live_names_unique_and_know_their_importers,
    automations_round_trip_list_and_are_found_when_due_or_listening,
    a_status_change_waits_for_the_scheduler_that_read_the_automation_due,
    executions_round_trip_and_a_planned_run_or_event_runs_once,
);

async fn scripts_round_trip_keep_live_names_unique_and_know_their_importers(backend: Backend) {
    let fx = StoreFixture::new(backend).await;
    let tenant = TenantId(new_id());
    let lib = script(tenant, "lib", &[], 0);
    let mut main = script(tenant, "main", &["lib", "other"], 1);
    let mut tx = fx.store.write().await.expect("begin");
    tx.scripts().insert(&lib).await.expect("insert lib");
    tx.scripts().insert(&main).await.expect("insert main");
    tx.scripts().insert_version(&lib.current_version()).await.expect("version");
    let twice = tx.scripts().insert_version(&lib.current_version()).await;
    assert!(matches!(twice, Err(StoreError::Conflict(_))), "{twice:?}");
    let same_name = tx.scripts().insert(&script(tenant, "lib", &[], 2)).await;
    assert!(matches!(same_name, Err(StoreError::Conflict(_))), "{same_name:?}");
    // Another organisation may use the name.
    tx.scripts().insert(&script(TenantId(new_id()), "lib", &[], 2)).await.expect("other tenant");
    tx.commit().await.expect("commit");

    let mut tx = fx.store.write().await.expect("begin");
    assert_eq!(tx.scripts().get(tenant, main.id).await.expect("get"), Some(main.clone()));
    assert_eq!(tx.scripts().by_name(tenant, "lib").await.expect("by name"), Some(lib.clone()));
    let version = tx.scripts().version(tenant, lib.id, 1).await.expect("version").expect("exists");
    assert_eq!((version.source, version.imports), (lib.source.clone(), lib.imports.clone()));
    assert_eq!(tx.scripts().version(tenant, lib.id, 2).await.expect("version"), None);
    let importers = tx.scripts().importers(tenant, "lib").await.expect("importers");
    assert_eq!(importers.iter().map(|s| s.id).collect::<Vec<_>>(), [main.id]);
    assert!(tx.scripts().importers(tenant, "li").await.expect("importers").is_empty(), "whole names only");

    // Every mutable field changes; a deleted script frees its name.
    main.name = "main-2".into();
    main.description = None;
    main.status = ScriptStatus::Published;
    main.version = 2;
    main.source = "1 + 1".into();
    main.parameters = json!([]);
    main.imports = vec!["lib".into()];
    main.dependencies = vec![ResolvedDependency { name: "lib".into(), script_id: lib.id, version: 1 }];
    main.updated_at = at(5);
    main.published_at = Some(at(5));
    tx.scripts().update(&main).await.expect("update");
    assert_eq!(tx.scripts().get_for_update(tenant, main.id).await.expect("get"), Some(main.clone()));
    let mut gone = lib.clone();
    gone.status = ScriptStatus::Deleted;
    tx.scripts().update(&gone).await.expect("delete");
    assert_eq!(tx.scripts().by_name(tenant, "lib").await.expect("by name"), None);
    tx.scripts().insert(&script(tenant, "lib", &[], 6)).await.expect("the name is free again");
    tx.commit().await.expect("commit");

    let mut tx = fx.store.read().await.expect("read");
    let listed = tx.scripts().list(tenant, &ScriptFilter::default(), &NEWEST_FIRST, page(10)).await.expect("list");
    assert_eq!(listed.total, 2, "deleted scripts are left out");
    assert_eq!(listed.items[1].id, main.id, "newest first");
    let deleted = ScriptFilter { status: Some(ScriptStatus::Deleted), ..ScriptFilter::default() };
    let listed = tx.scripts().list(tenant, &deleted, &NEWEST_FIRST, page(10)).await.expect("list");
    assert_eq!(listed.items.iter().map(|s| s.id).collect::<Vec<_>>(), [lib.id]);
    let by_name = ScriptFilter { name: Some("main-2".into()), ..ScriptFilter::default() };
    assert_eq!(tx.scripts().list(tenant, &by_name, &NEWEST_FIRST, page(10)).await.expect("list").total, 1);
}

/// The scheduler reads due automations and writes each back with its next run: the read locks
/// them, so a status change meanwhile waits and then applies to what the scheduler wrote (on
/// PostgreSQL an unlocked read let the scheduler write the old status over a committed
/// INACTIVE or DELETED). SQLite's single writer serialises the two anyway.
async fn a_status_change_waits_for_the_scheduler_that_read_the_automation_due(backend: Backend) {
    let fx = StoreFixture::new(backend).await;
    let tenant = TenantId(new_id());
    let s = script(tenant, "tick", &[], 0);
    let cron = Trigger::Scheduled { cron: "* * * * *".into(), time_zone: "UTC".into() };
    let mut scheduled = automation(tenant, &s, cron, 1);
    scheduled.next_run_at = Some(at(100));
    let mut tx = fx.store.write().await.expect("begin");
    tx.scripts().insert(&s).await.expect("script");
    tx.automations().insert(&scheduled).await.expect("insert");
    tx.commit().await.expect("commit");

    let mut scheduler = fx.store.write().await.expect("begin");
    let mut due = scheduler.automations().due(at(100), 10).await.expect("due");
    assert_eq!(due.len(), 1);
    let store = fx.store.clone();
    let id = scheduled.id;
    let switch_off = tokio::spawn(async move {
        let mut tx = store.write().await.expect("begin");
        let mut automation = tx.automations().get_for_update(tenant, id).await.expect("get").expect("found");
        automation.status = AutomationStatus::Inactive;
        tx.automations().update(&automation).await.expect("update");
        tx.commit().await.expect("commit");
    });
    if backend == Backend::Postgres {
        // Until the change waits on the scheduler's lock (or, without one, has committed).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while fx.db.waiting_on_a_row().await == 0 && !switch_off.is_finished() {
            assert!(std::time::Instant::now() < deadline, "the status change neither waited nor finished");
            tokio::task::yield_now().await;
        }
    }
    let mut ran = due.remove(0);
    ran.next_run_at = Some(at(160));
    scheduler.automations().update(&ran).await.expect("next run");
    scheduler.commit().await.expect("commit");
    switch_off.await.expect("the status change");

    let mut tx = fx.store.read().await.expect("read");
    let now = tx.automations().get(tenant, id).await.expect("get").expect("found");
    assert_eq!(now.status, AutomationStatus::Inactive, "the status change stands");
    assert_eq!(now.next_run_at, Some(at(160)), "and so does the scheduler's next run");
}

async fn automations_round_trip_list_and_are_found_when_due_or_listening(backend: Backend) {
    let fx = StoreFixture::new(backend).await;
    let tenant = TenantId(new_id());
    let s = script(tenant, "sweep", &[], 0);
    let on_demand = automation(tenant, &s, Trigger::OnDemand, 1);
    let mut scheduled =
        automation(tenant, &s, Trigger::Scheduled { cron: "0 17 * * *".into(), time_zone: "Europe/Paris".into() }, 2);
    scheduled.next_run_at = Some(at(100));
    let listening = automation(tenant, &s, Trigger::Event { event_type: "transaction.confirmed".into() }, 3);
    let mut tx = fx.store.write().await.expect("begin");
    tx.scripts().insert(&s).await.expect("script");
    for a in [&on_demand, &scheduled, &listening] {
        tx.automations().insert(a).await.expect("insert");
    }
    tx.commit().await.expect("commit");

    let mut tx = fx.store.write().await.expect("begin");
    for a in [&on_demand, &scheduled, &listening] {
        assert_eq!(tx.automations().get(tenant, a.id).await.expect("get").as_ref(), Some(a));
    }
    assert_eq!(tx.automations().count_active_for_script(tenant, s.id).await.expect("count"), 3);
    assert!(tx.automations().due(at(99), 10).await.expect("due").is_empty());
    let due = tx.automations().due(at(100), 10).await.expect("due");
    assert_eq!(due.iter().map(|a| a.id).collect::<Vec<_>>(), [scheduled.id]);
    let heard = tx.automations().for_event(tenant, "transaction.confirmed").await.expect("for event");
    assert_eq!(heard.iter().map(|a| a.id).collect::<Vec<_>>(), [listening.id]);
    assert!(tx.automations().for_event(tenant, "transaction.failed").await.expect("for event").is_empty());

    let mut changed = scheduled.clone();
    changed.status = AutomationStatus::Inactive;
    changed.parameters = json!({ "target": "20.00" });
    changed.consecutive_failures = 2;
    changed.next_run_at = Some(at(200));
    changed.updated_at = at(9);
    changed.name = None;
    tx.automations().update(&changed).await.expect("update");
    assert_eq!(tx.automations().get_for_update(tenant, changed.id).await.expect("get"), Some(changed.clone()));
    assert!(tx.automations().due(at(1_000), 10).await.expect("due").is_empty(), "INACTIVE never runs");
    assert_eq!(tx.automations().count_active_for_script(tenant, s.id).await.expect("count"), 2);
    tx.commit().await.expect("commit");

    let mut tx = fx.store.read().await.expect("read");
    let all = tx.automations().list(tenant, &AutomationFilter::default(), &NEWEST_FIRST, page(10)).await.expect("list");
    assert_eq!(all.items.iter().map(|a| a.id).collect::<Vec<_>>(), [listening.id, scheduled.id, on_demand.id]);
    let inactive = AutomationFilter { status: Some(AutomationStatus::Inactive), ..AutomationFilter::default() };
    assert_eq!(tx.automations().list(tenant, &inactive, &NEWEST_FIRST, page(10)).await.expect("list").total, 1);
    let events =
        AutomationFilter { trigger: Some(TriggerType::Event), script_id: Some(s.id), ..AutomationFilter::default() };
    assert_eq!(tx.automations().list(tenant, &events, &NEWEST_FIRST, page(10)).await.expect("list").total, 1);
}

async fn executions_round_trip_and_a_planned_run_or_event_runs_once(backend: Backend) {
    let fx = StoreFixture::new(backend).await;
    let tenant = TenantId(new_id());
    let automation_id = new_id();
    let first = execution(tenant, automation_id, 1);
    let mut planned = execution(tenant, automation_id, 2);
    planned.trigger = TriggerType::Scheduled;
    planned.scheduled_for = Some(at(100));
    let mut heard = execution(tenant, automation_id, 3);
    heard.trigger = TriggerType::Event;
    heard.event_id = Some(new_id());
    let mut tx = fx.store.write().await.expect("begin");
    for e in [&first, &planned, &heard] {
        tx.executions().insert(e).await.expect("insert");
    }
    let mut again = execution(tenant, automation_id, 4);
    again.scheduled_for = planned.scheduled_for;
    assert!(matches!(tx.executions().insert(&again).await, Err(StoreError::Conflict(_))), "one run per instant");
    let mut again = execution(tenant, automation_id, 4);
    again.event_id = heard.event_id;
    assert!(matches!(tx.executions().insert(&again).await, Err(StoreError::Conflict(_))), "one run per event");
    tx.commit().await.expect("commit");

    let mut tx = fx.store.write().await.expect("begin");
    let mut done = first.clone();
    done.status = ExecutionStatus::Succeeded;
    done.log = vec!["swept 5.00".into(), "a \"quoted\", line".into()];
    done.submitted = vec![new_id()];
    done.error = Some("none".into());
    done.attempts = 2;
    done.started_at = Some(at(5));
    done.finished_at = Some(at(6));
    tx.executions().update(&done).await.expect("update");
    assert_eq!(tx.executions().get_for_update(tenant, done.id).await.expect("get"), Some(done.clone()));
    assert_eq!(tx.executions().get(tenant, heard.id).await.expect("get"), Some(heard.clone()));
    tx.commit().await.expect("commit");

    let mut tx = fx.store.read().await.expect("read");
    let listed = tx
        .executions()
        .list(tenant, automation_id, &ExecutionFilter::default(), &NEWEST_FIRST, page(10))
        .await
        .expect("list");
    assert_eq!(listed.items.iter().map(|e| e.id).collect::<Vec<_>>(), [heard.id, planned.id, first.id]);
    let succeeded = ExecutionFilter { status: Some(ExecutionStatus::Succeeded) };
    let listed = tx.executions().list(tenant, automation_id, &succeeded, &NEWEST_FIRST, page(10)).await.expect("list");
    assert_eq!(listed.items, vec![done]);
    let other = tx
        .executions()
        .list(tenant, new_id(), &ExecutionFilter::default(), &NEWEST_FIRST, page(10))
        .await
        .expect("list");
    assert_eq!(other.total, 0);
}
