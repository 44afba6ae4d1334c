//! The sealed audit chain after SIGKILLs: the real binary seals every 50 ms under a load of
//! audited writes and is killed several times just after a block lands (sealing is going on),
//! then restarted. Once every record is sealed, `tokenops audit verify` passes on the store,
//! every record is sealed exactly once, block numbers and sequence numbers run without a gap
//! or a repeat, and the signed head verifies against the published keys.

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use tokenops_testkit::{API_VERSION, Backend, ServiceProcess, TestDb, Testbed, backends};
use uuid::Uuid;

use crate::BINARY;
use crate::crash_load::wait_until;

/// How many times the service is killed.
const KILLS: usize = 6;
/// Concurrent writers.
const WRITERS: usize = 4;
const POLL: Duration = Duration::from_millis(20);

backends!(the_chain_verifies_after_sigkills_while_sealing);

fn environment(bed: &Testbed) -> BTreeMap<String, String> {
    let mut env = bed.environment("all");
    env.insert("TOKENOPS_AUDIT_SEAL_MS".to_owned(), "50".to_owned());
    env.insert("TOKENOPS_JOB_LEASE_MS".to_owned(), "1000".to_owned());
    env.insert("TOKENOPS_WORKER_POLL_MS".to_owned(), "50".to_owned());
    env.insert("TOKENOPS_IDEMPOTENCY_LEASE_MS".to_owned(), "1000".to_owned());
    env
}

/// The organisation's blocks in the store, in order: (block number, first seq, record count).
async fn blocks(db: &TestDb, tenant: &str) -> Vec<(i64, i64, i64)> {
    db.strings(&format!(
        "SELECT CAST(block_number AS TEXT) || ' ' || CAST(first_seq AS TEXT) || ' ' || CAST(record_count AS TEXT)
         FROM audit_blocks WHERE CAST(chain_id AS TEXT) = '{tenant}' ORDER BY block_number"
    ))
    .await
    .iter()
    .map(|line| {
        let numbers: Vec<i64> = line.split(' ').map(|n| n.parse().expect("a number")).collect();
        (numbers[0], numbers[1], numbers[2])
    })
    .collect()
}

/// Writes customers through whichever service is up, until told to stop; counts the 201s.
fn writers(base_url: Arc<std::sync::RwLock<String>>, token: String, stop: Arc<AtomicBool>) -> Arc<AtomicUsize> {
    let created = Arc::new(AtomicUsize::new(0));
    for _ in 0..WRITERS {
        let (base_url, token, stop, created) = (base_url.clone(), token.clone(), stop.clone(), created.clone());
        tokio::spawn(async move {
            let client = reqwest::Client::builder().timeout(Duration::from_secs(2)).build().expect("HTTP client");
            while !stop.load(Ordering::Relaxed) {
                let url = format!("{}/api/customers", base_url.read().expect("url").clone());
                let reference = format!("c-{}", Uuid::now_v7().simple());
                let sent = client
                    .post(url)
                    .header("API-Version", API_VERSION)
                    .header("Idempotency-Key", Uuid::now_v7().to_string())
                    .bearer_auth(&token)
                    .json(&json!({ "customerRef": reference }))
                    .send()
                    .await;
                match sent {
                    Ok(reply) if reply.status().as_u16() == 201 => {
                        created.fetch_add(1, Ordering::Relaxed);
                    }
                    // The service is down or restarting: try again shortly.
                    _ => tokio::time::sleep(POLL).await,
                }
            }
        });
    }
    created
}

/// Runs `tokenops audit verify` on the store, with a deadline: a stall names itself instead of
/// running out the suite's timeout.
async fn audit_verify(db: &TestDb, tenant: &str) -> (i32, String) {
    let mut command = tokio::process::Command::new(BINARY);
    command
        .args(["audit", "verify", "--tenant", tenant, "--database-url", &db.url()])
        .env_clear()
        .env("TOKENOPS_DATA_DIR", db.dir())
        .env("TOKENOPS_LOG", "error");
    if let Some(schema) = db.schema() {
        command.args(["--database-schema", schema]);
    }
    command.kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("tokenops audit verify answers within 60 s")
        .expect("run tokenops audit verify");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.code().unwrap_or(-1), text)
}

async fn the_chain_verifies_after_sigkills_while_sealing(backend: Backend) {
    let bed = Testbed::start(backend).await;
    let (db, tenant) = (&bed.db, &bed.tenant);
    let tenant_id = tenant.id.as_uuid().to_string();
    let env = environment(&bed);

    let mut service = ServiceProcess::start(BINARY, &env).await;
    let base_url = Arc::new(std::sync::RwLock::new(service.base_url.clone()));
    let stop = Arc::new(AtomicBool::new(false));
    let created = writers(base_url.clone(), tenant.token.clone(), stop.clone());

    for kill in 0..KILLS {
        // Killed just after a block of this organisation lands, while the next seal is due.
        let before = blocks(db, &tenant_id).await.len();
        wait_until(Duration::from_secs(20), POLL, "a block sealed before the kill", || async {
            blocks(db, &tenant_id).await.len() > before
        })
        .await;
        tokio::time::sleep(Duration::from_millis(10 * (kill as u64 + 1))).await;
        tokio::time::timeout(Duration::from_secs(20), service.kill9()).await.expect("the killed service is reaped");
        service = ServiceProcess::start(BINARY, &env).await;
        *base_url.write().expect("url") = service.base_url.clone();
    }
    // A little more load on the last start, then none.
    let at_last_start = created.load(Ordering::Relaxed);
    wait_until(Duration::from_secs(20), POLL, "writes after the last restart", || async {
        created.load(Ordering::Relaxed) > at_last_start + 20
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    // Every record of the organisation sealed: the writers' last requests are answered by now.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let unsealed = format!("CAST(tenant_id AS TEXT) = '{tenant_id}' AND chain_seq IS NULL");
    wait_until(Duration::from_secs(30), Duration::from_millis(50), "every record sealed", || async {
        db.count(db.sealed_audit_records(), &unsealed).await == 0
    })
    .await;

    // At least every write answered 201 is recorded (a write killed after its commit but before
    // its answer is recorded too).
    let records = db.count("audit_records", &format!("CAST(tenant_id AS TEXT) = '{tenant_id}'")).await;
    let answered = created.load(Ordering::Relaxed) as i64;
    assert!(records >= answered && answered > 0, "{records} records for {answered} answered writes");

    // Each record sealed once: sequence numbers 1..=records, none twice.
    let mut seqs: Vec<i64> = db
        .strings(&format!(
            "SELECT CAST(chain_seq AS TEXT) FROM {} WHERE CAST(tenant_id AS TEXT) = '{tenant_id}'",
            db.sealed_audit_records()
        ))
        .await
        .iter()
        .map(|s| s.parse().expect("a sequence number"))
        .collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=records).collect::<Vec<_>>(), "sequence numbers run 1..={records} without gap or repeat");

    // Blocks numbered 1, 2, … each starting where the previous one ended, covering every record.
    let sealed = blocks(db, &tenant_id).await;
    assert!(sealed.len() > KILLS, "blocks were sealed between the kills: {}", sealed.len());
    let mut next_seq = 1;
    for (i, (number, first_seq, count)) in sealed.iter().enumerate() {
        assert_eq!(*number, i as i64 + 1, "block numbers run without gap or repeat: {sealed:?}");
        assert_eq!(*first_seq, next_seq, "block {number} starts where the previous one ended");
        assert!(*count > 0, "block {number} seals something");
        next_seq += count;
    }
    assert_eq!(next_seq - 1, records, "the blocks cover every record once");

    // The store's chain verifies with the binary, against the store's signed head.
    let (code, out) = audit_verify(db, &tenant_id).await;
    assert_eq!(code, 0, "tokenops audit verify: {out}");
    assert!(out.contains(&records.to_string()), "the verdict counts {records} records: {out}");

    // The head the API serves is signed, and names the last block.
    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().expect("HTTP client");
    let head: Value = client
        .get(format!("{}/api/audit/chain/head", service.base_url))
        .header("API-Version", API_VERSION)
        .bearer_auth(&tenant.token)
        .send()
        .await
        .expect("head")
        .json()
        .await
        .expect("head JSON");
    let jwks: Value = client
        .get(format!("{}/.well-known/webhook-jwks.json", service.base_url))
        .send()
        .await
        .expect("jwks")
        .json()
        .await
        .expect("jwks JSON");
    let claims = tokenops_app::audit_chain::open_head(head["signature"].as_str().expect("signature"), &jwks)
        .expect("the head's signature verifies against the published JWKS");
    assert_eq!(claims.head.block_number, sealed.len() as i64, "{head}");
    assert_eq!(claims.head.hash, head["hash"].as_str().expect("hash"));
    let last_hash = db
        .strings(&format!(
            "SELECT hash FROM audit_blocks WHERE CAST(chain_id AS TEXT) = '{tenant_id}' AND block_number = {}",
            sealed.len()
        ))
        .await;
    assert_eq!(last_hash, vec![claims.head.hash.clone()], "the signed head is the last block's");
    drop(service);
}
