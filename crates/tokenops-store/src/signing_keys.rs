//! The embedded provider's signing keys (sealed): `SigningKeyRecord` and `SigningKeyStore`.

use async_trait::async_trait;
use tokenops_domain::Timestamp;

use crate::rows::{self, Encode};
use crate::{StoreResult, TableWrites};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SigningKeyRecord {
    pub kid: String,
    /// The private key sealed under the master key (associated data: the kid).
    pub sealed_key: String,
    pub created_at: Timestamp,
    /// When the key stops being published (set when a newer key takes over).
    pub retire_at: Option<Timestamp>,
}

#[async_trait]
pub trait SigningKeyStore: Send + TableWrites {
    /// Oldest first.
    async fn list(&mut self) -> StoreResult<Vec<SigningKeyRecord>>;
    async fn insert(&mut self, key: &SigningKeyRecord) -> StoreResult<()> {
        self.insert_row(&rows::SIGNING_KEYS, key.values()?, "signing key id").await
    }
    async fn set_retire_at(&mut self, kid: &str, retire_at: Timestamp) -> StoreResult<()>;
    /// Removes keys retired before `cutoff`; returns how many.
    async fn delete_retired(&mut self, cutoff: Timestamp) -> StoreResult<u64>;
}
