//! Crash safety of token operations, with the real binary: 2,000 operations submitted by
//! concurrent clients while the service is killed with SIGKILL three times (`CRASH_KILLS` for
//! another count) and restarted;
//! clients resend unanswered requests with the same key. Afterwards every 202'd operation
//! exists exactly once and is terminal, no ledger transaction is applied twice, and the sum of
//! balances equals minted minus burned (each account's ledger balance equals the service's
//! position and the sum of its confirmed operations).
//!
//! The same on two nodes on one PostgreSQL database, on the EVM ledger (anvil), as a multi-node
//! deployment runs (the embedded ledger has one producing node): clients spread over both
//! nodes and resend to the other when theirs does not answer, and a node drawn at random is
//! killed and restarted each time.

use crate::BINARY;
use crate::crash_load::{
    self, Answer, Balances, Client, Detail, DropSchema, Mix, OVERDRAFT, Planned, Rng, Row, Submitted, amount_text,
    balances, by_type, crash_load_environment, eventually, evidence, evidence_report, failures, is_reverted_overdraft,
    lock_violations, locks, open_accounts, operations, overdraft_violations, tx_hashes,
};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};
use tokenops_testkit::anvil::Anvil;
use tokenops_testkit::{Backend, ServiceProcess, TestDb, Testbed, backends};

const CLIENTS: usize = 16;
const ACCOUNTS: usize = 8;
/// Operations not (yet) CONFIRMED or FAILED.
const OPEN: &str = "state NOT IN ('CONFIRMED', 'FAILED')";
/// Open operations that no queued or running job will move any more (table alias `o`).
const STUCK: &str = "o.state NOT IN ('CONFIRMED', 'FAILED') AND NOT EXISTS (SELECT 1 FROM jobs j \
     WHERE j.status IN ('queued', 'running') AND CAST(j.payload ->> 'transactionId' AS TEXT) = CAST(o.id AS TEXT))";
/// The wait before a client resends after no answer or a 5xx.
const RESEND_PAUSE: Duration = Duration::from_millis(50);
/// A LOCK's RELEASE or CANCEL is submitted this many of the client's steps after the LOCK.
const COMPLETION_AFTER_STEPS: usize = 8;

/// What one run of the crash test does.
struct Setup {
    /// Operations submitted, an equal share by each of the CLIENTS.
    operations: usize,
    /// Nodes serving the API and running workers on the one store.
    nodes: usize,
    /// SIGKILLs, spread evenly over the submissions (each of a node drawn at random).
    kills: usize,
    /// The EVM node the service's ledger is on; `None`: the embedded ledger.
    anvil: Option<Anvil>,
}

/// The SIGKILLs of a run: `CRASH_KILLS` when set (`CRASH_KILLS=50` for the long run the
/// throughput issue asks of both stores), else `default`.
fn kills(default: usize) -> usize {
    std::env::var("CRASH_KILLS").ok().and_then(|text| text.parse().ok()).unwrap_or(default)
}

impl Setup {
    /// A node is killed once this many submissions have been answered, at each step.
    fn kill_after_answers(&self) -> Vec<usize> {
        (1..=self.kills).map(|k| self.operations * k / (self.kills + 1)).collect()
    }
}

fn environment(bed: &Testbed, anvil: Option<&Anvil>) -> BTreeMap<String, String> {
    let mut env = bed.environment("all");
    crash_load_environment(&mut env);
    if let Some(anvil) = anvil {
        env.extend(anvil.ledger_settings());
    }
    // The pipeline itself must hand every operation on: the sweep that would resume one no job
    // carries (after a minute unchanged) is kept out of this test, so such an operation shows.
    env.insert("TOKENOPS_RESUME_SWEEP_SECS".to_owned(), "86400".to_owned());
    // The test reports what it finds; the job runner's retry warnings would drown it.
    env.insert("TOKENOPS_LOG".to_owned(), "error".to_owned());
    env
}

/// Client `c`'s operations (see `crash_load::plan`).
fn plan(c: usize, quota: usize) -> Vec<Planned> {
    let rng = Rng::from_state(0x9E37_79B9_7F4A_7C15 ^ ((c as u64 + 1) * 0x1000_0000_01B3), ACCOUNTS);
    let mix = Mix { transfers: 60, overdrawn_transfers: 63, mints: 70, burns: 76, locks: 78 };
    crash_load::plan(rng, c, quota, "crash", &mix)
}

/// One kill: when, and what the killed process had in flight.
#[derive(Debug)]
struct Kill {
    node: usize,
    answered: usize,
    running_jobs: i64,
    in_flight: i64,
    signed_unsettled: i64,
    restart: Duration,
}

impl Kill {
    fn describe(&self) -> String {
        format!(
            "node {} after {} answers ({} jobs leased, {} operations in flight, {} signed and not settled; ready again in {:?})",
            self.node, self.answered, self.running_jobs, self.in_flight, self.signed_unsettled, self.restart
        )
    }
}

async fn operations_survive_three_sigkills_each_applied_exactly_once(backend: Backend) {
    survive_sigkills(backend, Setup { operations: 2_000, nodes: 1, kills: kills(3), anvil: None }).await;
}

/// Two nodes on one PostgreSQL database, a random one killed five times: the same promises.
/// Both sign for the same wallets, each only under the wallet's signing lease, which a killed
/// node's survivor takes over within seconds. anvil runs as a chain's node does: a block every
/// second, its pool re-read at each (`Anvil::start_with_block_time`). Mining only on arrival, it
/// left a wallet's transaction unmined for minutes while other wallets' blocks came (once its
/// next nonce after the two below were included; once queued with the chain's next nonce).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_survive_sigkills_of_either_each_operation_applied_exactly_once() {
    let anvil = Anvil::start_with_block_time(1).await;
    survive_sigkills(Backend::Postgres, Setup { operations: 1_120, nodes: 2, kills: kills(5), anvil: Some(anvil) })
        .await;
}

async fn survive_sigkills(backend: Backend, setup: Setup) {
    assert!(setup.operations.is_multiple_of(CLIENTS), "every client submits the same number");
    let quota = setup.operations / CLIENTS;
    let name = format!("transactions_crash ({backend:?}, {} node(s))", setup.nodes);
    let started = Instant::now();
    let bed = Testbed::start(backend).await;
    let (db, tenant) = (&bed.db, &bed.tenant);
    let _schema = DropSchema(db);
    let env = environment(&bed, setup.anvil.as_ref());

    let mut services = Vec::new();
    for _ in 0..setup.nodes {
        services.push(Some(ServiceProcess::start(BINARY, &env).await));
    }
    let base_url = |s: &Option<ServiceProcess>| s.as_ref().map(|s| s.base_url.clone()).unwrap_or_default();
    let client = Client::new(&base_url(&services[0]), &tenant.token, RESEND_PAUSE, COMPLETION_AFTER_STEPS);
    let mut nodes = vec![client.node.clone()];
    nodes.extend(services[1..].iter().map(|s| Arc::new(RwLock::new(base_url(s)))));
    let counters = client.counters.clone();

    // One contract, one customer, the accounts; all ACTIVE before the first operation.
    open_accounts(&client, db, ACCOUNTS).await;
    let ready = started.elapsed();
    eprintln!("{name}: {ACCOUNTS} accounts ACTIVE after {ready:?}");

    // The clients, spread over the nodes, and a controller that kills and restarts a node as
    // they go.
    let submitting = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let client = match nodes.len() {
                1 => client.clone(),
                n => client.via(&nodes[c % n], &nodes[(c + 1) % n]),
            };
            tokio::spawn(client.run(plan(c, quota)))
        })
        .collect();
    let mut victims = Rng::seeded(0x6b696c6c, setup.nodes);
    let mut kills = Vec::new();
    for threshold in setup.kill_after_answers() {
        let finished = || clients.iter().all(|c| c.is_finished());
        while counters.answered.load(Ordering::Relaxed) < threshold && !finished() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if finished() {
            break;
        }
        let answered = counters.answered.load(Ordering::Relaxed);
        let victim = victims.account();
        services[victim].take().expect("every node runs between kills").kill9().await;
        let running_jobs = db.count("jobs", "status = 'running'").await;
        let in_flight = db.count("operations", "state NOT IN ('CONFIRMED', 'FAILED')").await;
        let signed_unsettled = db
            .count("operations", "state IN ('PENDING_SETTLEMENT', 'SETTLING') AND signed_transaction IS NOT NULL")
            .await;
        let down = Instant::now();
        let restarted = ServiceProcess::start(BINARY, &env).await;
        *nodes[victim].write().unwrap_or_else(PoisonError::into_inner) = restarted.base_url.clone();
        services[victim] = Some(restarted);
        let kill = Kill { node: victim, answered, running_jobs, in_flight, signed_unsettled, restart: down.elapsed() };
        eprintln!("{name}: killed at {:?}: {}", submitting.elapsed(), kill.describe());
        kills.push(kill);
    }
    let mut submitted: Vec<Submitted> = Vec::new();
    for c in clients {
        submitted.extend(c.await.expect("client task"));
    }
    let submitted_in = submitting.elapsed();
    let replayed_202 = counters.replayed_202.load(Ordering::Relaxed);
    eprintln!("{name}: {} submissions answered in {submitted_in:?}", setup.operations);
    let killed: BTreeSet<usize> = kills.iter().map(|k| k.node).collect();
    let kills: Vec<String> = kills.iter().map(Kill::describe).collect();
    assert_eq!(kills.len(), setup.kills, "a node was killed each time while clients submitted: {kills:?}");
    if setup.nodes > 1 {
        assert_eq!(killed.len(), setup.nodes, "each node was killed at least once: {kills:?}");
    }
    assert_eq!(submitted.len(), setup.operations);

    // Every answer is a 202, or a 400 for a RELEASE or CANCEL of a lock whose LOCK failed.
    let mut accepted: BTreeMap<String, String> = BTreeMap::new(); // key -> transactionId
    let mut refused_completions = Vec::new();
    let mut unexpected = Vec::new();
    for s in &submitted {
        match &s.answer {
            Answer::Accepted(id) => {
                assert!(accepted.insert(s.key.clone(), id.clone()).is_none(), "key {} answered twice", s.key);
            }
            Answer::Refused(400, reply) if s.lock_id.is_some() => refused_completions.push((s, reply.clone())),
            other => unexpected.push(format!("{} {}: {}", s.tx_type, s.key, other.describe())),
        }
    }
    let distinct_ids: BTreeSet<&String> = accepted.values().collect();
    assert_eq!(distinct_ids.len(), accepted.len(), "two keys were answered with the same transactionId");

    // Settlement runs to the end: every operation CONFIRMED or FAILED. An operation that is
    // neither and has no queued or running job left can never move again: stop waiting.
    let settling = Instant::now();
    eventually(Duration::from_secs(60), || async {
        db.count("operations", OPEN).await == db.count("operations o", STUCK).await
    })
    .await;
    let settled_in = settling.elapsed();
    eprintln!("{name}: settled {settled_in:?} after the last answer");

    // Findings are collected, so that one run reports every broken promise.
    let mut violations: Vec<String> = Vec::new();
    macro_rules! check {
        ($holds:expr, $($message:tt)+) => {
            if !$holds {
                violations.push(format!($($message)+));
            }
        };
    }
    let open = db.strings(&format!("SELECT CAST(id AS TEXT) FROM operations WHERE {OPEN}")).await;
    if !open.is_empty() {
        let mut report = evidence_report(db, open.iter().map(String::as_str), Detail::Brief).await;
        if let Some(anvil) = &setup.anvil {
            report.push_str(&pool_report(anvil).await);
        }
        violations.push(format!(
            "{} operations never reached CONFIRMED or FAILED ({} of them with no job left to move them):\n{report}",
            open.len(),
            db.count("operations o", STUCK).await
        ));
    }
    if !unexpected.is_empty() {
        let mut report = unexpected.join("\n");
        for s in submitted.iter().filter(|s| matches!(s.answer, Answer::GaveUp(_))).take(5) {
            if let Some(lock_id) = &s.lock_id {
                report.push_str(&format!("\n  the LOCK of {}: {}", s.key, evidence(db, lock_id, Detail::Brief).await));
            }
        }
        violations.push(format!("{} unexpected answers:\n{report}", unexpected.len()));
    }

    // Exactly one operation per accepted key, and nothing else.
    let rows = operations(db).await;
    let by_id: HashMap<&str, &Row> = rows.iter().map(|r| (r.id.as_str(), r)).collect();
    let mut keys_seen: BTreeMap<&str, usize> = BTreeMap::new();
    for row in &rows {
        *keys_seen.entry(row.key.as_str()).or_default() += 1;
    }
    let doubled: Vec<_> = keys_seen.iter().filter(|(_, n)| **n > 1).collect();
    check!(doubled.is_empty(), "idempotency keys with more than one operation: {doubled:?}");
    for (key, id) in &accepted {
        match by_id.get(id.as_str()) {
            Some(row) => check!(&row.key == key, "operation {id} answered for {key} carries key {}", row.key),
            None => violations.push(format!("202 for {key} names {id}, which does not exist")),
        }
    }
    check!(rows.len() == accepted.len(), "{} operations exist for {} accepted keys", rows.len(), accepted.len());

    // RELEASE and CANCEL: refused only when their LOCK failed; each lock completed once.
    for (s, reply) in &refused_completions {
        let lock_id = s.lock_id.as_deref().unwrap_or_default();
        let lock_state = by_id.get(lock_id).map(|r| r.state.as_str());
        if lock_state != Some("FAILED") {
            let times = db
                .strings(&format!(
                    "SELECT 'LOCK ' || o.state || ' at ' || CAST(o.updated_at AS TEXT) || ' µs; lock ' || \
                     COALESCE((SELECT l.status || ' created at ' || CAST(l.created_at AS TEXT) || ' µs' FROM locks l \
                     WHERE CAST(l.id AS TEXT) = '{lock_id}'), 'missing') FROM operations o WHERE CAST(o.id AS TEXT) = '{lock_id}'"
                ))
                .await;
            violations.push(format!(
                "{} {} refused with {reply} while its LOCK {lock_id} is {lock_state:?} ({})",
                s.tx_type,
                s.key,
                times.join("")
            ));
        }
    }
    let locks = locks(db).await;
    violations.extend(lock_violations(&rows, &locks));

    // No ledger transaction applied twice: each operation that reached the ledger has its own
    // hash, included once, and the ledger holds no transaction that no operation accounts for.
    let reading = Instant::now();
    let (ledger, supply) = match &setup.anvil {
        None => embedded_chain(db).await,
        Some(anvil) => evm_chain(anvil, &client).await,
    };
    let ledger_read_in = reading.elapsed();
    let (hashes, shared_hashes) = tx_hashes(&rows);
    violations.extend(shared_hashes);
    let (failures, crash_failures) = failures(&rows);
    for row in &rows {
        let included = ledger.get(&row.tx_hash).map(|(success, _)| *success);
        match row.state.as_str() {
            "CONFIRMED" => check!(
                included == Some(true),
                "CONFIRMED {} {} has txHash {:?}, which the ledger holds as {included:?}",
                row.tx_type,
                row.id,
                row.tx_hash
            ),
            "FAILED" if is_reverted_overdraft(row) => check!(
                included == Some(false),
                "reverted {} {} has txHash {:?}, which the ledger holds as {included:?}",
                row.tx_type,
                row.id,
                row.tx_hash
            ),
            "FAILED" => {}
            _ => check!(
                included.is_none(),
                "{} {} {} has txHash {:?}, which the ledger holds as {included:?}",
                row.state,
                row.tx_type,
                row.id,
                row.tx_hash
            ),
        }
    }
    if !crash_failures.is_empty() {
        let report = evidence_report(db, crash_failures.iter().map(String::as_str), Detail::Brief).await;
        violations.push(format!(
            "{} operations failed for another reason than an overdraft (a crash must not fail an operation):\n{report}",
            crash_failures.len()
        ));
    }
    let mut strays = Vec::new();
    let mut fillers = 0;
    for (hash, (success, deployed)) in &ledger {
        if !deployed.is_empty() || hashes.contains_key(hash.as_str()) {
            continue;
        }
        // The gap sweep's zero transfers are accounted for: each used up a nonce nothing else
        // would have, so that the wallet's later transactions could be included.
        match &setup.anvil {
            Some(anvil) if *success && is_gap_filler(anvil, hash).await => fillers += 1,
            _ => strays.push(format!("{hash} (success {success})")),
        }
    }
    check!(strays.is_empty(), "ledger transactions no operation accounts for: {strays:?}");
    // The planned overdrafts failed on the ledger.
    violations.extend(overdraft_violations(&rows, OVERDRAFT));

    // Balances: the ledger's per account equals the service's position and the sum of the
    // account's confirmed operations; their sum is minted minus burned.
    let Balances { minted, burned, shown: balances, violations: found } = balances(&client, db, &rows, ACCOUNTS).await;
    violations.extend(found);
    check!(supply == vec![(minted - burned).to_string()], "the token's total supply {supply:?}");

    // Every key that was resent, and every tenth other one, still answers its one operation.
    let resent = counters.resent.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let sample: Vec<(&String, &String)> = accepted
        .iter()
        .enumerate()
        .filter(|(i, (key, _))| resent.contains(*key) || i % 10 == 0)
        .map(|(_, e)| e)
        .collect();
    let replays = futures::future::join_all(sample.chunks(sample.len() / 8 + 1).map(|chunk| {
        let client = client.clone();
        let submitted = &submitted;
        async move {
            let mut wrong = Vec::new();
            for &(key, id) in chunk {
                let original = submitted.iter().find(|s| &s.key == key).expect("submitted");
                let body = match &original.lock_id {
                    Some(lock_id) => json!({ "txType": original.tx_type, "params": { "lockId": lock_id } }),
                    None => plan_body(key, quota),
                };
                match client.submit(key, &body).await.0 {
                    Answer::Accepted(again) if &again == id => {}
                    other => wrong.push(format!("{key}: {id} then {}", other.describe())),
                }
            }
            wrong
        }
    }))
    .await;
    let wrong: Vec<String> = replays.into_iter().flatten().collect();
    let checked_in = settling.elapsed() - settled_in;
    check!(wrong.is_empty(), "replays that did not answer the original operation: {wrong:?}");

    let by_type = |state: &str| by_type(&rows, state);
    eprintln!(
        "{name}: {} submissions, {} accepted, {} completions refused (LOCK failed); \
         confirmed {:?}, failed {:?}, open {:?}; failures by code {failures:?}",
        submitted.len(),
        accepted.len(),
        refused_completions.len(),
        by_type("CONFIRMED"),
        by_type("FAILED"),
        open.len(),
    );
    eprintln!(
        "  kills: {}; {} keys resent, {} replays checked; resends: {} unanswered, {} 5xx, {} 409 in flight, {} 404 lock not visible; {} replayed 202s",
        kills.join("; "),
        resent.len(),
        sample.len(),
        counters.unanswered.load(Ordering::Relaxed),
        counters.server_errors.load(Ordering::Relaxed),
        counters.in_flight_409.load(Ordering::Relaxed),
        counters.lock_not_visible_404.load(Ordering::Relaxed),
        replayed_202,
    );
    eprintln!(
        "  minted {} burned {} balances {balances:?}; setup {ready:?}, submissions {submitted_in:?}, \
         settlement after them {settled_in:?}, checks after it {checked_in:?} (the ledger read in \
         {ledger_read_in:?}), total {:?}",
        amount_text(minted),
        amount_text(burned),
        started.elapsed()
    );
    assert!(violations.is_empty(), "{} violations:\n{}", violations.len(), violations.join("\n"));

    // Signatures signed anew since each node's last start (on two nodes, a nonce handed out
    // again when a wallet's signing lease changed hands): a figure for the report.
    let (mut superseded, mut deferred) = (0.0, 0.0);
    for service in services.iter().flatten() {
        let metrics = client.http.get(format!("{}/metrics", service.base_url)).send().await.expect("metrics");
        let text = metrics.text().await.expect("metrics text");
        let sum = |name: &str| {
            text.lines()
                .filter_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
                .filter_map(|value| value.trim().parse::<f64>().ok())
                .sum::<f64>()
        };
        superseded += sum("tokenops_signatures_superseded_total");
        deferred += sum("tokenops_settle_deferred_elsewhere_total");
    }
    eprintln!("  nonce gaps filled by the sweep: {fillers}");
    if let Some(anvil) = &setup.anvil {
        eprintln!(
            "  times anvil held a sender's next nonce back and its transactions were sent again: {}",
            anvil.requeued()
        );
    }
    eprintln!(
        "  since the nodes' last starts: {superseded} signatures superseded and signed anew, \
         {deferred} settle steps sent back to the queue (their wallet's lease held by the other node)"
    );
    for service in services.into_iter().flatten() {
        assert!(service.terminate().await.success());
    }
    assert_eq!(db.count("jobs", "status = 'running'").await, 0);
}

/// The embedded chain as its store holds it: each transaction (hash -> (success, the address
/// it deployed)) and the token's total supply.
async fn embedded_chain(db: &TestDb) -> (BTreeMap<String, (bool, String)>, Vec<String>) {
    let transactions = db
        .strings(
            "SELECT hash || '|' || CASE WHEN success THEN '1' ELSE '0' END || '|' || COALESCE(contract_address, '') \
             FROM ledger_transactions",
        )
        .await
        .into_iter()
        .map(|row| {
            let f: Vec<&str> = row.split('|').collect();
            (f[0].to_owned(), (f[1] == "1", f[2].to_owned()))
        })
        .collect();
    (transactions, db.strings("SELECT total_supply FROM ledger_tokens").await)
}

/// The same read from the EVM node: every transaction to the USD token or deploying one, from
/// every block's receipts, and the token's `totalSupply()`. The gas funding the node's
/// developer account sends the wallets is not the token's and is left out.
async fn evm_chain(anvil: &Anvil, client: &Client) -> (BTreeMap<String, (bool, String)>, Vec<String>) {
    let (status, contract) = client.call(reqwest::Method::GET, "/api/contracts/USD", None).await;
    assert_eq!(status, 200, "{contract}");
    let token = contract["contractAddress"].as_str().expect("the token's address").to_lowercase();
    let head = anvil.rpc("eth_blockNumber", json!([])).await;
    let head = u64::from_str_radix(head.as_str().expect("block number").trim_start_matches("0x"), 16).expect("hex");
    let mut transactions = BTreeMap::new();
    for number in 0..=head {
        let receipts = anvil.rpc("eth_getBlockReceipts", json!([format!("{number:#x}")])).await;
        for receipt in receipts.as_array().expect("receipts") {
            let text = |field: &str| receipt[field].as_str().unwrap_or_default().to_lowercase();
            let deployed = text("contractAddress");
            if text("to") == token || deployed == token {
                transactions.insert(text("transactionHash"), (text("status") == "0x1", deployed));
            }
        }
    }
    // totalSupply(): 0x18160ddd.
    let supply = anvil.rpc("eth_call", json!([{ "to": token, "data": "0x18160ddd" }, "latest"])).await;
    let supply = u128::from_str_radix(supply.as_str().expect("supply").trim_start_matches("0x"), 16).expect("hex");
    (transactions, vec![supply.to_string()])
}

/// What the EVM node holds back, per sender: the nonces it could include now ("ready") and those
/// waiting behind a nonce gap ("queued"), against the sender's nonce on chain. A ready nonce
/// left there is the node's stall; a queued one is a gap the service left.
async fn pool_report(anvil: &Anvil) -> String {
    let pool = anvil.rpc("txpool_inspect", json!([])).await;
    let mut senders: BTreeMap<String, (Vec<u64>, Vec<u64>)> = BTreeMap::new();
    for (part, ready) in [("pending", true), ("queued", false)] {
        for (sender, nonces) in pool[part].as_object().into_iter().flatten() {
            let entry = senders.entry(sender.to_lowercase()).or_default();
            let nonces = nonces.as_object().into_iter().flatten().filter_map(|(nonce, _)| nonce.parse::<u64>().ok());
            if ready { entry.0.extend(nonces) } else { entry.1.extend(nonces) }
        }
    }
    let mut report = format!("\n  the EVM node's pool ({} senders):", senders.len());
    for (sender, (mut ready, mut queued)) in senders {
        ready.sort_unstable();
        queued.sort_unstable();
        let on_chain = anvil.rpc("eth_getTransactionCount", json!([sender, "latest"])).await;
        let on_chain = on_chain.as_str().and_then(|n| u64::from_str_radix(n.trim_start_matches("0x"), 16).ok());
        report
            .push_str(&format!("\n    {sender}: next nonce on chain {on_chain:?}, ready {ready:?}, queued {queued:?}"));
    }
    report
}

/// Whether the EVM transaction `hash` is a nonce gap's filler (`nonce_gaps`): a transfer of zero
/// tokens from its sender to itself.
async fn is_gap_filler(anvil: &Anvil, hash: &str) -> bool {
    let transaction = anvil.rpc("eth_getTransactionByHash", json!([hash])).await;
    let text = |field: &str| transaction[field].as_str().unwrap_or_default().to_lowercase();
    // transfer(address,uint256): 0xa9059cbb, the recipient and the amount in 32-byte words.
    let filler = format!("0xa9059cbb{:0>64}{:0>64}", text("from").trim_start_matches("0x"), "");
    text("input") == filler
}

/// The body planned for `key` (the plan is deterministic, so it can be made again).
fn plan_body(key: &str, quota: usize) -> Value {
    let client: usize = key.get(6..8).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("key {key}"));
    for step in plan(client, quota) {
        match step {
            Planned::Single { key: k, body } | Planned::Lock { key: k, body, .. } if k == key => return body,
            _ => {}
        }
    }
    panic!("no planned body for {key}")
}

backends!(operations_survive_three_sigkills_each_applied_exactly_once);
