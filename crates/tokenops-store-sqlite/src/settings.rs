//! Platform settings on SQLite.

use crate::SqliteTx;
use async_trait::async_trait;
use rusqlite::params;
use tokenops_store::{SettingStore, StoreResult};

#[async_trait]
impl SettingStore for SqliteTx {
    async fn get(&mut self, name: &str) -> StoreResult<Option<String>> {
        self.scalar_optional("SELECT value FROM settings WHERE name = ?1", params![name])
    }

    async fn get_or_insert(&mut self, name: &str, value: &str) -> StoreResult<String> {
        self.execute(
            "INSERT INTO settings (name, value) VALUES (?1, ?2) ON CONFLICT (name) DO NOTHING",
            params![name, value],
        )?;
        self.scalar("SELECT value FROM settings WHERE name = ?1", params![name])
    }
}
