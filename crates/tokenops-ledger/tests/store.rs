//! The ledger's store traits on both backends, below the ledger: a block written with every kind
//! of row reads back exactly (nulls, blobs, 256-bit amounts as text, a hold expiry beyond
//! i64::MAX), the upserts replace what a block changes, and a second block with the same number
//! is a conflict that changes nothing (this fences out a second producer).

use tokenops_domain::Timestamp;
use tokenops_store::{
    LedgerBalance, LedgerBlock, LedgerBlockChanges, LedgerHold, LedgerHoldStatus, LedgerNonce, LedgerToken,
    LedgerTransaction, StoreError,
};
use tokenops_testkit::StoreFixture;
use tokenops_testkit::{Backend, backends};

fn block(number: u64) -> LedgerBlock {
    LedgerBlock {
        number,
        hash: format!("0x{:064x}", number + 1000),
        parent_hash: format!("0x{:064x}", number + 999),
        timestamp: 1_800_000_000 + number,
        transaction_count: 1,
        produced_at: Timestamp::from_micros(1_800_000_000_000_000),
    }
}

const TOKEN: &str = "0x7070707070707070707070707070707070707070";
const ALICE: &str = "0xa1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1";
/// 2^256 - 1.
const MAX_U256: &str = "115792089237316195423570985008687907853269984665640564039457584007913129639935";

async fn blocks_round_trip_and_fence_a_second_producer(backend: Backend) {
    let fixture = StoreFixture::new(backend).await;
    let store = &fixture.store;

    let mut tx = store.write().await.expect("write");
    assert_eq!(tx.ledger().chain_id().await.expect("chain id"), None);
    tx.ledger().init_chain(7, &block(0)).await.expect("init");
    tx.commit().await.expect("commit");
    let mut tx = store.write().await.expect("write");
    assert!(matches!(tx.ledger().init_chain(7, &block(0)).await, Err(StoreError::Conflict(_))));
    drop(tx);

    let reverted = LedgerTransaction {
        hash: format!("0x{:064x}", 1),
        block_number: 1,
        index: 0,
        sender: ALICE.into(),
        nonce: 0,
        to: Some(TOKEN.into()),
        raw: vec![0x02, 0xff, 0x00, 0x10],
        success: false,
        revert_reason: Some("InsufficientAvailableBalance".into()),
        revert_data: Some(vec![0x67, 0x01, 0xc6, 0xf6]),
        contract_address: None,
    };
    let deployment = LedgerTransaction {
        hash: format!("0x{:064x}", 2),
        index: 1,
        nonce: 1,
        to: None,
        success: true,
        revert_reason: None,
        revert_data: None,
        contract_address: Some(TOKEN.into()),
        ..reverted.clone()
    };
    let token = LedgerToken {
        address: TOKEN.into(),
        name: "Euro".into(),
        symbol: "EUR".into(),
        decimals: 2,
        issuer: ALICE.into(),
        total_supply: MAX_U256.into(),
        deploy_transaction: deployment.hash.clone(),
        block_number: 1,
    };
    let balance = LedgerBalance { token: TOKEN.into(), wallet: ALICE.into(), total: MAX_U256.into(), held: "5".into() };
    let hold = LedgerHold {
        token: TOKEN.into(),
        id: format!("0x{:064x}", 9),
        owner: ALICE.into(),
        payee: None,
        amount: "5".into(),
        expires_at: u64::MAX,
        status: LedgerHoldStatus::Active,
    };
    let nonce = LedgerNonce { address: ALICE.into(), nonce: 2 };
    let first = block(1);
    let changes = LedgerBlockChanges {
        block: &first,
        transactions: &[reverted.clone(), deployment.clone()],
        tokens: std::slice::from_ref(&token),
        balances: std::slice::from_ref(&balance),
        holds: std::slice::from_ref(&hold),
        nonces: std::slice::from_ref(&nonce),
    };
    let mut tx = store.write().await.expect("write");
    tx.ledger().append_block(changes).await.expect("append");
    tx.commit().await.expect("commit");

    let mut tx = store.read().await.expect("read");
    let ledger = tx.ledger();
    assert_eq!(ledger.chain_id().await.expect("chain id"), Some(7));
    assert_eq!(ledger.head().await.expect("head"), Some(first.clone()));
    assert_eq!(ledger.block(0).await.expect("genesis"), Some(block(0)));
    assert_eq!(ledger.transaction(&reverted.hash).await.expect("tx"), Some(reverted.clone()));
    assert_eq!(ledger.transaction(&deployment.hash).await.expect("tx"), Some(deployment.clone()));
    assert_eq!(ledger.transaction(&format!("0x{:064x}", 3)).await.expect("tx"), None);
    assert_eq!(ledger.token(TOKEN).await.expect("token"), Some(token.clone()));
    let keys = vec![(TOKEN.to_owned(), ALICE.to_owned()), (TOKEN.to_owned(), TOKEN.to_owned())];
    assert_eq!(ledger.balances(&keys).await.expect("balances"), vec![balance.clone()], "a missing row is zero");
    let hold_keys = vec![(TOKEN.to_owned(), hold.id.clone()), (TOKEN.to_owned(), format!("0x{:064x}", 8))];
    assert_eq!(ledger.holds(&hold_keys).await.expect("holds"), vec![hold.clone()]);
    assert_eq!(ledger.nonces(&[ALICE.to_owned(), TOKEN.to_owned()]).await.expect("nonces"), vec![nonce.clone()]);
    drop(tx);

    // A second producer writing block 1 again: a conflict, and nothing of it lands.
    let intruder = LedgerTransaction { hash: format!("0x{:064x}", 4), block_number: 2, nonce: 2, ..reverted.clone() };
    let mut tx = store.write().await.expect("write");
    let result = tx
        .ledger()
        .append_block(LedgerBlockChanges {
            block: &first,
            transactions: std::slice::from_ref(&intruder),
            tokens: &[],
            balances: &[],
            holds: &[],
            nonces: &[],
        })
        .await;
    assert!(matches!(result, Err(StoreError::Conflict(_))), "{result:?}");
    drop(tx);

    // The next block's upserts replace state rows.
    let second = block(2);
    let spent = LedgerBalance { total: "0".into(), held: "0".into(), ..balance.clone() };
    let executed = LedgerHold { status: LedgerHoldStatus::Executed, ..hold.clone() };
    let burnt = LedgerToken { total_supply: "0".into(), ..token.clone() };
    let next = LedgerNonce { nonce: 3, ..nonce.clone() };
    let mut tx = store.write().await.expect("write");
    tx.ledger()
        .append_block(LedgerBlockChanges {
            block: &second,
            transactions: std::slice::from_ref(&intruder),
            tokens: std::slice::from_ref(&burnt),
            balances: std::slice::from_ref(&spent),
            holds: std::slice::from_ref(&executed),
            nonces: std::slice::from_ref(&next),
        })
        .await
        .expect("append");
    tx.commit().await.expect("commit");
    let mut tx = store.read().await.expect("read");
    let ledger = tx.ledger();
    assert_eq!(ledger.head().await.expect("head").map(|b| b.number), Some(2));
    assert_eq!(ledger.balances(&keys).await.expect("balances"), vec![spent]);
    assert_eq!(ledger.holds(&hold_keys).await.expect("holds"), vec![executed]);
    assert_eq!(ledger.token(TOKEN).await.expect("token"), Some(burnt));
    assert_eq!(ledger.nonces(&[ALICE.to_owned()]).await.expect("nonces"), vec![next]);
    assert_eq!(ledger.transaction(&intruder.hash).await.expect("tx").map(|t| t.block_number), Some(2));
}

backends!(blocks_round_trip_and_fence_a_second_producer);
