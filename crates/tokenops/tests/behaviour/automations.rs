//! `/api/automations`: creation from a PUBLISHED script, lists, status changes, runs on demand
//! with overrides, scheduled runs on the Clock, and the history; each rule and status code of
//! the spec's table provoked; and a treasury script that submits a MINT which settles.

use reqwest::Method;
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tokenops_testkit::{Backend, Reply, TestApp, backends};
use uuid::Uuid;

use crate::fixtures::{active_account, active_contract, customer};
use crate::scripts::{SWEEP, create, id_of, publish};
use crate::support::{drain_past_three_attempts, three_attempts, write_in_flight};

#[track_caller]
pub fn refused(reply: &Reply, status: u16, says: &str) {
    assert_eq!(reply.status, status, "{}", reply.body);
    let text = format!("{} {}", reply.body["message"], reply.body["details"]);
    assert!(text.contains(says), "expected {says:?} in {}", reply.body);
}

pub fn value(key: &str, value: Value, kind: &str) -> Value {
    json!({ "key": key, "value": value, "type": kind })
}

/// A published script and an ON_DEMAND automation of it.
pub async fn on_demand(app: &TestApp, name: &str, source: &str, parameters: Value) -> (String, String) {
    let script = id_of(&create(app, name, source).await);
    publish(app, &script).await;
    let made = app.post("/api/automations", &json!({ "scriptId": script, "parameters": parameters })).await;
    assert_eq!(made.status, 201, "{}", made.body);
    (script, made.body["automationId"].as_str().expect("automationId").to_owned())
}

pub async fn execute(app: &TestApp, automation: &str, body: &Value) -> Reply {
    app.post(&format!("/api/automations/{automation}/executions"), body).await
}

/// The automation's latest run, once it is final (the workers run it; polled with a deadline).
pub async fn finished_run(app: &TestApp, automation: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        app.drain_jobs().await;
        let history = app.get(&format!("/api/automations/{automation}/history")).await;
        history.expect(200);
        let latest = history.body["content"][0].clone();
        if matches!(latest["status"].as_str(), Some("SUCCEEDED" | "FAILED")) {
            return latest;
        }
        assert!(Instant::now() < deadline, "the run did not finish: {}", history.body);
        tokio::task::yield_now().await;
    }
}

backends!(
    a_run_whose_error_or_log_holds_a_nul_character_is_recorded_on_every_store,
    an_automation_needs_a_published_script_and_valid_fields,
    automations_are_listed_in_style_a_with_their_filters,
    a_status_change_refuses_the_current_status_and_leaving_deleted,
    an_automation_whose_script_was_deleted_neither_comes_back_on_nor_runs,
    an_automation_never_runs_code_that_is_not_published,
    a_run_refuses_a_draft_it_imports_through_another_script,
    a_run_on_demand_needs_active_on_demand_and_fitting_overrides,
    a_run_records_its_parameters_log_and_result,
    a_treasury_script_submits_a_mint_that_settles_once,
    a_scheduled_automation_runs_when_the_clock_passes_its_time,
    a_failing_run_is_recorded_and_repeated_failures_disable_the_automation,
    an_event_automation_runs_once_per_event_of_its_type_with_the_event,
    a_run_does_not_stay_running_after_its_job_ran_out_of_attempts,
    runs_that_overreach_end_with_the_sandboxs_error_and_the_service_stays_healthy,
);

async fn an_automation_needs_a_published_script_and_valid_fields(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let draft = id_of(&create(&app, "sweep", SWEEP).await);
    refused(&app.post("/api/automations", &json!({ "scriptId": draft })).await, 409, "PUBLISHED");
    refused(&app.post("/api/automations", &json!({ "scriptId": Uuid::now_v7() })).await, 404, "not found");
    refused(&app.post("/api/automations", &json!({})).await, 400, "scriptId");
    publish(&app, &draft).await;
    let account = value("account", json!("acc-1"), "STRING");
    refused(&app.post("/api/automations", &json!({ "scriptId": draft })).await, 400, "account");
    refused(
        &app.post("/api/automations", &json!({ "scriptId": draft, "triggerType": "HOURLY", "parameters": [account] }))
            .await,
        400,
        "triggerType",
    );
    let scheduled = |cron: &str, zone: Option<&str>| json!({ "scriptId": draft, "triggerType": "SCHEDULED", "cron": cron, "timeZone": zone, "parameters": [account] });
    refused(&app.post("/api/automations", &scheduled("0 17 * *", Some("UTC"))).await, 400, "five fields");
    refused(&app.post("/api/automations", &scheduled("0 17 * * *", None)).await, 400, "timeZone");
    // A cron naming no date that exists (February 31st) would never run.
    refused(&app.post("/api/automations", &scheduled("0 0 31 2 *", Some("UTC"))).await, 400, "never run");
    let unknown_zone = app.post("/api/automations", &scheduled("0 17 * * *", Some("Mars/Base"))).await;
    refused(&unknown_zone, 400, "time zone");
    assert_eq!(unknown_zone.body["details"][0]["field"], "timeZone", "{}", unknown_zone.body);
    refused(
        &app.post(
            "/api/automations",
            &json!({ "scriptId": draft, "triggerType": "EVENT", "eventType": "nope", "parameters": [account] }),
        )
        .await,
        400,
        "eventType",
    );
    let made = app.post("/api/automations", &scheduled("0 17 * * *", Some("Europe/Paris"))).await;
    assert_eq!(made.status, 201, "{}", made.body);
    assert_eq!(made.body["status"], "ACTIVE");
    assert_eq!(made.body["rootScriptId"], draft.as_str());
    assert!(made.body["nextRunAt"].is_string(), "a scheduled automation plans its run");
    assert_eq!(made.body["parameters"], json!({ "account": "acc-1", "target": "1000" }), "decimals in canonical form");
    let id = made.body["automationId"].as_str().expect("id");
    assert_eq!(made.header("location"), Some(format!("/api/automations/{id}").as_str()));
    let no_key = app.request(Method::POST, "/api/automations").json(&json!({ "scriptId": draft })).send().await;
    assert_eq!(no_key.expect("answered").status().as_u16(), 400);
}

async fn automations_are_listed_in_style_a_with_their_filters(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let (_, first) = on_demand(&app, "a", "1", json!([])).await;
    app.clock.advance_millis(1_000);
    let (_, second) = on_demand(&app, "b", "2", json!([])).await;
    let listed = app.get("/api/automations").await;
    listed.expect(200);
    assert_eq!(listed.body["totalElements"], 2);
    assert_eq!(listed.body["content"][0]["automationId"], second.as_str(), "newest first");
    assert_eq!(app.get("/api/automations?size=500").await.body["size"], 100, "clamped");
    assert_eq!(app.get("/api/automations?size=0").await.body["size"], 1, "clamped");
    // Whole numbers past the 64-bit range clamp like any other.
    assert_eq!(app.get("/api/automations?size=99999999999999999999").await.body["size"], 100, "clamped");
    assert_eq!(app.get("/api/automations?size=-99999999999999999999").await.body["size"], 1, "clamped");
    let unknown = app.get("/api/automations?status=SLEEPING").await;
    unknown.expect(200);
    assert_eq!(
        (unknown.body["totalElements"].as_u64(), unknown.body["content"].as_array().map(Vec::len)),
        (Some(0), Some(0))
    );
    app.patch(&format!("/api/automations/{first}/status"), &json!({ "status": "INACTIVE" })).await.expect(200);
    let inactive = app.get("/api/automations?status=INACTIVE").await;
    assert_eq!(inactive.body["content"][0]["automationId"], first.as_str());
    let oldest = app.get("/api/automations?sort=createdAt,asc").await;
    assert_eq!(oldest.body["content"][0]["automationId"], first.as_str());
    assert_eq!(app.get(&format!("/api/automations/{first}")).await.body["status"], "INACTIVE");
    assert_eq!(app.get(&format!("/api/automations/{}", Uuid::now_v7())).await.status, 404);
}

async fn a_status_change_refuses_the_current_status_and_leaving_deleted(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let (_, id) = on_demand(&app, "a", "1", json!([])).await;
    let path = format!("/api/automations/{id}/status");
    refused(&app.patch(&path, &json!({})).await, 400, "status");
    refused(&app.patch(&path, &json!({ "status": "ACTIVE" })).await, 400, "already");
    refused(&app.patch(&path, &json!({ "status": "PAUSED" })).await, 400, "status");
    for status in ["INACTIVE", "DISABLED", "ACTIVE", "DELETED"] {
        let changed = app.patch(&path, &json!({ "status": status })).await;
        assert_eq!(changed.status, 200, "{status}: {}", changed.body);
        assert_eq!(changed.body["status"], status);
    }
    refused(&app.patch(&path, &json!({ "status": "ACTIVE" })).await, 400, "DELETED");
    assert_eq!(app.get(&format!("/api/automations/{id}")).await.status, 404, "deleted");
    refused(
        &app.patch(&format!("/api/automations/{}/status", Uuid::now_v7()), &json!({ "status": "ACTIVE" })).await,
        404,
        "not found",
    );
}

async fn an_automation_whose_script_was_deleted_neither_comes_back_on_nor_runs(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let (script, id) = on_demand(&app, "gone", "1", json!([])).await;
    let status = format!("/api/automations/{id}/status");
    crate::scripts::set_status(&app, &script, "DEPRECATED").await.expect(200);
    let delete = format!("/api/scripts/{script}");
    refused(&app.write(Method::DELETE, &delete, "delete-1", &Value::Null).await, 409, "ACTIVE");
    app.patch(&status, &json!({ "status": "INACTIVE" })).await.expect(200);
    app.write(Method::DELETE, &delete, "delete-2", &Value::Null).await.expect(204);
    // Switched off so that its script could go, it stays off: its script no longer exists.
    // The spec's 400 for a transition not allowed (its 409 is only for a key in flight).
    refused(&app.patch(&status, &json!({ "status": "ACTIVE" })).await, 400, "deleted");
    assert_eq!(app.get(&format!("/api/automations/{id}")).await.body["status"], "INACTIVE");
    refused(&execute(&app, &id, &json!({})).await, 409, "ACTIVE");
    // Other moves stay open: it can still be deleted.
    app.patch(&status, &json!({ "status": "DELETED" })).await.expect(200);
}

async fn an_automation_never_runs_code_that_is_not_published(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let (script, id) = on_demand(&app, "flip", "\"published\"", json!([])).await;
    let status = format!("/api/automations/{id}/status");
    // A DRAFT's code changes without publication: unpublishing under an ACTIVE automation is a
    // state conflict.
    refused(&crate::scripts::set_status(&app, &script, "DRAFT").await, 409, "ACTIVE automation");
    assert_eq!(app.get(&format!("/api/scripts/{script}")).await.body["status"], "PUBLISHED");
    // A run queued before the script went back to DRAFT does not run the draft's code.
    execute(&app, &id, &json!({})).await.expect(202);
    app.patch(&status, &json!({ "status": "INACTIVE" })).await.expect(200);
    crate::scripts::set_status(&app, &script, "DRAFT").await.expect(200);
    app.patch(&format!("/api/scripts/{script}"), &json!({ "source": "\"unpublished\"" })).await.expect(200);
    let run = finished_run(&app, &id).await;
    assert_eq!(run["status"], "FAILED", "{run}");
    assert!(run["error"].as_str().is_some_and(|e| e.contains("DRAFT")), "{run}");
    assert!(!run["log"].to_string().contains("unpublished"), "{run}");
    // Nor does it come back on until the script is published again; then it runs the new code.
    refused(&app.patch(&status, &json!({ "status": "ACTIVE" })).await, 400, "DRAFT");
    crate::scripts::publish(&app, &script).await;
    app.patch(&status, &json!({ "status": "ACTIVE" })).await.expect(200);
    execute(&app, &id, &json!({})).await.expect(202);
    let run = finished_run(&app, &id).await;
    assert_eq!(run["status"], "SUCCEEDED", "{run}");
    assert_eq!(run["log"], json!(["result: unpublished"]), "{run}");
}

async fn a_run_refuses_a_draft_it_imports_through_another_script(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let leaf = id_of(&create(&app, "leaf", "fn one() { 1 }").await);
    publish(&app, &leaf).await;
    let middle = id_of(&create(&app, "middle", "import \"leaf\" as leaf;\nfn two() { 2 }").await);
    publish(&app, &middle).await;
    let (top, id) = on_demand(&app, "top", "import \"middle\" as middle;\nmiddle::two()", json!([])).await;
    // The middle script's new code no longer imports the leaf, which nothing imports now and may
    // go back to DRAFT and change; the top script's publication still resolves the middle one's
    // old version, which imports it.
    app.patch(&format!("/api/scripts/{middle}"), &json!({ "source": "fn two() { 2 }" })).await.expect(200);
    assert_eq!(app.get(&format!("/api/scripts/{top}")).await.body["status"], "OUTDATED");
    crate::scripts::set_status(&app, &leaf, "DRAFT").await.expect(200);
    app.patch(&format!("/api/scripts/{leaf}"), &json!({ "source": "fn one() { 99 }" })).await.expect(200);
    execute(&app, &id, &json!({})).await.expect(202);
    let run = finished_run(&app, &id).await;
    assert_eq!(run["status"], "FAILED", "{run}");
    assert!(run["error"].as_str().is_some_and(|e| e.contains("\"leaf\"") && e.contains("DRAFT")), "{run}");
    // Published again, it runs.
    publish(&app, &leaf).await;
    execute(&app, &id, &json!({})).await.expect(202);
    assert_eq!(finished_run(&app, &id).await["status"], "SUCCEEDED");
}

async fn a_run_on_demand_needs_active_on_demand_and_fitting_overrides(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let (script, id) = on_demand(&app, "sweep", SWEEP, json!([value("account", json!("acc-1"), "STRING")])).await;
    refused(
        &execute(&app, &id, &json!({ "overrides": [value("target", json!("abc"), "DECIMAL")] })).await,
        422,
        "target",
    );
    refused(&execute(&app, &id, &json!({ "overrides": [value("target", json!("5"), "STRING")] })).await, 422, "target");
    refused(&execute(&app, &id, &json!({ "overrides": [value("nope", json!("5"), "STRING")] })).await, 422, "nope");
    refused(
        &execute(&app, &id, &json!({ "overrides": [{ "key": "", "value": "1", "type": "STRING" }] })).await,
        400,
        "key",
    );
    refused(&execute(&app, &id, &json!({ "overrides": [{ "key": "target", "type": "DECIMAL" }] })).await, 400, "value");
    refused(&execute(&app, &id, &json!({ "overrides": [{ "key": "target", "value": "1" }] })).await, 400, "type");
    let no_key = app.request(Method::POST, &format!("/api/automations/{id}/executions")).json(&json!({})).send().await;
    assert_eq!(no_key.expect("answered").status().as_u16(), 400);
    assert_eq!(app.post("/api/automations/not-a-uuid/executions", &json!({})).await.status, 400);
    refused(&execute(&app, &Uuid::now_v7().to_string(), &json!({})).await, 404, "not found");
    app.patch(&format!("/api/automations/{id}/status"), &json!({ "status": "INACTIVE" })).await.expect(200);
    refused(&execute(&app, &id, &json!({})).await, 409, "ACTIVE");
    let scheduled = app
        .post(
            "/api/automations",
            &json!({ "scriptId": script, "triggerType": "SCHEDULED", "cron": "0 17 * * *", "timeZone": "UTC",
                     "parameters": [value("account", json!("acc-1"), "STRING")] }),
        )
        .await;
    let scheduled = scheduled.body["automationId"].as_str().expect("id").to_owned();
    refused(&execute(&app, &scheduled, &json!({})).await, 409, "ON_DEMAND");
    // A key in flight.
    app.patch(&format!("/api/automations/{id}/status"), &json!({ "status": "ACTIVE" })).await.expect(200);
    let path = format!("/api/automations/{id}/executions");
    assert_eq!(write_in_flight(&app, "automation.execute", Method::POST, &path, &json!({})).await.status, 409);
}

async fn a_run_records_its_parameters_log_and_result(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let (_, id) = on_demand(&app, "sweep", SWEEP, json!([value("account", json!("acc-1"), "STRING")])).await;
    let run = execute(&app, &id, &json!({ "overrides": [value("target", json!("250.5"), "DECIMAL")] })).await;
    assert_eq!(run.status, 202, "{}", run.body);
    assert_eq!(run.body["status"], "QUEUED");
    let finished = finished_run(&app, &id).await;
    assert_eq!(finished["status"], "SUCCEEDED", "{finished}");
    assert_eq!(finished["trigger"], "ON_DEMAND");
    assert_eq!(finished["parameters"], json!({ "account": "acc-1", "target": "250.5" }));
    assert_eq!(finished["log"][0], "sweep acc-1 to 250.5");
    assert!(finished["startedAt"].is_string() && finished["finishedAt"].is_string());
    assert_eq!(finished["error"], Value::Null);
    // The history: style A, newest first, filtered by status.
    execute(&app, &id, &json!({})).await.expect(202);
    finished_run(&app, &id).await;
    let history = app.get(&format!("/api/automations/{id}/history")).await;
    assert_eq!(history.body["totalElements"], 2);
    assert_eq!(history.body["content"][0]["parameters"]["target"], "1000", "the default, canonical");
    assert_eq!(app.get(&format!("/api/automations/{id}/history?status=FAILED")).await.body["totalElements"], 0);
    assert_eq!(app.get(&format!("/api/automations/{id}/history?status=WHATEVER")).await.body["totalElements"], 0);
    assert_eq!(app.get(&format!("/api/automations/{id}/history?size=1000")).await.body["size"], 100);
    assert_eq!(app.get(&format!("/api/automations/{id}/history?size=99999999999999999999")).await.body["size"], 100);
    assert_eq!(app.get(&format!("/api/automations/{}/history", Uuid::now_v7())).await.status, 404);
    // Each run is audited.
    let audit = app.get(&format!("/api/audit/events?action=automation.run&resourceId={id}")).await;
    assert_eq!(audit.body["totalItems"], 2, "{}", audit.body);
}

const MINTER: &str = r#"// @param account: string -- the account to fund
// @param amount: decimal = "12.34"
let op = submit(#{ txType: "MINT", assetId: "EUR", accountRef: account, amount: amount });
log("submitted " + op.transactionId);
let balance = balance(account);
log("available before: " + balance.available);
op.transactionId
"#;

async fn a_treasury_script_submits_a_mint_that_settles_once(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    active_contract(&app, "EUR").await;
    customer(&app, "treasury").await;
    active_account(&app, "acc-1", "treasury", "EUR").await;
    let (_, id) = on_demand(&app, "mint", MINTER, json!([value("account", json!("acc-1"), "STRING")])).await;
    execute(&app, &id, &json!({})).await.expect(202);
    let run = finished_run(&app, &id).await;
    assert_eq!(run["status"], "SUCCEEDED", "{run}");
    let submitted = run["submitted"].as_array().expect("submitted").clone();
    assert_eq!(submitted.len(), 1);
    let operation = submitted[0].as_str().expect("id");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        // Receipts are polled on the service's clock.
        app.clock.advance_millis(250);
        app.drain_jobs().await;
        let read = app.get(&format!("/api/transactions/{operation}")).await;
        if read.body["status"] == "CONFIRMED" || read.body["state"] == "CONFIRMED" {
            break;
        }
        assert!(Instant::now() < deadline, "the MINT did not settle: {}", read.body);
        tokio::task::yield_now().await;
    }
    let balance = app.get("/api/accounts/acc-1/balances").await;
    assert_eq!(balance.body["total"], "12.34", "{}", balance.body);
    // The same run, redone (as after a crash), submits nothing twice: its key is the run's.
    let listed = app.get("/api/transactions?accountRef=acc-1").await;
    listed.expect(200);
    let mints = listed.body["content"].as_array().expect("content").iter().filter(|o| o["txType"] == "MINT").count();
    assert_eq!(mints, 1, "{}", listed.body);
    // The submission's audit record says a worker made it for the automation's creator, in
    // answer to no HTTP request.
    let audited = app.get(&format!("/api/audit/events?action=transaction.submit&resourceId={operation}")).await;
    audited.expect(200);
    let record = &audited.body["data"][0];
    assert_eq!(record["source"], "WORKER", "{}", audited.body);
    assert_eq!(record["actorId"], app.tenant.subject.as_str(), "{record}");
    assert!(record.get("httpStatus").is_none_or(Value::is_null), "{record}");
}

async fn a_scheduled_automation_runs_when_the_clock_passes_its_time(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let script = id_of(&create(&app, "tick", "log(\"tick\"); 1").await);
    publish(&app, &script).await;
    let made = app
        .post(
            "/api/automations",
            &json!({ "scriptId": script, "triggerType": "SCHEDULED", "cron": "*/5 * * * *", "timeZone": "UTC" }),
        )
        .await;
    assert_eq!(made.status, 201, "{}", made.body);
    let id = made.body["automationId"].as_str().expect("id").to_owned();
    app.drain_jobs().await;
    let none = app.get(&format!("/api/automations/{id}/history")).await;
    assert_eq!(none.body["totalElements"], 0, "not due yet");
    app.clock.advance_millis(6 * 60_000);
    // The scheduler runs on its period; here, now.
    app.app.jobs.schedule_periodic("automations.schedule").await.expect("schedule");
    let run = finished_run(&app, &id).await;
    assert_eq!((run["trigger"].as_str(), run["status"].as_str()), (Some("SCHEDULED"), Some("SUCCEEDED")), "{run}");
    assert!(run["scheduledFor"].is_string());
    assert_eq!(run["log"][0], "tick");
    let after = app.get(&format!("/api/automations/{id}")).await;
    assert!(after.body["nextRunAt"].as_str() > made.body["nextRunAt"].as_str(), "the next run is planned");
}

async fn a_failing_run_is_recorded_and_repeated_failures_disable_the_automation(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let (_, id) = on_demand(&app, "thrower", "throw \"boom\";", json!([])).await;
    for attempt in 1..=5 {
        execute(&app, &id, &json!({})).await.expect(202);
        let run = finished_run(&app, &id).await;
        assert_eq!(run["status"], "FAILED", "{run}");
        assert!(run["error"].as_str().is_some_and(|e| e.contains("boom")), "{run}");
        let automation = app.get(&format!("/api/automations/{id}")).await;
        assert_eq!(automation.body["consecutiveFailures"], attempt);
    }
    let disabled = app.get(&format!("/api/automations/{id}")).await;
    assert_eq!(disabled.body["status"], "DISABLED", "after five failures in a row");
    refused(&execute(&app, &id, &json!({})).await, 409, "DISABLED");
}

async fn a_run_whose_error_or_log_holds_a_nul_character_is_recorded_on_every_store(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    // A script may make any text: its run must end in the history however the store keeps text.
    let (_, thrower) = on_demand(&app, "nul-thrower", "throw \"bad\\x00thing\";", json!([])).await;
    execute(&app, &thrower, &json!({})).await.expect(202);
    let run = finished_run(&app, &thrower).await;
    assert_eq!(run["status"], "FAILED", "{run}");
    assert!(run["error"].as_str().is_some_and(|e| e.contains("bad\u{FFFD}thing")), "{run}");
    let (_, logger) = on_demand(&app, "nul-logger", "log(\"a\\x00b\"); \"c\\x00d\"", json!([])).await;
    execute(&app, &logger, &json!({})).await.expect(202);
    let run = finished_run(&app, &logger).await;
    assert_eq!(run["status"], "SUCCEEDED", "{run}");
    assert_eq!(run["log"], json!(["a\u{0}b", "result: c\u{0}d"]), "{run}");
}

async fn an_event_automation_runs_once_per_event_of_its_type_with_the_event(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let script = id_of(&create(&app, "on-status", "log(event.type + \" \" + event.resource.id); 1").await);
    publish(&app, &script).await;
    let made = app
        .post(
            "/api/automations",
            &json!({ "scriptId": script, "triggerType": "EVENT", "eventType": "customer.status_changed" }),
        )
        .await;
    assert_eq!(made.status, 201, "{}", made.body);
    let id = made.body["automationId"].as_str().expect("id").to_owned();
    app.post("/api/customers", &json!({ "customerRef": "c-1" })).await.expect(201);
    app.drain_jobs().await;
    assert_eq!(app.get(&format!("/api/automations/{id}/history")).await.body["totalElements"], 0, "another type");
    app.patch("/api/customers/c-1", &json!({ "status": "INACTIVE" })).await.expect(200);
    let run = finished_run(&app, &id).await;
    assert_eq!((run["trigger"].as_str(), run["status"].as_str()), (Some("EVENT"), Some("SUCCEEDED")), "{run}");
    assert!(run["eventId"].is_string());
    assert_eq!(run["log"][0], "customer.status_changed c-1");
    app.drain_jobs().await;
    assert_eq!(app.get(&format!("/api/automations/{id}/history")).await.body["totalElements"], 1, "once per event");
}

/// A run whose end cannot be recorded until its job's attempts are spent (as after repeated
/// crashes) must not stay RUNNING for ever: the job's burial records it FAILED.
async fn a_run_does_not_stay_running_after_its_job_ran_out_of_attempts(backend: Backend) {
    let app = TestApp::spawn_with(backend, three_attempts()).await;
    let (_, id) = on_demand(&app, "sweep", SWEEP, json!([value("account", json!("acc-1"), "STRING")])).await;
    execute(&app, &id, &json!({})).await.expect(202);
    // The run's end commits with its audit record: make that insert fail.
    app.db.fail_inserts_into("audit_records").await;
    drain_past_three_attempts(&app).await;
    app.db.heal_inserts_into("audit_records").await;
    drain_past_three_attempts(&app).await;
    let dead = app.db.count("jobs", "kind = 'automation.run' AND status = 'dead'").await;
    assert_eq!(dead, 1, "the run's job ran out of attempts");
    let history = app.get(&format!("/api/automations/{id}/history")).await;
    let run = &history.body["content"][0];
    assert_eq!(run["status"], "FAILED", "the run is stranded: {run}");
    assert!(run["error"].as_str().is_some_and(|e| e.contains("attempts")), "{run}");
    assert!(run["finishedAt"].is_string(), "{run}");
    let audit = app.get(&format!("/api/audit/events?action=automation.run&resourceId={id}")).await;
    assert_eq!(audit.body["totalItems"], 1, "the run's end is audited: {}", audit.body);
}

/// The sandbox through the service: an endless loop, deep recursion, a string that doubles for
/// ever, and reaching for a file, the network or a process each end their run FAILED with the
/// sandbox's error recorded, and the service goes on answering and running scripts.
async fn runs_that_overreach_end_with_the_sandboxs_error_and_the_service_stays_healthy(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    for (name, source, says) in [
        ("endless", "let i = 0; while true { i += 1; }", ["LIMIT_EXCEEDED", "operations"]),
        ("recursion", "fn down(n) { down(n + 1) }\ndown(0)", ["LIMIT_EXCEEDED", "call"]),
        ("huge-string", "let s = \"x\"; loop { s += s; }", ["LIMIT_EXCEEDED", "bytes of text"]),
        // Strings each under the size limit, held by a function pointer no size check walks.
        (
            "curried",
            "fn id(x) { x }\nlet f = Fn(\"id\");\nfor i in 0..3000 { let s = \"a\" + i; for j in 0..15 { s += s; } f = f.curry(s); }",
            ["LIMIT_EXCEEDED", "bytes of memory"],
        ),
        ("file", "open_file(\"/etc/passwd\")", ["SCRIPT_ERROR", "Function not found"]),
        ("network", "http_get(\"http://example.com\")", ["SCRIPT_ERROR", "Function not found"]),
        ("process", "system(\"ls\")", ["SCRIPT_ERROR", "Function not found"]),
    ] {
        let (_, id) = on_demand(&app, name, source, json!([])).await;
        execute(&app, &id, &json!({})).await.expect(202);
        let run = finished_run(&app, &id).await;
        assert_eq!(run["status"], "FAILED", "{name}: {run}");
        let error = run["error"].as_str().unwrap_or_default();
        assert!(says.iter().all(|part| error.contains(part)), "{name}: the recorded error says why: {error}");
    }
    let ready = Reply::read(app.raw(Method::GET, "/readyz").send().await.expect("readyz")).await;
    ready.expect(200);
    let (_, id) = on_demand(&app, "after", SWEEP, json!([value("account", json!("acc-1"), "STRING")])).await;
    execute(&app, &id, &json!({})).await.expect(202);
    assert_eq!(finished_run(&app, &id).await["status"], "SUCCEEDED", "scripts still run");
}
