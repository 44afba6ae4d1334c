//! Settings: platform-wide values every node must share (for example the cursor signing key).

use async_trait::async_trait;

use crate::StoreResult;

#[async_trait]
pub trait SettingStore: Send {
    async fn get(&mut self, name: &str) -> StoreResult<Option<String>>;
    /// Inserts unless present; returns the value that is stored afterwards (first writer wins).
    async fn get_or_insert(&mut self, name: &str, value: &str) -> StoreResult<String>;
}
