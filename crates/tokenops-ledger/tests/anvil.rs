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
use tokenops_ledger::{
    Address, EvmConfig, EvmLedger, GasFunding, Ledger, LedgerCall, LedgerError, Outcome, ReceiptStatus,
    SignedTransaction, TokenSpec,
};
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

/// anvil, a custody keystore (its store kept for the test's life) with the issuer's wallet, and
/// the ledger's configuration.
struct Setup {
    anvil: Anvil,
    _fixture: StoreFixture,
    custody: Arc<EmbeddedKeystore>,
    issuer: Address,
    config: EvmConfig,
}

impl Setup {
    async fn start() -> Self {
        install_crypto_provider();
        let anvil = Anvil::start().await;
        let fixture = StoreFixture::new(Backend::Sqlite).await;
        let custody = Arc::new(EmbeddedKeystore::new(
            fixture.store.clone(),
            Arc::new(Sealer::new([5u8; 32])),
            Arc::new(tokenops_domain::SystemClock),
        ));
        let issuer = custody.create_wallet("issuer").await.expect("issuer wallet");
        let mut config = EvmConfig::new(anvil.url.clone());
        config.gas_funding = GasFunding::DevSetBalance(U256::from(10u64).pow(U256::from(19u64)));
        config.poll_interval = Duration::from_millis(20);
        config.request_timeout = Duration::from_secs(2);
        Self { anvil, _fixture: fixture, custody, issuer, config }
    }

    /// A ledger on the node with empty nonce slots, as after the service's restart.
    async fn connect(&self) -> EvmLedger {
        EvmLedger::connect(self.config.clone(), self.issuer, self.custody.clone()).await.expect("connect to anvil")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anvil_conformance() {
    let started = Instant::now();
    let Setup { anvil, _fixture, custody, issuer, config } = Setup::start().await;
    let ledger = EvmLedger::connect(config, issuer, custody.clone()).await.expect("connect to anvil");
    assert_eq!(ledger.chain_id().await.expect("chain id"), 31_337, "anvil's chain id, read from the node");
    let network = AnvilNetwork { anvil, ledger: Arc::new(ledger), custody };
    suite::run(&network).await;
    eprintln!("anvil conformance suite: {:.1} s", started.elapsed().as_secs_f64());
}

/// A node that does not answer when the service starts does not stop it: the ledger connects,
/// and what needs the node (its chain id, a signature) is a temporary failure until it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_away_at_connection_is_waited_for() {
    let setup = Setup::start().await;
    let nobody = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("address");
    let mut away = setup.config.clone();
    away.url = format!("http://{nobody}");
    let ledger =
        EvmLedger::connect(away, setup.issuer, setup.custody.clone()).await.expect("connects without the node");
    let error = ledger.chain_id().await.expect_err("no node to ask");
    assert!(error.is_temporary(), "{error}");
    assert_eq!(setup.connect().await.chain_id().await.expect("chain id"), 31_337);
}

/// Two nodes on one store, both signing for the issuer: only the holder of the wallet's signing
/// lease signs; the other is told so and signs nothing, until the holder stops signing and its
/// lease lapses. Then the other takes the wallet over and continues after the holder's nonces,
/// and the first is the one told so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_on_one_store_sign_for_a_wallet_one_at_a_time() {
    let setup = Setup::start().await;
    let store = setup._fixture.store.clone();
    let first = setup.connect().await.with_signing_leases(store.clone());
    let second = setup.connect().await.with_signing_leases(store);
    let alice = setup.custody.create_wallet("alice").await.expect("alice");
    let spec = TokenSpec { name: "Euro".into(), symbol: "EUR".into(), decimals: 2 };
    let token = first.deploy_token(&spec).await.expect("deploy");
    let custody = setup.custody.as_ref();
    let mut last = None;
    for amount in [1, 2, 4] {
        let signed = first.sign(token, &mint(alice, amount), custody).await.expect("the holder signs");
        first.send(&signed).await.expect("send");
        let refused = second.sign(token, &mint(alice, 100), custody).await;
        assert!(matches!(refused, Err(LedgerError::Elsewhere { .. })), "the other node does not sign: {refused:?}");
        last = Some(signed);
    }
    let last = last.expect("signed");

    let lapsed = Instant::now();
    let taken = loop {
        match second.sign(token, &mint(alice, 8), custody).await {
            Ok(signed) => break signed,
            Err(LedgerError::Elsewhere { .. }) => {
                assert!(lapsed.elapsed() < Duration::from_secs(10), "the unused lease lapses within seconds");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("signing: {e}"),
        }
    };
    eprintln!("the lease changed hands after {:?}", lapsed.elapsed());
    assert_eq!(taken.nonce, last.nonce + 1, "after the first node's nonces");
    second.send(&taken).await.expect("send");
    let refused = first.sign(token, &mint(alice, 100), custody).await;
    assert!(matches!(refused, Err(LedgerError::Elsewhere { .. })), "the first node no longer signs: {refused:?}");
    for transaction in [&last, &taken] {
        assert_eq!(suite::included(&second, transaction.hash).await.1, Outcome::Success);
    }
    assert_eq!(second.balances(token, alice).await.expect("balances").total, U256::from(15));
}

/// A crash leaves a gap: `lost` was signed but never recorded, the two after it were. Returns
/// the token, the wallet minted to, and the three signatures; the ledger that made them is gone.
async fn gap_left_by_a_crash(setup: &Setup) -> (Address, Address, [SignedTransaction; 3]) {
    let alice = setup.custody.create_wallet("alice").await.expect("alice");
    let ledger = setup.connect().await;
    let spec = TokenSpec { name: "Euro".into(), symbol: "EUR".into(), decimals: 2 };
    let token = ledger.deploy_token(&spec).await.expect("deploy");
    let lost = ledger.sign(token, &mint(alice, 1), setup.custody.as_ref()).await.expect("sign");
    let kept = ledger.sign(token, &mint(alice, 2), setup.custody.as_ref()).await.expect("sign");
    let kept_too = ledger.sign(token, &mint(alice, 4), setup.custody.as_ref()).await.expect("sign");
    assert_eq!([kept.nonce, kept_too.nonce], [lost.nonce + 1, lost.nonce + 2]);
    (token, alice, [lost, kept, kept_too])
}

fn mint(to: Address, amount: u64) -> LedgerCall {
    LedgerCall::Mint { to, amount: U256::from(amount) }
}

/// After a restart, the stored signatures sent again wait in the node's pool behind the gap a
/// crash left (the node's pending count is the gap). The next signature fills the gap, and the
/// one after must skip the nonces the waiting transactions hold: handing one out again made
/// the node refuse it ("replacement transaction underpriced") or, paying more, drop the waiting
/// one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_signature_behind_a_gap_keeps_its_nonce() {
    let setup = Setup::start().await;
    let (token, alice, [lost, kept, kept_too]) = gap_left_by_a_crash(&setup).await;

    let ledger = setup.connect().await;
    for waiting in [&kept, &kept_too] {
        ledger.send(waiting).await.expect("the stored signature again");
        assert_eq!(ledger.receipt(waiting.hash).await.expect("receipt"), ReceiptStatus::Pending, "behind the gap");
    }
    let filler = ledger.sign(token, &mint(alice, 8), setup.custody.as_ref()).await.expect("sign");
    assert_eq!(filler.nonce, lost.nonce, "the gap is filled first");
    let after = ledger.sign(token, &mint(alice, 16), setup.custody.as_ref()).await.expect("sign");
    assert_eq!(after.nonce, kept_too.nonce + 1, "the waiting transactions' nonces are not handed out again");
    ledger.send(&filler).await.expect("send");
    ledger.send(&after).await.expect("send");
    for transaction in [&kept, &kept_too, &filler, &after] {
        assert_eq!(suite::included(&ledger, transaction.hash).await.1, Outcome::Success);
    }
    assert_eq!(ledger.balances(token, alice).await.expect("balances").total, U256::from(30));
}

/// A nonce a waiting transaction took after the slot was filled (it is read from the node only
/// then) is refused at send: temporarily while both wait, since the waiting one may still leave
/// the pool; for good once the other is included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nonce_held_by_a_waiting_transaction_is_refused_until_the_other_is_included() {
    let setup = Setup::start().await;
    let (token, alice, [lost, kept, _]) = gap_left_by_a_crash(&setup).await;

    let ledger = setup.connect().await;
    let filler = ledger.sign(token, &mint(alice, 8), setup.custody.as_ref()).await.expect("sign");
    assert_eq!(filler.nonce, lost.nonce);
    ledger.send(&kept).await.expect("the stored signature again, after the slot was filled");
    let clash = ledger.sign(token, &mint(alice, 16), setup.custody.as_ref()).await.expect("sign");
    assert_eq!(clash.nonce, kept.nonce, "the slot could not know");
    let refused = ledger.send(&clash).await.expect_err("the nonce is held");
    assert!(refused.is_temporary(), "while both wait: {refused}");
    assert_eq!(ledger.receipt(kept.hash).await.expect("receipt"), ReceiptStatus::Pending, "not replaced");

    ledger.send(&filler).await.expect("send");
    assert_eq!(suite::included(&ledger, kept.hash).await.1, Outcome::Success);
    let refused = ledger.send(&clash).await.expect_err("the nonce is used");
    assert!(!refused.is_temporary(), "once the other is included: {refused}");
    let next = ledger.sign(token, &mint(alice, 32), setup.custody.as_ref()).await.expect("sign");
    assert_eq!(next.nonce, kept.nonce + 1);
    ledger.send(&next).await.expect("send");
    assert_eq!(suite::included(&ledger, next.hash).await.1, Outcome::Success);
    assert_eq!(ledger.balances(token, alice).await.expect("balances").total, U256::from(2 + 8 + 32));
}

/// The test's own reqwest client needs a rustls provider too; the ledger installs ring when it
/// connects, this only makes the order irrelevant.
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
