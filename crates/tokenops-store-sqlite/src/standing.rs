//! A token subject's standing on SQLite: the one statement behind `Store::subject_standing`.

use crate::codec;
use rusqlite::params;
use tokenops_domain::TenantId;
use tokenops_store::{Standing, StoreResult, SubjectStanding};
use uuid::Uuid;

/// See `Store::subject_standing`: both lookups in one statement, on a connection outside any
/// transaction.
pub(crate) fn subject_standing(
    conn: &rusqlite::Connection,
    tenant: Option<TenantId>,
    id: Uuid,
) -> StoreResult<SubjectStanding> {
    let mut statement = conn
        .prepare_cached(
            "SELECT 'user' AS kind, tenant_id, status = 'ACTIVE' AS active, role_id FROM users
             WHERE id = ?1 AND tenant_id = ?2
             UNION ALL
             SELECT 'client', tenant_id, active, role_id FROM machine_clients WHERE id = ?1",
        )
        .map_err(codec::backend)?;
    let tenant_text = tenant.map(|t| codec::id_text(t.as_uuid()));
    let mut rows = statement.query(params![codec::id_text(id), tenant_text]).map_err(codec::backend)?;
    let mut standing = SubjectStanding::default();
    while let Some(row) = rows.next().map_err(codec::backend)? {
        let kind: String = codec::get(row, "kind")?;
        let found = Standing {
            tenant: codec::opt_tenant(codec::get(row, "tenant_id")?)?,
            active: codec::get::<i64>(row, "active")? != 0,
            role_id: codec::opt_uuid(codec::get(row, "role_id")?)?,
        };
        match kind.as_str() {
            "user" => standing.user = Some(found),
            _ => standing.client = Some(found),
        }
    }
    Ok(standing)
}
