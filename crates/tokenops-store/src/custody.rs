//! Custody keys: the embedded keystore's persistence. One row per wallet holds its secp256k1
//! secret key sealed under the master key (`tokenops-secrets`: AES-256-GCM); the store never sees
//! a plain key and cannot open one (the master key is configuration, not data).
//!
//! Wallets are platform-wide, not tenant-scoped: an address is unique on the ledger, and the
//! accounts that own wallets (later issues) carry the tenant.

use async_trait::async_trait;
use tokenops_domain::Timestamp;

use crate::rows::{self, Encode};
use crate::{StoreResult, TableWrites};

/// Whether a key may sign. A disabled key stays stored (so that its wallet's history remains
/// explainable) but every signing request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CustodyKeyStatus {
    Active,
    Disabled,
}

impl CustodyKeyStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CustodyKeyStatus::Active => "ACTIVE",
            CustodyKeyStatus::Disabled => "DISABLED",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "ACTIVE" => Some(CustodyKeyStatus::Active),
            "DISABLED" => Some(CustodyKeyStatus::Disabled),
            _ => None,
        }
    }
}

/// One wallet's key as stored.
#[derive(Clone, PartialEq, Eq)]
pub struct CustodyKeyRecord {
    /// The wallet's EVM address: `0x` and 40 lower-case hex digits.
    pub address: String,
    pub label: String,
    /// The 32-byte secret key sealed under the master key (associated data: the purpose prefix
    /// `tokenops/wallet-key/` and the address's 20 bytes), as `Sealer::seal` writes it.
    pub sealed_key: String,
    pub status: CustodyKeyStatus,
    pub created_at: Timestamp,
    pub disabled_at: Option<Timestamp>,
}

/// The sealed key is not secret, but a debug print of it helps nobody and invites copying it
/// into logs.
impl std::fmt::Debug for CustodyKeyRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CustodyKeyRecord")
            .field("address", &self.address)
            .field("label", &self.label)
            .field("status", &self.status)
            .field("created_at", &self.created_at)
            .field("disabled_at", &self.disabled_at)
            .finish_non_exhaustive()
    }
}

#[async_trait]
pub trait CustodyKeyStore: Send + TableWrites {
    /// Stores a new key; `StoreError::Conflict` when the address already has one.
    async fn insert(&mut self, key: &CustodyKeyRecord) -> StoreResult<()> {
        self.insert_row(&rows::CUSTODY_KEYS, key.values()?, "custody key address").await
    }
    async fn get(&mut self, address: &str) -> StoreResult<Option<CustodyKeyRecord>>;
    /// Disables the key (idempotent: a disabled key keeps its first `disabled_at`); false when
    /// the address has no key.
    async fn disable(&mut self, address: &str, now: Timestamp) -> StoreResult<bool>;
}
