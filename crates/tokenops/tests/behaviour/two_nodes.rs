//! Nodes on one PostgreSQL database, the real binary: an Idempotency-Key answered by one node
//! replays on the other, the same key sent to both at once makes one operation, and a key in
//! flight is 409 on every node. On the embedded ledger the nodes split the roles (one node runs
//! the workers and produces blocks, API nodes read the chain), and a second worker node is
//! refused at start, since the chain's mempool and nonces live in the producing process. (Two
//! full nodes under SIGKILLs, on the EVM ledger: `transactions_crash`.)

use crate::BINARY;
use crate::crash_load::{Client, crash_load_environment, open_accounts, wait_until};
use reqwest::Method;
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tokenops_app::clock::{Clock, SystemClock};
use tokenops_testkit::{Backend, ServiceProcess, Testbed};

/// One submission under `key` to the node at `base`: status, whether it was a replay, body.
async fn post(client: &Client, base: &str, path: &str, key: &str, body: &Value) -> (u16, bool, Value) {
    let response = client
        .http
        .post(format!("{base}{path}"))
        .header("API-Version", "1.0.0")
        .header("Idempotency-Key", key)
        .bearer_auth(&client.token)
        .json(body)
        .send()
        .await
        .expect("the node answers");
    let status = response.status().as_u16();
    let replayed = response.headers().contains_key("idempotent-replayed");
    (status, replayed, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_share_idempotency_and_one_produces_the_embedded_ledger() {
    let bed = Testbed::start(Backend::Postgres).await;
    let (db, tenant) = (&bed.db, &bed.tenant);
    let node_env = |role: &str| {
        let mut env = bed.environment(role);
        crash_load_environment(&mut env);
        env.insert("TOKENOPS_ROLE".to_owned(), role.to_owned());
        env
    };
    // Node A serves the API only; node B serves it too and runs the workers.
    let a = ServiceProcess::start(BINARY, &node_env("api")).await;
    let b = ServiceProcess::start(BINARY, &node_env("all")).await;
    let client = Client::new(&a.base_url, &tenant.token, Duration::from_millis(50), 0);
    open_accounts(&client, db, 2).await;

    // Answered by A, replayed by B: the same operation, marked as a replay.
    let mint = json!({ "txType": "MINT", "assetId": "USD", "accountRef": "acc-0", "amount": "12.34" });
    let (status, replayed, first) = post(&client, &a.base_url, "/api/transactions", "mint-1", &mint).await;
    assert_eq!((status, replayed), (202, false), "{first}");
    let (status, replayed, again) = post(&client, &b.base_url, "/api/transactions", "mint-1", &mint).await;
    assert_eq!((status, replayed), (202, true), "{again}");
    assert_eq!(again["transactionId"], first["transactionId"]);
    // Another body under the key, on B: refused as on A.
    let other = json!({ "txType": "MINT", "assetId": "USD", "accountRef": "acc-1", "amount": "1.00" });
    let (status, _, refused) = post(&client, &b.base_url, "/api/transactions", "mint-1", &other).await;
    assert_eq!(status, 422, "{refused}");

    // The same key to both nodes at once: one operation. The node that finds the key in flight
    // on the other answers 409 IDEMPOTENCY_CONFLICT (or, if the other committed meanwhile, the
    // replay); sent again, it answers the same operation.
    let (one, two) = tokio::join!(
        post(&client, &a.base_url, "/api/transactions", "mint-2", &mint),
        post(&client, &b.base_url, "/api/transactions", "mint-2", &mint),
    );
    let mut ids = Vec::new();
    for ((status, _, body), node) in [(one, &a), (two, &b)] {
        let body = match status {
            202 => body,
            409 => {
                assert_eq!(body["code"], "IDEMPOTENCY_CONFLICT", "{body}");
                let deadline = Instant::now() + Duration::from_secs(10);
                loop {
                    let (status, replayed, again) =
                        post(&client, &node.base_url, "/api/transactions", "mint-2", &mint).await;
                    if status == 409 && Instant::now() < deadline {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                    assert_eq!((status, replayed), (202, true), "{again}");
                    break again;
                }
            }
            _ => panic!("{status}: {body}"),
        };
        ids.push(body["transactionId"].clone());
    }
    assert_eq!(ids[0], ids[1], "both nodes answer the one operation");
    assert_eq!(db.count("operations", "idempotency_key = 'mint-2'").await, 1);

    // A key in flight (a claim another node holds, its lease not run out) is 409 on both nodes.
    let customer = json!({ "customerRef": "in-flight" });
    let fingerprint = tokenops_api::write::fingerprint("POST", "/api/customers", None, &customer);
    let now = SystemClock.now();
    db.execute(&format!(
        "INSERT INTO idempotency_records (tenant_id, operation, idempotency_key, request_hash, state, lease_token, \
         lease_until, created_at) VALUES ('{}', 'customer.create', 'held', '{fingerprint}', 'IN_FLIGHT', '{}', {}, {})",
        tenant.id,
        uuid::Uuid::now_v7(),
        now.plus_millis(60_000).as_micros(),
        now.as_micros()
    ))
    .await;
    for node in [&a, &b] {
        let (status, _, body) = post(&client, &node.base_url, "/api/customers", "held", &customer).await;
        assert_eq!(status, 409, "{}: {body}", node.base_url);
    }

    // The workers' node produced the blocks; the API node reads them: the operations settle,
    // and A shows the balance and a ready ledger.
    wait_until(Duration::from_secs(30), Duration::from_millis(50), "both mints CONFIRMED", || async {
        db.count("operations", "state = 'CONFIRMED'").await == 2
    })
    .await;
    let (status, balances) = client.call(Method::GET, "/api/accounts/acc-0/balances", None).await;
    assert_eq!((status, balances["total"].as_str()), (200, Some("24.68")), "{balances}");
    assert!(balances["blockNumber"].as_u64().is_some_and(|n| n > 0), "{balances}");
    let ready = client.http.get(format!("{}/readyz", a.base_url)).send().await.expect("readyz");
    assert_eq!(ready.status().as_u16(), 200);

    // A second node with workers on the embedded ledger would produce blocks beside B's: refused.
    let log = db.dir().join("second-worker.log");
    let mut second = ServiceProcess::spawn(BINARY, &node_env("worker"), Some(&log));
    let exited = second.exited_within(Duration::from_secs(30)).await.expect("the second worker node stops");
    assert!(!exited.success(), "it stops with an error");
    let said = std::fs::read_to_string(&log).expect("its log");
    assert!(said.contains("TOKENOPS_LEDGER=evm"), "it says what to run instead: {said}");
    // B carries on.
    let (status, _, third) = post(&client, &a.base_url, "/api/transactions", "mint-3", &mint).await;
    assert_eq!(status, 202, "{third}");
    wait_until(Duration::from_secs(30), Duration::from_millis(50), "the third mint CONFIRMED", || async {
        db.count("operations", "state = 'CONFIRMED'").await == 3
    })
    .await;

    for node in [a, b] {
        assert!(node.terminate().await.success());
    }
    db.drop_schema();
}
