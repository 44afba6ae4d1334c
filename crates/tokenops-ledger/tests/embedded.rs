//! The embedded ledger on both stores: the conformance suite, then what only an embedded ledger
//! has to prove. It keeps everything across a restart, and a transaction lost with the mempool
//! is included when its same bytes are sent again. One process at a time produces its blocks;
//! others read.

mod suite;

use alloy::primitives::{Address, B256, U256};
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;
use suite::{Network, included};
use tokenops_custody::{Custody, EmbeddedKeystore};
use tokenops_domain::{Clock, Timestamp};
use tokenops_ledger::{
    EmbeddedConfig, EmbeddedLedger, Ledger, LedgerCall, LedgerError, Outcome, ReceiptStatus, TokenSpec,
};
use tokenops_secrets::Sealer;
use tokenops_store::Store;
use tokenops_testkit::StoreFixture;
use tokenops_testkit::{Backend, backends};

/// The ledger's time at the start of every test (EVM seconds).
const T0: u64 = 1_800_000_000;

/// The domain's manual clock, read in EVM seconds: tests move it instead of sleeping.
#[derive(Clone)]
struct ManualClock(tokenops_domain::ManualClock);

impl Default for ManualClock {
    fn default() -> Self {
        Self(tokenops_domain::ManualClock::starting_at(Timestamp::from_micros(T0 as i64 * 1_000_000)))
    }
}

impl ManualClock {
    fn now(&self) -> u64 {
        u64::try_from(self.0.now().as_micros() / 1_000_000).expect("after the epoch")
    }
    fn advance(&self, seconds: u64) {
        self.0.advance_millis(i64::try_from(seconds).expect("seconds") * 1_000);
    }
    fn config(&self) -> EmbeddedConfig {
        EmbeddedConfig {
            block_interval: Duration::from_millis(10),
            clock: Arc::new(self.0.clone()),
            ..EmbeddedConfig::default()
        }
    }
}

fn keystore(store: Arc<dyn Store>) -> Arc<EmbeddedKeystore> {
    Arc::new(EmbeddedKeystore::new(store, Arc::new(Sealer::new([3u8; 32])), Arc::new(ManualClock::default().0)))
}

async fn deploy_euro(ledger: &EmbeddedLedger) -> Address {
    ledger.deploy_token(&TokenSpec { name: "Euro".into(), symbol: "EUR".into(), decimals: 2 }).await.expect("deploy")
}

/// A store, the issuer's and alice's wallets in a keystore on it, and a ledger on it that makes
/// blocks only when asked (or when a deployment waits for its own), with the Euro deployed.
struct SlowChain {
    fixture: StoreFixture,
    custody: Arc<EmbeddedKeystore>,
    issuer: Address,
    alice: Address,
    config: EmbeddedConfig,
    ledger: EmbeddedLedger,
    token: Address,
}

async fn slow_chain(backend: Backend) -> SlowChain {
    let fixture = StoreFixture::new(backend).await;
    let custody = keystore(fixture.store.clone());
    let issuer = custody.create_wallet("issuer").await.expect("issuer");
    let alice = custody.create_wallet("alice").await.expect("alice");
    let config = EmbeddedConfig { block_interval: Duration::from_secs(3_600), ..ManualClock::default().config() };
    let ledger =
        EmbeddedLedger::open(fixture.store.clone(), issuer, custody.clone(), config.clone()).await.expect("open");
    let token = deploy_euro(&ledger).await;
    SlowChain { fixture, custody, issuer, alice, config, ledger, token }
}

struct Embedded {
    ledger: Arc<EmbeddedLedger>,
    custody: Arc<EmbeddedKeystore>,
    clock: ManualClock,
}

#[async_trait]
impl Network for Embedded {
    fn ledger(&self) -> Arc<dyn Ledger> {
        self.ledger.clone()
    }
    fn custody(&self) -> Arc<dyn Custody> {
        self.custody.clone()
    }
    async fn now(&self) -> u64 {
        self.clock.now()
    }
    async fn advance_time(&self, seconds: u64) {
        self.clock.advance(seconds);
    }
    async fn stop(&self) {
        self.ledger.close();
    }
}

async fn conformance(backend: Backend) {
    let fixture = StoreFixture::new(backend).await;
    let custody = keystore(fixture.store.clone());
    let issuer = custody.create_wallet("issuer").await.expect("issuer wallet");
    let clock = ManualClock::default();
    let ledger =
        EmbeddedLedger::open(fixture.store.clone(), issuer, custody.clone(), clock.config()).await.expect("open");
    suite::run(&Embedded { ledger: Arc::new(ledger), custody, clock }).await;
}

async fn keeps_everything_across_a_restart(backend: Backend) {
    let fixture = StoreFixture::new(backend).await;
    let custody = keystore(fixture.store.clone());
    let issuer = custody.create_wallet("issuer").await.expect("issuer");
    let alice = custody.create_wallet("alice").await.expect("alice");
    let bob = custody.create_wallet("bob").await.expect("bob");
    let clock = ManualClock::default();

    let ledger =
        EmbeddedLedger::open(fixture.store.clone(), issuer, custody.clone(), clock.config()).await.expect("open");
    let token = ledger
        .deploy_token(&TokenSpec { name: "Swiss franc".into(), symbol: "CHF".into(), decimals: 2 })
        .await
        .expect("deploy");
    let mut receipts = Vec::new();
    for call in [
        LedgerCall::Mint { to: alice, amount: U256::from(1_000) },
        LedgerCall::Transfer { from: alice, to: bob, amount: U256::from(250) },
        LedgerCall::Transfer { from: alice, to: bob, amount: U256::from(5_000) },
        LedgerCall::Hold {
            owner: alice,
            id: B256::repeat_byte(1),
            payee: Some(bob),
            amount: U256::from(100),
            expires_at: Some(T0 + 60),
        },
        LedgerCall::Hold {
            owner: bob,
            id: B256::repeat_byte(2),
            payee: None,
            amount: U256::from(50),
            expires_at: None,
        },
    ] {
        let hash = ledger.submit(token, &call, custody.as_ref()).await.expect("submit");
        receipts.push((hash, included(&ledger, hash).await));
    }
    let head = ledger.head_number();
    let before = (ledger.balances(token, alice).await.expect("alice"), ledger.balances(token, bob).await.expect("bob"));
    drop(ledger);

    // A new process: new store handle, new keystore, new ledger.
    let store = fixture.reopen().await;
    let custody = keystore(store.clone());
    let ledger = EmbeddedLedger::open(store, issuer, custody.clone(), clock.config()).await.expect("reopen");
    assert_eq!(ledger.head_number(), head, "every block is still there");
    let info = ledger.adopt_token(token).await.expect("the deployment survived");
    assert_eq!((info.symbol.as_str(), info.decimals, info.issuer), ("CHF", 2, issuer));
    for (hash, receipt) in &receipts {
        let ReceiptStatus::Included { block_number, outcome } = ledger.receipt(*hash).await.expect("receipt") else {
            panic!("receipt of {hash} lost")
        };
        assert_eq!((block_number, &outcome), (receipt.0, &receipt.1));
    }
    assert!(matches!(&receipts[2].1 .1, Outcome::Reverted { reason, .. } if reason == "InsufficientAvailableBalance"));
    let after = (ledger.balances(token, alice).await.expect("alice"), ledger.balances(token, bob).await.expect("bob"));
    assert_eq!(
        (after.0.total, after.0.held, after.1.total, after.1.held),
        (before.0.total, before.0.held, before.1.total, before.1.held)
    );
    assert_eq!((after.0.total, after.0.held), (U256::from(750), U256::from(100)));

    // Holds, nonces and supply carried over: the hold executes once, the wallets keep signing
    // with the next nonce, the hold id stays used.
    let hash = ledger
        .submit(token, &LedgerCall::ExecuteHold { actor: alice, id: B256::repeat_byte(1) }, custody.as_ref())
        .await
        .expect("execute");
    assert_eq!(included(&ledger, hash).await.1, Outcome::Success);
    let hash = ledger
        .submit(token, &LedgerCall::ExecuteHold { actor: alice, id: B256::repeat_byte(1) }, custody.as_ref())
        .await
        .expect("execute again");
    assert!(matches!(included(&ledger, hash).await.1, Outcome::Reverted { reason, .. } if reason == "HoldNotActive"));
    let hold_again =
        LedgerCall::Hold { owner: bob, id: B256::repeat_byte(2), payee: None, amount: U256::from(1), expires_at: None };
    let hash = ledger.submit(token, &hold_again, custody.as_ref()).await.expect("hold");
    assert!(matches!(included(&ledger, hash).await.1, Outcome::Reverted { reason, .. } if reason == "HoldExists"));
    let hash = ledger
        .submit(token, &LedgerCall::Burn { from: bob, amount: U256::from(300) }, custody.as_ref())
        .await
        .expect("burn");
    assert_eq!(included(&ledger, hash).await.1, Outcome::Success);
    let bob_after = ledger.balances(token, bob).await.expect("bob");
    assert_eq!((bob_after.total, bob_after.held, bob_after.available), (U256::from(50), U256::from(50), U256::ZERO));
    assert!(ledger.head_number() > head);
}

async fn resends_what_the_mempool_lost(backend: Backend) {
    let fixture = StoreFixture::new(backend).await;
    let custody = keystore(fixture.store.clone());
    let issuer = custody.create_wallet("issuer").await.expect("issuer");
    let alice = custody.create_wallet("alice").await.expect("alice");
    let clock = ManualClock::default();
    let ledger =
        EmbeddedLedger::open(fixture.store.clone(), issuer, custody.clone(), clock.config()).await.expect("open");
    let token = deploy_euro(&ledger).await;
    drop(ledger);

    // A ledger that never produces a block on its own: the mint waits in the mempool.
    let slow = EmbeddedConfig { block_interval: Duration::from_secs(3_600), ..clock.config() };
    let ledger =
        EmbeddedLedger::open(fixture.reopen().await, issuer, custody.clone(), slow.clone()).await.expect("open");
    let signed = ledger
        .sign(token, &LedgerCall::Mint { to: alice, amount: U256::from(7) }, custody.as_ref())
        .await
        .expect("sign");
    ledger.send(&signed).await.expect("send");
    assert_eq!(ledger.receipt(signed.hash).await.expect("receipt"), ReceiptStatus::Pending);
    drop(ledger); // the process dies with the mint in its mempool

    let ledger = EmbeddedLedger::open(fixture.reopen().await, issuer, custody.clone(), slow).await.expect("reopen");
    assert_eq!(ledger.receipt(signed.hash).await.expect("receipt"), ReceiptStatus::Unknown);
    assert_eq!(ledger.send(&signed).await.expect("the same bytes again"), signed.hash);
    assert_eq!(ledger.produce_block().await.expect("block"), 1);
    assert_eq!(included(&ledger, signed.hash).await.1, Outcome::Success);
    assert_eq!(ledger.balances(token, alice).await.expect("balances").total, U256::from(7));

    // Garbage, and bytes signed for another chain, are refused for good.
    let truncated =
        tokenops_ledger::SignedTransaction { raw: signed.raw.slice(..signed.raw.len() - 1), ..signed.clone() };
    assert!(matches!(ledger.send(&truncated).await, Err(LedgerError::Final { .. })));
    let other_fixture = StoreFixture::new(backend).await;
    let other_config = EmbeddedConfig { chain_id: 99, ..clock.config() };
    let other =
        EmbeddedLedger::open(other_fixture.store.clone(), issuer, custody.clone(), other_config).await.expect("open");
    let other_token = deploy_euro(&other).await;
    assert_eq!(other_token, token, "the same issuer and nonce deploy to the same address on both chains");
    let foreign = other
        .sign(token, &LedgerCall::Mint { to: alice, amount: U256::from(1) }, custody.as_ref())
        .await
        .expect("sign");
    match ledger.send(&foreign).await {
        Err(LedgerError::Final { reason }) => assert!(reason.contains("chain"), "{reason}"),
        other => panic!("expected a final refusal, got {other:?}"),
    }
    // The next signature of the issuer continues after the included mint.
    let next = ledger
        .sign(token, &LedgerCall::Mint { to: alice, amount: U256::from(1) }, custody.as_ref())
        .await
        .expect("sign");
    assert_eq!(next.nonce, signed.nonce + 1);
}

/// A block whose write fails leaves no trace (one store transaction per block) and its
/// transactions wait for the next block.
async fn a_failed_block_write_leaves_nothing_and_is_retried(backend: Backend) {
    let SlowChain { fixture, custody, alice, ledger, token, .. } = slow_chain(backend).await;
    let blocks = fixture.db.count("ledger_blocks", "").await;

    fixture.db.fail_inserts_into("ledger_transactions").await;
    let hash = ledger
        .submit(token, &LedgerCall::Mint { to: alice, amount: U256::from(7) }, custody.as_ref())
        .await
        .expect("submit");
    match ledger.produce_block().await {
        Err(error @ LedgerError::Temporary { .. }) => assert!(error.is_temporary()),
        other => panic!("expected a temporary failure, got {other:?}"),
    }
    assert_eq!(fixture.db.count("ledger_blocks", "").await, blocks, "no block without its transactions");
    assert_eq!(fixture.db.count("ledger_balances", "").await, 0, "no balance without its block");
    assert_eq!(ledger.receipt(hash).await.expect("receipt"), ReceiptStatus::Pending);

    fixture.db.heal_inserts_into("ledger_transactions").await;
    assert_eq!(ledger.produce_block().await.expect("block"), 1);
    assert_eq!(included(&ledger, hash).await.1, Outcome::Success);
    assert_eq!(ledger.balances(token, alice).await.expect("balances").total, U256::from(7));
}

/// After a restart, a stored signature sent again can wait in the mempool behind a gap (a nonce
/// signed before the crash but never recorded). The next signature fills the gap, and the one
/// after it must skip the nonce the waiting transaction holds: handing it out again made two
/// transactions of one nonce, and the later one failed for good.
async fn a_resent_signature_behind_a_gap_keeps_its_nonce(backend: Backend) {
    let SlowChain { fixture, custody, issuer, alice, config: slow, ledger, token } = slow_chain(backend).await;
    let mint = |amount: u64| LedgerCall::Mint { to: alice, amount: U256::from(amount) };
    let lost = ledger.sign(token, &mint(1), custody.as_ref()).await.expect("sign");
    let kept = ledger.sign(token, &mint(2), custody.as_ref()).await.expect("sign");
    assert_eq!(kept.nonce, lost.nonce + 1);
    drop(ledger); // the process dies: `lost` was never recorded, `kept` was

    let ledger = EmbeddedLedger::open(fixture.reopen().await, issuer, custody.clone(), slow).await.expect("reopen");
    ledger.send(&kept).await.expect("the stored signature again");
    let filler = ledger.sign(token, &mint(4), custody.as_ref()).await.expect("sign");
    assert_eq!(filler.nonce, lost.nonce, "the gap is filled first");
    let after = ledger.sign(token, &mint(8), custody.as_ref()).await.expect("sign");
    assert_eq!(after.nonce, kept.nonce + 1, "the waiting transaction's nonce is not handed out again");
    ledger.send(&filler).await.expect("send");
    ledger.send(&after).await.expect("send");
    assert_eq!(ledger.produce_block().await.expect("block"), 3);
    for hash in [kept.hash, filler.hash, after.hash] {
        assert_eq!(included(&ledger, hash).await.1, Outcome::Success);
    }
    assert_eq!(ledger.balances(token, alice).await.expect("balances").total, U256::from(14));
}

/// The settlement's crash test once lost two operations this way: a recorded signature whose
/// send failed for now had its nonce handed to the next signature, and once that one landed the
/// recorded bytes could never be included. A refused send leaves the nonce to its bytes.
async fn a_send_refused_for_now_keeps_its_nonce_for_the_same_bytes(backend: Backend) {
    let SlowChain { fixture, custody, issuer, alice, config: slow, ledger, token } = slow_chain(backend).await;
    drop(ledger);
    let full_at_one = EmbeddedConfig { max_pending: 1, ..slow };
    let ledger = EmbeddedLedger::open(fixture.store.clone(), issuer, custody.clone(), full_at_one).await.expect("open");
    let mint = |amount: u64| LedgerCall::Mint { to: alice, amount: U256::from(amount) };
    let first = ledger.sign(token, &mint(1), custody.as_ref()).await.expect("sign");
    let refused = ledger.sign(token, &mint(2), custody.as_ref()).await.expect("sign");
    ledger.send(&first).await.expect("send");
    let error = ledger.send(&refused).await.expect_err("the mempool is full");
    assert!(error.is_temporary(), "{error}");
    let next = ledger.sign(token, &mint(4), custody.as_ref()).await.expect("sign");
    assert_eq!(next.nonce, refused.nonce + 1, "the refused bytes keep their nonce");
    assert_eq!(ledger.produce_block().await.expect("block"), 1, "transactions included");
    ledger.send(&refused).await.expect("the same bytes again");
    assert_eq!(ledger.produce_block().await.expect("block"), 1);
    ledger.send(&next).await.expect("send");
    assert_eq!(ledger.produce_block().await.expect("block"), 1);
    for hash in [first.hash, refused.hash, next.hash] {
        assert_eq!(included(&ledger, hash).await.1, Outcome::Success);
    }
    assert_eq!(ledger.balances(token, alice).await.expect("balances").total, U256::from(7));
}

/// The mempool and the nonce slots live in the producing process: a second producer on the
/// same store is refused while the first holds the role, even from another handle of the store
/// (another process); a reader beside it sees what the producer commits and signs nothing;
/// once the producer is gone, a new one opens.
async fn one_process_produces_others_read(backend: Backend) {
    let SlowChain { fixture, custody, issuer, alice, config, ledger, token } = slow_chain(backend).await;
    let other_process = fixture.reopen().await;
    let refused = EmbeddedLedger::open(other_process.clone(), issuer, custody.clone(), config.clone())
        .await
        .expect_err("a second producer on the store");
    assert!(matches!(&refused, LedgerError::Final { .. }), "{refused}");
    assert!(refused.to_string().contains("TOKENOPS_LEDGER=evm"), "the refusal says what to run: {refused}");

    let reader = EmbeddedLedger::open_reader(other_process.clone(), issuer, custody.clone(), config.clone())
        .await
        .expect("a reader beside the producer");
    let mint = LedgerCall::Mint { to: alice, amount: U256::from(5) };
    let hash = ledger.submit(token, &mint, custody.as_ref()).await.expect("submit");
    assert_eq!(ledger.produce_block().await.expect("block"), 1);
    let (block, _) = included(&ledger, hash).await;
    assert_eq!(reader.latest_block().await.expect("the reader's head"), block, "the producer's committed head");
    assert_eq!(reader.balances(token, alice).await.expect("balances").total, U256::from(5));
    assert!(matches!(reader.receipt(hash).await.expect("receipt"), ReceiptStatus::Included { .. }));
    let signing = reader.sign(token, &mint, custody.as_ref()).await.expect_err("a reader does not sign");
    assert!(matches!(signing, LedgerError::Final { .. }), "{signing}");

    drop(ledger);
    let next = EmbeddedLedger::open(other_process, issuer, custody.clone(), config)
        .await
        .expect("the role is free once the producer is gone");
    let hash = next.submit(token, &mint, custody.as_ref()).await.expect("submit");
    assert_eq!(next.produce_block().await.expect("block"), 1);
    assert_eq!(included(&next, hash).await.1, Outcome::Success);
    assert_eq!(reader.balances(token, alice).await.expect("balances").total, U256::from(10));
}

backends!(
    conformance,
    keeps_everything_across_a_restart,
    resends_what_the_mempool_lost,
    a_resent_signature_behind_a_gap_keeps_its_nonce,
    a_send_refused_for_now_keeps_its_nonce_for_the_same_bytes,
    a_failed_block_write_leaves_nothing_and_is_retried,
    one_process_produces_others_read
);
