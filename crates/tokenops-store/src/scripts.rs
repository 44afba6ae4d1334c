//! Scripts and their versions: `ScriptStore`. A version is written once and never changed.

use async_trait::async_trait;
use tokenops_domain::TenantId;
use tokenops_domain::paging::{Page, PageRequest, SortKey};
use tokenops_domain::script::{Script, ScriptFilter, ScriptVersion};
use uuid::Uuid;

use crate::keyset::KeyValue;
use crate::rows::Encode;
use crate::{StoreError, StoreResult};
use crate::{TableRows, TableWrites, conditions, keyset, rows};

#[async_trait]
pub trait ScriptStore: Send + TableRows<Script> + TableWrites {
    /// `StoreError::Conflict` when a script that is not deleted has the name.
    async fn insert(&mut self, script: &Script) -> StoreResult<()> {
        if self.insert_row_if_new(&rows::SCRIPTS, script.values()?).await? {
            Ok(())
        } else {
            Err(StoreError::Conflict(format!("a script named {:?} exists", script.name)))
        }
    }
    /// Any status, deleted included.
    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<Script>> {
        self.row_by_key(tenant, &rows::SCRIPTS, KeyValue::Id(id), false).await
    }
    /// As `get`, locking the row for the rest of the transaction.
    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<Script>> {
        self.row_by_key(tenant, &rows::SCRIPTS, KeyValue::Id(id), true).await
    }
    /// Waits for the organisation's script writes in flight and holds its turn for the rest of
    /// the transaction. A write judges scripts another may change at once (a publication its
    /// imports, an unpublication or new code its importers, a deletion or a new importer each
    /// other), so the organisation's script writes take turns; each then reads the others'
    /// outcome.
    async fn take_scripts_turn(&mut self, tenant: TenantId) -> StoreResult<()>;
    /// The script that is not deleted with this name.
    async fn by_name(&mut self, tenant: TenantId, name: &str) -> StoreResult<Option<Script>>;
    /// Replaces every mutable field; `StoreError::Conflict` when the new name is taken.
    async fn update(&mut self, script: &Script) -> StoreResult<()> {
        let set = [
            "name",
            "description",
            "status",
            "version",
            "source",
            "parameters",
            "imports",
            "dependencies",
            "updated_at",
            "published_at",
        ];
        self.update_row(&rows::SCRIPTS, script.values()?, &set).await.map(drop)
    }
    /// `StoreError::Conflict` when the script has that version.
    async fn insert_version(&mut self, version: &ScriptVersion) -> StoreResult<()> {
        self.insert_row(&rows::SCRIPT_VERSIONS, version.values()?, &format!("script version {}", version.version)).await
    }
    async fn version(&mut self, tenant: TenantId, script_id: Uuid, version: u32) -> StoreResult<Option<ScriptVersion>>;
    /// The scripts, not deleted, whose source imports `name`, oldest first.
    async fn importers(&mut self, tenant: TenantId, name: &str) -> StoreResult<Vec<Script>>;
    /// In `sort` order (then id, descending).
    async fn list(
        &mut self,
        tenant: TenantId,
        filter: &ScriptFilter,
        sort: &[SortKey],
        page: PageRequest,
    ) -> StoreResult<Page<Script>> {
        let order = keyset::order_by(&keyset::plain(sort));
        self.page_rows(tenant, &rows::SCRIPTS, conditions::scripts(filter), &order, page).await
    }
}
