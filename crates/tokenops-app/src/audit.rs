//! The audit log: reading it, and the record a background job writes with its effect. Request
//! writes get theirs from `write::Write`.

use crate::clock::Clock;
use crate::error::{AppResult, Error};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use tokenops_domain::audit::{AuditFilter, AuditOutcome, AuditRecord, AuditSource};
use tokenops_domain::paging::{Page, PageRequest, SortKey};
use tokenops_domain::{TenantId, Timestamp, new_id};
use tokenops_store::{SealedCount, Store, StoreError, Tx};
use uuid::Uuid;

/// Records in `tx` what a job did (source WORKER, no actor), under the same audit actions as
/// request writes use.
pub async fn record_worker(
    tx: &mut dyn Tx,
    tenant: TenantId,
    action: &crate::write::AuditAction,
    resource_id: String,
    outcome: AuditOutcome,
    detail: serde_json::Value,
    now: Timestamp,
) -> Result<(), StoreError> {
    let record = AuditRecord {
        tenant_id: Some(tenant),
        outcome,
        ..platform_record(AuditSource::Worker, action, resource_id, detail, now)
    };
    tx.audit().record(&record).await
}

/// A platform record (no organisation, no actor, no request) of a change the service made of
/// itself, at start (SYSTEM) or in a job (WORKER).
pub fn platform_record(
    source: AuditSource,
    action: &crate::write::AuditAction,
    resource_id: String,
    detail: serde_json::Value,
    now: Timestamp,
) -> AuditRecord {
    AuditRecord {
        id: new_id(),
        tenant_id: None,
        occurred_at: now,
        created_at: now,
        action: action.name.to_owned(),
        category: action.category.to_owned(),
        source,
        actor_id: None,
        resource_type: action.resource_type.to_owned(),
        resource_id: Some(resource_id),
        outcome: AuditOutcome::Success,
        request_id: None,
        idempotency_key: None,
        http_status: None,
        detail,
        seal: None,
    }
}

/// How many records an export reads per batch: large enough that the per-read cost is small,
/// small enough that memory stays flat and no read holds the store for long.
const EXPORT_BATCH: u32 = 2_000;

/// How many filters' sealed counts a node keeps: a few bytes each.
const SEALED_COUNTS_MAX: usize = 1_024;

/// The filters' counts over sealed records (`SealedCount`), per organisation and filter, the
/// least recently used dropped first. Each node keeps its own: a count is exact whoever made
/// it, so nodes need not agree on what they keep.
#[derive(Default)]
struct SealedCounts {
    entries: HashMap<(TenantId, AuditFilter), (SealedCount, u64)>,
    /// Advances on each use; an entry's last use is its value then.
    clock: u64,
}

impl SealedCounts {
    fn get(&mut self, key: &(TenantId, AuditFilter)) -> Option<SealedCount> {
        self.clock += 1;
        let clock = self.clock;
        self.entries.get_mut(key).map(|(count, used)| {
            *used = clock;
            *count
        })
    }

    /// Keeps `count` unless a count further along the chain is kept already (a request that
    /// read an older snapshot finishing last).
    fn put(&mut self, key: (TenantId, AuditFilter), count: SealedCount) {
        self.clock += 1;
        let clock = self.clock;
        if let Some((kept, used)) = self.entries.get_mut(&key) {
            if kept.through_seq <= count.through_seq {
                *kept = count;
            }
            *used = clock;
            return;
        }
        if self.entries.len() >= SEALED_COUNTS_MAX {
            let oldest = self.entries.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                self.entries.remove(&oldest);
            }
        }
        self.entries.insert(key, (count, clock));
    }
}

/// `filter` as a cache key: the actors as a set, which is what the filter means.
fn normalised(filter: &AuditFilter) -> AuditFilter {
    let mut filter = filter.clone();
    filter.actor_ids.sort();
    filter.actor_ids.dedup();
    filter
}

pub struct AuditLog {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    /// Style B wants an exact total, and a broad filter matches most of the log: its count over
    /// the sealed records is kept, so that the next page of it counts only what was sealed or
    /// written since.
    sealed_counts: Mutex<SealedCounts>,
}

impl AuditLog {
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Self {
        Self { store, clock, sealed_counts: Mutex::new(SealedCounts::default()) }
    }

    /// The whole filtered log in `sort` order, read in batches. It covers the records that
    /// occurred before the export began: a record written while it runs is not half-included.
    pub fn export(&self, tenant: TenantId, filter: &AuditFilter, sort: &[SortKey]) -> AuditExport {
        let began = Timestamp::from_micros(self.clock.now().as_micros().saturating_add(1));
        let mut filter = filter.clone();
        filter.occurred_to = Some(filter.occurred_to.map_or(began, |to| to.min(began)));
        AuditExport { store: self.store.clone(), tenant, filter, sort: sort.to_vec(), last: None, done: false }
    }

    pub async fn list(
        &self,
        tenant: TenantId,
        filter: &AuditFilter,
        sort: &[SortKey],
        page: PageRequest,
    ) -> AppResult<Page<AuditRecord>> {
        let key = (tenant, normalised(filter));
        let known = self.sealed_counts.lock().unwrap_or_else(PoisonError::into_inner).get(&key);
        let mut tx = self.store.read().await?;
        let counted = tx.audit().count(tenant, filter, known).await?;
        let items = tx.audit().page(tenant, filter, sort, page, counted.total).await?;
        drop(tx);
        self.sealed_counts.lock().unwrap_or_else(PoisonError::into_inner).put(key, counted.sealed);
        Ok(Page { items, total: counted.total })
    }

    pub async fn get(&self, tenant: TenantId, id: Uuid) -> AppResult<AuditRecord> {
        let mut tx = self.store.read().await?;
        tx.audit().get(tenant, id).await?.ok_or_else(|| Error::not_found(format!("Audit event {id} not found")))
    }
}

/// An export under way: each [`AuditExport::next_batch`] reads the next records, in a read of
/// its own, after the last one handed out.
pub struct AuditExport {
    store: Arc<dyn Store>,
    tenant: TenantId,
    filter: AuditFilter,
    sort: Vec<SortKey>,
    last: Option<AuditRecord>,
    done: bool,
}

impl AuditExport {
    /// The next records, or `None` once all are out.
    pub async fn next_batch(&mut self) -> AppResult<Option<Vec<AuditRecord>>> {
        if self.done {
            return Ok(None);
        }
        let batch = {
            let mut tx = self.store.read().await?;
            tx.audit().batch_after(self.tenant, &self.filter, &self.sort, self.last.as_ref(), EXPORT_BATCH).await?
        };
        self.done = batch.len() < EXPORT_BATCH as usize;
        self.last = batch.last().cloned();
        Ok((!batch.is_empty()).then_some(batch))
    }
}
