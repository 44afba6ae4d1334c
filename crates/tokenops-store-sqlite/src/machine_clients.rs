//! Machine clients on SQLite: `MachineClientStore`.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::{Row, params};
use tokenops_domain::TenantId;
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_store::rows::{self, MACHINE_CLIENT_COLUMNS};
use tokenops_store::{MachineClientRecord, MachineClientStore, StoreResult};
use uuid::Uuid;

fn decode_client(row: &Row<'_>) -> StoreResult<MachineClientRecord> {
    rows::machine_client(&codec::Cols(row))
}

#[async_trait]
impl MachineClientStore for SqliteTx {
    async fn insert(&mut self, client: &MachineClientRecord) -> StoreResult<()> {
        self.execute(
            "INSERT INTO machine_clients (id, tenant_id, name, role_id, secret_hash, active, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                codec::id_text(client.id),
                client.tenant_id.map(|t| codec::id_text(t.as_uuid())),
                &client.name,
                client.role_id.map(codec::id_text),
                &client.secret_hash,
                i64::from(client.active),
                client.created_at.as_micros(),
            ],
        )?;
        Ok(())
    }

    async fn get(&mut self, id: Uuid) -> StoreResult<Option<MachineClientRecord>> {
        let sql = format!("SELECT {MACHINE_CLIENT_COLUMNS} FROM machine_clients WHERE id = ?1");
        self.fetch_optional(&sql, params![codec::id_text(id)], decode_client)
    }

    async fn count_operator_clients(&mut self) -> StoreResult<u64> {
        let count: i64 = self.scalar("SELECT COUNT(*) FROM machine_clients WHERE tenant_id IS NULL", [])?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    async fn list(&mut self, tenant: TenantId, page: PageRequest) -> StoreResult<Page<MachineClientRecord>> {
        let tenant_text = codec::id_text(tenant.as_uuid());
        let sql = format!(
            "SELECT {MACHINE_CLIENT_COLUMNS} FROM machine_clients WHERE tenant_id = ?1
             ORDER BY created_at ASC, id ASC LIMIT ?2 OFFSET ?3"
        );
        self.page_where(
            "SELECT COUNT(*) FROM machine_clients WHERE tenant_id = ?1",
            &sql,
            &[&tenant_text],
            page,
            decode_client,
        )
    }

    async fn set_active(&mut self, tenant: TenantId, id: Uuid, active: bool) -> StoreResult<bool> {
        let done = self.execute(
            "UPDATE machine_clients SET active = ?1 WHERE tenant_id = ?2 AND id = ?3",
            params![i64::from(active), codec::id_text(tenant.as_uuid()), codec::id_text(id)],
        )?;
        Ok(done == 1)
    }
}
