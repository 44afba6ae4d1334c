//! Breaks on PostgreSQL: `BreakStore`. Inserts use `ON CONFLICT DO NOTHING` (see `codec::conflict`).

use crate::clause::Clause;
use crate::codec::asset_text;
use crate::{PostgresTx, codec, query};
use async_trait::async_trait;
use sqlx::postgres::PgRow;
use tokenops_domain::TenantId;
use tokenops_domain::operation::{Break, BreakFilter};
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_store::conditions;
use tokenops_store::rows;
use tokenops_store::{BreakStore, StoreResult};

fn decode_break(row: &PgRow) -> StoreResult<Break> {
    rows::break_record(&codec::Cols(row))
}

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

    async fn list(&mut self, tenant: TenantId, filter: &BreakFilter, page: PageRequest) -> StoreResult<Page<Break>> {
        let clause = Clause::of(conditions::breaks(filter));
        clause.page(self, tenant, &rows::BREAKS, "detected_at DESC, id DESC", page, decode_break).await
    }
}
