//! A token subject's standing on PostgreSQL: the one statement behind `Store::subject_standing`.

use crate::{codec, query};
use tokenops_domain::TenantId;
use tokenops_store::{Standing, StoreResult, SubjectStanding};
use uuid::Uuid;

/// See `Store::subject_standing`: both lookups in one statement, outside any transaction.
pub(crate) async fn subject_standing(
    pool: &sqlx::PgPool,
    tenant: Option<TenantId>,
    id: Uuid,
) -> StoreResult<SubjectStanding> {
    let query = sqlx::query(
        "SELECT 'user' AS kind, tenant_id, status = 'ACTIVE' AS active, role_id FROM users
         WHERE id = $1 AND tenant_id = $2
         UNION ALL
         SELECT 'client', tenant_id, active, role_id FROM machine_clients WHERE id = $1",
    )
    .bind(id)
    .bind(tenant.map(TenantId::as_uuid));
    let rows = query::fetch_all(pool, query, |row| {
        let kind: String = codec::get(row, "kind")?;
        let found = Standing {
            tenant: codec::opt_tenant(codec::get(row, "tenant_id")?),
            active: codec::get(row, "active")?,
            role_id: codec::get(row, "role_id")?,
        };
        Ok((kind, found))
    })
    .await?;
    let mut standing = SubjectStanding::default();
    for (kind, found) in rows {
        match kind.as_str() {
            "user" => standing.user = Some(found),
            _ => standing.client = Some(found),
        }
    }
    Ok(standing)
}
