//! The embedded keystore on both stores: wallets sign with their own key, disabled and unknown
//! wallets are refused, and the stored keys cannot be read without the master key.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use std::sync::Arc;
use tokenops_custody::{Address, B256, Custody, CustodyError, EmbeddedKeystore, Refusal};
use tokenops_domain::{Clock, ManualClock, SystemClock, Timestamp};
use tokenops_secrets::{SealError, Sealer};
use tokenops_testkit::StoreFixture;
use tokenops_testkit::{Backend, backends};

const MASTER: [u8; 32] = [7u8; 32];

/// The purpose prefix of a sealed wallet key's associated data, as documented in the keystore.
const WALLET_KEY: &[u8] = b"tokenops/wallet-key/";

/// When the tests' keystores start their clock (µs since the epoch).
const T0: i64 = 1_800_000_000_000_000;

fn keystore(store: Arc<dyn tokenops_store::Store>) -> EmbeddedKeystore {
    keystore_on(store, ManualClock::starting_at(Timestamp::from_micros(T0)))
}

fn keystore_on(store: Arc<dyn tokenops_store::Store>, clock: impl Clock) -> EmbeddedKeystore {
    EmbeddedKeystore::new(store, Arc::new(Sealer::new(MASTER)), Arc::new(clock))
}

fn hash(n: u8) -> B256 {
    B256::repeat_byte(n)
}

fn refusal(error: CustodyError) -> Refusal {
    match error {
        CustodyError::Refused { refusal, .. } => refusal,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

async fn signs_with_the_wallet_key(backend: Backend) {
    let fixture = StoreFixture::new(backend).await;
    let custody = keystore(fixture.store.clone());
    let alice = custody.create_wallet("alice").await.expect("create alice");
    let bob = custody.create_wallet("bob").await.expect("create bob");
    assert_ne!(alice, bob);

    for n in 1..=3 {
        let signature = custody.sign_hash(alice, hash(n)).await.expect("sign");
        assert_eq!(signature.recover_address_from_prehash(&hash(n)).expect("recover"), alice);
        // EIP-2: s in the lower half of the curve order, or EVM nodes refuse the transaction.
        assert!(signature.normalize_s().is_none(), "signature s is already normalised");
    }
    let signature = custody.sign_hash(bob, hash(9)).await.expect("sign");
    assert_eq!(signature.recover_address_from_prehash(&hash(9)).expect("recover"), bob);

    // A restart (a new keystore on the same store, same master key) keeps every wallet.
    let restarted = keystore(fixture.reopen().await);
    let signature = restarted.sign_hash(alice, hash(4)).await.expect("sign after restart");
    assert_eq!(signature.recover_address_from_prehash(&hash(4)).expect("recover"), alice);
}

async fn disabled_and_unknown_wallets_are_refused(backend: Backend) {
    let fixture = StoreFixture::new(backend).await;
    let clock = ManualClock::starting_at(Timestamp::from_micros(T0));
    let custody = keystore_on(fixture.store.clone(), clock.clone());
    let wallet = custody.create_wallet("to be disabled").await.expect("create");
    custody.sign_hash(wallet, hash(1)).await.expect("sign while active");

    // The key's record is stamped by the keystore's clock, not the system's.
    clock.advance_millis(5_000);
    custody.disable(wallet).await.expect("disable");
    clock.advance_millis(5_000);
    custody.disable(wallet).await.expect("disabling again is fine");
    assert_eq!(refusal(custody.sign_hash(wallet, hash(1)).await.expect_err("disabled")), Refusal::Disabled);
    let status = fixture.db.strings("SELECT status FROM custody_keys").await;
    assert_eq!(status, ["DISABLED"]);
    let stamps = fixture
        .db
        .strings("SELECT CAST(created_at AS TEXT) || '|' || CAST(disabled_at AS TEXT) FROM custody_keys")
        .await;
    assert_eq!(stamps, [format!("{T0}|{}", T0 + 5_000_000)]);

    let unknown = Address::repeat_byte(0x42);
    assert_eq!(refusal(custody.sign_hash(unknown, hash(1)).await.expect_err("unknown")), Refusal::UnknownWallet);
    assert_eq!(refusal(custody.disable(unknown).await.expect_err("unknown")), Refusal::UnknownWallet);
    assert_eq!(refusal(custody.create_wallet("bad\0label").await.expect_err("label")), Refusal::Rejected);
}

async fn keys_at_rest_are_unreadable_without_the_master_key(backend: Backend) {
    let fixture = StoreFixture::new(backend).await;
    let custody = keystore(fixture.store.clone());
    let wallet = custody.create_wallet("secret").await.expect("create");

    let raw_row = fixture
        .db
        .strings("SELECT address || '|' || label || '|' || sealed_key || '|' || status FROM custody_keys")
        .await;
    assert_eq!(raw_row.len(), 1);
    let raw_row = &raw_row[0];
    let sealed = fixture.db.strings("SELECT sealed_key FROM custody_keys").await.remove(0);

    // With the master key and the documented associated data (purpose prefix, address bytes) the
    // stored value opens to the wallet's secret key...
    let aad = |prefix: &[u8], address: Address| [prefix, address.as_slice()].concat();
    let master = Sealer::new(MASTER);
    let secret = master.open(&sealed, &aad(WALLET_KEY, wallet)).expect("opens under the master key");
    let key = k256::ecdsa::SigningKey::from_slice(&secret).expect("a secp256k1 key");
    assert_eq!(Address::from_public_key(key.verifying_key()), wallet);

    // ...but the stored row holds no trace of it: not as hex text, nor as bytes inside the
    // sealed value once its base64url is undone.
    let secret_hex = hex::encode(&secret);
    assert!(!raw_row.contains(&secret_hex), "the raw row contains the private key");
    assert!(!raw_row.contains(&secret_hex.to_uppercase()));
    let stored = URL_SAFE_NO_PAD.decode(&sealed).expect("the sealed value is base64url");
    assert!(
        !stored.windows(secret.len()).any(|bytes| bytes == &secret[..]),
        "the sealed value holds the key in the clear"
    );
    // Another master key does not open it, nor does the right key for another address or for
    // another purpose (a signing key's prefix).
    assert_eq!(Sealer::new([8u8; 32]).open(&sealed, &aad(WALLET_KEY, wallet)), Err(SealError::Unauthentic));
    assert_eq!(master.open(&sealed, &aad(WALLET_KEY, Address::repeat_byte(1))), Err(SealError::Unauthentic));
    assert_eq!(master.open(&sealed, &aad(b"tokenops/signing-key/", wallet)), Err(SealError::Unauthentic));
    assert_eq!(master.open(&sealed, wallet.as_slice()), Err(SealError::Unauthentic));

    // A keystore configured with another master key cannot sign: temporary (a configuration to
    // fix), not a refusal that would fail the operation for good.
    let wrong = EmbeddedKeystore::new(fixture.store.clone(), Arc::new(Sealer::new([8u8; 32])), Arc::new(SystemClock));
    match wrong.sign_hash(wallet, hash(1)).await {
        Err(CustodyError::Unavailable { reason }) => assert!(reason.contains("master key"), "{reason}"),
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

backends!(
    signs_with_the_wallet_key,
    disabled_and_unknown_wallets_are_refused,
    keys_at_rest_are_unreadable_without_the_master_key
);

/// Without a configured key the service seals with the development key in `{data_dir}/master.key`
/// (the binary's one dev key, shared with identity). The same key must come back after a
/// restart, or every wallet would be lost with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wallets_outlive_a_restart_on_the_development_master_key() {
    let data_dir =
        std::env::temp_dir().join(format!("tokenops-custody-{}-{}", std::process::id(), rand::random::<u64>()));
    let key_file = data_dir.join("master.key");
    let fixture = StoreFixture::new(Backend::Sqlite).await;
    let sealer = Sealer::load_or_create_dev_key(&key_file).expect("create the development key");
    let wallet = EmbeddedKeystore::new(fixture.store.clone(), Arc::new(sealer), Arc::new(SystemClock))
        .create_wallet("dev")
        .await
        .expect("create");

    let reloaded = Sealer::load_or_create_dev_key(&key_file).expect("reload the development key");
    let restarted = EmbeddedKeystore::new(fixture.reopen().await, Arc::new(reloaded), Arc::new(SystemClock));
    let signature = restarted.sign_hash(wallet, hash(2)).await.expect("sign after restart");
    assert_eq!(signature.recover_address_from_prehash(&hash(2)).expect("recover"), wallet);
    std::fs::remove_dir_all(&data_dir).expect("clean up");
}
