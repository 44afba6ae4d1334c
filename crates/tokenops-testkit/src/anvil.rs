//! anvil, the local EVM node, for tests that need a real one: started on a free loopback port,
//! killed with the test (or earlier, by [`Anvil::stop`], to make the ledger unreachable). The
//! binary comes from `TOKENOPS_TEST_ANVIL` (`scripts/test` sets it, installing anvil from npm
//! when needed). Without it, starting fails: a test that passes without a node proves nothing.

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// anvil on a free loopback port.
pub struct Anvil {
    child: Mutex<Option<Child>>,
    /// One client for every call, so that a test reading thousands of blocks reuses its
    /// connections.
    http: reqwest::Client,
    /// The JSON-RPC URL (`http://127.0.0.1:{port}`).
    pub url: String,
}

impl Anvil {
    /// Starts anvil and waits until it listens; it mines a block for each transaction as it
    /// arrives. Panics when `TOKENOPS_TEST_ANVIL` is not set or anvil does not start.
    pub async fn start() -> Self {
        Self::launch(&[]).await
    }

    /// Like [`Anvil::start`], and it also mines a block every `seconds`, as a real chain does,
    /// with every transaction ready by then. For tests that send many transactions per wallet
    /// out of nonce order: mining on arrival alone can leave a ready transaction unmined for good
    /// (foundry-rs/foundry#10122), while the timer's blocks take every ready one. A transaction
    /// behind a nonce gap still stays out, so a gap the service leaves still shows.
    pub async fn start_with_block_time(seconds: u32) -> Self {
        Self::launch(&["--mixed-mining", "--block-time", &seconds.to_string()]).await
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
        Self { child: Mutex::new(Some(child)), http, url: format!("http://{address}") }
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
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
        let response: Value = self
            .http
            .post(&self.url)
            .json(&body)
            .send()
            .await
            .expect("anvil answers")
            .json()
            .await
            .expect("JSON-RPC answer");
        assert!(response.get("error").is_none(), "{method}: {response}");
        response["result"].clone()
    }

    /// Kills anvil and waits for it to exit: the node is unreachable afterwards.
    pub async fn stop(&self) {
        let child = self.child.lock().expect("lock").take();
        if let Some(mut child) = child {
            child.kill().await.expect("kill anvil");
        }
    }
}
