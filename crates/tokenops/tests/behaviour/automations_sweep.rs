//! A treasury sweep end to end (a published script importing a published helper, run on a
//! cron schedule in an explicit time zone and on demand, its TRANSFER settled), dry runs of
//! scripts (`POST /api/scripts/{scriptId}/dry-runs`), and runs that meet a store failure or a
//! second worker.

use reqwest::Method;
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tokenops_testkit::{Backend, Tenant, TestApp, backends};
use uuid::Uuid;

use crate::automations::{execute, finished_run, refused, value};
use crate::fixtures::{active_account, active_contract, customer};
use crate::scripts::{create, id_of, publish};
use crate::support::key;

/// The amount above a target, for the sweep to import.
const AMOUNT: &str = r#"// The part of `available` above `target`, or "0".
fn excess(available, target) {
    if decimal_cmp(available, target) > 0 { decimal_sub(available, target) } else { "0" }
}
"#;

const SWEEP: &str = r#"// @param target: decimal = "1000" -- the balance to keep on the account
// @param account: string = "ops" -- the account swept
// @param reserve: string = "reserve" -- where the excess goes
import "treasury.amount" as amount;
let available = balance(account).available;
let excess = amount::excess(available, target);
if excess == "0" {
    log("nothing above " + target);
} else {
    let op = submit(#{ txType: "TRANSFER", assetId: "EUR", accountRef: account, counterpartyRef: reserve, amount: excess });
    log("swept " + excess + " to " + reserve + " as " + op.transactionId);
}
"#;

/// Runs the jobs, moving the manual clock past receipt polls, until operation `id` is in
/// `state` (a real-time deadline).
async fn until_state(app: &TestApp, id: &str, state: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        app.drain_jobs().await;
        let found = app.get(&format!("/api/transactions/{id}")).await;
        found.expect(200);
        if found.body["state"] == state {
            return found.body;
        }
        assert!(Instant::now() < deadline, "operation never reached {state}: {}", found.body);
        app.clock.advance_millis(250);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn available(app: &TestApp, account: &str) -> String {
    let balance = app.get(&format!("/api/accounts/{account}/balances")).await;
    balance.expect(200);
    balance.body["available"].as_str().expect("available").to_owned()
}

async fn transfers(app: &TestApp) -> Vec<Value> {
    let listed = app.get("/api/transactions?txType=TRANSFER").await;
    listed.expect(200);
    listed.body["content"].as_array().expect("content").clone()
}

/// A EUR contract, customer `treasury` with accounts `ops` (1500 minted, CONFIRMED) and
/// `reserve`, and the helper and sweep scripts (DRAFTs); the sweep's id.
async fn treasury(app: &TestApp) -> String {
    active_contract(app, "EUR").await;
    customer(app, "treasury").await;
    for account in ["ops", "reserve"] {
        active_account(app, account, "treasury", "EUR").await;
    }
    let minted = app
        .post(
            "/api/transactions",
            &json!({ "txType": "MINT", "assetId": "EUR", "accountRef": "ops", "amount": "1500" }),
        )
        .await;
    minted.expect(202);
    until_state(app, minted.body["transactionId"].as_str().expect("id"), "CONFIRMED").await;
    create(app, "treasury.amount", AMOUNT).await;
    id_of(&create(app, "treasury.sweep", SWEEP).await)
}

async fn dry_run(app: &TestApp, script: &str, body: &Value) -> tokenops_testkit::Reply {
    app.post(&format!("/api/scripts/{script}/dry-runs"), body).await
}

fn transfer(amount: &str) -> Value {
    json!({ "txType": "TRANSFER", "assetId": "EUR", "accountRef": "ops", "counterpartyRef": "reserve", "amount": amount })
}

backends!(
    a_dry_run_answers_the_transfer_a_sweep_would_submit_and_makes_nothing,
    a_dry_run_answers_a_scripts_error_and_refuses_as_a_run_does,
    a_treasury_sweep_runs_on_its_schedule_and_on_demand_and_settles,
    a_run_that_meets_a_store_failure_is_retried_not_failed,
    two_workers_running_one_execution_submit_once_and_record_one_end,
    an_event_automation_is_not_started_by_what_its_own_runs_submitted,
);

async fn a_dry_run_answers_the_transfer_a_sweep_would_submit_and_makes_nothing(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let sweep = treasury(&app).await;
    let audited = app.get("/api/audit/events").await.body["totalItems"].clone();
    // A DRAFT runs, its import resolved to the helper's current code.
    let ran = dry_run(&app, &sweep, &json!({})).await;
    ran.expect(200);
    assert_eq!(ran.body["status"], "SUCCEEDED", "{}", ran.body);
    assert_eq!((ran.body["scriptId"].as_str(), ran.body["version"].as_u64()), (Some(sweep.as_str()), Some(1)));
    assert_eq!(ran.body["parameters"], json!({ "target": "1000", "account": "ops", "reserve": "reserve" }));
    assert_eq!(ran.body["submissions"], json!([transfer("500")]), "{}", ran.body);
    assert_eq!(ran.body["log"], json!(["swept 500 to reserve as dry-run-1"]));
    assert_eq!(ran.body["error"], Value::Null);
    // Nothing was made: no operation, no execution, no audit record; the balance is untouched.
    app.drain_jobs().await;
    assert!(transfers(&app).await.is_empty(), "a dry run submitted a TRANSFER");
    assert_eq!(app.db.count("automation_executions", "").await, 0);
    assert_eq!(app.get("/api/audit/events").await.body["totalItems"], audited, "a dry run is not audited");
    assert_eq!(available(&app, "ops").await, "1500.00");
    // An override changes the answer; a target above the balance submits nothing.
    let lower = dry_run(&app, &sweep, &json!({ "overrides": [value("target", json!("1200.5"), "DECIMAL")] })).await;
    lower.expect(200);
    assert_eq!(lower.body["submissions"], json!([transfer("299.5")]), "{}", lower.body);
    assert_eq!(lower.body["parameters"]["target"], "1200.5");
    let higher = dry_run(&app, &sweep, &json!({ "overrides": [value("target", json!("2000"), "DECIMAL")] })).await;
    higher.expect(200);
    assert_eq!(higher.body["submissions"], json!([]));
    assert_eq!(higher.body["log"], json!(["nothing above 2000"]));
    // Published, it runs as a run would, against the helper's resolved version.
    publish(&app, &id_of(&app.get("/api/scripts?name=treasury.amount").await.body["content"][0])).await;
    publish(&app, &sweep).await;
    let published = dry_run(&app, &sweep, &json!({ "version": 1 })).await;
    published.expect(200);
    assert_eq!(published.body["submissions"], json!([transfer("500")]), "{}", published.body);
    assert!(transfers(&app).await.is_empty());
}

async fn a_dry_run_answers_a_scripts_error_and_refuses_as_a_run_does(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let thrower = id_of(&create(&app, "thrower", "log(\"before\");\nthrow \"boom\";").await);
    let failed = dry_run(&app, &thrower, &json!({})).await;
    failed.expect(200);
    assert_eq!(failed.body["status"], "FAILED", "{}", failed.body);
    let error = failed.body["error"].as_str().expect("error");
    assert!(error.starts_with("SCRIPT_ERROR") && error.contains("boom"), "{error}");
    assert_eq!(failed.body["log"], json!(["before"]));
    // A submission a run would refuse is refused here too, and nothing is captured.
    let odd = id_of(&create(&app, "odd", "submit(#{ txType: \"MINT\", colour: \"blue\" })").await);
    let refused_submission = dry_run(&app, &odd, &json!({})).await;
    refused_submission.expect(200);
    assert!(
        refused_submission.body["error"].as_str().is_some_and(|e| e.starts_with("HOST_ERROR") && e.contains("colour")),
        "{}",
        refused_submission.body
    );
    assert_eq!(refused_submission.body["submissions"], json!([]));
    // So are the fields a run's submission would be refused for, each named, though nothing
    // they name is looked up (no contract or account exists here).
    for (n, body, field) in [
        (r#"txType: "TRANSFER", assetId: "EUR", accountRef: "a", counterpartyRef: "b", amount: "-1.00""#, "amount"),
        (r#"txType: "TRANSFER", assetId: "EUR", accountRef: "a", counterpartyRef: "b", amount: "1.001""#, "amount"),
        (r#"txType: "TRANSFER", assetId: "EUR", accountRef: "a", amount: "1.00""#, "counterpartyRef"),
        (r#"txType: "TRANSFER", assetId: "XYZ", accountRef: "a", counterpartyRef: "b", amount: "1""#, "assetId"),
        (r#"txType: "MINT", assetId: "EUR", accountRef: "a", counterpartyRef: "b", amount: "1""#, "counterpartyRef"),
        (r#"txType: "RELEASE", params: #{ lockId: "not-a-uuid" }"#, "params.lockId"),
    ]
    .into_iter()
    .enumerate()
    .map(|(n, (body, field))| (n, body, field))
    {
        let script = id_of(&create(&app, &format!("bad-submission-{n}"), &format!("submit(#{{ {body} }})")).await);
        let refused = dry_run(&app, &script, &json!({})).await;
        refused.expect(200);
        let error = refused.body["error"].as_str().unwrap_or_default();
        assert!(error.starts_with("HOST_ERROR") && error.contains(field), "{body}: {}", refused.body);
        assert_eq!(refused.body["submissions"], json!([]), "{body}");
    }
    // A MINT needs transaction:mint of the dry run's caller, as of a run's user, before its
    // fields are looked at.
    let subject = Uuid::now_v7().to_string();
    let scope = "automation:execute transaction:submit";
    let claims = app.issuer.claims_with_scope(&app.clock, &subject, Some(app.tenant.id), 3_600, Some(scope));
    let no_mint = Tenant { id: app.tenant.id, subject, token: app.issuer.sign(&claims) };
    let minting =
        id_of(&create(&app, "minting", "submit(#{ txType: \"MINT\", assetId: \"EUR\", amount: \"-1\" })").await);
    let unpermitted = app.post_as(&no_mint, &format!("/api/scripts/{minting}/dry-runs"), &json!({})).await;
    unpermitted.expect(200);
    let error = unpermitted.body["error"].as_str().unwrap_or_default();
    assert!(error.starts_with("HOST_ERROR") && error.contains("transaction:mint"), "{}", unpermitted.body);
    // A balance read needs balance:read, as GET /api/accounts/{ref}/balances does: account:read
    // is not enough.
    let subject = Uuid::now_v7().to_string();
    let scope = "automation:execute account:read";
    let claims = app.issuer.claims_with_scope(&app.clock, &subject, Some(app.tenant.id), 3_600, Some(scope));
    let no_balances = Tenant { id: app.tenant.id, subject, token: app.issuer.sign(&claims) };
    let reader = id_of(&create(&app, "reader", "balance(\"acc-1\")").await);
    let unpermitted = app.post_as(&no_balances, &format!("/api/scripts/{reader}/dry-runs"), &json!({})).await;
    unpermitted.expect(200);
    let error = unpermitted.body["error"].as_str().unwrap_or_default();
    assert!(error.starts_with("HOST_ERROR") && error.contains("balance:read"), "{}", unpermitted.body);
    // The status codes.
    let sweep = id_of(&create(&app, "sweep", crate::scripts::SWEEP).await);
    let account = value("account", json!("acc-1"), "STRING");
    refused(&dry_run(&app, &sweep, &json!({})).await, 422, "account");
    refused(
        &dry_run(&app, &sweep, &json!({ "overrides": [account, value("target", json!("abc"), "DECIMAL")] })).await,
        422,
        "target",
    );
    refused(
        &dry_run(&app, &sweep, &json!({ "overrides": [account, value("target", json!("5"), "INTEGER")] })).await,
        422,
        "target",
    );
    refused(
        &dry_run(&app, &sweep, &json!({ "overrides": [account, value("nope", json!("5"), "STRING")] })).await,
        422,
        "nope",
    );
    refused(
        &dry_run(&app, &sweep, &json!({ "overrides": [{ "key": " ", "value": "1", "type": "STRING" }] })).await,
        400,
        "key",
    );
    refused(
        &dry_run(&app, &sweep, &json!({ "overrides": [{ "key": "target", "type": "DECIMAL" }] })).await,
        400,
        "value",
    );
    refused(&dry_run(&app, &sweep, &json!({ "version": 0 })).await, 400, "version");
    refused(&dry_run(&app, &sweep, &json!({ "event": "x" })).await, 400, "event");
    refused(&dry_run(&app, &sweep, &json!({ "version": 7, "overrides": [account] })).await, 404, "version 7");
    refused(&dry_run(&app, &Uuid::now_v7().to_string(), &json!({})).await, 404, "not found");
    assert_eq!(dry_run(&app, "not-a-uuid", &json!({})).await.status, 400);
    let ok = dry_run(&app, &sweep, &json!({ "overrides": [account] })).await;
    ok.expect(200);
    assert_eq!(ok.body["log"][0], "sweep acc-1 to 1000");
    // Another organisation's script is not found; a deleted one is 409.
    let other = app.new_tenant();
    assert_eq!(app.post_as(&other, &format!("/api/scripts/{sweep}/dry-runs"), &json!({})).await.status, 404);
    app.write(Method::DELETE, &format!("/api/scripts/{sweep}"), &key(), &Value::Null).await.expect(204);
    refused(&dry_run(&app, &sweep, &json!({ "overrides": [account] })).await, 409, "deleted");
    // An event script reads the event it is given.
    let on_event = id_of(&create(&app, "on-event", "log(event.type); 1").await);
    let with_event = dry_run(&app, &on_event, &json!({ "event": { "type": "customer.created" } })).await;
    assert_eq!(with_event.body["log"], json!(["customer.created", "result: 1"]), "{}", with_event.body);
    assert_eq!(app.db.count("automation_executions", "").await, 0);
}

async fn a_treasury_sweep_runs_on_its_schedule_and_on_demand_and_settles(backend: Backend) {
    let mut app = TestApp::spawn(backend).await;
    let sweep = treasury(&app).await;
    let helper = id_of(&app.get("/api/scripts?name=treasury.amount").await.body["content"][0]);
    publish(&app, &helper).await;
    let published = publish(&app, &sweep).await;
    assert_eq!(published["dependencies"][0]["name"], "treasury.amount", "{published}");
    assert_eq!(published["dependencies"][0]["scriptId"], helper.as_str());
    // Every weekday at 18:00 in Paris.
    let scheduled = app
        .post(
            "/api/automations",
            &json!({ "name": "evening sweep", "scriptId": sweep, "triggerType": "SCHEDULED", "cron": "0 18 * * MON-FRI",
                     "timeZone": "Europe/Paris" }),
        )
        .await;
    assert_eq!(scheduled.status, 201, "{}", scheduled.body);
    let automation = scheduled.body["automationId"].as_str().expect("id").to_owned();
    let planned = scheduled.body["nextRunAt"].as_str().expect("nextRunAt").to_owned();
    app.drain_jobs().await;
    assert_eq!(app.get(&format!("/api/automations/{automation}/history")).await.body["totalElements"], 0);
    // Past the planned time (at most three days and a bit away, weekends included).
    app.clock.advance_millis(4 * 24 * 3_600_000);
    // The integrator's token expired meanwhile: a fresh one for the same user.
    let claims = app.issuer.claims(&app.clock, &app.tenant.subject, Some(app.tenant.id), 3_600);
    app.tenant.token = app.issuer.sign(&claims);
    app.app.jobs.schedule_periodic("automations.schedule").await.expect("schedule");
    let run = finished_run(&app, &automation).await;
    assert_eq!((run["trigger"].as_str(), run["status"].as_str()), (Some("SCHEDULED"), Some("SUCCEEDED")), "{run}");
    assert_eq!(run["scheduledFor"].as_str(), Some(planned.as_str()), "the run is the planned instant's");
    let submitted = run["submitted"].as_array().expect("submitted").clone();
    assert_eq!(submitted.len(), 1, "{run}");
    let id = submitted[0].as_str().expect("id").to_owned();
    assert_eq!(run["log"][0], format!("swept 500 to reserve as {id}"));
    let settled = until_state(&app, &id, "CONFIRMED").await;
    assert_eq!(
        (settled["txType"].as_str(), settled["amount"].as_str()),
        (Some("TRANSFER"), Some("500.00")),
        "{settled}"
    );
    assert_eq!((available(&app, "ops").await, available(&app, "reserve").await), ("1000.00".into(), "500.00".into()));
    assert_eq!(transfers(&app).await.len(), 1, "one TRANSFER");
    let after = app.get(&format!("/api/automations/{automation}")).await;
    assert!(after.body["nextRunAt"].as_str() > Some(planned.as_str()), "the next run is planned: {}", after.body);

    // The same sweep on demand, keeping 400 this time.
    let on_demand = app.post("/api/automations", &json!({ "scriptId": sweep })).await;
    on_demand.expect(201);
    let on_demand = on_demand.body["automationId"].as_str().expect("id").to_owned();
    refused(
        &execute(&app, &on_demand, &json!({ "overrides": [value("target", json!("lots"), "DECIMAL")] })).await,
        422,
        "target",
    );
    refused(
        &execute(&app, &on_demand, &json!({ "overrides": [value("target", json!(400), "INTEGER")] })).await,
        422,
        "target",
    );
    let requested =
        execute(&app, &on_demand, &json!({ "overrides": [value("target", json!("400"), "DECIMAL")] })).await;
    requested.expect(202);
    let run = finished_run(&app, &on_demand).await;
    assert_eq!((run["trigger"].as_str(), run["status"].as_str()), (Some("ON_DEMAND"), Some("SUCCEEDED")), "{run}");
    assert_eq!(run["parameters"]["target"], "400");
    let id = run["submitted"][0].as_str().expect("submitted").to_owned();
    let settled = until_state(&app, &id, "CONFIRMED").await;
    assert_eq!(settled["amount"], "600.00", "{settled}");
    assert_eq!((available(&app, "ops").await, available(&app, "reserve").await), ("400.00".into(), "1100.00".into()));
    let history = app.get(&format!("/api/automations/{on_demand}/history")).await;
    assert_eq!(history.body["totalElements"], 1, "the refused requests made no run: {}", history.body);
    assert_eq!(history.body["content"][0]["submitted"], json!([id]));
}

const MINTER: &str = r#"let op = submit(#{ txType: "MINT", assetId: "EUR", accountRef: "acc-1", amount: "5" });
op.transactionId
"#;

async fn mints(app: &TestApp) -> usize {
    let listed = app.get("/api/transactions?txType=MINT").await;
    listed.expect(200);
    listed.body["content"].as_array().expect("content").len()
}

/// A submission that meets a store failure is no outcome of the script: the run stays RUNNING,
/// its job is retried, and the next attempt submits under the same key.
async fn a_run_that_meets_a_store_failure_is_retried_not_failed(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    active_contract(&app, "EUR").await;
    customer(&app, "treasury").await;
    active_account(&app, "acc-1", "treasury", "EUR").await;
    let (_, automation) = crate::automations::on_demand(&app, "minter", MINTER, json!([])).await;
    app.db.fail_inserts_into("operations").await;
    execute(&app, &automation, &json!({})).await.expect(202);
    app.drain_jobs().await;
    let history = app.get(&format!("/api/automations/{automation}/history")).await;
    let run = &history.body["content"][0];
    assert_eq!((run["status"].as_str(), run["attempts"].as_u64()), (Some("RUNNING"), Some(1)), "{run}");
    assert_eq!(
        app.db.count("jobs", "kind = 'automation.run' AND status = 'queued'").await,
        1,
        "the job waits to retry"
    );
    app.db.heal_inserts_into("operations").await;
    app.clock.advance_millis(120_000);
    let run = finished_run(&app, &automation).await;
    assert_eq!((run["status"].as_str(), run["attempts"].as_u64()), (Some("SUCCEEDED"), Some(2)), "{run}");
    assert_eq!(run["submitted"].as_array().map(Vec::len), Some(1));
    assert_eq!(mints(&app).await, 1);
    let automation = app.get(&format!("/api/automations/{automation}")).await;
    assert_eq!(automation.body["consecutiveFailures"], 0, "no failure was counted");
}

/// A run's job whose lease is taken over while its script still runs (a slow worker) runs in two
/// workers at once: the submission is made once, and one end is recorded and audited.
async fn two_workers_running_one_execution_submit_once_and_record_one_end(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    active_contract(&app, "EUR").await;
    customer(&app, "treasury").await;
    active_account(&app, "acc-1", "treasury", "EUR").await;
    // Submits, then waits until account `go` exists (the test's signal).
    let slow = r#"let op = submit(#{ txType: "MINT", assetId: "EUR", accountRef: "acc-1", amount: "5" });
loop { try { account("go"); break; } catch { } }
op.transactionId
"#;
    let (_, automation) = crate::automations::on_demand(&app, "slow", slow, json!([])).await;
    execute(&app, &automation, &json!({})).await.expect(202);
    let first = {
        let app = app.app.clone();
        tokio::spawn(async move { app.jobs.drain().await })
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while mints(&app).await == 0 {
        assert!(Instant::now() < deadline, "the first worker did not submit");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The first worker's lease runs out while its script waits; a second worker takes the job.
    app.clock.advance_millis(10 * 60_000);
    let second = {
        let app = app.app.clone();
        tokio::spawn(async move { app.jobs.drain().await })
    };
    let history = format!("/api/automations/{automation}/history");
    while app.get(&history).await.body["content"][0]["attempts"] != 2 {
        assert!(Instant::now() < deadline, "the second worker did not start the run");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    app.post("/api/customers", &json!({ "customerRef": "signal" })).await.expect(201);
    app.post("/api/accounts", &json!({ "accountRef": "go", "customerRef": "signal", "assetId": "EUR" }))
        .await
        .expect(201);
    for worker in [first, second] {
        tokio::time::timeout(Duration::from_secs(30), worker)
            .await
            .expect("worker ends")
            .expect("joins")
            .expect("drains");
    }
    app.drain_jobs().await;
    assert_eq!(mints(&app).await, 1, "the MINT was submitted once");
    let run = &app.get(&history).await.body["content"][0];
    assert_eq!(run["status"], "SUCCEEDED", "{run}");
    assert_eq!(run["submitted"].as_array().map(Vec::len), Some(1), "{run}");
    let audit = app.get(&format!("/api/audit/events?action=automation.run&resourceId={automation}")).await;
    assert_eq!(audit.body["totalItems"], 1, "one end recorded: {}", audit.body);
}

/// An EVENT automation on `transaction.confirmed` whose script submits: the confirmation of
/// what a run submitted starts no run (of it or of any other EVENT automation), so one event
/// sets off one run, never a chain.
async fn an_event_automation_is_not_started_by_what_its_own_runs_submitted(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    active_contract(&app, "EUR").await;
    customer(&app, "treasury").await;
    active_account(&app, "acc-1", "treasury", "EUR").await;
    let script = id_of(&create(&app, "echo-minter", MINTER).await);
    publish(&app, &script).await;
    let made = app
        .post(
            "/api/automations",
            &json!({ "scriptId": script, "triggerType": "EVENT", "eventType": "transaction.confirmed" }),
        )
        .await;
    assert_eq!(made.status, 201, "{}", made.body);
    let automation = made.body["automationId"].as_str().expect("id").to_owned();
    let minted = app
        .post("/api/transactions", &json!({ "txType": "MINT", "assetId": "EUR", "accountRef": "acc-1", "amount": "1" }))
        .await;
    minted.expect(202);
    until_state(&app, minted.body["transactionId"].as_str().expect("id"), "CONFIRMED").await;
    let run = finished_run(&app, &automation).await;
    assert_eq!(run["status"], "SUCCEEDED", "{run}");
    let submitted = run["submitted"][0].as_str().expect("the run's MINT").to_owned();
    until_state(&app, &submitted, "CONFIRMED").await;
    for _ in 0..3 {
        app.clock.advance_millis(1_000);
        app.drain_jobs().await;
    }
    let history = app.get(&format!("/api/automations/{automation}/history")).await;
    assert_eq!(history.body["totalElements"], 1, "the run's own confirmation started no run: {}", history.body);
    assert_eq!(mints(&app).await, 2, "the API's MINT and the run's, nothing more");
}
