//! Idempotency-Key behaviour of the customer writes (spec: Endpoints/common request rules,
//! Errors/Status codes 409 and 422, Limits/Idempotency-Key, Failed operations), on both stores.

use reqwest::Method;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use tokenops_testkit::{Backend, Tenant, TestApp, backends};

use crate::support::{key, until_waiting};

const HOUR_MS: i64 = 3_600_000;

/// A response with its body as the exact text sent.
struct Raw {
    status: u16,
    headers: HeaderMap,
    text: String,
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|_| panic!("not JSON: {}", self.text))
    }

    fn replayed(&self) -> bool {
        self.header("idempotent-replayed") == Some("true")
    }

    /// The replay of `original`: the same status and the identical body, byte for byte, marked
    /// `Idempotent-Replayed: true`.
    #[track_caller]
    fn assert_replay_of(&self, original: &Raw) {
        assert_eq!(self.status, original.status, "{}", self.text);
        assert_eq!(self.text, original.text, "the replay is the original body, byte for byte");
        assert!(self.replayed(), "the replay carries idempotent-replayed: true");
    }
}

/// Sends a JSON body given as text, so that byte-level variations reach the service.
async fn send_as(app: &TestApp, tenant: &Tenant, method: Method, path: &str, key: &str, body: &str) -> Raw {
    let response = app
        .request_as(tenant, method, path)
        .header("Idempotency-Key", key)
        .header("Content-Type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .expect("send");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.expect("body");
    Raw { status, headers, text }
}

async fn send(app: &TestApp, method: Method, path: &str, key: &str, body: &Value) -> Raw {
    send_as(app, &app.tenant, method, path, key, &body.to_string()).await
}

/// A fresh token for the default organisation's user (the kit's token lasts an hour of the
/// app's clock).
fn fresh_token(app: &TestApp) -> Tenant {
    let claims = app.issuer.claims(&app.clock, &app.tenant.subject, Some(app.tenant.id), 3_600);
    Tenant { token: app.issuer.sign(&claims), ..app.tenant.clone() }
}

async fn count(app: &TestApp, table: &str, condition: &str) -> i64 {
    app.db.count(table, condition).await
}

async fn status_of(app: &TestApp, customer_ref: &str) -> Value {
    let reply = app.get(&format!("/api/customers/{customer_ref}")).await;
    reply.expect(200);
    reply.body["status"].clone()
}

// ---------------------------------------------------------------------------------------------
// Replay
// ---------------------------------------------------------------------------------------------

async fn same_key_and_payload_replays_the_original_response(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let k = key();
    let body = json!({ "customerRef": "c-1", "displayName": "Ada Ltd" });
    let first = send(&app, Method::POST, "/api/customers", &k, &body).await;
    assert_eq!(first.status, 201, "{}", first.text);
    assert!(!first.replayed(), "the original response is not marked as a replay");

    // Later, so that running the request again would produce another createdAt.
    app.clock.advance_millis(5_000);
    for _ in 0..3 {
        let again = send(&app, Method::POST, "/api/customers", &k, &body).await;
        again.assert_replay_of(&first);
        assert_eq!(again.header("location"), Some("/api/customers/c-1"));
    }
    assert_eq!(count(&app, "customers", "").await, 1);
    assert_eq!(count(&app, "audit_records", "action = 'customer.create' AND outcome = 'SUCCESS'").await, 1);
    assert_eq!(count(&app, "audit_records", "").await, 1, "a replay writes no audit record");
    assert_eq!(count(&app, "idempotency_records", "").await, 1);
}

async fn a_replayed_status_change_is_not_applied_again(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    app.post("/api/customers", &json!({ "customerRef": "c-1" })).await.expect(201);
    let k = key();
    let deactivate = json!({ "status": "INACTIVE" });
    let first = send(&app, Method::PATCH, "/api/customers/c-1", &k, &deactivate).await;
    assert_eq!(first.status, 200, "{}", first.text);
    app.clock.advance_millis(1_000);
    app.patch("/api/customers/c-1", &json!({ "status": "ACTIVE" })).await.expect(200);

    let again = send(&app, Method::PATCH, "/api/customers/c-1", &k, &deactivate).await;
    again.assert_replay_of(&first);
    assert_eq!(status_of(&app, "c-1").await, "ACTIVE", "the replay did not change the customer again");
    assert_eq!(count(&app, "events", "event_type = 'customer.status_changed'").await, 2);
    assert_eq!(count(&app, "audit_records", "action = 'customer.update_status'").await, 2);
}

async fn same_payload_with_other_key_order_and_whitespace_is_the_same_request(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let k = key();
    let tenant = app.tenant.clone();
    let first =
        send_as(&app, &tenant, Method::POST, "/api/customers", &k, r#"{"customerRef":"c-1","displayName":"Ada"}"#)
            .await;
    assert_eq!(first.status, 201, "{}", first.text);
    app.clock.advance_millis(1_000);
    let reordered = send_as(
        &app,
        &tenant,
        Method::POST,
        "/api/customers",
        &k,
        "{\n  \"displayName\" : \"Ada\",\n\t\"customerRef\":   \"c-1\"\n}\n",
    )
    .await;
    reordered.assert_replay_of(&first);
    assert_eq!(count(&app, "customers", "").await, 1);

    // And for PATCH.
    let pk = key();
    let patched = send_as(&app, &tenant, Method::PATCH, "/api/customers/c-1", &pk, r#"{"status":"INACTIVE"}"#).await;
    assert_eq!(patched.status, 200, "{}", patched.text);
    let spaced =
        send_as(&app, &tenant, Method::PATCH, "/api/customers/c-1", &pk, " {  \"status\" :\"INACTIVE\"  } ").await;
    spaced.assert_replay_of(&patched);
}

async fn a_refused_registration_is_replayed_with_the_identical_error(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    app.post("/api/customers", &json!({ "customerRef": "c-1" })).await.expect(201);
    let k = key();
    let body = json!({ "customerRef": "c-1" });
    let first = send(&app, Method::POST, "/api/customers", &k, &body).await;
    assert_eq!(first.status, 409, "{}", first.text);
    assert_eq!(first.json()["existingStatus"], "ACTIVE");

    // The customer changes since; running the request again would say INACTIVE with a new
    // timestamp. The key replays the outcome it had.
    app.clock.advance_millis(2_000);
    app.patch("/api/customers/c-1", &json!({ "status": "INACTIVE" })).await.expect(200);
    let again = send(&app, Method::POST, "/api/customers", &k, &body).await;
    again.assert_replay_of(&first);
    assert_eq!(again.json()["existingStatus"], "ACTIVE");

    // A new key asks again and gets today's answer.
    let fresh = app.post("/api/customers", &body).await;
    fresh.expect(409);
    assert_eq!(fresh.body["existingStatus"], "INACTIVE");
    assert_eq!(count(&app, "customers", "").await, 1);
}

async fn a_refused_status_change_of_a_missing_customer_is_replayed(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let k = key();
    let body = json!({ "status": "INACTIVE" });
    let first = send(&app, Method::PATCH, "/api/customers/c-1", &k, &body).await;
    assert_eq!(first.status, 404, "{}", first.text);

    // The customer appears afterwards; the key still answers what it answered.
    app.clock.advance_millis(2_000);
    app.post("/api/customers", &json!({ "customerRef": "c-1" })).await.expect(201);
    let again = send(&app, Method::PATCH, "/api/customers/c-1", &k, &body).await;
    again.assert_replay_of(&first);
    assert_eq!(status_of(&app, "c-1").await, "ACTIVE", "the replay changed nothing");
    assert_eq!(count(&app, "events", "").await, 0);

    // The failed attempt is in the audit log once, as a FAILURE.
    assert_eq!(count(&app, "audit_records", "action = 'customer.update_status' AND outcome = 'FAILURE'").await, 1);
    assert_eq!(count(&app, "audit_records", "action = 'customer.update_status' AND outcome = 'SUCCESS'").await, 0);
}

/// A 400 found after admission (the account does not exist, the name is taken) binds nothing to
/// the key: the corrected request under the same key runs, where a bound refusal would be 422.
async fn an_invalid_write_frees_its_key_for_the_corrected_request(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    crate::fixtures::active_contract(&app, "USD").await;
    crate::fixtures::customer(&app, "c-1").await;
    crate::fixtures::active_account(&app, "a", "c-1", "USD").await;
    let k = key();
    let wrong = json!({ "txType": "MINT", "assetId": "USD", "accountRef": "nobody", "amount": "1" });
    let first = send(&app, Method::POST, "/api/transactions", &k, &wrong).await;
    assert_eq!(first.status, 400, "{}", first.text);
    let again = send(&app, Method::POST, "/api/transactions", &k, &wrong).await;
    assert_eq!(again.status, 400, "{}", again.text);
    assert!(!again.replayed(), "a refusal that binds nothing is answered anew, not replayed");
    let corrected = json!({ "txType": "MINT", "assetId": "USD", "accountRef": "a", "amount": "1" });
    let accepted = send(&app, Method::POST, "/api/transactions", &k, &corrected).await;
    assert_eq!(accepted.status, 202, "{}", accepted.text);
    send(&app, Method::POST, "/api/transactions", &k, &corrected).await.assert_replay_of(&accepted);
    assert_eq!(count(&app, "operations", "").await, 1);
    // An invalid request leaves no audit record, as one refused before admission does: the log
    // holds the accepted submission alone.
    let refusals = "action = 'transaction.submit' AND outcome = 'FAILURE'";
    assert_eq!(count(&app, "audit_records", refusals).await, 0);
    assert_eq!(count(&app, "audit_records", "action = 'transaction.submit'").await, 1);

    // The same holds where the refusal needs the store: a script name already taken.
    let script = |name: &str| json!({ "name": name, "source": "1" });
    assert_eq!(send(&app, Method::POST, "/api/scripts", &key(), &script("taken")).await.status, 201);
    let k = key();
    let taken = send(&app, Method::POST, "/api/scripts", &k, &script("taken")).await;
    assert_eq!(taken.status, 400, "{}", taken.text);
    let renamed = send(&app, Method::POST, "/api/scripts", &k, &script("free")).await;
    assert_eq!(renamed.status, 201, "{}", renamed.text);
}

async fn a_key_reused_with_a_different_payload_is_422_and_creates_nothing(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let k = key();
    let original = send(&app, Method::POST, "/api/customers", &k, &json!({ "customerRef": "c-1" })).await;
    assert_eq!(original.status, 201);

    let other = send(&app, Method::POST, "/api/customers", &k, &json!({ "customerRef": "c-2" })).await;
    assert_eq!(other.status, 422, "{}", other.text);
    let body = other.json();
    assert_eq!(body["status"], 422);
    assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()));
    assert!(!other.replayed());
    assert_eq!(app.get("/api/customers/c-2").await.status, 404);
    assert_eq!(count(&app, "customers", "").await, 1);
    assert_eq!(count(&app, "audit_records", "").await, 1, "the refused reuse is not a write");

    // The key still belongs to its first request.
    let again = send(&app, Method::POST, "/api/customers", &k, &json!({ "customerRef": "c-1" })).await;
    assert_eq!(again.status, 201);
    assert_eq!(again.text, original.text);

    // A refused outcome is protected the same way.
    let refused_key = key();
    let refused = send(&app, Method::POST, "/api/customers", &refused_key, &json!({ "customerRef": "c-1" })).await;
    assert_eq!(refused.status, 409);
    let switched = send(&app, Method::POST, "/api/customers", &refused_key, &json!({ "customerRef": "c-3" })).await;
    assert_eq!(switched.status, 422, "{}", switched.text);
    assert_eq!(count(&app, "customers", "").await, 1);
}

// ---------------------------------------------------------------------------------------------
// Scope
// ---------------------------------------------------------------------------------------------

async fn keys_are_scoped_per_organisation(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let other = app.new_tenant();
    let k = key();
    let mine = send(&app, Method::POST, "/api/customers", &k, &json!({ "customerRef": "c-1" })).await;
    assert_eq!(mine.status, 201);

    // Same key, same payload, other organisation: its own new request, not a replay of ours.
    let theirs =
        send_as(&app, &other, Method::POST, "/api/customers", &k, &json!({ "customerRef": "c-1" }).to_string()).await;
    assert_eq!(theirs.status, 201, "{}", theirs.text);
    assert!(!theirs.replayed());
    // Same key, different payload, yet another organisation: not a reuse.
    let third = app.new_tenant();
    let different =
        send_as(&app, &third, Method::POST, "/api/customers", &k, &json!({ "customerRef": "c-9" }).to_string()).await;
    assert_eq!(different.status, 201, "{}", different.text);
    assert_eq!(count(&app, "customers", "").await, 3);
    assert_eq!(count(&app, "idempotency_records", "").await, 3);
}

async fn keys_are_scoped_per_operation(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let k = key();
    let created = send(&app, Method::POST, "/api/customers", &k, &json!({ "customerRef": "c-1" })).await;
    assert_eq!(created.status, 201);
    let patched = send(&app, Method::PATCH, "/api/customers/c-1", &k, &json!({ "status": "INACTIVE" })).await;
    assert_eq!(patched.status, 200, "the POST's key is free for a PATCH: {}", patched.text);
    assert!(!patched.replayed());
    assert_eq!(status_of(&app, "c-1").await, "INACTIVE");

    // And the other way round: a key first used on a PATCH is free for a POST.
    let k2 = key();
    let patch = send(&app, Method::PATCH, "/api/customers/c-1", &k2, &json!({ "status": "ACTIVE" })).await;
    assert_eq!(patch.status, 200);
    let post = send(&app, Method::POST, "/api/customers", &k2, &json!({ "customerRef": "c-2" })).await;
    assert_eq!(post.status, 201, "{}", post.text);
    assert_eq!(count(&app, "customers", "").await, 2);
}

// ---------------------------------------------------------------------------------------------
// In flight and concurrency
// ---------------------------------------------------------------------------------------------

async fn a_key_in_flight_is_409_with_retry_after_until_its_lease_expires_then_taken_over(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let k = key();
    let body = json!({ "customerRef": "c-1" });
    app.seed_claim("customer.create", &k, "POST", "/api/customers", &body).await;

    let busy = send(&app, Method::POST, "/api/customers", &k, &body).await;
    assert_eq!(busy.status, 409, "{}", busy.text);
    let seconds: u64 = busy.header("retry-after").expect("Retry-After").parse().expect("whole seconds");
    assert!(seconds >= 1, "Retry-After is at least one second");
    assert_eq!(busy.json()["code"], "IDEMPOTENCY_CONFLICT");
    assert_eq!(busy.json()["status"], 409);
    assert!(!busy.replayed());
    assert_eq!(count(&app, "customers", "").await, 0);

    // The in-flight 409 is not the key's outcome: still busy just before the lease ends.
    app.clock.advance_millis(29_000);
    let still = send(&app, Method::POST, "/api/customers", &k, &body).await;
    assert_eq!(still.status, 409, "{}", still.text);
    assert!(still.header("retry-after").is_some());
    assert_eq!(count(&app, "customers", "").await, 0);

    // The holder never finished: past its lease the same request takes the key over.
    app.clock.advance_millis(1_001);
    let taken = send(&app, Method::POST, "/api/customers", &k, &body).await;
    assert_eq!(taken.status, 201, "{}", taken.text);
    assert!(!taken.replayed());
    assert_eq!(count(&app, "customers", "").await, 1);
    let replay = send(&app, Method::POST, "/api/customers", &k, &body).await;
    replay.assert_replay_of(&taken);
}

/// On PostgreSQL a request whose key another request still runs under is answered at once with
/// the 409 of a key in flight (it does not wait for the first to end); once the first ends, the
/// same request replays its answer. (SQLite runs one write at a time: the second request is
/// admitted only after the first ended, and replays it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_key_whose_request_is_still_running_is_409_at_once() {
    let app = TestApp::spawn(Backend::Postgres).await;
    for (method, path, body) in [
        (Method::POST, "/api/customers", json!({ "customerRef": "c-1" })),
        (Method::PATCH, "/api/customers/c-1", json!({ "status": "INACTIVE" })),
    ] {
        let k = key();
        let held = app.db.hold_table("customers").await;
        let first = {
            let (app, k, body, method) = (&app, k.clone(), body.clone(), method.clone());
            async move { send(app, method, path, &k, &body).await }
        };
        let second = async {
            // The first request has claimed its key and waits on the table.
            until_waiting("the first request at the table", 1, async || app.db.waiting_on("customers").await).await;
            // At once: not after the first request (whose table is held until the answer).
            let busy =
                tokio::time::timeout(std::time::Duration::from_secs(5), send(&app, method.clone(), path, &k, &body))
                    .await;
            held.release().await;
            busy.expect("the duplicate is answered while the first request still runs")
        };
        let (first, busy) = futures::future::join(first, second).await;
        assert_eq!(busy.status, 409, "{path}: {}", busy.text);
        assert_eq!(busy.json()["code"], "IDEMPOTENCY_CONFLICT", "{}", busy.text);
        let seconds: u64 = busy.header("retry-after").expect("Retry-After").parse().expect("whole seconds");
        assert!(seconds >= 1, "{seconds}");
        assert!(first.status == 200 || first.status == 201, "{path}: {}", first.text);
        assert!(!first.replayed());
        send(&app, method, path, &k, &body).await.assert_replay_of(&first);
    }
    assert_eq!(count(&app, "customers", "status = 'INACTIVE'").await, 1);
}

async fn concurrent_identical_requests_with_one_key_create_one_customer(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let k = key();
    let body = json!({ "customerRef": "c-race", "displayName": "Race Ltd" });
    let replies =
        futures::future::join_all((0..50).map(|_| send(&app, Method::POST, "/api/customers", &k, &body))).await;

    let originals: Vec<&Raw> = replies.iter().filter(|r| r.status == 201 && !r.replayed()).collect();
    assert_eq!(originals.len(), 1, "exactly one request ran the registration");
    let original = originals[0];
    for reply in &replies {
        match reply.status {
            201 => assert_eq!(reply.text, original.text, "every 201 is the one registration"),
            409 => {
                let seconds: u64 =
                    reply.header("retry-after").expect("Retry-After on 409").parse().expect("whole seconds");
                assert!(seconds >= 1);
                assert_eq!(reply.json()["code"], "IDEMPOTENCY_CONFLICT");
            }
            other => panic!("unexpected {other}: {}", reply.text),
        }
    }
    assert_eq!(count(&app, "customers", "").await, 1);
    assert_eq!(
        count(&app, "audit_records", "action = 'customer.create' AND outcome = 'SUCCESS' AND resource_id = 'c-race'")
            .await,
        1
    );
    assert_eq!(count(&app, "audit_records", "").await, 1, "no attempt left a failure record");

    // Afterwards the key replays for everyone.
    let after = send(&app, Method::POST, "/api/customers", &k, &body).await;
    after.assert_replay_of(original);
}

/// Identical submissions sent at once, round after round: one operation each round, and every
/// answer is its 202 (a replay answers it as it is now) or the 409 of a key in flight. None may
/// answer about an operation that a read cannot see yet (the replay waits for the original's
/// commit, which SQLite's group commit shares among writes).
async fn concurrent_identical_submissions_answer_the_one_operation(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    crate::fixtures::active_contract(&app, "USD").await;
    crate::fixtures::customer(&app, "c-1").await;
    crate::fixtures::active_account(&app, "a", "c-1", "USD").await;
    let body = json!({ "txType": "MINT", "assetId": "USD", "accountRef": "a", "amount": "1" });
    const ROUNDS: usize = 10;
    for round in 0..ROUNDS {
        let k = key();
        let replies =
            futures::future::join_all((0..10).map(|_| send(&app, Method::POST, "/api/transactions", &k, &body))).await;
        let mut ids: Vec<String> = Vec::new();
        for reply in &replies {
            match reply.status {
                202 => ids.push(reply.json()["transactionId"].as_str().expect("transactionId").to_owned()),
                409 => assert_eq!(reply.json()["code"], "IDEMPOTENCY_CONFLICT", "round {round}: {}", reply.text),
                other => panic!("round {round}: unexpected {other}: {}", reply.text),
            }
        }
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 1, "round {round}: one operation answered: {ids:?}");
    }
    assert_eq!(count(&app, "operations", "").await, ROUNDS as i64);
}

async fn concurrent_take_overs_of_an_expired_claim_run_the_request_once(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let k = key();
    let body = json!({ "customerRef": "c-1" });
    app.seed_claim("customer.create", &k, "POST", "/api/customers", &body).await;
    app.clock.advance_millis(31_000);

    let replies =
        futures::future::join_all((0..20).map(|_| send(&app, Method::POST, "/api/customers", &k, &body))).await;
    let originals: Vec<&Raw> = replies.iter().filter(|r| r.status == 201 && !r.replayed()).collect();
    assert_eq!(originals.len(), 1, "exactly one request took the key over and ran");
    for reply in &replies {
        match reply.status {
            201 => assert_eq!(reply.text, originals[0].text),
            409 => {
                assert!(reply.header("retry-after").is_some(), "{}", reply.text);
                assert_eq!(reply.json()["code"], "IDEMPOTENCY_CONFLICT");
            }
            other => panic!("unexpected {other}: {}", reply.text),
        }
    }
    assert_eq!(count(&app, "customers", "").await, 1);
    assert_eq!(count(&app, "audit_records", "").await, 1);
    assert_eq!(count(&app, "idempotency_records", "state = 'COMPLETED'").await, 1);
}

// ---------------------------------------------------------------------------------------------
// Failures
// ---------------------------------------------------------------------------------------------

async fn a_status_change_that_fails_midway_leaves_nothing_and_the_key_can_be_retried(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    app.post("/api/customers", &json!({ "customerRef": "c-1" })).await.expect(201);
    let before = app.get("/api/customers/c-1").await;
    let events = count(&app, "events", "").await;
    let jobs = count(&app, "jobs", "").await;
    let audit = count(&app, "audit_records", "").await;
    let keys = count(&app, "idempotency_records", "").await;
    let k = key();
    let body = json!({ "status": "INACTIVE" });

    // Each part of the write in turn fails after the status change was made in the transaction:
    // the outbox event, its dispatch job, the audit record.
    for table in ["events", "jobs", "audit_records"] {
        app.db.fail_inserts_into(table).await;
        let failed = send(&app, Method::PATCH, "/api/customers/c-1", &k, &body).await;
        assert_eq!(failed.status, 500, "inserts into {table} fail: {}", failed.text);
        assert_eq!(failed.json()["message"], "System error occurred");
        assert_eq!(failed.json()["status"], 500);
        assert!(!failed.replayed());
        // Healed before looking: healing writes nothing, so what is found is what the failed
        // request left.
        app.db.heal_inserts_into(table).await;

        let after = app.get("/api/customers/c-1").await;
        assert_eq!(after.body, before.body, "the customer is unchanged ({table})");
        assert_eq!(count(&app, "events", "").await, events, "no event ({table})");
        assert_eq!(count(&app, "jobs", "").await, jobs, "no job ({table})");
        assert_eq!(count(&app, "audit_records", "").await, audit, "no audit record ({table})");
        assert_eq!(count(&app, "idempotency_records", "").await, keys);
        assert_eq!(count(&app, "idempotency_records", &format!("idempotency_key = '{k}'")).await, 0);
    }

    let retried = send(&app, Method::PATCH, "/api/customers/c-1", &k, &body).await;
    assert_eq!(retried.status, 200, "{}", retried.text);
    assert!(!retried.replayed(), "the 500 was not stored as the key's outcome");
    assert_eq!(retried.json()["status"], "INACTIVE");
    assert_eq!(status_of(&app, "c-1").await, "INACTIVE");
    assert_eq!(count(&app, "events", "event_type = 'customer.status_changed'").await, 1);
    assert_eq!(count(&app, "jobs", "").await, jobs + 1);
    assert_eq!(count(&app, "audit_records", "action = 'customer.update_status' AND outcome = 'SUCCESS'").await, 1);
    let replay = send(&app, Method::PATCH, "/api/customers/c-1", &k, &body).await;
    replay.assert_replay_of(&retried);
    assert_eq!(count(&app, "events", "event_type = 'customer.status_changed'").await, 1, "applied once");
}

async fn a_registration_that_fails_midway_leaves_nothing_and_the_key_can_be_retried(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let k = key();
    let body = json!({ "customerRef": "c-1" });
    // The claim of the key itself, then the audit record of the registration.
    for table in ["idempotency_records", "audit_records"] {
        app.db.fail_inserts_into(table).await;
        let failed = send(&app, Method::POST, "/api/customers", &k, &body).await;
        assert_eq!(failed.status, 500, "inserts into {table} fail: {}", failed.text);
        assert_eq!(failed.json()["message"], "System error occurred");
        app.db.heal_inserts_into(table).await;
        assert_eq!(count(&app, "customers", "").await, 0);
        assert_eq!(count(&app, "audit_records", "").await, 0);
        assert_eq!(count(&app, "idempotency_records", "").await, 0);
        assert_eq!(app.get("/api/customers/c-1").await.status, 404);
    }

    let retried = send(&app, Method::POST, "/api/customers", &k, &body).await;
    assert_eq!(retried.status, 201, "{}", retried.text);
    assert_eq!(count(&app, "customers", "").await, 1);
    assert_eq!(count(&app, "audit_records", "outcome = 'SUCCESS'").await, 1);
}

async fn a_refusal_that_cannot_be_recorded_releases_the_key(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    app.post("/api/customers", &json!({ "customerRef": "c-1" })).await.expect(201);
    let audit = count(&app, "audit_records", "").await;

    // The caller's mistake (an existing customer; a missing one) is found, but storing the
    // outcome with its audit record fails: nothing is recorded and the key stays free.
    app.db.fail_inserts_into("audit_records").await;
    let k = key();
    let body = json!({ "customerRef": "c-1" });
    let failed = send(&app, Method::POST, "/api/customers", &k, &body).await;
    assert_eq!(failed.status, 500, "{}", failed.text);
    assert_eq!(failed.json()["message"], "System error occurred");
    let pk = key();
    let patch = json!({ "status": "INACTIVE" });
    let failed_patch = send(&app, Method::PATCH, "/api/customers/c-404", &pk, &patch).await;
    assert_eq!(failed_patch.status, 500, "{}", failed_patch.text);
    assert_eq!(count(&app, "audit_records", "").await, audit);
    assert_eq!(count(&app, "idempotency_records", &format!("idempotency_key IN ('{k}', '{pk}')")).await, 0);

    // Retried at once with the same key (well within the 30 s lease), the request runs again.
    app.db.heal_inserts_into("audit_records").await;
    let retried = send(&app, Method::POST, "/api/customers", &k, &body).await;
    assert_eq!(retried.status, 409, "{}", retried.text);
    assert_eq!(retried.json()["existingStatus"], "ACTIVE", "the real outcome, not an in-flight conflict");
    assert!(retried.header("retry-after").is_none());
    let retried_patch = send(&app, Method::PATCH, "/api/customers/c-404", &pk, &patch).await;
    assert_eq!(retried_patch.status, 404, "{}", retried_patch.text);
    let replay = send(&app, Method::POST, "/api/customers", &k, &body).await;
    replay.assert_replay_of(&retried);
}

// ---------------------------------------------------------------------------------------------
// Retention
// ---------------------------------------------------------------------------------------------

async fn a_completed_key_is_kept_for_24_hours(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let k = key();
    let body = json!({ "customerRef": "c-1" });
    let first = send(&app, Method::POST, "/api/customers", &k, &body).await;
    assert_eq!(first.status, 201);
    let condition = format!("idempotency_key = '{k}'");

    app.clock.advance_millis(23 * HOUR_MS);
    app.app.jobs.schedule_maintenance().await.expect("schedule maintenance");
    let report = app.drain_jobs().await;
    assert!(report.completed >= 1, "the maintenance job ran: {report:?}");
    assert_eq!(count(&app, "idempotency_records", &condition).await, 1, "kept at 23 hours");
    let tenant = fresh_token(&app);
    let replay = send_as(&app, &tenant, Method::POST, "/api/customers", &k, &body.to_string()).await;
    replay.assert_replay_of(&first);

    // Past 24 hours the next maintenance run removes it (the first run has finished, so the
    // deduplicated job can be scheduled again).
    app.clock.advance_millis(HOUR_MS + 1_000);
    app.app.jobs.schedule_maintenance().await.expect("schedule maintenance again");
    let report = app.drain_jobs().await;
    assert!(report.completed >= 1, "the maintenance job ran again: {report:?}");
    assert_eq!(count(&app, "idempotency_records", &condition).await, 0, "pruned after 24 hours");

    // The key is new again: the request runs anew (and meets the customer it registered).
    let tenant = fresh_token(&app);
    let anew = send_as(&app, &tenant, Method::POST, "/api/customers", &k, &body.to_string()).await;
    assert_eq!(anew.status, 409, "{}", anew.text);
    assert!(!anew.replayed());
    assert_eq!(anew.json()["existingStatus"], "ACTIVE");
}

async fn a_key_completed_after_a_late_take_over_is_kept_for_24_hours_from_then(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let k = key();
    let body = json!({ "customerRef": "c-1" });
    // A holder claimed the key and crashed; the client comes back 23 hours later.
    app.seed_claim("customer.create", &k, "POST", "/api/customers", &body).await;
    app.clock.advance_millis(23 * HOUR_MS);
    let tenant = fresh_token(&app);
    let taken = send_as(&app, &tenant, Method::POST, "/api/customers", &k, &body.to_string()).await;
    assert_eq!(taken.status, 201, "{}", taken.text);

    // Two hours after that completion (25 hours after the first claim) it still replays.
    app.clock.advance_millis(2 * HOUR_MS);
    app.app.jobs.schedule_maintenance().await.expect("schedule maintenance");
    app.drain_jobs().await;
    let condition = format!("idempotency_key = '{k}'");
    assert_eq!(count(&app, "idempotency_records", &condition).await, 1, "completed two hours ago");
    let tenant = fresh_token(&app);
    let replay = send_as(&app, &tenant, Method::POST, "/api/customers", &k, &body.to_string()).await;
    replay.assert_replay_of(&taken);

    // 24 hours after the completion it goes.
    app.clock.advance_millis(22 * HOUR_MS + 1_000);
    app.app.jobs.schedule_maintenance().await.expect("schedule maintenance");
    app.drain_jobs().await;
    assert_eq!(count(&app, "idempotency_records", &condition).await, 0);
}

async fn an_abandoned_in_flight_claim_is_pruned_after_the_retention(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let body = json!({ "customerRef": "abandoned-1" });
    app.seed_claim("customer.create", "abandoned", "POST", "/api/customers", &body).await;
    app.app.jobs.schedule_maintenance().await.expect("schedule");
    app.drain_jobs().await;
    assert_eq!(count(&app, "idempotency_records", "idempotency_key = 'abandoned'").await, 1, "a live claim is kept");
    app.clock.advance_millis(24 * 3_600_000 + 60_000);
    app.app.jobs.schedule_maintenance().await.expect("schedule");
    app.drain_jobs().await;
    assert_eq!(count(&app, "idempotency_records", "idempotency_key = 'abandoned'").await, 0);
}

// ---------------------------------------------------------------------------------------------
// The key itself
// ---------------------------------------------------------------------------------------------

/// A key is printable ASCII, 0x20 to 0x7E: a tab (which HTTP lets through a header) or a byte
/// outside ASCII is a 400 that leaves nothing behind, while a space inside a key is a character
/// like any other.
async fn a_key_outside_printable_ascii_is_400_and_a_space_inside_is_allowed(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let body = json!({ "customerRef": "c-1" });
    let tab = send(&app, Method::POST, "/api/customers", "a\tb", &body).await;
    assert_eq!(tab.status, 400, "{}", tab.text);
    assert!(tab.json()["message"].as_str().is_some_and(|m| m.contains("printable ASCII")), "{}", tab.text);
    let non_ascii = app
        .request(Method::POST, "/api/customers")
        .header("Idempotency-Key", reqwest::header::HeaderValue::from_bytes("clé".as_bytes()).expect("obs-text"))
        .json(&body)
        .send()
        .await
        .expect("send");
    assert_eq!(non_ascii.status().as_u16(), 400);
    // The prefix of the automation runs' own keys is theirs alone.
    let reserved = send(&app, Method::POST, "/api/customers", "automation-run:0190:1", &body).await;
    assert_eq!(reserved.status, 400, "{}", reserved.text);
    assert!(reserved.json()["message"].as_str().is_some_and(|m| m.contains("reserved")), "{}", reserved.text);
    assert_eq!(count(&app, "customers", "").await, 0);
    assert_eq!(count(&app, "idempotency_records", "").await, 0);

    let spaced = send(&app, Method::POST, "/api/customers", "order 42 / retry ~1", &body).await;
    assert_eq!(spaced.status, 201, "{}", spaced.text);
    send(&app, Method::POST, "/api/customers", "order 42 / retry ~1", &body).await.assert_replay_of(&spaced);
}

backends!(
    a_key_outside_printable_ascii_is_400_and_a_space_inside_is_allowed,
    same_key_and_payload_replays_the_original_response,
    a_replayed_status_change_is_not_applied_again,
    same_payload_with_other_key_order_and_whitespace_is_the_same_request,
    a_refused_registration_is_replayed_with_the_identical_error,
    a_refused_status_change_of_a_missing_customer_is_replayed,
    an_invalid_write_frees_its_key_for_the_corrected_request,
    a_key_reused_with_a_different_payload_is_422_and_creates_nothing,
    keys_are_scoped_per_organisation,
    keys_are_scoped_per_operation,
    a_key_in_flight_is_409_with_retry_after_until_its_lease_expires_then_taken_over,
    concurrent_identical_requests_with_one_key_create_one_customer,
    concurrent_identical_submissions_answer_the_one_operation,
    concurrent_take_overs_of_an_expired_claim_run_the_request_once,
    a_status_change_that_fails_midway_leaves_nothing_and_the_key_can_be_retried,
    a_registration_that_fails_midway_leaves_nothing_and_the_key_can_be_retried,
    a_refusal_that_cannot_be_recorded_releases_the_key,
    a_completed_key_is_kept_for_24_hours,
    a_key_completed_after_a_late_take_over_is_kept_for_24_hours_from_then,
    an_abandoned_in_flight_claim_is_pruned_after_the_retention,
);
