//! anvil, the local EVM node, for tests that need a real one: started on a free loopback port,
//! killed with the test (or earlier, by [`Anvil::stop`], to make the ledger unreachable). The
//! binary comes from `TOKENOPS_TEST_ANVIL` (`scripts/test` sets it, installing anvil from npm
//! when needed). Without it, starting fails: a test that passes without a node proves nothing.

use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

/// anvil on a free loopback port.
pub struct Anvil {
    child: Mutex<Option<Child>>,
    /// One client for every call, so that a test reading thousands of blocks reuses its
    /// connections.
    http: reqwest::Client,
    /// The JSON-RPC URL (`http://127.0.0.1:{port}`).
    pub url: String,
    /// The task that requeues stranded transactions ([`Anvil::start_with_block_time`]).
    keeper: Option<JoinHandle<()>>,
    /// How many times the keeper requeued a sender's transactions.
    requeued: Arc<AtomicUsize>,
}

impl Drop for Anvil {
    fn drop(&mut self) {
        if let Some(keeper) = &self.keeper {
            keeper.abort();
        }
    }
}

impl Anvil {
    /// Starts anvil and waits until it listens; it mines a block for each transaction as it
    /// arrives. Panics when `TOKENOPS_TEST_ANVIL` is not set or anvil does not start.
    pub async fn start() -> Self {
        Self::launch(&[]).await
    }

    /// Like [`Anvil::start`], and closer to a real chain's node, for tests that send many
    /// transactions per wallet, out of nonce order, from several processes:
    /// - it also mines a block every `seconds`, with every transaction ready by then: mining on
    ///   arrival alone can leave a ready transaction unmined for good (foundry-rs/foundry#10122);
    /// - as a real node re-reads its queue at each new block, a keeper looks at anvil's pool
    ///   every `seconds`: a transaction queued with the sender's next nonce on chain (anvil
    ///   queues one that arrives, needing the nonce below, while the block with that nonce is
    ///   being mined, and never looks at it again) is seen twice, then the sender's pooled
    ///   transactions are taken out and sent again, so that anvil sorts them afresh.
    ///
    /// A transaction behind a nonce gap stays out (the sender's next nonce is not in the pool),
    /// so a gap the service leaves still shows.
    pub async fn start_with_block_time(seconds: u32) -> Self {
        let mut anvil = Self::launch(&["--mixed-mining", "--block-time", &seconds.to_string()]).await;
        let (http, url, requeued) = (anvil.http.clone(), anvil.url.clone(), anvil.requeued.clone());
        let every = Duration::from_secs(u64::from(seconds));
        anvil.keeper = Some(tokio::spawn(keep_pool(http, url, every, requeued)));
        anvil
    }

    /// How many times a sender's stranded transactions were sent again (see
    /// [`Anvil::start_with_block_time`]).
    pub fn requeued(&self) -> usize {
        self.requeued.load(Ordering::Relaxed)
    }

    async fn launch(mining: &[&str]) -> Self {
        let Ok(binary) = std::env::var("TOKENOPS_TEST_ANVIL") else {
            panic!(
                "TOKENOPS_TEST_ANVIL is not set: this test needs anvil. Run scripts/test \
                 (it installs anvil from npm), or set TOKENOPS_TEST_ANVIL to an anvil binary, for example \
                 contracts/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil after `npm --prefix contracts ci`."
            )
        };
        // Port 0: anvil picks a free port and prints it, so no other process can race for it.
        let mut child = Command::new(&binary)
            .args(["--host", "127.0.0.1", "--port", "0", "--accounts", "1"])
            .args(mining)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start anvil at {binary}: {e}"));
        let stdout = child.stdout.take().expect("anvil's stdout");
        let mut lines = BufReader::new(stdout).lines();
        let address = tokio::time::timeout(Duration::from_secs(20), async {
            while let Some(line) = lines.next_line().await.expect("read anvil's output") {
                if let Some(address) = line.trim().strip_prefix("Listening on ") {
                    return address.to_owned();
                }
            }
            panic!("anvil exited before listening")
        })
        .await
        .expect("anvil listens within 20 s");
        // Keep draining its output so that anvil never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        // The HTTP client needs the process's TLS provider, even for plain HTTP.
        tokenops_identity::install_crypto_provider();
        let http = reqwest::Client::builder().build().expect("HTTP client");
        let url = format!("http://{address}");
        Self { child: Mutex::new(Some(child)), http, url, keeper: None, requeued: Arc::default() }
    }

    /// The app settings that put its ledger on this node, with gas funded by anvil's dev accounts.
    pub fn ledger_settings(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("TOKENOPS_LEDGER".to_owned(), "evm".to_owned()),
            ("TOKENOPS_EVM_RPC_URL".to_owned(), self.url.clone()),
            ("TOKENOPS_EVM_GAS_FUNDING".to_owned(), "dev".to_owned()),
        ])
    }

    /// Calls a JSON-RPC method and returns its `result`; panics on an error answer.
    pub async fn rpc(&self, method: &str, params: Value) -> Value {
        call(&self.http, &self.url, method, params).await.unwrap_or_else(|e| panic!("{e}"))
    }

    /// Kills anvil and waits for it to exit: the node is unreachable afterwards.
    pub async fn stop(&self) {
        if let Some(keeper) = &self.keeper {
            keeper.abort();
        }
        let child = self.child.lock().expect("lock").take();
        if let Some(mut child) = child {
            child.kill().await.expect("kill anvil");
        }
    }
}

/// Calls a JSON-RPC method: its `result`, or what went wrong.
async fn call(http: &reqwest::Client, url: &str, method: &str, params: Value) -> Result<Value, String> {
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
    let response = http.post(url).json(&body).send().await.map_err(|e| format!("{method}: anvil answers: {e}"))?;
    let response: Value = response.json().await.map_err(|e| format!("{method}: JSON-RPC answer: {e}"))?;
    match response.get("error") {
        Some(_) => Err(format!("{method}: {response}")),
        None => Ok(response["result"].clone()),
    }
}

/// Every `every`, requeues the transactions of each sender whose next nonce on chain is queued
/// in anvil's pool and was so at the last look too (between a block's commit and anvil's
/// promotion after it, it is briefly so). A failed look or requeue waits for the next tick.
async fn keep_pool(http: reqwest::Client, url: String, every: Duration, requeued: Arc<AtomicUsize>) {
    let mut seen = BTreeSet::new();
    loop {
        tokio::time::sleep(every).await;
        let Ok(stranded) = stranded(&http, &url).await else { continue };
        let mut still = BTreeSet::new();
        for (sender, hash) in stranded {
            if !seen.contains(&hash) {
                still.insert(hash);
            } else if requeue(&http, &url, &sender).await.is_ok() {
                requeued.fetch_add(1, Ordering::Relaxed);
            }
        }
        seen = still;
    }
}

/// (sender, transaction hash) of each queued transaction whose nonce is its sender's next on
/// chain: nothing is missing below it, yet anvil holds it back.
async fn stranded(http: &reqwest::Client, url: &str) -> Result<Vec<(String, String)>, String> {
    let pool = call(http, url, "txpool_content", json!([])).await?;
    let mut found = Vec::new();
    for (sender, queued) in pool["queued"].as_object().into_iter().flatten() {
        let next = call(http, url, "eth_getTransactionCount", json!([sender, "latest"])).await?;
        let next = next.as_str().and_then(|n| u64::from_str_radix(n.trim_start_matches("0x"), 16).ok());
        let Some(next) = next else { continue };
        if let Some(hash) = queued[next.to_string()]["hash"].as_str() {
            found.push((sender.clone(), hash.to_owned()));
        }
    }
    Ok(found)
}

/// Takes `sender`'s transactions out of anvil's pool and sends them again, lowest nonce first:
/// anvil then sorts each against the chain as it is now.
async fn requeue(http: &reqwest::Client, url: &str, sender: &str) -> Result<(), String> {
    let pool = call(http, url, "txpool_content", json!([])).await?;
    let mut hashes = BTreeMap::new();
    for part in ["pending", "queued"] {
        for (nonce, transaction) in pool[part][sender].as_object().into_iter().flatten() {
            if let (Ok(nonce), Some(hash)) = (nonce.parse::<u64>(), transaction["hash"].as_str()) {
                hashes.insert(nonce, hash.to_owned());
            }
        }
    }
    let mut raws = Vec::new();
    for hash in hashes.values() {
        raws.push(call(http, url, "eth_getRawTransactionByHash", json!([hash])).await?);
    }
    call(http, url, "anvil_removePoolTransactions", json!([sender])).await?;
    for raw in raws {
        // One included or sent again by the service meanwhile is refused: nothing to do.
        let _ = call(http, url, "eth_sendRawTransaction", json!([raw])).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// anvil's state after the race: a transaction queued, needing the nonce below it, while
    /// the chain's count already stands at its own nonce. Here `anvil_setNonce` moves the count
    /// instead of a block; timer blocks alone leave the transaction queued.
    #[tokio::test]
    async fn a_transaction_queued_with_the_next_nonce_on_chain_is_sent_again_and_mined() {
        let anvil = Anvil::start_with_block_time(1).await;
        let sender = anvil.rpc("eth_accounts", json!([])).await[0].as_str().expect("a dev account").to_owned();
        let transfer = json!({ "from": sender, "to": sender, "value": "0x1", "nonce": "0x1" });
        let hash = anvil.rpc("eth_sendTransaction", json!([transfer])).await;
        anvil.rpc("anvil_setNonce", json!([sender, "0x1"])).await;
        let mut receipt = Value::Null;
        for _ in 0..50 {
            receipt = anvil.rpc("eth_getTransactionReceipt", json!([hash])).await;
            if !receipt.is_null() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(receipt["status"], "0x1", "mined within 5 s: {receipt}");
        assert_eq!(anvil.requeued(), 1);
    }
}
