//! Audit records on PostgreSQL.

use crate::clause::{self, Clause};
use crate::query::BindPage;
use crate::{PostgresTx, codec};
use async_trait::async_trait;
use sqlx::postgres::PgRow;
use std::collections::BTreeMap;
use tokenops_domain::TenantId;
use tokenops_domain::audit::{AuditFilter, AuditRecord, AuditSeal};
use tokenops_domain::audit_chain::{self, AuditBlock};
use tokenops_domain::paging::{PageRequest, SortKey};
use tokenops_store::rows::{self, AUDIT_BLOCK_COLUMNS, AUDIT_COLUMNS, ColumnValue};
use tokenops_store::{
    AuditCount, AuditStore, SealedCount, StoreResult, ascii_prefix_range, audit_key_values, audit_keys, carries,
    case_forms,
};
use tokenops_store::{conditions, keyset};
use uuid::Uuid;

/// A record's own columns. Its seal is in `audit_seals` (migration 0023), whose column names
/// differ from these, so that a join of the two names each column once.
const RECORD_COLUMNS: &str = "id, tenant_id, occurred_at, created_at, action, category, source, actor_id, resource_type, resource_id, outcome, request_id, idempotency_key, http_status, detail";

/// Records with their seals (NULL while unsealed).
const RECORDS: &str = "audit_records r LEFT JOIN audit_seals s ON s.record_id = r.id";

/// A record not sealed yet, with the seal columns `decode` reads.
const UNSEALED_COLUMNS: &str = "id, tenant_id, occurred_at, created_at, action, category, source, actor_id, resource_type, resource_id, outcome, request_id, idempotency_key, http_status, detail, NULL::bigint AS chain_seq, NULL::bigint AS block_number, NULL::text AS record_hash";

/// The identifier columns the free-text query matches by case-insensitive prefix.
const QUERY_COLUMNS: &[&str] = &["id", "actor_id", "resource_id", "request_id", "action"];

fn decode(row: &PgRow) -> StoreResult<AuditRecord> {
    rows::audit_record(&codec::Cols(row))
}

/// The WHERE clause shared by the count and the page, with `$1` the tenant.
fn where_clause(filter: &AuditFilter) -> Clause {
    let mut clause = Clause::of(conditions::audit_records(filter));
    if !filter.actor_ids.is_empty() {
        let actors = clause.param(ColumnValue::TextList(Some(filter.actor_ids.clone())));
        clause.and(&format!("actor_id = ANY({actors})"));
    }
    if let Some(q) = &filter.query {
        let pattern = clause.param(prefix_regex(q).into());
        // An ASCII query also bounds each column by its range in the column's index of
        // `lower(column COLLATE "C")` (migration 0017: ASCII folding whatever the server's
        // locale), so that each column is searched through its index, not the table.
        let range =
            ascii_prefix_range(q).map(|(lower, upper)| (clause.param(lower.into()), clause.param(upper.into())));
        let any = QUERY_COLUMNS
            .iter()
            .map(|col| match &range {
                Some((lo, hi)) => format!(
                    "(lower({col}::text COLLATE \"C\") >= {lo} AND lower({col}::text COLLATE \"C\") < {hi} AND {col}::text ~ {pattern})"
                ),
                None => format!("{col}::text ~ {pattern}"),
            })
            .collect::<Vec<_>>()
            .join(" OR ");
        clause.and(&format!("({any})"));
    }
    clause
}

/// A regular expression for "starts with `query`, ignoring case": each letter becomes the set of
/// its case forms (`[éÉ]`), the same rule the SQLite store applies (whose `lower()` folds ASCII
/// only), and unlike `lower()` here, independent of the server's locale. Other punctuation is
/// escaped, so it matches itself.
pub(crate) fn prefix_regex(query: &str) -> String {
    let mut pattern = String::with_capacity(query.len() * 4 + 1);
    pattern.push('^');
    for c in query.chars() {
        let forms = case_forms(c);
        if forms.len() > 1 {
            pattern.push('[');
            pattern.extend(forms);
            pattern.push(']');
        } else {
            // In a PostgreSQL regular expression, a backslash before a character that is not
            // alphanumeric makes that character literal.
            if c.is_ascii() && !c.is_ascii_alphanumeric() {
                pattern.push('\\');
            }
            pattern.push(c);
        }
    }
    pattern
}

#[async_trait]
impl AuditStore for PostgresTx {
    /// Held back and written with the transaction's next statement (`deferred`).
    async fn record(&mut self, r: &AuditRecord) -> StoreResult<()> {
        self.hold_back()?.audit(r)
    }

    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<AuditRecord>> {
        let sql = format!("SELECT {AUDIT_COLUMNS} FROM {RECORDS} WHERE r.tenant_id = $1 AND r.id = $2");
        self.fetch_optional(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(tenant.as_uuid()).bind(id), decode).await
    }

    async fn count(
        &mut self,
        tenant: TenantId,
        filter: &AuditFilter,
        known: Option<SealedCount>,
    ) -> StoreResult<AuditCount> {
        // A read transaction is one snapshot (REPEATABLE READ): the head, the unsealed matches
        // and the sealed ones agree.
        let head: Option<i64> = self
            .fetch_one(
                sqlx::query("SELECT MAX(chain_seq) AS head FROM audit_seals WHERE chain_id = $1")
                    .bind(tenant.as_uuid()),
                |row| codec::get(row, "head"),
            )
            .await?;
        let head = head.unwrap_or(0);
        let mut clause = where_clause(filter);
        let matches = clause.sql.clone();
        // Both short counts start from the few records of the queue or of the chain's end.
        let unsealed = self
            .count_of(
                &clause,
                tenant,
                format!(
                    "SELECT COUNT(*) AS total FROM audit_unsealed u JOIN audit_records r ON r.id = u.record_id
                     WHERE u.chain_id = $1 AND {matches}"
                ),
            )
            .await?;
        let sealed = match carries(known, head) {
            Some(known) => {
                let through = clause.param(known.through_seq.into());
                let since = self
                    .count_of(
                        &clause,
                        tenant,
                        format!(
                            "SELECT COUNT(*) AS total FROM audit_seals s JOIN audit_records r ON r.id = s.record_id
                             WHERE s.chain_id = $1 AND s.chain_seq > {through} AND {matches}"
                        ),
                    )
                    .await?;
                known.count + since
            }
            None => {
                let full = self.count_of(&clause, tenant, clause.count_sql("audit_records")).await?;
                full.saturating_sub(unsealed)
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
        _total: u64,
    ) -> StoreResult<Vec<AuditRecord>> {
        let clause = where_clause(filter);
        // Sort columns come from the endpoint's allow list (`SortKey::column`), never the request.
        // The export's order too, so that a page and an export list the same records alike.
        let order = keyset::order_by(&audit_keys(sort));
        // The page is chosen among the records alone; only its rows are joined to their seals.
        let sql = format!(
            "SELECT {AUDIT_COLUMNS} FROM ({}) r LEFT JOIN audit_seals s ON s.record_id = r.id ORDER BY {order}",
            clause.page_sql("audit_records", RECORD_COLUMNS, &order)
        );
        self.fetch_all(clause::bind(&clause, tenant, sqlx::query(sqlx::AssertSqlSafe(sql))).bind_page(page), decode)
            .await
    }

    async fn batch_after(
        &mut self,
        tenant: TenantId,
        filter: &AuditFilter,
        sort: &[SortKey],
        after: Option<&AuditRecord>,
        limit: u32,
    ) -> StoreResult<Vec<AuditRecord>> {
        let mut clause = where_clause(filter);
        let keys = audit_keys(sort);
        if let Some(record) = after {
            clause.after(&keys, &audit_key_values(record, &keys));
        }
        let order = keyset::order_by(&keys);
        let sql = format!(
            "SELECT {AUDIT_COLUMNS} FROM (SELECT {RECORD_COLUMNS} FROM audit_records WHERE {} ORDER BY {order} LIMIT {}) r
             LEFT JOIN audit_seals s ON s.record_id = r.id ORDER BY {order}",
            clause.sql,
            clause.placeholder(clause.next())
        );
        let query = clause::bind(&clause, tenant, sqlx::query(sqlx::AssertSqlSafe(sql))).bind(i64::from(limit));
        self.fetch_all(query, decode).await
    }

    async fn unsealed_chains(&mut self, limit: u32) -> StoreResult<Vec<Option<TenantId>>> {
        let chains: Vec<Uuid> = self
            .fetch_all(
                sqlx::query("SELECT DISTINCT chain_id FROM audit_unsealed LIMIT $1").bind(i64::from(limit)),
                |row| codec::get(row, "chain_id"),
            )
            .await?;
        Ok(chains.into_iter().map(audit_chain::chain_tenant).collect())
    }

    async fn last_block(&mut self, chain: Option<TenantId>) -> StoreResult<Option<AuditBlock>> {
        let sql = format!(
            "SELECT {AUDIT_BLOCK_COLUMNS} FROM audit_blocks WHERE chain_id = $1 ORDER BY block_number DESC LIMIT 1"
        );
        self.fetch_optional(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(audit_chain::chain_id(chain)), |row| {
            rows::audit_block(&codec::Cols(row))
        })
        .await
    }

    async fn last_blocks(&mut self, after: Option<Uuid>, limit: u32) -> StoreResult<Vec<AuditBlock>> {
        let sql = format!(
            "SELECT DISTINCT ON (chain_id) {AUDIT_BLOCK_COLUMNS} FROM audit_blocks
             WHERE $1::uuid IS NULL OR chain_id > $1
             ORDER BY chain_id, block_number DESC LIMIT $2"
        );
        self.fetch_all(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(after).bind(i64::from(limit)), |row| {
            rows::audit_block(&codec::Cols(row))
        })
        .await
    }

    async fn resign_head(&mut self, chain_id: Uuid, number: i64, signature: &str) -> StoreResult<()> {
        self.execute(
            sqlx::query("UPDATE audit_blocks SET head_signature = $3 WHERE chain_id = $1 AND block_number = $2")
                .bind(chain_id)
                .bind(number)
                .bind(signature),
        )
        .await
        .map(|_| ())
    }

    async fn unsealed(&mut self, chain: Option<TenantId>, limit: u32) -> StoreResult<Vec<AuditRecord>> {
        let sql = format!(
            "SELECT {UNSEALED_COLUMNS} FROM audit_unsealed u JOIN audit_records r ON r.id = u.record_id
             WHERE u.chain_id = $1 ORDER BY u.record_created_at, u.record_id LIMIT $2"
        );
        self.fetch_all(
            sqlx::query(sqlx::AssertSqlSafe(sql)).bind(audit_chain::chain_id(chain)).bind(i64::from(limit)),
            decode,
        )
        .await
    }

    async fn seal_block(
        &mut self,
        chain: Option<TenantId>,
        block: &AuditBlock,
        seals: &[(Uuid, AuditSeal)],
    ) -> StoreResult<()> {
        self.execute(
            sqlx::query(
                "INSERT INTO audit_blocks (chain_id, block_number, previous_hash, hash, first_seq, record_count, sealed_at, head_signature)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            )
            .bind(block.chain_id)
            .bind(block.number)
            .bind(&block.previous_hash)
            .bind(&block.hash)
            .bind(block.first_seq)
            .bind(block.record_count)
            .bind(block.sealed_at.as_micros())
            .bind(&block.head_signature),
        )
        .await?;
        // One statement for the whole block: the seals as parallel arrays.
        let ids: Vec<Uuid> = seals.iter().map(|(id, _)| *id).collect();
        let seqs: Vec<i64> = seals.iter().map(|(_, s)| s.chain_seq).collect();
        let hashes: Vec<String> = seals.iter().map(|(_, s)| s.record_hash.clone()).collect();
        // A record leaves the queue as its seal is written: one that another sealer took first,
        // or that is not in this chain's queue, is missing from `gone`, and so from the count.
        let sql = "WITH gone AS (DELETE FROM audit_unsealed WHERE chain_id = $1 AND record_id = ANY($3::uuid[])
                                 RETURNING record_id)
                   INSERT INTO audit_seals (record_id, chain_id, chain_seq, block_number, record_hash)
                   SELECT s.id, $1, s.seq, $2, s.hash
                   FROM UNNEST($3::uuid[], $4::bigint[], $5::text[]) AS s(id, seq, hash)
                   JOIN gone ON gone.record_id = s.id";
        let changed = self
            .execute(
                sqlx::query(sql)
                    .bind(audit_chain::chain_id(chain))
                    .bind(block.number)
                    .bind(ids)
                    .bind(seqs)
                    .bind(hashes),
            )
            .await?;
        if changed != seals.len() as u64 {
            return Err(codec::conflict("audit records sealed already"));
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
            "SELECT {AUDIT_COLUMNS} FROM audit_seals s JOIN audit_records r ON r.id = s.record_id
             WHERE s.chain_id = $1 AND s.chain_seq > $2 ORDER BY s.chain_seq LIMIT $3"
        );
        self.fetch_all(
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(audit_chain::chain_id(chain))
                .bind(after_seq)
                .bind(i64::from(limit)),
            decode,
        )
        .await
    }

    async fn block_hashes(&mut self, chain: Option<TenantId>) -> StoreResult<BTreeMap<i64, String>> {
        let pairs = self
            .fetch_all(
                sqlx::query("SELECT block_number, hash FROM audit_blocks WHERE chain_id = $1")
                    .bind(audit_chain::chain_id(chain)),
                |row| rows::audit_block_hash(&codec::Cols(row)),
            )
            .await?;
        Ok(pairs.into_iter().collect())
    }

    async fn unsealed_count(&mut self, chain: Option<TenantId>) -> StoreResult<u64> {
        let total: i64 = self
            .fetch_one(
                sqlx::query("SELECT COUNT(*) AS total FROM audit_unsealed WHERE chain_id = $1")
                    .bind(audit_chain::chain_id(chain)),
                |row| codec::get(row, "total"),
            )
            .await?;
        Ok(codec::count(total))
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
            query: Some("Ab_%".into()),
            ..AuditFilter::default()
        };
        let clause = where_clause(&filter);
        let (sql, binds) = (&clause.sql, &clause.binds);
        // The regex, then the ASCII query's lower and upper bounds in the columns' indexes.
        assert_eq!(binds.len(), 5);
        assert!(sql.starts_with("tenant_id = $1 AND action = $2 AND actor_id = ANY($3) AND ("));
        assert!(sql.contains(
            "(lower(id::text COLLATE \"C\") >= $5 AND lower(id::text COLLATE \"C\") < $6 AND id::text ~ $4)"
        ));
        assert!(sql.contains(" OR (lower(actor_id::text COLLATE \"C\") >= $5"));
        assert!(matches!(&binds[2], ColumnValue::Text(Some(p)) if p == "^[Aa][bB]\\_\\%"));
        assert!(matches!(&binds[3], ColumnValue::Text(Some(p)) if p == "ab_%"));
    }

    #[test]
    fn the_query_becomes_a_case_insensitive_prefix_regex() {
        assert_eq!(prefix_regex("émi-1"), "^[éÉ][mM][iI]\\-1");
        assert_eq!(prefix_regex(".*(?x)\\d"), "^\\.\\*\\(\\?[xX]\\)\\\\[dD]");
        assert_eq!(prefix_regex("ß"), "^ß", "only single-character case forms");
        assert_eq!(prefix_regex(""), "^");
    }
}
