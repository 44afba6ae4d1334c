//! Crash safety of automation runs, with the real binary: runs of a published script that
//! mints three times each are requested concurrently (some requests resent with their key),
//! and the service is killed with SIGKILL twice while runs are under way. Afterwards every run
//! requested is in the history once and SUCCEEDED, lists exactly its three operations, and no
//! operation was submitted twice: the MINTs are three per run and the balance is their sum.

use crate::BINARY;
use crate::crash_load::{Answered, Client, amount_text, crash_load_environment, eventually, operations, wait_until};
use reqwest::Method;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::PoisonError;
use std::time::{Duration, Instant};
use tokenops_testkit::{Backend, ServiceProcess, TestDb, Testbed, backends};

backends!(runs_are_recorded_once_and_submit_once_across_sigkills_while_running);

/// Runs requested in each of the two waves; the service is killed once during each.
const WAVE: usize = 16;
const WAVES: usize = 2;
/// Every this-many-th run is requested a second time with its key once answered.
const RESEND_EVERY: usize = 3;
const POLL: Duration = Duration::from_millis(2);
/// Runs not final.
const UNDER_WAY: &str = "status IN ('QUEUED', 'RUNNING')";

/// Three MINTs to `account`, of `run`.01, `run`.02 and `run`.03 EUR, so that every operation's
/// amount names its run and its ordinal. The loop between them stretches the run, so that a
/// kill finds runs halfway.
const MINT_THREE: &str = r#"// @param account: string -- the account to fund
// @param run: integer = 0 -- the run's number, which makes its amounts its own
for part in 1..4 {
    let amount = run.to_string() + ".0" + part.to_string();
    let op = submit(#{ txType: "MINT", assetId: "EUR", accountRef: account, amount: amount });
    log("minted " + op.transactionId);
    let spin = 0;
    for i in 0..2000 { spin += i; }
}
"#;

fn environment(bed: &Testbed) -> BTreeMap<String, String> {
    let mut env = bed.environment("all");
    crash_load_environment(&mut env);
    env.insert("TOKENOPS_LOG".to_owned(), "error".to_owned());
    env
}

/// A request of the test's own that must succeed with `status`.
async fn expect(client: &Client, method: Method, path: &str, body: Option<Value>, status: u16) -> Value {
    let (got, reply) = client.call(method, path, body).await;
    assert_eq!(got, status, "{path}: {reply}");
    reply
}

/// Requests run `n` with `key` until it is answered.
async fn request_run(client: &Client, automation: &str, n: usize, key: &str) -> Answered {
    let body = json!({ "overrides": [{ "key": "run", "value": n, "type": "INTEGER" }] });
    let path = format!("/api/automations/{automation}/executions");
    client.post_until_answered(&path, key, &body, &format!("run {n}")).await
}

/// The runs of one wave, requested concurrently: each run's number and its execution id.
fn request_wave(client: &Client, automation: &str, wave: usize) -> Vec<tokio::task::JoinHandle<(usize, String)>> {
    (wave * WAVE + 1..=(wave + 1) * WAVE)
        .map(|n| {
            let (client, automation) = (client.clone(), automation.to_owned());
            tokio::spawn(async move {
                let Answered { status, reply, .. } = request_run(&client, &automation, n, &format!("run-{n}")).await;
                assert_eq!(status, 202, "run {n}: {reply}");
                (n, reply["executionId"].as_str().unwrap_or_else(|| panic!("run {n}: {reply}")).to_owned())
            })
        })
        .collect()
}

/// The wave's runs RUNNING with their first MINT made: a kill now makes them run again over a
/// submission. (Halfway runs of an earlier wave may be left from its kill.)
fn halfway(wave: usize) -> String {
    format!(
        "e.status = 'RUNNING' AND CAST(e.parameters ->> 'run' AS INTEGER) > {} AND EXISTS (SELECT 1 FROM \
         operations o WHERE o.idempotency_key = 'automation-run:' || CAST(e.id AS TEXT) || ':0')",
        WAVE * wave
    )
}

/// Waits until one of the wave's runs is halfway (RUNNING with its first MINT made), kills the
/// service, and tells how far the runs had come and how many were halfway.
async fn kill_while_running(service: ServiceProcess, db: &TestDb, wave: usize) -> (String, i64) {
    let all_mints = (3 * WAVE * (wave + 1)) as i64;
    let halfway = halfway(wave);
    wait_until(Duration::from_secs(30), POLL, "a run halfway", || async {
        db.count("automation_executions e", &halfway).await > 0
    })
    .await;
    service.kill9().await;
    let final_runs = db.count("automation_executions", "status IN ('SUCCEEDED', 'FAILED')").await;
    let running = db.count("automation_executions", "status = 'RUNNING'").await;
    let halfway = db.count("automation_executions e", &halfway).await;
    let mints = db.count("operations", "tx_type = 'MINT'").await;
    assert!(final_runs < (WAVE * (wave + 1)) as i64, "kill {}: every run had ended already", wave + 1);
    (
        format!("{final_runs} runs final, {running} RUNNING ({halfway} halfway), {mints} of {all_mints} MINTs made"),
        halfway,
    )
}

async fn runs_are_recorded_once_and_submit_once_across_sigkills_while_running(backend: Backend) {
    let started = Instant::now();
    let bed = Testbed::start(backend).await;
    let (db, tenant) = (&bed.db, &bed.tenant);
    let env = environment(&bed);
    let mut service = ServiceProcess::start(BINARY, &env).await;
    let client = Client::new(&service.base_url, &tenant.token, Duration::from_millis(50), 0);

    // An EUR contract, a customer and acc-1, ACTIVE; the script published; the automation.
    expect(&client, Method::POST, "/api/contracts", Some(json!({ "assetId": "EUR" })), 201).await;
    expect(&client, Method::POST, "/api/customers", Some(json!({ "customerRef": "treasury" })), 201).await;
    let contract_active = eventually(Duration::from_secs(30), || async {
        client.call(Method::GET, "/api/contracts/EUR", None).await.1["status"] == "ACTIVE"
    });
    assert!(contract_active.await, "the contract never became ACTIVE");
    let account = json!({ "accountRef": "acc-1", "customerRef": "treasury", "assetId": "EUR" });
    expect(&client, Method::POST, "/api/accounts", Some(account), 201).await;
    let account_active = eventually(Duration::from_secs(30), || async {
        client.call(Method::GET, "/api/accounts/acc-1", None).await.1["status"] == "ACTIVE"
    });
    assert!(account_active.await, "acc-1 never became ACTIVE");
    let script = json!({ "name": "mint-three", "source": MINT_THREE });
    let script = expect(&client, Method::POST, "/api/scripts", Some(script), 201).await;
    let script = script["scriptId"].as_str().expect("scriptId").to_owned();
    let publish = Some(json!({ "status": "PUBLISHED" }));
    expect(&client, Method::PATCH, &format!("/api/scripts/{script}"), publish, 200).await;
    let parameters = json!([{ "key": "account", "value": "acc-1", "type": "STRING" }]);
    let automation = json!({ "scriptId": script, "triggerType": "ON_DEMAND", "parameters": parameters });
    let automation = expect(&client, Method::POST, "/api/automations", Some(automation), 201).await;
    let automation = automation["automationId"].as_str().expect("automationId").to_owned();
    eprintln!("automations_crash ({backend:?}): ready after {:?}", started.elapsed());

    // Each wave of runs requested concurrently, and the service killed while they run.
    let mut requested: BTreeMap<usize, String> = BTreeMap::new();
    for wave in 0..WAVES {
        let requests = request_wave(&client, &automation, wave);
        let (at_kill, halfway) = kill_while_running(service, db, wave).await;
        assert!(halfway > 0, "kill {}: no run was halfway", wave + 1);
        service = ServiceProcess::start(BINARY, &env).await;
        *client.node.write().unwrap_or_else(PoisonError::into_inner) = service.base_url.clone();
        eprintln!("automations_crash ({backend:?}): kill {} with {at_kill}", wave + 1);
        for request in requests {
            let (n, execution) = request.await.expect("request");
            assert!(requested.insert(n, execution).is_none());
        }
    }
    assert_eq!(requested.len(), WAVE * WAVES);

    // A request sent again with its key is answered its run, not a new one.
    for (n, execution) in requested.iter().filter(|(n, _)| *n % RESEND_EVERY == 0) {
        let Answered { status, reply, replayed, .. } = request_run(&client, &automation, *n, &format!("run-{n}")).await;
        assert_eq!((status, replayed), (202, true), "run {n} again: {reply}");
        assert_eq!(reply["executionId"].as_str(), Some(execution.as_str()), "run {n} again");
    }

    // Everything final: the runs, then their MINTs.
    let history_path = format!("/api/automations/{automation}/history?size=100");
    let runs_final =
        eventually(Duration::from_secs(30), || async { db.count("automation_executions", UNDER_WAY).await == 0 });
    let runs_final = runs_final.await;
    let expected_mints = (3 * WAVE * WAVES) as i64;
    let mints_final = eventually(Duration::from_secs(30), || async {
        db.count("operations", "tx_type = 'MINT' AND state NOT IN ('CONFIRMED', 'FAILED')").await == 0
    })
    .await;

    let mut violations = Vec::new();
    if !runs_final {
        let open = db.count("automation_executions", UNDER_WAY).await;
        violations.push(format!("{open} runs are still QUEUED or RUNNING"));
    }
    if !mints_final {
        violations.push("MINTs are still on their way".to_owned());
    }
    let history = expect(&client, Method::GET, &history_path, None, 200).await;
    let runs = history["content"].as_array().expect("content");
    if history["totalElements"] != json!(WAVE * WAVES) {
        violations.push(format!("the history holds {} runs for {} requested", history["totalElements"], WAVE * WAVES));
    }
    let rows = operations(db).await;
    let mints: Vec<_> = rows.iter().filter(|r| r.tx_type == "MINT").collect();
    let mut listed = BTreeSet::new();
    for (n, execution) in &requested {
        let recorded: Vec<&Value> = runs.iter().filter(|r| r["executionId"] == execution.as_str()).collect();
        let [run] = recorded.as_slice() else {
            violations.push(format!("run {n} ({execution}) is in the history {} times", recorded.len()));
            continue;
        };
        if run["status"] != "SUCCEEDED" || run["parameters"]["run"] != json!(n) {
            violations.push(format!("run {n}: {run}"));
        }
        let submitted: Vec<&str> =
            run["submitted"].as_array().map(|s| s.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
        let amounts: Vec<String> = submitted
            .iter()
            .map(|id| mints.iter().find(|m| m.id == *id).map(|m| amount_text(m.amount)).unwrap_or_default())
            .collect();
        let expected: Vec<String> = (1..=3).map(|part| format!("{n}.0{part}")).collect();
        if amounts != expected {
            violations.push(format!("run {n} lists {submitted:?}, MINTs of {amounts:?}, not {expected:?}"));
        }
        listed.extend(submitted.iter().map(|id| (*id).to_owned()));
        let log_lines = run["log"].as_array().map(Vec::len).unwrap_or_default();
        if log_lines != 3 {
            violations.push(format!("run {n} logged {log_lines} lines: {}", run["log"]));
        }
    }
    if mints.len() as i64 != expected_mints || listed.len() as i64 != expected_mints {
        violations.push(format!(
            "{} MINTs made, {} listed by the runs, {expected_mints} expected",
            mints.len(),
            listed.len()
        ));
    }
    let unconfirmed: Vec<_> = mints.iter().filter(|m| m.state != "CONFIRMED").map(|m| (&m.id, &m.state)).collect();
    if !unconfirmed.is_empty() {
        violations.push(format!("MINTs not CONFIRMED: {unconfirmed:?}"));
    }
    let sum: i64 = requested.keys().map(|n| 3 * 100 * *n as i64 + 6).sum();
    let balance = expect(&client, Method::GET, "/api/accounts/acc-1/balances", None, 200).await;
    if balance["total"].as_str().map(crate::crash_load::cents) != Some(sum) {
        violations.push(format!("the balance is {balance}, the runs minted {}", amount_text(sum)));
    }
    let jobs = db.count("jobs", "kind = 'automation.run' AND status <> 'done'").await;
    if jobs != 0 {
        violations.push(format!("{jobs} automation.run jobs are not done"));
    }
    assert!(violations.is_empty(), "automations_crash ({backend:?}):\n{}", violations.join("\n"));
    eprintln!("automations_crash ({backend:?}): passed in {:?}", started.elapsed());
}
