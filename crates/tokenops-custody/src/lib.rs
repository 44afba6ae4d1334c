//! Custody: who holds each wallet's key and signs for it. A port ([`Custody`]) with two
//! implementations:
//!
//! - [`EmbeddedKeystore`] (the default): one secp256k1 key per wallet, kept in the service's own
//!   store sealed under the platform master key (`tokenops_secrets::Sealer`, AES-256-GCM).
//! - [`RemoteSigner`] (production): a signing service spoken to over HTTP, modelled on
//!   Web3Signer; the protocol is in `PROTOCOL.md` beside this crate.
//!
//! Custody signs 32-byte hashes, not transactions: the ledger builds the transaction, asks for a
//! signature of its signing hash and encodes the result. So custody never needs to understand a
//! ledger, and a refusal here is distinguishable from a chain failure: nothing reached the ledger.

mod keystore;
mod remote;

pub use alloy::primitives::{Address, B256, Signature};
pub use keystore::EmbeddedKeystore;
pub use remote::{RemoteSigner, RemoteSignerConfig};

use async_trait::async_trait;

/// Why custody refused: the spec's `SIGNING_REJECTED`. Retrying does not help.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Custody holds no key for the wallet.
    UnknownWallet,
    /// The wallet's key was disabled.
    Disabled,
    /// Custody refused the request itself (an invalid label, a signer's policy, a signature that
    /// does not belong to the wallet).
    Rejected,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum CustodyError {
    /// Custody will not sign (or create, or disable) for this wallet: final.
    #[error("custody refused{}: {reason}", wallet.map(|w| format!(" for wallet {w}")).unwrap_or_default())]
    Refused { wallet: Option<Address>, refusal: Refusal, reason: String },
    /// Custody could not answer now (the remote signer is unreachable, the store failed, the
    /// key does not open under the configured master key): retry later, after fixing the
    /// cause if it is configuration.
    #[error("custody unavailable: {reason}")]
    Unavailable { reason: String },
}

impl CustodyError {
    pub fn refused(wallet: Address, refusal: Refusal, reason: impl Into<String>) -> Self {
        CustodyError::Refused { wallet: Some(wallet), refusal, reason: reason.into() }
    }

    pub fn unavailable(reason: impl Into<String>) -> Self {
        CustodyError::Unavailable { reason: reason.into() }
    }

    /// True for a refusal (final), false for a temporary failure.
    pub fn is_refusal(&self) -> bool {
        matches!(self, CustodyError::Refused { .. })
    }
}

/// Holds one key per wallet and signs with it.
#[async_trait]
pub trait Custody: Send + Sync {
    /// Creates a wallet with a fresh key and returns its EVM address. `label` is for operators
    /// (for example the account it belongs to); it is not secret and need not be unique.
    async fn create_wallet(&self, label: &str) -> Result<Address, CustodyError>;

    /// Signs `hash` (already hashed: a transaction's signing hash) with the wallet's key. The
    /// signature recovers to `wallet`; `s` is in the lower half of the curve order (EIP-2).
    async fn sign_hash(&self, wallet: Address, hash: B256) -> Result<Signature, CustodyError>;

    /// Disables the wallet's key for good: every later `sign_hash` is refused. Idempotent.
    async fn disable(&self, wallet: Address) -> Result<(), CustodyError>;
}

/// The store's spelling of an address: `0x` and 40 lower-case hex digits.
pub(crate) fn address_text(address: Address) -> String {
    format!("{address:#x}")
}

/// A label is operator text: bounded, printable, and storable on both stores (PostgreSQL refuses
/// NUL in text).
pub(crate) fn check_label(label: &str) -> Result<(), CustodyError> {
    if label.chars().count() > 200 || label.chars().any(char::is_control) {
        return Err(CustodyError::Refused {
            wallet: None,
            refusal: Refusal::Rejected,
            reason: "a wallet label is at most 200 characters without control characters".into(),
        });
    }
    Ok(())
}

/// Installs rustls's ring provider unless one is installed: the workspace builds reqwest without
/// a provider of its own (one provider for the whole binary), and a client built without one
/// panics.
pub(crate) fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_lower_case_text() {
        let address: Address = "0x00000000000000000000000000000000000000Ab".parse().expect("address");
        assert_eq!(address_text(address), "0x00000000000000000000000000000000000000ab");
    }

    #[test]
    fn labels_are_bounded() {
        assert!(check_label("account 42").is_ok());
        assert!(check_label(&"x".repeat(201)).is_err());
        assert!(check_label("a\0b").is_err());
    }
}
