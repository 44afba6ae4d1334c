//! Benchmark of the embedded ledger: transfers applied per second on each store.
//!
//! ```sh
//! cargo run --release -p tokenops-ledger --example ledger_bench
//! cargo run --release -p tokenops-ledger --example ledger_bench -- --transfers 50000 --wallets 500 --stores sqlite
//! ```
//!
//! Per store (a SQLite file in a temporary directory; PostgreSQL at `TOKENOPS_TEST_POSTGRES_URL`,
//! default the local server, in a schema of its own that is dropped afterwards) it measures:
//!
//! 1. **sign**: custody (the embedded keystore: a store read, AES-GCM decryption and a secp256k1
//!    signature per transfer) signing transfers, without sending them;
//! 2. **apply (pre-signed)**: those signed transfers sent and included: signature recovery,
//!    nonce checks, ABI decoding, execution and the block commits. This is the ledger's own cost;
//! 3. **sign + apply**: `submit` (sign then send) from concurrent tasks until all are included:
//!    the pipeline's path with the embedded keystore.
//!
//! Also printed: the store's one-row commit rate, measured in the same run. The embedded ledger
//! commits once per block, so its rate should be far above that ceiling.

#![allow(clippy::print_stdout)]

use alloy::primitives::{Address, U256};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokenops_custody::{Custody, EmbeddedKeystore};
use tokenops_ledger::{
    EmbeddedConfig, EmbeddedLedger, Ledger, LedgerCall, Outcome, ReceiptStatus, SignedTransaction, TokenSpec,
};
use tokenops_secrets::Sealer;
use tokenops_store::Store;
use tokenops_store_postgres::PostgresStore;
use tokenops_store_sqlite::SqliteStore;

struct Options {
    transfers: usize,
    wallets: usize,
    stores: Vec<String>,
}

fn options() -> Result<Options, String> {
    let mut options = Options { transfers: 20_000, wallets: 200, stores: vec!["sqlite".into(), "postgres".into()] };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--transfers" => options.transfers = value()?.parse().map_err(|e| format!("--transfers: {e}"))?,
            "--wallets" => options.wallets = value()?.parse().map_err(|e| format!("--wallets: {e}"))?,
            "--stores" => options.stores = value()?.split(',').map(str::to_owned).collect(),
            "--help" | "-h" => {
                return Err("usage: ledger_bench [--transfers N] [--wallets N] [--stores sqlite,postgres]".into());
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if options.wallets < 2 {
        return Err("--wallets must be at least 2".into());
    }
    Ok(options)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let options = options()?;
    println!(
        "embedded ledger benchmark: {} transfers from {} wallets per phase, {} cores",
        options.transfers,
        options.wallets,
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    println!("{:<9} {:<34} {:>9} {:>9} {:>12}", "store", "phase", "count", "seconds", "per second");
    for store in &options.stores {
        match store.as_str() {
            "sqlite" => {
                let dir = std::env::temp_dir().join(format!("tokenops-ledger-bench-{}", std::process::id()));
                std::fs::create_dir_all(&dir)?;
                let sqlite = SqliteStore::open(&dir.join("bench.db")).await?;
                sqlite.migrate(&tokenops_domain::SystemClock).await?;
                let result = bench("sqlite", Arc::new(sqlite.clone()), &options).await;
                sqlite.close().await;
                std::fs::remove_dir_all(&dir)?;
                result?;
            }
            "postgres" => {
                let url = std::env::var("TOKENOPS_TEST_POSTGRES_URL")
                    .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
                let schema = format!("ledger_bench_{}", std::process::id());
                let postgres = match PostgresStore::connect(&url, Some(&schema)).await {
                    Ok(store) => store,
                    Err(error) => {
                        println!("postgres  skipped: cannot connect to {url}: {error}");
                        continue;
                    }
                };
                postgres.migrate(&tokenops_domain::SystemClock).await?;
                let result = bench("postgres", Arc::new(postgres.clone()), &options).await;
                postgres.close().await;
                let pool = sqlx::PgPool::connect(&url).await?;
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP SCHEMA \"{schema}\" CASCADE"))).execute(&pool).await?;
                pool.close().await;
                result?;
            }
            other => return Err(format!("unknown store {other}").into()),
        }
    }
    Ok(())
}

fn row(store: &str, phase: &str, count: usize, elapsed: Duration) {
    let seconds = elapsed.as_secs_f64();
    println!("{store:<9} {phase:<34} {count:>9} {seconds:>9.2} {:>12.0}", count as f64 / seconds.max(1e-9));
}

async fn bench(name: &str, store: Arc<dyn Store>, options: &Options) -> Result<(), Box<dyn std::error::Error>> {
    // The store's durable one-row commit rate: the ceiling a commit per transfer would have.
    let commits = 300;
    let started = Instant::now();
    for i in 0..commits {
        let mut tx = store.write().await?;
        tx.settings().get_or_insert(&format!("bench.commit.{i}"), "x").await?;
        tx.commit().await?;
    }
    row(name, "store: one-row commits (ceiling)", commits, started.elapsed());

    // A fixed master key: the bench's wallets are dropped with its store, so no key needs keeping
    // secret, and sealing costs the same under any key.
    let custody = Arc::new(EmbeddedKeystore::new(
        store.clone(),
        Arc::new(Sealer::new([9u8; 32])),
        Arc::new(tokenops_domain::SystemClock),
    ));
    let issuer = custody.create_wallet("issuer").await?;
    let ledger =
        Arc::new(EmbeddedLedger::open(store.clone(), issuer, custody.clone(), EmbeddedConfig::default()).await?);
    let token = ledger.deploy_token(&TokenSpec { name: "Euro".into(), symbol: "EUR".into(), decimals: 2 }).await?;
    let mut wallets = Vec::with_capacity(options.wallets);
    for i in 0..options.wallets {
        wallets.push(custody.create_wallet(&format!("bench {i}")).await?);
    }
    let mut last = None;
    for wallet in &wallets {
        let call = LedgerCall::Mint { to: *wallet, amount: U256::from(1_000_000_000u64) };
        last = Some(ledger.submit(token, &call, custody.as_ref()).await?);
    }
    if let Some(hash) = last {
        wait_all(&ledger, &[hash]).await?;
    }
    let plan = transfers(&wallets, options.transfers);

    // 1. Sign (keystore), concurrently per wallet group; nothing sent yet.
    let started = Instant::now();
    let signed = sign_all(&ledger, &custody, token, &plan).await?;
    row(name, "sign (embedded keystore)", signed.len(), started.elapsed());

    // 2. Apply the pre-signed transfers: send, then wait until every one is included.
    let started = Instant::now();
    let hashes = send_all(&ledger, signed).await?;
    wait_all(&ledger, &hashes).await?;
    row(name, "apply (pre-signed)", hashes.len(), started.elapsed());
    verify(&ledger, &hashes).await?;

    // 3. Sign and apply: submit from concurrent tasks.
    let started = Instant::now();
    let hashes = submit_all(&ledger, &custody, token, &plan).await?;
    wait_all(&ledger, &hashes).await?;
    row(name, "sign + apply (submit)", hashes.len(), started.elapsed());
    verify(&ledger, &hashes).await?;

    // Every transfer moved 1 unit around a ring: the supply is intact and nothing reverted.
    let mut total = U256::ZERO;
    for wallet in &wallets {
        total += ledger.balances(token, *wallet).await?.total;
    }
    if total != U256::from(1_000_000_000u64) * U256::from(wallets.len()) {
        return Err(format!("supply changed: {total}").into());
    }
    println!("{name:<9} blocks: {}", ledger.head_number());
    ledger.close();
    Ok(())
}

/// `count` transfers of 1 unit, wallet i to wallet i+1, spread over the wallets.
fn transfers(wallets: &[Address], count: usize) -> Vec<(Address, Address)> {
    (0..count).map(|i| (wallets[i % wallets.len()], wallets[(i + 1) % wallets.len()])).collect()
}

/// The plan split into one slice per task, each holding whole wallets (so that a wallet's
/// transfers keep their nonce order within a task).
fn groups(plan: &[(Address, Address)], tasks: usize) -> Vec<Vec<(Address, Address)>> {
    let mut groups = vec![Vec::new(); tasks];
    for (from, to) in plan {
        let task = usize::from(from.0[19]) % tasks;
        groups[task].push((*from, *to));
    }
    groups
}

const TASKS: usize = 32;

async fn sign_all(
    ledger: &Arc<EmbeddedLedger>,
    custody: &Arc<EmbeddedKeystore>,
    token: Address,
    plan: &[(Address, Address)],
) -> Result<Vec<SignedTransaction>, Box<dyn std::error::Error>> {
    let mut tasks = Vec::new();
    for group in groups(plan, TASKS) {
        let (ledger, custody) = (ledger.clone(), custody.clone());
        tasks.push(tokio::spawn(async move {
            let mut signed = Vec::with_capacity(group.len());
            for (from, to) in group {
                let call = LedgerCall::Transfer { from, to, amount: U256::from(1) };
                signed.push(ledger.sign(token, &call, custody.as_ref() as &dyn Custody).await?);
            }
            Ok::<_, tokenops_ledger::LedgerError>(signed)
        }));
    }
    let mut all = Vec::with_capacity(plan.len());
    for task in tasks {
        all.extend(task.await??);
    }
    Ok(all)
}

async fn send_all(
    ledger: &Arc<EmbeddedLedger>,
    signed: Vec<SignedTransaction>,
) -> Result<Vec<tokenops_ledger::TxHash>, Box<dyn std::error::Error>> {
    let hashes: Vec<_> = signed.iter().map(|s| s.hash).collect();
    let parallel = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    let mut chunks: Vec<Vec<SignedTransaction>> = vec![Vec::new(); parallel];
    for transaction in signed {
        let task = usize::from(transaction.sender.0[19]) % parallel;
        chunks[task].push(transaction);
    }
    let mut tasks = Vec::new();
    for chunk in chunks {
        let ledger = ledger.clone();
        tasks.push(tokio::spawn(async move {
            for transaction in chunk {
                send_with_backpressure(&ledger, &transaction).await?;
            }
            Ok::<_, tokenops_ledger::LedgerError>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(hashes)
}

/// Sends, waiting briefly while the mempool is full (the ledger's back-pressure).
async fn send_with_backpressure(
    ledger: &EmbeddedLedger,
    transaction: &SignedTransaction,
) -> Result<(), tokenops_ledger::LedgerError> {
    loop {
        match ledger.send(transaction).await {
            Ok(_) => return Ok(()),
            Err(error) if error.is_temporary() => tokio::time::sleep(Duration::from_millis(5)).await,
            Err(error) => return Err(error),
        }
    }
}

async fn submit_all(
    ledger: &Arc<EmbeddedLedger>,
    custody: &Arc<EmbeddedKeystore>,
    token: Address,
    plan: &[(Address, Address)],
) -> Result<Vec<tokenops_ledger::TxHash>, Box<dyn std::error::Error>> {
    let mut tasks = Vec::new();
    for group in groups(plan, TASKS) {
        let (ledger, custody) = (ledger.clone(), custody.clone());
        tasks.push(tokio::spawn(async move {
            let mut hashes = Vec::with_capacity(group.len());
            for (from, to) in group {
                let call = LedgerCall::Transfer { from, to, amount: U256::from(1) };
                let signed = ledger.sign(token, &call, custody.as_ref() as &dyn Custody).await?;
                send_with_backpressure(&ledger, &signed).await?;
                hashes.push(signed.hash);
            }
            Ok::<_, tokenops_ledger::LedgerError>(hashes)
        }));
    }
    let mut all = Vec::with_capacity(plan.len());
    for task in tasks {
        all.extend(task.await??);
    }
    Ok(all)
}

/// Waits until the mempool is empty and the given transactions are included.
async fn wait_all(
    ledger: &EmbeddedLedger,
    hashes: &[tokenops_ledger::TxHash],
) -> Result<(), Box<dyn std::error::Error>> {
    let deadline = Instant::now() + Duration::from_secs(600);
    while ledger.pending_count() > 0 {
        if Instant::now() > deadline {
            return Err("transfers not included within 10 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    for hash in hashes.iter().rev().take(1) {
        if !matches!(ledger.receipt(*hash).await?, ReceiptStatus::Included { .. }) {
            return Err(format!("{hash} not included").into());
        }
    }
    Ok(())
}

/// Every 100th receipt succeeded.
async fn verify(ledger: &EmbeddedLedger, hashes: &[tokenops_ledger::TxHash]) -> Result<(), Box<dyn std::error::Error>> {
    for hash in hashes.iter().step_by(100) {
        match ledger.receipt(*hash).await? {
            ReceiptStatus::Included { outcome: Outcome::Success, .. } => {}
            other => return Err(format!("{hash}: {other:?}").into()),
        }
    }
    Ok(())
}
