//! The conformance suite on a real EVM node: anvil (started by the test kit's `Anvil` on a free
//! loopback port for this test), with the custody keys in a SQLite store. The binary comes from
//! `TOKENOPS_TEST_ANVIL` (`scripts/test` sets it, installing anvil from npm when needed). Without
//! it this test fails: a suite that passes without running proves nothing.

mod suite;

use alloy::primitives::U256;
use async_trait::async_trait;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use suite::Network;
use tokenops_custody::{Custody, EmbeddedKeystore};
use tokenops_ledger::{EvmConfig, EvmLedger, GasFunding, Ledger};
use tokenops_secrets::Sealer;
use tokenops_testkit::Backend;
use tokenops_testkit::StoreFixture;
use tokenops_testkit::anvil::Anvil;

struct AnvilNetwork {
    anvil: Anvil,
    ledger: Arc<EvmLedger>,
    custody: Arc<EmbeddedKeystore>,
}

#[async_trait]
impl Network for AnvilNetwork {
    fn ledger(&self) -> Arc<dyn Ledger> {
        self.ledger.clone()
    }
    fn custody(&self) -> Arc<dyn Custody> {
        self.custody.clone()
    }
    async fn now(&self) -> u64 {
        let block = self.anvil.rpc("eth_getBlockByNumber", json!(["latest", false])).await;
        let timestamp = block["timestamp"].as_str().expect("timestamp");
        u64::from_str_radix(timestamp.trim_start_matches("0x"), 16).expect("hex timestamp")
    }
    async fn advance_time(&self, seconds: u64) {
        self.anvil.rpc("evm_increaseTime", json!([seconds])).await;
    }
    async fn stop(&self) {
        self.anvil.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anvil_conformance() {
    install_crypto_provider();
    let started = Instant::now();
    let anvil = Anvil::start().await;
    let fixture = StoreFixture::new(Backend::Sqlite).await;
    let custody = Arc::new(EmbeddedKeystore::new(fixture.store.clone(), Arc::new(Sealer::new([5u8; 32]))));
    let issuer = custody.create_wallet("issuer").await.expect("issuer wallet");
    let mut config = EvmConfig::new(anvil.url.clone());
    config.gas_funding = GasFunding::DevSetBalance(U256::from(10u64).pow(U256::from(19u64)));
    config.poll_interval = Duration::from_millis(20);
    config.request_timeout = Duration::from_secs(2);
    let ledger = EvmLedger::connect(config, issuer, custody.clone()).await.expect("connect to anvil");
    assert_eq!(ledger.chain_id(), 31_337, "anvil's chain id, read from the node");
    let network = AnvilNetwork { anvil, ledger: Arc::new(ledger), custody };
    suite::run(&network).await;
    eprintln!("anvil conformance suite: {:.1} s", started.elapsed().as_secs_f64());
}

/// The test's own reqwest client needs a rustls provider too; the ledger installs ring when it
/// connects, this only makes the order irrelevant.
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
