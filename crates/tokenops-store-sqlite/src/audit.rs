//! Audit records on SQLite.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use sqlx::Row;
use sqlx::sqlite::SqliteRow;
use tokenops_domain::TenantId;
use tokenops_domain::audit::{AuditOutcome, AuditRecord, AuditSource};
use tokenops_domain::paging::{Page, PageRequest, SortKey};
use tokenops_store::{AuditFilter, AuditStore, StoreError, StoreResult, case_forms};
use uuid::Uuid;

const COLUMNS: &str = "id, tenant_id, occurred_at, created_at, action, category, source, actor_id, resource_type, resource_id, outcome, request_id, idempotency_key, http_status, detail";

fn decode(row: &SqliteRow) -> StoreResult<AuditRecord> {
    let text = |name: &str| row.try_get::<String, _>(name).map_err(codec::backend);
    let opt = |name: &str| row.try_get::<Option<String>, _>(name).map_err(codec::backend);
    let source = text("source")?;
    let outcome = text("outcome")?;
    Ok(AuditRecord {
        id: codec::uuid(&text("id")?)?,
        tenant_id: codec::opt_tenant(opt("tenant_id")?)?,
        occurred_at: codec::ts(row.try_get("occurred_at").map_err(codec::backend)?),
        created_at: codec::ts(row.try_get("created_at").map_err(codec::backend)?),
        action: text("action")?,
        category: text("category")?,
        source: AuditSource::parse(&source).ok_or_else(|| StoreError::Corrupt(format!("audit source {source:?}")))?,
        actor_id: opt("actor_id")?,
        resource_type: text("resource_type")?,
        resource_id: opt("resource_id")?,
        outcome: AuditOutcome::parse(&outcome)
            .ok_or_else(|| StoreError::Corrupt(format!("audit outcome {outcome:?}")))?,
        request_id: opt("request_id")?,
        idempotency_key: opt("idempotency_key")?,
        http_status: row
            .try_get::<Option<i64>, _>("http_status")
            .map_err(codec::backend)?
            .and_then(|s| u16::try_from(s).ok()),
        detail: codec::json(&text("detail")?)?,
    })
}

/// The WHERE clause shared by the count and the page, with `$1` the tenant.
fn where_clause(filter: &AuditFilter, binds: &mut Vec<Bind>) -> String {
    let mut sql = String::from("tenant_id = $1");
    let mut push = |sql: &mut String, clause: &str, value: Bind| {
        binds.push(value);
        let n = binds.len() + 1;
        sql.push_str(&clause.replace("?", &format!("${n}")));
    };
    if let Some(from) = filter.occurred_from {
        push(&mut sql, " AND occurred_at >= ?", Bind::Int(from.as_micros()));
    }
    if let Some(to) = filter.occurred_to {
        push(&mut sql, " AND occurred_at < ?", Bind::Int(to.as_micros()));
    }
    if let Some(v) = &filter.request_id {
        push(&mut sql, " AND request_id = ?", Bind::Text(v.clone()));
    }
    if let Some(v) = &filter.action {
        push(&mut sql, " AND action = ?", Bind::Text(v.clone()));
    }
    if let Some(v) = &filter.source {
        push(&mut sql, " AND source = ?", Bind::Text(v.clone()));
    }
    if let Some(v) = &filter.resource_type {
        push(&mut sql, " AND resource_type = ?", Bind::Text(v.clone()));
    }
    if let Some(v) = &filter.resource_id {
        push(&mut sql, " AND resource_id = ?", Bind::Text(v.clone()));
    }
    if !filter.actor_ids.is_empty() {
        sql.push_str(" AND actor_id IN (");
        for (i, actor) in filter.actor_ids.iter().enumerate() {
            binds.push(Bind::Text(actor.clone()));
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&format!("${}", binds.len() + 1));
        }
        sql.push(')');
    }
    if let Some(q) = &filter.query {
        binds.push(Bind::Text(prefix_glob(q)));
        let n = binds.len() + 1;
        let any = QUERY_COLUMNS.iter().map(|col| format!("{col} GLOB ${n}")).collect::<Vec<_>>().join(" OR ");
        sql.push_str(&format!(" AND ({any})"));
    }
    sql
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

enum Bind {
    Int(i64),
    Text(String),
}

fn bind_all<'q>(
    mut query: sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments>,
    tenant: &str,
    binds: &[Bind],
) -> sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments> {
    query = query.bind(tenant.to_owned());
    for b in binds {
        query = match b {
            Bind::Int(v) => query.bind(*v),
            Bind::Text(v) => query.bind(v.clone()),
        };
    }
    query
}

#[async_trait]
impl AuditStore for SqliteTx {
    async fn record(&mut self, r: &AuditRecord) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO audit_records (id, tenant_id, occurred_at, created_at, action, category, source, actor_id,
                                        resource_type, resource_id, outcome, request_id, idempotency_key, http_status, detail)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
        )
        .bind(codec::id_text(r.id))
        .bind(r.tenant_id.map(|t| codec::id_text(t.as_uuid())))
        .bind(r.occurred_at.as_micros())
        .bind(r.created_at.as_micros())
        .bind(&r.action)
        .bind(&r.category)
        .bind(r.source.as_str())
        .bind(r.actor_id.as_deref())
        .bind(&r.resource_type)
        .bind(r.resource_id.as_deref())
        .bind(r.outcome.as_str())
        .bind(r.request_id.as_deref())
        .bind(r.idempotency_key.as_deref())
        .bind(r.http_status.map(i64::from))
        .bind(codec::json_text(&r.detail))
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        Ok(())
    }

    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<AuditRecord>> {
        let sql = format!("SELECT {COLUMNS} FROM audit_records WHERE tenant_id = $1 AND id = $2");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(codec::id_text(tenant.as_uuid()))
            .bind(codec::id_text(id))
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        row.as_ref().map(decode).transpose()
    }

    async fn list(
        &mut self,
        tenant: TenantId,
        filter: &AuditFilter,
        sort: &[SortKey],
        page: PageRequest,
    ) -> StoreResult<Page<AuditRecord>> {
        let tenant_text = codec::id_text(tenant.as_uuid());
        let mut binds = Vec::new();
        let clause = where_clause(filter, &mut binds);
        let count_sql = format!("SELECT COUNT(*) FROM audit_records WHERE {clause}");
        let total: i64 = bind_all(sqlx::query(sqlx::AssertSqlSafe(count_sql)), &tenant_text, &binds)
            .fetch_one(&mut *self.tx)
            .await
            .and_then(|row| row.try_get(0))
            .map_err(codec::backend)?;
        let mut order: Vec<String> = sort.iter().map(|k| format!("{} {}", k.column, k.direction.sql())).collect();
        order.push("id DESC".to_owned());
        let n = binds.len() + 2;
        let sql = format!(
            "SELECT {COLUMNS} FROM audit_records WHERE {clause} ORDER BY {} LIMIT ${n} OFFSET ${}",
            order.join(", "),
            n + 1
        );
        let rows = bind_all(sqlx::query(sqlx::AssertSqlSafe(sql)), &tenant_text, &binds)
            .bind(i64::from(page.size))
            .bind(i64::try_from(page.offset()).unwrap_or(i64::MAX))
            .fetch_all(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        let items = rows.iter().map(decode).collect::<StoreResult<Vec<_>>>()?;
        Ok(Page { items, total: u64::try_from(total).unwrap_or(0) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_becomes_a_case_insensitive_prefix_glob() {
        assert_eq!(prefix_glob("Ab-1"), "[Aa][bB]-1*");
        assert_eq!(prefix_glob("émi"), "[éÉ][mM][iI]*");
        assert_eq!(prefix_glob("a*?[]%_"), "[aA][*][?][[]]%_*");
        assert_eq!(prefix_glob("ß"), "ß*", "only single-character case forms");
        assert_eq!(prefix_glob(""), "*");
    }
}
