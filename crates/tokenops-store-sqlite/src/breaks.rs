//! Breaks on SQLite: `BreakStore`.

use crate::codec::asset_text;
use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::params;
use tokenops_domain::operation::Break;
use tokenops_store::rows;
use tokenops_store::{BreakStore, StoreResult};

#[async_trait]
impl BreakStore for SqliteTx {
    async fn insert(&mut self, record: &Break) -> StoreResult<()> {
        self.insert_row(
            &rows::BREAKS,
            params![
                codec::id_text(record.id),
                codec::id_text(record.tenant_id.as_uuid()),
                record.transaction_id.map(codec::id_text),
                record.account_ref.as_str(),
                asset_text(record.asset_id),
                record.reason.as_str(),
                &record.detail,
                record.detected_at.as_micros(),
            ],
        )
    }
}
