//! Breaks on SQLite: `BreakStore`.

use crate::clause::Clause;
use crate::codec::asset_text;
use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::{Row, params};
use tokenops_domain::TenantId;
use tokenops_domain::operation::{Break, BreakFilter};
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_store::conditions;
use tokenops_store::rows;
use tokenops_store::{BreakStore, StoreResult};

fn decode_break(row: &Row<'_>) -> StoreResult<Break> {
    rows::break_record(&codec::Cols(row))
}

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

    async fn list(&mut self, tenant: TenantId, filter: &BreakFilter, page: PageRequest) -> StoreResult<Page<Break>> {
        let clause = Clause::of(conditions::breaks(filter));
        clause.page(self, tenant, &rows::BREAKS, "detected_at DESC, id DESC", page, decode_break)
    }
}
