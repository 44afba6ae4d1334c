//! The audit trail: `AuditStore`.

use async_trait::async_trait;
use tokenops_domain::TenantId;
use tokenops_domain::audit::{AuditFilter, AuditRecord};
use tokenops_domain::paging::{Page, PageRequest, SortKey};
use uuid::Uuid;

use crate::StoreResult;
use crate::keyset::{self, KeyColumn, KeyValue};

#[async_trait]
pub trait AuditStore: Send {
    async fn record(&mut self, record: &AuditRecord) -> StoreResult<()>;
    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<AuditRecord>>;
    async fn list(
        &mut self,
        tenant: TenantId,
        filter: &AuditFilter,
        sort: &[SortKey],
        page: PageRequest,
    ) -> StoreResult<Page<AuditRecord>>;

    /// Up to `limit` records of `filter` in the order of `sort` (then `id`), strictly after
    /// `after`, the last record of the previous batch: an export reads the log this way, each
    /// batch a short read, however many records it holds.
    async fn batch_after(
        &mut self,
        tenant: TenantId,
        filter: &AuditFilter,
        sort: &[SortKey],
        after: Option<&AuditRecord>,
        limit: u32,
    ) -> StoreResult<Vec<AuditRecord>>;
}

/// The keyset columns of an audit list sorted by `sort` (columns from the endpoint's allow
/// list), `id` last.
pub fn audit_keys(sort: &[SortKey]) -> Vec<KeyColumn> {
    let keys: Vec<KeyColumn> = sort
        .iter()
        .map(|key| KeyColumn { key: *key, nullable: matches!(key.column, "actor_id" | "resource_id") })
        .collect();
    keyset::with_id(&keys)
}

/// `record`'s values in `keys` (from [`audit_keys`]), as the store compares them.
pub fn audit_key_values(record: &AuditRecord, keys: &[KeyColumn]) -> Vec<KeyValue> {
    let text = |v: &str| KeyValue::Text(v.to_owned());
    keys.iter()
        .map(|k| match k.key.column {
            "id" => KeyValue::Id(record.id),
            "occurred_at" => KeyValue::Int(record.occurred_at.as_micros()),
            "created_at" => KeyValue::Int(record.created_at.as_micros()),
            "action" => text(&record.action),
            "category" => text(&record.category),
            "source" => text(record.source.as_str()),
            "actor_id" => text(record.actor_id.as_deref().unwrap_or("")),
            "resource_type" => text(&record.resource_type),
            "resource_id" => text(record.resource_id.as_deref().unwrap_or("")),
            "outcome" => text(record.outcome.as_str()),
            // The endpoint's allow list names no other column.
            other => text(other),
        })
        .collect()
}
