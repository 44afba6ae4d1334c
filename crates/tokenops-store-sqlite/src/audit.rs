//! Audit records on SQLite.

use crate::clause::{self, Clause};
use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::types::Value;
use rusqlite::{Row, params, params_from_iter};
use std::collections::BTreeMap;
use tokenops_domain::TenantId;
use tokenops_domain::audit::{AuditFilter, AuditRecord, AuditSeal};
use tokenops_domain::audit_chain::{self, AuditBlock};
use tokenops_domain::paging::{PageRequest, SortKey};
use tokenops_store::rows::{self, AUDIT_BLOCK_COLUMNS, AUDIT_COLUMNS};
use tokenops_store::{
    AuditCount, AuditStore, SealedCount, StoreResult, ascii_prefix_range, audit_key_values, audit_keys, carries,
    case_forms,
};
use tokenops_store::{conditions, keyset};
use uuid::Uuid;

/// The chain's tenant as `?1` binds it: `tenant_id IS ?1` matches NULL for the platform's chain
/// (SQLite uses an index for `IS` as for `=`).
fn chain_value(chain: Option<TenantId>) -> Value {
    chain.map_or(Value::Null, |t| Value::Text(codec::id_text(t.as_uuid())))
}

fn decode(row: &Row<'_>) -> StoreResult<AuditRecord> {
    rows::audit_record(&codec::Cols(row))
}

/// How many matches of the `query` filter a page may still find through the identifier
/// columns' indexes and sort. SQLite's planner cannot tell a rare prefix from a common one (it
/// keeps no histograms), and the indexes serve a rare one; a common one's page is found sooner
/// by reading the newest records in order until the page is full. The count, taken first, tells
/// which.
const QUERY_BY_INDEX_UP_TO: u64 = 5_000;

/// The WHERE clause shared by the count and the page, with `?1` the tenant. `by_index`: bound an
/// ASCII `query` by each identifier column's range, for SQLite to read it through their indexes
/// (migration 0017), the exact pattern deciding either way; and let several actors be read
/// through theirs.
fn where_clause(filter: &AuditFilter, by_index: bool) -> Clause {
    let mut clause = Clause::of(conditions::audit_records(filter));
    if !filter.actor_ids.is_empty() {
        // Unary `+` keeps SQLite from reading several actors through their index, which finds
        // their matches out of order, to be sorted all before the first page.
        let column = if by_index || filter.actor_ids.len() == 1 { "actor_id" } else { "+actor_id" };
        let actors: Vec<String> = filter.actor_ids.iter().map(|a| clause.param(Value::Text(a.clone()))).collect();
        clause.and(&format!("{column} IN ({})", actors.join(", ")));
    }
    if let Some(q) = &filter.query {
        let pattern = clause.param(Value::Text(prefix_glob(q)));
        // An ASCII query also bounds each column by its range in the column's NOCASE index
        // (migration 0017), so that each column is searched through its index, not the table.
        let range = ascii_prefix_range(q)
            .filter(|_| by_index)
            .map(|(lower, upper)| (clause.param(Value::Text(lower)), clause.param(Value::Text(upper))));
        // Every match lies in its column's range, so the ranges (one OR, read index by index)
        // and the exact patterns (another) may be checked apart: SQLite reads an OR through
        // several indexes only when each of its terms is an index's.
        if let Some((lo, hi)) = range {
            let ranges = QUERY_COLUMNS
                .iter()
                .map(|col| format!("({col} >= {lo} COLLATE NOCASE AND {col} < {hi} COLLATE NOCASE)"))
                .collect::<Vec<_>>()
                .join(" OR ");
            clause.and(&format!("({ranges})"));
        }
        let any = QUERY_COLUMNS.iter().map(|col| format!("{col} GLOB {pattern}")).collect::<Vec<_>>().join(" OR ");
        clause.and(&format!("({any})"));
    }
    clause
}

/// The identifier columns the free-text query matches by case-insensitive prefix.
const QUERY_COLUMNS: &[&str] = &["id", "actor_id", "resource_id", "request_id", "action"];

/// A GLOB pattern for "starts with `query`, ignoring case". SQLite's `lower()` and `LIKE` fold
/// ASCII letters only, so each letter becomes the set of its case forms (`[éÉ]`) instead, the
/// same rule the PostgreSQL store applies; GLOB's own special characters match themselves.
pub(crate) fn prefix_glob(query: &str) -> String {
    let mut pattern = String::with_capacity(query.len() * 4 + 1);
    for c in query.chars() {
        let forms = case_forms(c);
        if forms.len() > 1 || matches!(c, '*' | '?' | '[') {
            pattern.push('[');
            pattern.extend(forms);
            pattern.push(']');
        } else {
            pattern.push(c);
        }
    }
    pattern.push('*');
    pattern
}

#[async_trait]
impl AuditStore for SqliteTx {
    async fn record(&mut self, r: &AuditRecord) -> StoreResult<()> {
        self.execute(
            "INSERT INTO audit_records (id, tenant_id, occurred_at, created_at, action, category, source, actor_id,
                                        resource_type, resource_id, outcome, request_id, idempotency_key, http_status, detail)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
            params![
                codec::id_text(r.id),
                r.tenant_id.map(|t| codec::id_text(t.as_uuid())),
                r.occurred_at.as_micros(),
                r.created_at.as_micros(),
                &r.action,
                &r.category,
                r.source.as_str(),
                r.actor_id.as_deref(),
                &r.resource_type,
                r.resource_id.as_deref(),
                r.outcome.as_str(),
                r.request_id.as_deref(),
                r.idempotency_key.as_deref(),
                r.http_status.map(i64::from),
                codec::json_text(&r.detail),
            ],
        )?;
        Ok(())
    }

    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<AuditRecord>> {
        let sql = format!("SELECT {AUDIT_COLUMNS} FROM audit_records WHERE tenant_id = ?1 AND id = ?2");
        self.fetch_optional(&sql, params![codec::id_text(tenant.as_uuid()), codec::id_text(id)], decode)
    }

    async fn count(
        &mut self,
        tenant: TenantId,
        filter: &AuditFilter,
        known: Option<SealedCount>,
    ) -> StoreResult<AuditCount> {
        // One read transaction: the head, the unsealed matches and the sealed ones are one
        // snapshot's.
        let tenant_text = codec::id_text(tenant.as_uuid());
        let head: Option<i64> = self.scalar(
            "SELECT MAX(chain_seq) FROM audit_records WHERE tenant_id = ?1 AND chain_seq IS NOT NULL",
            params![&tenant_text],
        )?;
        let head = head.unwrap_or(0);
        let mut plain = where_clause(filter, false);
        let matches = plain.sql.clone();
        // The planner would read a broad filter's own index to find these few (it keeps no
        // histograms): `INDEXED BY` reads the unsealed records' partial index, and the chain's.
        let unsealed = self.count_of(&plain, tenant, &format!("SELECT COUNT(*) FROM audit_records INDEXED BY audit_records_unsealed WHERE {matches} AND chain_seq IS NULL"))?;
        let sealed = match carries(known, head) {
            Some(known) => {
                let through = plain.param(Value::Integer(known.through_seq));
                let since = self.count_of(&plain, tenant, &format!("SELECT COUNT(*) FROM audit_records INDEXED BY audit_records_by_chain_seq WHERE {matches} AND chain_seq > {through}"))?;
                known.count + since
            }
            None => {
                let clause = where_clause(filter, true);
                self.count_of(&clause, tenant, &clause.count_sql("audit_records"))?.saturating_sub(unsealed)
            }
        };
        Ok(AuditCount::new(head, sealed, unsealed))
    }

    async fn page(
        &mut self,
        tenant: TenantId,
        filter: &AuditFilter,
        sort: &[SortKey],
        page: PageRequest,
        total: u64,
    ) -> StoreResult<Vec<AuditRecord>> {
        // A `query` prefix or several actors find their matches through their indexes out of
        // order: worth it only for few matches.
        let unordered = filter.query.is_some() || filter.actor_ids.len() > 1;
        let by_index = !unordered || total <= QUERY_BY_INDEX_UP_TO;
        let clause = where_clause(filter, by_index);
        // The export's order too, so that a page and an export list the same records alike.
        let order = keyset::order_by(&audit_keys(sort));
        let (limit, offset) = codec::page_limits(page);
        let mut values = clause::values(&clause, tenant);
        values.extend([Value::Integer(limit), Value::Integer(offset)]);
        self.fetch_all(&clause.page_sql("audit_records", AUDIT_COLUMNS, &order), params_from_iter(values), decode)
    }

    async fn batch_after(
        &mut self,
        tenant: TenantId,
        filter: &AuditFilter,
        sort: &[SortKey],
        after: Option<&AuditRecord>,
        limit: u32,
    ) -> StoreResult<Vec<AuditRecord>> {
        // In order, batch after batch: read the newest records in order, as a common prefix's
        // page is (see `QUERY_BY_INDEX_UP_TO`).
        let mut clause = where_clause(filter, false);
        let keys = audit_keys(sort);
        if let Some(record) = after {
            clause.after(&keys, &audit_key_values(record, &keys));
        }
        let sql = format!(
            "SELECT {AUDIT_COLUMNS} FROM audit_records WHERE {} ORDER BY {} LIMIT {}",
            clause.sql,
            keyset::order_by(&keys),
            clause.placeholder(clause.next())
        );
        let mut values = clause::values(&clause, tenant);
        values.push(Value::Integer(i64::from(limit)));
        self.fetch_all(&sql, params_from_iter(values), decode)
    }

    async fn unsealed_chains(&mut self, limit: u32) -> StoreResult<Vec<Option<TenantId>>> {
        self.fetch_all(
            // Held to the partial index: statistics taken before a sealing (SQLite's planner
            // keeps no others) put every record in it, and the planner then scanned the table,
            // a million rows on each run of the sealer.
            "SELECT DISTINCT tenant_id FROM audit_records INDEXED BY audit_records_unsealed WHERE chain_seq IS NULL LIMIT ?1",
            params![i64::from(limit)],
            |row| rows::Columns::opt_tenant(&codec::Cols(row), "tenant_id"),
        )
    }

    async fn last_block(&mut self, chain: Option<TenantId>) -> StoreResult<Option<AuditBlock>> {
        let sql = format!(
            "SELECT {AUDIT_BLOCK_COLUMNS} FROM audit_blocks WHERE chain_id = ?1 ORDER BY block_number DESC LIMIT 1"
        );
        self.fetch_optional(&sql, params![codec::id_text(audit_chain::chain_id(chain))], |row| {
            rows::audit_block(&codec::Cols(row))
        })
    }

    async fn last_blocks(&mut self, after: Option<Uuid>, limit: u32) -> StoreResult<Vec<AuditBlock>> {
        // SQLite takes a bare column beside MAX() from the row that holds the maximum.
        let sql = format!(
            "SELECT {AUDIT_BLOCK_COLUMNS} FROM audit_blocks WHERE (chain_id, block_number) IN (
                 SELECT chain_id, MAX(block_number) FROM audit_blocks
                 WHERE ?1 IS NULL OR chain_id > ?1 GROUP BY chain_id ORDER BY chain_id LIMIT ?2
             ) ORDER BY chain_id"
        );
        self.fetch_all(&sql, params![after.map(codec::id_text), i64::from(limit)], |row| {
            rows::audit_block(&codec::Cols(row))
        })
    }

    async fn resign_head(&mut self, chain_id: Uuid, number: i64, signature: &str) -> StoreResult<()> {
        self.require_write("signing an audit head anew")?;
        self.execute(
            "UPDATE audit_blocks SET head_signature = ?3 WHERE chain_id = ?1 AND block_number = ?2",
            params![codec::id_text(chain_id), number, signature],
        )
        .map(|_| ())
    }

    async fn unsealed(&mut self, chain: Option<TenantId>, limit: u32) -> StoreResult<Vec<AuditRecord>> {
        let sql = format!(
            "SELECT {AUDIT_COLUMNS} FROM audit_records INDEXED BY audit_records_unsealed WHERE tenant_id IS ?1 AND chain_seq IS NULL ORDER BY created_at, id LIMIT ?2"
        );
        self.fetch_all(&sql, params![chain_value(chain), i64::from(limit)], decode)
    }

    async fn seal_block(
        &mut self,
        chain: Option<TenantId>,
        block: &AuditBlock,
        seals: &[(Uuid, AuditSeal)],
    ) -> StoreResult<()> {
        self.execute(
            "INSERT INTO audit_blocks (chain_id, block_number, previous_hash, hash, first_seq, record_count, sealed_at, head_signature)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                codec::id_text(block.chain_id),
                block.number,
                &block.previous_hash,
                &block.hash,
                block.first_seq,
                block.record_count,
                block.sealed_at.as_micros(),
                &block.head_signature,
            ],
        )?;
        for (id, seal) in seals {
            let changed = self.execute(
                "UPDATE audit_records SET chain_seq = ?1, block_number = ?2, record_hash = ?3
                 WHERE id = ?4 AND tenant_id IS ?5 AND chain_seq IS NULL",
                params![seal.chain_seq, seal.block_number, &seal.record_hash, codec::id_text(*id), chain_value(chain)],
            )?;
            if changed != 1 {
                return Err(tokenops_store::StoreError::Conflict(format!("audit record {id} is sealed already")));
            }
        }
        Ok(())
    }

    async fn sealed_after(
        &mut self,
        chain: Option<TenantId>,
        after_seq: i64,
        limit: u32,
    ) -> StoreResult<Vec<AuditRecord>> {
        let sql = format!(
            "SELECT {AUDIT_COLUMNS} FROM audit_records INDEXED BY audit_records_by_chain_seq WHERE tenant_id IS ?1 AND chain_seq > ?2 ORDER BY chain_seq LIMIT ?3"
        );
        self.fetch_all(&sql, params![chain_value(chain), after_seq, i64::from(limit)], decode)
    }

    async fn block_hashes(&mut self, chain: Option<TenantId>) -> StoreResult<BTreeMap<i64, String>> {
        let pairs = self.fetch_all(
            "SELECT block_number, hash FROM audit_blocks WHERE chain_id = ?1",
            params![codec::id_text(audit_chain::chain_id(chain))],
            |row| rows::audit_block_hash(&codec::Cols(row)),
        )?;
        Ok(pairs.into_iter().collect())
    }

    async fn unsealed_count(&mut self, chain: Option<TenantId>) -> StoreResult<u64> {
        let count: i64 = self.scalar(
            "SELECT COUNT(*) FROM audit_records INDEXED BY audit_records_unsealed WHERE tenant_id IS ?1 AND chain_seq IS NULL",
            params![chain_value(chain)],
        )?;
        Ok(u64::try_from(count).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn where_clause_numbers_parameters_after_the_tenant() {
        let filter = AuditFilter {
            action: Some("customer.create".into()),
            actor_ids: vec!["a".into(), "b".into()],
            query: Some("Ab".into()),
            ..AuditFilter::default()
        };
        let clause = where_clause(&filter, true);
        assert!(clause.sql.starts_with("tenant_id = ?1 AND action = ?2 AND actor_id IN (?3, ?4) AND ((id >= ?6"));
        assert!(clause.sql.ends_with(" OR action GLOB ?5)"));
        assert_eq!(clause.binds.len(), 6);
        assert!(where_clause(&filter, false).sql.contains(" AND +actor_id IN (?3, ?4) AND (id GLOB ?5 OR "));
    }

    #[test]
    fn the_query_becomes_a_case_insensitive_prefix_glob() {
        assert_eq!(prefix_glob("Ab-1"), "[Aa][bB]-1*");
        assert_eq!(prefix_glob("émi"), "[éÉ][mM][iI]*");
        assert_eq!(prefix_glob("a*?[]%_"), "[aA][*][?][[]]%_*");
        assert_eq!(prefix_glob("ß"), "ß*", "only single-character case forms");
        assert_eq!(prefix_glob(""), "*");
    }
}
