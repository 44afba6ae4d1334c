//! Platform settings on SQLite.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use tokenops_store::{SettingStore, StoreResult};

#[async_trait]
impl SettingStore for SqliteTx {
    async fn get(&mut self, name: &str) -> StoreResult<Option<String>> {
        sqlx::query_scalar("SELECT value FROM settings WHERE name = $1")
            .bind(name)
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(codec::backend)
    }

    async fn get_or_insert(&mut self, name: &str, value: &str) -> StoreResult<String> {
        sqlx::query("INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING")
            .bind(name)
            .bind(value)
            .execute(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        sqlx::query_scalar("SELECT value FROM settings WHERE name = $1")
            .bind(name)
            .fetch_one(&mut *self.tx)
            .await
            .map_err(codec::backend)
    }
}
