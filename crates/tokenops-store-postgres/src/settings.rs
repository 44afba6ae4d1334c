//! Platform settings on PostgreSQL.

use crate::PostgresTx;
use async_trait::async_trait;
use tokenops_store::{SettingStore, StoreResult};

#[async_trait]
impl SettingStore for PostgresTx {
    async fn get(&mut self, name: &str) -> StoreResult<Option<String>> {
        self.scalar_optional(sqlx::query_scalar("SELECT value FROM settings WHERE name = $1").bind(name)).await
    }

    async fn get_or_insert(&mut self, name: &str, value: &str) -> StoreResult<String> {
        // A concurrent first writer makes this INSERT wait for its commit, then do nothing; the
        // SELECT (a new statement, so a fresh snapshot under READ COMMITTED) sees its value.
        self.execute(
            sqlx::query("INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING")
                .bind(name)
                .bind(value),
        )
        .await?;
        self.scalar(sqlx::query_scalar("SELECT value FROM settings WHERE name = $1").bind(name)).await
    }
}
