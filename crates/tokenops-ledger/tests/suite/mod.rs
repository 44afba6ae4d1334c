//! The ledger conformance suite: one scenario, run on every ledger (the embedded ledger on both
//! stores in `tests/embedded.rs`, anvil in `tests/anvil.rs`). It drives the ledger through the
//! port only, so a behaviour that differs between two ledgers is a bug in one of them.
//!
//! Covered: deploy and adopt, mint, transfer, a transfer over the available balance (included,
//! reverted with the decoded reason, with a hash and a block), holds with and without payee,
//! executeHold, cancelHold, a second completion of the same hold (reverts), expiry (time moved,
//! not slept), total = available + held after every step, burn, sending the same signed bytes
//! twice, a custody refusal (nothing on the ledger, no nonce gap), and a ledger that stops
//! answering (temporary).

#![allow(dead_code)]

use alloy::primitives::{Address, B256, Bytes, U256};
use alloy::sol_types::SolError;
use async_trait::async_trait;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokenops_custody::{Custody, CustodyError, Refusal, Signature};
use tokenops_ledger::contract::TokenopsToken as C;
use tokenops_ledger::{Balances, Ledger, LedgerCall, LedgerError, Outcome, ReceiptStatus, TokenSpec, TxHash};

/// What the suite needs of a ledger under test besides the port.
#[async_trait]
pub trait Network: Send + Sync {
    fn ledger(&self) -> Arc<dyn Ledger>;
    /// The custody holding the issuer's and the test wallets' keys.
    fn custody(&self) -> Arc<dyn Custody>;
    /// The ledger's time: the next block's timestamp is at least this (EVM seconds).
    async fn now(&self) -> u64;
    /// Moves the ledger's time forward.
    async fn advance_time(&self, seconds: u64);
    /// Makes the ledger unreachable (the node stops).
    async fn stop(&self);
}

/// Custody that refuses the next signature, then delegates: a refusal must leave no nonce gap.
struct RefuseNext {
    inner: Arc<dyn Custody>,
    refuse: AtomicBool,
}

#[async_trait]
impl Custody for RefuseNext {
    async fn create_wallet(&self, label: &str) -> Result<Address, CustodyError> {
        self.inner.create_wallet(label).await
    }
    async fn sign_hash(&self, wallet: Address, hash: B256) -> Result<Signature, CustodyError> {
        if self.refuse.swap(false, Ordering::SeqCst) {
            return Err(CustodyError::refused(wallet, Refusal::Rejected, "policy says no"));
        }
        self.inner.sign_hash(wallet, hash).await
    }
    async fn disable(&self, wallet: Address) -> Result<(), CustodyError> {
        self.inner.disable(wallet).await
    }
}

/// Waits (bounded) until the transaction is included.
pub async fn included(ledger: &dyn Ledger, hash: TxHash) -> (u64, Outcome) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match ledger.receipt(hash).await.expect("receipt") {
            ReceiptStatus::Included { block_number, outcome } => return (block_number, outcome),
            ReceiptStatus::Pending => {}
            ReceiptStatus::Unknown => panic!("the ledger does not know {hash}"),
        }
        assert!(tokio::time::Instant::now() < deadline, "{hash} not included within 30 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

struct Scenario<'a> {
    network: &'a dyn Network,
    ledger: Arc<dyn Ledger>,
    custody: Arc<dyn Custody>,
    token: Address,
    wallets: Vec<Address>,
}

impl Scenario<'_> {
    /// Submits the call and waits for its receipt.
    async fn settle(&self, call: LedgerCall) -> (TxHash, u64, Outcome) {
        let hash = self.ledger.submit(self.token, &call, self.custody.as_ref()).await.expect("submit");
        let (block, outcome) = included(self.ledger.as_ref(), hash).await;
        (hash, block, outcome)
    }

    async fn succeeds(&self, call: LedgerCall) -> u64 {
        let (hash, block, outcome) = self.settle(call.clone()).await;
        assert_eq!(outcome, Outcome::Success, "{call:?} ({hash})");
        self.check_invariant().await;
        block
    }

    /// Asserts the call is included reverted with `reason`; returns the revert data.
    async fn reverts(&self, call: LedgerCall, reason: &str) -> Bytes {
        let (hash, block, outcome) = self.settle(call.clone()).await;
        assert!(block > 0, "a reverted transaction has a block");
        assert_ne!(hash, TxHash::ZERO);
        let Outcome::Reverted { reason: actual, data } = outcome else {
            panic!("{call:?} should revert with {reason}, it succeeded")
        };
        assert_eq!(actual, reason, "{call:?}");
        self.check_invariant().await;
        data
    }

    async fn balances(&self, wallet: Address) -> Balances {
        self.ledger.balances(self.token, wallet).await.expect("balances")
    }

    /// total = available + held, for every wallet.
    async fn check_invariant(&self) {
        for wallet in &self.wallets {
            let b = self.balances(*wallet).await;
            assert_eq!(b.total, b.available + b.held, "total = available + held for {wallet}: {b:?}");
        }
    }

    async fn expect(&self, wallet: Address, total: u64, held: u64) {
        let b = self.balances(wallet).await;
        assert_eq!((b.total, b.held, b.available), (U256::from(total), U256::from(held), U256::from(total - held)));
    }
}

fn amount(n: u64) -> U256 {
    U256::from(n)
}

fn id(n: u8) -> B256 {
    B256::repeat_byte(n)
}

pub async fn run(network: &dyn Network) {
    let ledger = network.ledger();
    let custody = network.custody();
    let issuer = ledger.issuer();

    // Deploy, and adopt what was deployed.
    let spec = TokenSpec { name: "Euro".into(), symbol: "EUR".into(), decimals: 2 };
    let token = ledger.deploy_token(&spec).await.expect("deploy");
    let info = ledger.adopt_token(token).await.expect("adopt");
    assert_eq!(
        (info.address, info.name.as_str(), info.symbol.as_str(), info.decimals, info.issuer),
        (token, "Euro", "EUR", 2, issuer)
    );
    let nowhere = Address::repeat_byte(0x5e);
    assert!(matches!(ledger.adopt_token(nowhere).await, Err(LedgerError::Final { .. })), "no token there");

    let mut wallets = Vec::new();
    for label in ["alice", "bob", "carol"] {
        let wallet = custody.create_wallet(label).await.expect("wallet");
        ledger.register_wallet(wallet).await.expect("register");
        wallets.push(wallet);
    }
    let (alice, bob, carol) = (wallets[0], wallets[1], wallets[2]);
    let s = Scenario { network, ledger: ledger.clone(), custody: custody.clone(), token, wallets };

    // Mint and transfer.
    let first_block = s.succeeds(LedgerCall::Mint { to: alice, amount: amount(1_000) }).await;
    s.expect(alice, 1_000, 0).await;
    let block = s.succeeds(LedgerCall::Transfer { from: alice, to: bob, amount: amount(300) }).await;
    assert!(block >= first_block, "blocks do not go back");
    s.expect(alice, 700, 0).await;
    s.expect(bob, 300, 0).await;
    let read = s.balances(alice).await;
    assert!(read.block_number >= block, "balances are read at or after the last block");

    // Over the available balance: included, reverted, decoded.
    let data = s
        .reverts(LedgerCall::Transfer { from: alice, to: bob, amount: amount(800) }, "InsufficientAvailableBalance")
        .await;
    let error = C::InsufficientAvailableBalance::abi_decode(&data).expect("revert data decodes");
    assert_eq!((error.account, error.available, error.needed), (alice, amount(700), amount(800)));
    s.expect(alice, 700, 0).await;

    // Holds with and without payee; held funds cannot be transferred.
    s.succeeds(LedgerCall::Hold { owner: alice, id: id(1), payee: Some(bob), amount: amount(200), expires_at: None })
        .await;
    s.expect(alice, 700, 200).await;
    s.succeeds(LedgerCall::Hold { owner: alice, id: id(2), payee: None, amount: amount(100), expires_at: None }).await;
    s.expect(alice, 700, 300).await;
    s.reverts(LedgerCall::Transfer { from: alice, to: carol, amount: amount(450) }, "InsufficientAvailableBalance")
        .await;
    s.reverts(
        LedgerCall::Hold { owner: alice, id: id(1), payee: None, amount: amount(1), expires_at: None },
        "HoldExists",
    )
    .await;
    s.reverts(
        LedgerCall::Hold { owner: alice, id: id(9), payee: None, amount: amount(0), expires_at: None },
        "ZeroAmount",
    )
    .await;

    // executeHold pays the payee (RELEASE); the payee may not execute; twice reverts.
    s.reverts(LedgerCall::ExecuteHold { actor: bob, id: id(1) }, "Unauthorized").await;
    s.succeeds(LedgerCall::ExecuteHold { actor: alice, id: id(1) }).await;
    s.expect(alice, 500, 100).await;
    s.expect(bob, 500, 0).await;
    let data = s.reverts(LedgerCall::ExecuteHold { actor: alice, id: id(1) }, "HoldNotActive").await;
    assert_eq!(C::HoldNotActive::abi_decode(&data).expect("decodes").status, 2, "executed");

    // cancelHold returns the funds (CANCEL); a second completion reverts.
    s.succeeds(LedgerCall::CancelHold { actor: alice, id: id(2) }).await;
    s.expect(alice, 500, 0).await;
    let data = s.reverts(LedgerCall::CancelHold { actor: alice, id: id(2) }, "HoldNotActive").await;
    assert_eq!(C::HoldNotActive::abi_decode(&data).expect("decodes").status, 3, "cancelled");
    s.reverts(LedgerCall::ExecuteHold { actor: alice, id: id(2) }, "HoldNotActive").await;
    s.reverts(LedgerCall::CancelHold { actor: alice, id: id(77) }, "UnknownHold").await;

    // A hold without payee executes back to the owner's available balance; the issuer may
    // execute for the platform.
    s.succeeds(LedgerCall::Hold { owner: alice, id: id(3), payee: None, amount: amount(50), expires_at: None }).await;
    s.expect(alice, 500, 50).await;
    s.succeeds(LedgerCall::ExecuteHold { actor: issuer, id: id(3) }).await;
    s.expect(alice, 500, 0).await;

    // Expiry, judged against the block's time: before it only the owner or the issuer may
    // cancel; from it on execution reverts and anyone may cancel.
    let now = network.now().await;
    s.reverts(
        LedgerCall::Hold {
            owner: alice,
            id: id(4),
            payee: Some(carol),
            amount: amount(40),
            expires_at: Some(now.saturating_sub(10)),
        },
        "HoldExpired",
    )
    .await;
    let expires_at = now + 1_000;
    s.succeeds(LedgerCall::Hold {
        owner: alice,
        id: id(4),
        payee: Some(carol),
        amount: amount(40),
        expires_at: Some(expires_at),
    })
    .await;
    s.expect(alice, 500, 40).await;
    s.reverts(LedgerCall::CancelHold { actor: carol, id: id(4) }, "Unauthorized").await;
    network.advance_time(2_000).await;
    let data = s.reverts(LedgerCall::ExecuteHold { actor: alice, id: id(4) }, "HoldExpired").await;
    assert_eq!(C::HoldExpired::abi_decode(&data).expect("decodes").expiresAt, expires_at);
    s.expect(alice, 500, 40).await;
    s.succeeds(LedgerCall::CancelHold { actor: carol, id: id(4) }).await;
    s.expect(alice, 500, 0).await;
    s.expect(carol, 0, 0).await;

    // Burn: available funds only.
    s.succeeds(LedgerCall::Hold { owner: alice, id: id(5), payee: None, amount: amount(100), expires_at: None }).await;
    let data = s.reverts(LedgerCall::Burn { from: alice, amount: amount(450) }, "InsufficientAvailableBalance").await;
    assert_eq!(C::InsufficientAvailableBalance::abi_decode(&data).expect("decodes").available, amount(400));
    s.succeeds(LedgerCall::Burn { from: alice, amount: amount(400) }).await;
    s.expect(alice, 100, 100).await;
    s.succeeds(LedgerCall::CancelHold { actor: issuer, id: id(5) }).await;
    s.expect(alice, 100, 0).await;

    // The same signed bytes twice: one hash, one effect.
    let signed = ledger
        .sign(token, &LedgerCall::Transfer { from: bob, to: carol, amount: amount(10) }, custody.as_ref())
        .await
        .expect("sign");
    let first = ledger.send(&signed).await.expect("send");
    assert_eq!(first, signed.hash);
    assert_eq!(ledger.send(&signed).await.expect("send again while pending or included"), signed.hash);
    let (_, outcome) = included(ledger.as_ref(), signed.hash).await;
    assert_eq!(outcome, Outcome::Success);
    assert_eq!(ledger.send(&signed).await.expect("send again once included"), signed.hash);
    s.expect(bob, 490, 0).await;
    s.expect(carol, 10, 0).await;

    // A custody refusal: nothing reaches the ledger and the wallet's nonce has no gap.
    let refusing = RefuseNext { inner: custody.clone(), refuse: AtomicBool::new(true) };
    let call = LedgerCall::Transfer { from: bob, to: carol, amount: amount(5) };
    match ledger.submit(token, &call, &refusing).await {
        Err(error @ LedgerError::Signing(CustodyError::Refused { .. })) => assert!(!error.is_temporary()),
        other => panic!("expected a signing refusal, got {other:?}"),
    }
    s.expect(bob, 490, 0).await;
    let hash = ledger.submit(token, &call, &refusing).await.expect("signs the second time");
    assert_eq!(included(ledger.as_ref(), hash).await.1, Outcome::Success, "no nonce gap after the refusal");
    s.expect(bob, 485, 0).await;

    // A disabled wallet: SIGNING_REJECTED, nothing on the ledger.
    custody.disable(carol).await.expect("disable");
    match ledger
        .submit(token, &LedgerCall::Transfer { from: carol, to: alice, amount: amount(1) }, custody.as_ref())
        .await
    {
        Err(LedgerError::Signing(CustodyError::Refused { refusal: Refusal::Disabled, .. })) => {}
        other => panic!("expected a signing refusal, got {other:?}"),
    }
    s.expect(carol, 15, 0).await;
    s.expect(alice, 100, 0).await;

    // The ledger stops answering: temporary (unreachable, where no answer comes), for every call.
    network.stop().await;
    let call = LedgerCall::Transfer { from: alice, to: bob, amount: amount(1) };
    for result in [
        ledger.submit(token, &call, custody.as_ref()).await.map(|_| ()),
        // A hash the ledger has not answered for yet (an included receipt may be cached).
        ledger.receipt(TxHash::repeat_byte(0x99)).await.map(|_| ()),
        ledger.balances(token, alice).await.map(|_| ()),
    ] {
        match result {
            Err(error @ (LedgerError::Temporary { .. } | LedgerError::Unreachable { .. })) => {
                assert!(error.is_temporary())
            }
            other => panic!("expected a temporary failure, got {other:?}"),
        }
    }
}
