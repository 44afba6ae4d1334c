//! Breaks on PostgreSQL: `BreakStore`. Inserts use `ON CONFLICT DO NOTHING` (see `codec::conflict`).

use crate::codec::asset_text;
use crate::{PostgresTx, query};
use async_trait::async_trait;
use tokenops_domain::operation::Break;
use tokenops_store::rows;
use tokenops_store::{BreakStore, StoreResult};

#[async_trait]
impl BreakStore for PostgresTx {
    async fn insert(&mut self, record: &Break) -> StoreResult<()> {
        self.insert_new(
            query::insert(&rows::BREAKS)
                .bind(record.id)
                .bind(record.tenant_id.as_uuid())
                .bind(record.transaction_id)
                .bind(record.account_ref.as_str())
                .bind(asset_text(record.asset_id))
                .bind(record.reason.as_str())
                .bind(&record.detail)
                .bind(record.detected_at.as_micros()),
            "break id",
        )
        .await
    }
}
