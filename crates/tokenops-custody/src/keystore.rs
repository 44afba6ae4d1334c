//! The embedded keystore: one secp256k1 key per wallet in the service's own store, sealed at
//! rest.
//!
//! A stored key (`custody_keys.sealed_key`) is the 32-byte secret scalar sealed with the
//! platform's one [`Sealer`] (AES-256-GCM under the master key; the format is the sealer's).
//! The associated data is `tokenops/wallet-key/` followed by the wallet's 20 address bytes: it
//! binds a sealed key to its row, so a key copied onto another wallet's row does not open, and to
//! its purpose, so no other kind of sealed secret opens as a wallet key.
//!
//! A key is opened for one signature and erased right after (the opened bytes are held in
//! `Zeroizing`, the library's key is erased once it has signed). Every signature reads the row,
//! so a key disabled by another node is refused at once.
//!
//! Signatures are made with libsecp256k1, which yields the recovery id with the signature;
//! `k256` finds it by trial recovery, which more than doubled the cost of every signature.

use crate::{Address, B256, Custody, CustodyError, Refusal, Signature, address_text, check_label};
use async_trait::async_trait;
use k256::ecdsa::SigningKey;
use rand::rngs::OsRng;
use secp256k1::{Message, Secp256k1, SignOnly};
use std::sync::{Arc, LazyLock};
use tokenops_domain::Clock;
use tokenops_secrets::Sealer;
use tokenops_store::{CustodyKeyRecord, CustodyKeyStatus, Store, StoreError};
use zeroize::Zeroizing;

/// Domain separation for sealed wallet keys, the counterpart of identity's
/// `tokenops/signing-key/`: one master key seals several kinds of secret, and a value sealed
/// for one purpose must never open as another.
const SEAL_CONTEXT: &[u8] = b"tokenops/wallet-key/";

/// One signing context for the process (creating one costs more than many signatures).
static SIGNER: LazyLock<Secp256k1<SignOnly>> = LazyLock::new(Secp256k1::signing_only);

/// The associated data a wallet's key is sealed under.
fn seal_aad(address: Address) -> Vec<u8> {
    [SEAL_CONTEXT, address.as_slice()].concat()
}

pub struct EmbeddedKeystore {
    store: Arc<dyn Store>,
    /// Shared with the rest of the service: one master key seals every secret at rest.
    sealer: Arc<Sealer>,
    /// Stamps `created_at` and `disabled_at`: the service's clock.
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for EmbeddedKeystore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedKeystore").finish_non_exhaustive()
    }
}

fn store_unavailable(error: StoreError) -> CustodyError {
    CustodyError::unavailable(format!("keystore: {error}"))
}

impl EmbeddedKeystore {
    pub fn new(store: Arc<dyn Store>, sealer: Arc<Sealer>, clock: Arc<dyn Clock>) -> Self {
        Self { store, sealer, clock }
    }

    fn open(&self, record: &CustodyKeyRecord, address: Address) -> Result<secp256k1::SecretKey, CustodyError> {
        // Temporary, not a refusal: a wrong master key is configuration to fix, after which the
        // same operation succeeds.
        let unopenable = || {
            tracing::error!(wallet = %address, "a custody key does not open under the configured master key");
            CustodyError::unavailable(format!(
                "the key of wallet {address} does not open under the configured master key"
            ))
        };
        let secret = self.sealer.open(&record.sealed_key, &seal_aad(address)).map_err(|_| unopenable())?;
        let bytes: [u8; 32] = secret.as_slice().try_into().map_err(|_| unopenable())?;
        let bytes = Zeroizing::new(bytes);
        secp256k1::SecretKey::from_byte_array(*bytes).map_err(|_| unopenable())
    }
}

#[async_trait]
impl Custody for EmbeddedKeystore {
    async fn create_wallet(&self, label: &str) -> Result<Address, CustodyError> {
        check_label(label)?;
        let key = SigningKey::random(&mut OsRng);
        let address = Address::from_public_key(key.verifying_key());
        let secret = Zeroizing::new(key.to_bytes());
        let sealed_key = self.sealer.seal(&secret[..], &seal_aad(address));
        drop(key);
        let record = CustodyKeyRecord {
            address: address_text(address),
            label: label.to_owned(),
            sealed_key,
            status: CustodyKeyStatus::Active,
            created_at: self.clock.now(),
            disabled_at: None,
        };
        let mut tx = self.store.write().await.map_err(store_unavailable)?;
        tx.custody_keys().insert(&record).await.map_err(store_unavailable)?;
        tx.commit().await.map_err(store_unavailable)?;
        tracing::info!(wallet = %address, label, "created a custody wallet");
        Ok(address)
    }

    async fn sign_hash(&self, wallet: Address, hash: B256) -> Result<Signature, CustodyError> {
        let mut tx = self.store.read().await.map_err(store_unavailable)?;
        let record = tx.custody_keys().get(&address_text(wallet)).await.map_err(store_unavailable)?;
        drop(tx);
        let Some(record) = record else {
            return Err(CustodyError::refused(wallet, Refusal::UnknownWallet, "custody holds no key for this wallet"));
        };
        if record.status == CustodyKeyStatus::Disabled {
            return Err(CustodyError::refused(wallet, Refusal::Disabled, "the wallet's key is disabled"));
        }
        let mut key = self.open(&record, wallet)?;
        let signature = SIGNER.sign_ecdsa_recoverable(Message::from_digest(hash.0), &key);
        key.non_secure_erase();
        let (recovery, compact) = signature.serialize_compact();
        let r = alloy::primitives::U256::from_be_slice(&compact[..32]);
        let s = alloy::primitives::U256::from_be_slice(&compact[32..]);
        // libsecp256k1 signs with a low `s` (EIP-2) and the parity of the nonce point's `y`.
        Ok(Signature::new(r, s, i32::from(recovery) == 1))
    }

    async fn disable(&self, wallet: Address) -> Result<(), CustodyError> {
        let mut tx = self.store.write().await.map_err(store_unavailable)?;
        let known =
            tx.custody_keys().disable(&address_text(wallet), self.clock.now()).await.map_err(store_unavailable)?;
        if !known {
            return Err(CustodyError::refused(wallet, Refusal::UnknownWallet, "custody holds no key for this wallet"));
        }
        tx.commit().await.map_err(store_unavailable)?;
        tracing::info!(%wallet, "disabled a custody wallet");
        Ok(())
    }
}
