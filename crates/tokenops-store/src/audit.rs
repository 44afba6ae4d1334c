//! The audit trail: `AuditStore`.

use async_trait::async_trait;
use std::collections::BTreeMap;
use tokenops_domain::TenantId;
use tokenops_domain::audit::{AuditFilter, AuditRecord, AuditSeal};
use tokenops_domain::audit_chain::AuditBlock;
use tokenops_domain::paging::{Page, PageRequest, SortDirection, SortKey};
use uuid::Uuid;

use crate::StoreResult;
use crate::keyset::{KeyColumn, KeyValue};

#[async_trait]
pub trait AuditStore: Send {
    async fn record(&mut self, record: &AuditRecord) -> StoreResult<()>;
    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<AuditRecord>>;

    /// One page of `filter` with its exact total, counted in full.
    async fn list(
        &mut self,
        tenant: TenantId,
        filter: &AuditFilter,
        sort: &[SortKey],
        page: PageRequest,
    ) -> StoreResult<Page<AuditRecord>> {
        let counted = self.count(tenant, filter, None).await?;
        let items = self.page(tenant, filter, sort, page, counted.total).await?;
        Ok(Page { items, total: counted.total })
    }

    /// The exact number of records of `filter`. With `known`, the filter's count over the
    /// sealed records up to a chain position (an earlier answer's [`AuditCount::sealed`]), only
    /// the records sealed after it and those not sealed yet are counted: few, where a full
    /// count reads every match.
    async fn count(
        &mut self,
        tenant: TenantId,
        filter: &AuditFilter,
        known: Option<SealedCount>,
    ) -> StoreResult<AuditCount>;

    /// One page of `filter` in `sort` order (then `id`); `total` is the filter's count, which
    /// a backend may use to choose how to read it.
    async fn page(
        &mut self,
        tenant: TenantId,
        filter: &AuditFilter,
        sort: &[SortKey],
        page: PageRequest,
        total: u64,
    ) -> StoreResult<Vec<AuditRecord>>;

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

    // The sealed chain (`tokenops_domain::audit_chain`). A chain is an organisation's (`Some`)
    // or the platform's own records' (`None`, chain id the nil UUID).

    /// Up to `limit` chains that hold records not sealed yet.
    async fn unsealed_chains(&mut self, limit: u32) -> StoreResult<Vec<Option<TenantId>>>;

    /// The chain's latest block, if any.
    async fn last_block(&mut self, chain: Option<TenantId>) -> StoreResult<Option<AuditBlock>>;

    /// The latest block of up to `limit` chains whose id is above `after` (every chain when
    /// walked from `None`), by chain id.
    async fn last_blocks(&mut self, after: Option<Uuid>, limit: u32) -> StoreResult<Vec<AuditBlock>>;

    /// Replaces the head signature stored with a chain's block (a head signed anew with the
    /// current key after a key rotation; the head itself does not change).
    async fn resign_head(&mut self, chain_id: Uuid, number: i64, signature: &str) -> StoreResult<()>;

    /// Up to `limit` of the chain's records not sealed yet, visible to this transaction, in
    /// (`created_at`, `id`) order.
    async fn unsealed(&mut self, chain: Option<TenantId>, limit: u32) -> StoreResult<Vec<AuditRecord>>;

    /// Stores `block` and each record's seal. A block number already taken, or a record
    /// already sealed (another sealer got there first), is `Conflict`: the caller rolls back.
    async fn seal_block(
        &mut self,
        chain: Option<TenantId>,
        block: &AuditBlock,
        seals: &[(Uuid, AuditSeal)],
    ) -> StoreResult<()>;

    /// Up to `limit` of the chain's sealed records after position `after_seq`, in chain order.
    async fn sealed_after(
        &mut self,
        chain: Option<TenantId>,
        after_seq: i64,
        limit: u32,
    ) -> StoreResult<Vec<AuditRecord>>;

    /// Every stored block hash of the chain, by block number.
    async fn block_hashes(&mut self, chain: Option<TenantId>) -> StoreResult<BTreeMap<i64, String>>;

    /// How many of the chain's records are not sealed yet.
    async fn unsealed_count(&mut self, chain: Option<TenantId>) -> StoreResult<u64>;
}

/// A filter's count over an organisation's sealed records up to chain position `through_seq`.
/// Records are sealed in order (1, 2, … without gaps), and neither a sealed record's place nor
/// its fields change, so this count never changes: it can be kept, and a later total is it
/// plus the matches sealed after `through_seq` or not sealed yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SealedCount {
    pub through_seq: i64,
    pub count: u64,
}

/// How far behind the chain a [`SealedCount`] may be and still be carried forward: past this,
/// the records sealed since are read one by one from the table, and a count of the whole
/// filter through its index is no slower.
pub const SEALED_COUNT_CARRY_MAX: i64 = 20_000;

/// A filter's exact total, and its count over the sealed records as of the same read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditCount {
    pub total: u64,
    pub sealed: SealedCount,
}

impl AuditCount {
    /// The total of `sealed` matches up to the chain's last sealed position `head` (0 when
    /// none is) and `unsealed` matches not sealed yet, both read in one snapshot.
    pub fn new(head: i64, sealed: u64, unsealed: u64) -> Self {
        AuditCount { total: sealed + unsealed, sealed: SealedCount { through_seq: head, count: sealed } }
    }
}

/// Whether `known` can be carried forward to the chain's position `head` (see
/// [`SEALED_COUNT_CARRY_MAX`]); a count from ahead of the chain (another store) cannot.
pub fn carries(known: Option<SealedCount>, head: i64) -> Option<SealedCount> {
    known.filter(|k| k.through_seq <= head && head - k.through_seq <= SEALED_COUNT_CARRY_MAX)
}

/// The keyset columns of an audit list sorted by `sort` (columns from the endpoint's allow
/// list): ties broken by `occurred_at`, then `id`, both in the direction of the last sort
/// property. So a sort on a property with a search index (`(tenant, property, occurred_at)`:
/// action, source, actor, resource type and id) reads that index forwards or backwards and
/// stops at the page, as the default order (`occurred_at` then `id`, newest first) does; with
/// `id` always descending, an ascending sort had to sort every match.
pub fn audit_keys(sort: &[SortKey]) -> Vec<KeyColumn> {
    let direction = sort.last().map_or(SortDirection::Desc, |key| key.direction);
    let mut keys: Vec<KeyColumn> = sort
        .iter()
        .map(|key| KeyColumn { key: *key, nullable: matches!(key.column, "actor_id" | "resource_id") })
        .collect();
    if !keys.iter().any(|k| k.key.column == "occurred_at") {
        keys.push(KeyColumn { key: SortKey { column: "occurred_at", direction }, nullable: false });
    }
    keys.push(KeyColumn { key: SortKey { column: "id", direction }, nullable: false });
    keys
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

#[cfg(test)]
mod tests {
    use super::*;

    fn order(sort: &[SortKey]) -> Vec<(&'static str, SortDirection)> {
        audit_keys(sort).iter().map(|k| (k.key.column, k.key.direction)).collect()
    }

    #[test]
    fn ties_are_broken_by_occurrence_then_id_in_the_last_propertys_direction() {
        use SortDirection::{Asc, Desc};
        let key = |column, direction| SortKey { column, direction };
        assert_eq!(order(&[key("occurred_at", Desc)]), [("occurred_at", Desc), ("id", Desc)]);
        assert_eq!(order(&[key("occurred_at", Asc)]), [("occurred_at", Asc), ("id", Asc)]);
        assert_eq!(order(&[key("action", Asc)]), [("action", Asc), ("occurred_at", Asc), ("id", Asc)]);
        assert_eq!(
            order(&[key("action", Desc), key("resource_id", Asc)]),
            [("action", Desc), ("resource_id", Asc), ("occurred_at", Asc), ("id", Asc)]
        );
    }
}
