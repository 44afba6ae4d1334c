//! Machine clients of an organisation: created with a role (handed out under the same rule as
//! inviting a user with it), their secret revealed once through a one-time URL, listed, and
//! disabled. A client's token (client-credentials grant) has the client id as `sub` and acts
//! with its role's permissions.

use serde::Serialize;
use std::sync::Arc;
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_domain::{TenantId, Timestamp, new_id};
use tokenops_identity::opaque;
use tokenops_store::Store;
use tokenops_store::{MachineClientRecord, SecretRevealRecord};
use uuid::Uuid;

use super::roles::{role_by_id, role_name_or_user, role_named, role_not_found};
use crate::error::{AppResult, Code, Error};
use crate::write::{AuditAction, AuditResource, Write};

const MACHINE_CLIENT: AuditResource = AuditResource { category: "ORGANISATION", resource_type: "machine_client" };
pub const CREATE: AuditAction = MACHINE_CLIENT.action("client.create");
pub const DISABLE: AuditAction = MACHINE_CLIENT.action("client.disable");
pub const REVEAL: AuditAction = AuditAction {
    name: "client.secret_reveal",
    category: "IDENTITY",
    resource_type: "machine_client",
    per_caller: false,
};

/// How long a secret waits for its one reveal.
pub const REVEAL_TTL_MS: i64 = 24 * 3_600_000;

fn reveal_aad(client_id: Uuid) -> Vec<u8> {
    format!("tokenops/client-secret/{client_id}").into_bytes()
}

/// A newly created client: its secret is not here, only the one-time URL that reveals it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedClient {
    /// The OAuth `client_id`, and the `sub` of its tokens.
    pub client_id: Uuid,
    pub name: String,
    pub role: String,
    /// Open once (GET, no bearer token) to read the secret; the URL is itself a secret.
    pub secret_reveal_url: String,
    #[schema(value_type = String, format = DateTime)]
    pub secret_reveal_expires_at: Timestamp,
}

/// A client as the list shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientOut {
    pub client_id: Uuid,
    pub name: String,
    pub role: String,
    pub active: bool,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
}

/// The revealed credentials. `Debug` hides the secret.
#[derive(Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevealedSecret {
    pub client_id: Uuid,
    pub client_secret: String,
    pub token_url: String,
}

impl std::fmt::Debug for RevealedSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RevealedSecret").field("client_id", &self.client_id).finish_non_exhaustive()
    }
}

fn not_found(id: Uuid) -> Error {
    Error::not_found(format!("Machine client {id} not found")).with_code(Code::ClientNotFound)
}

pub struct Clients {
    store: Arc<dyn Store>,
}

impl Clients {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }
}

impl Clients {
    /// Creates a client with the named role; `reveal_base` is the URL the one-time token is
    /// appended to.
    pub async fn create(
        &self,
        w: &mut Write,
        sealer: &tokenops_identity::Sealer,
        reveal_base: &str,
        name: String,
        role_name: Option<String>,
    ) -> AppResult<CreatedClient> {
        let tenant = w.tenant()?;
        let role_name = role_name_or_user(role_name.as_deref());
        let role = role_named(w.tx(), tenant, role_name).await?.ok_or_else(|| role_not_found(role_name))?;
        role.check_assignable_by(&w.context().caller)?;
        let now = w.now();
        let (secret, secret_hash) = opaque::new_opaque_token();
        let (reveal_token, reveal_hash) = opaque::new_opaque_token();
        let client = MachineClientRecord {
            id: new_id(),
            tenant_id: Some(tenant),
            name,
            role_id: Some(role.record.id),
            secret_hash,
            active: true,
            created_at: now,
        };
        w.tx().machine_clients().insert(&client).await?;
        let reveal = SecretRevealRecord {
            token_hash: reveal_hash,
            client_id: client.id,
            sealed_secret: sealer.seal(secret.as_bytes(), &reveal_aad(client.id)),
            expires_at: now.plus_millis(REVEAL_TTL_MS),
            created_at: now,
        };
        w.tx().secret_reveals().insert(&reveal).await?;
        w.set_resource_id(client.id.to_string());
        w.set_audit_detail(serde_json::json!({ "name": client.name, "role": role.record.name }));
        Ok(CreatedClient {
            client_id: client.id,
            name: client.name,
            role: role.record.name,
            secret_reveal_url: format!("{reveal_base}/{reveal_token}"),
            secret_reveal_expires_at: reveal.expires_at,
        })
    }

    /// One of the organisation's clients.
    pub async fn get(&self, tenant: TenantId, id: Uuid) -> AppResult<ClientOut> {
        let mut tx = self.store.read().await?;
        let client =
            tx.machine_clients().get(id).await?.filter(|c| c.tenant_id == Some(tenant)).ok_or_else(|| not_found(id))?;
        let role = match client.role_id {
            Some(role_id) => role_by_id(tx.as_mut(), tenant, role_id).await?.map(|r| r.record.name).unwrap_or_default(),
            None => String::new(),
        };
        Ok(ClientOut {
            client_id: client.id,
            name: client.name,
            role,
            active: client.active,
            created_at: client.created_at,
        })
    }

    /// One page of the organisation's clients, oldest first.
    pub async fn list(&self, tenant: TenantId, page: PageRequest) -> AppResult<Page<ClientOut>> {
        let mut tx = self.store.read().await?;
        let clients = tx.machine_clients().list(tenant, page).await?;
        let mut items = Vec::with_capacity(clients.items.len());
        for c in &clients.items {
            let role = match c.role_id {
                Some(id) => role_by_id(tx.as_mut(), tenant, id).await?.map(|r| r.record.name).unwrap_or_default(),
                None => String::new(),
            };
            items.push(ClientOut {
                client_id: c.id,
                name: c.name.clone(),
                role,
                active: c.active,
                created_at: c.created_at,
            });
        }
        Ok(Page { items, total: clients.total })
    }

    /// Disables a client: its tokens are refused from the next request, and it gets no more.
    /// Acting on a client is acting on a holder of its role: the caller needs what handing that
    /// role out needs, as for a user.
    pub async fn disable(&self, w: &mut Write, id: Uuid) -> AppResult<()> {
        let tenant = w.tenant()?;
        w.set_resource_id(id.to_string());
        let client = w.tx().machine_clients().get(id).await?.filter(|c| c.tenant_id == Some(tenant));
        let role_id = client.ok_or_else(|| not_found(id))?.role_id;
        if let Some(role_id) = role_id
            && let Some(role) = role_by_id(w.tx(), tenant, role_id).await?
        {
            role.check_actionable_by(&w.context().caller)?;
        }
        if !w.tx().machine_clients().set_active(tenant, id, false).await? {
            return Err(not_found(id));
        }
        Ok(())
    }

    /// The organisation of the client a reveal token is for, when the token is live: the reveal
    /// is recorded in that organisation's audit log.
    pub async fn reveal_tenant(&self, token: &str, now: Timestamp) -> AppResult<Option<TenantId>> {
        if !opaque::is_opaque_token(token) {
            return Ok(None);
        }
        let mut tx = self.store.write().await?;
        // Taken and rolled back: a peek that cannot consume the reveal.
        let Some(reveal) = tx.secret_reveals().take(&opaque::hash_opaque(token), now).await? else {
            return Ok(None);
        };
        // A disabled client's link reveals nothing: its secret opens no door any more.
        Ok(tx.machine_clients().get(reveal.client_id).await?.filter(|c| c.active).and_then(|c| c.tenant_id))
    }

    /// Reveals a secret once: the reveal is consumed in the same transaction; unknown, used or
    /// expired tokens, and the links of disabled clients, are all the same 404.
    pub async fn reveal(
        &self,
        w: &mut Write,
        sealer: &tokenops_identity::Sealer,
        token_url: &str,
        token: &str,
    ) -> AppResult<RevealedSecret> {
        let gone = || Error::of(Code::RevealNotFound);
        if !opaque::is_opaque_token(token) {
            return Err(gone());
        }
        let now = w.now();
        let reveal = w.tx().secret_reveals().take(&opaque::hash_opaque(token), now).await?.ok_or_else(gone)?;
        if !w.tx().machine_clients().get(reveal.client_id).await?.is_some_and(|c| c.active) {
            return Err(gone());
        }
        let secret = sealer.open(&reveal.sealed_secret, &reveal_aad(reveal.client_id)).map_err(Error::internal)?;
        let secret = String::from_utf8(secret.to_vec()).map_err(Error::internal)?;
        w.set_resource_id(reveal.client_id.to_string());
        Ok(RevealedSecret { client_id: reveal.client_id, client_secret: secret, token_url: token_url.to_owned() })
    }
}
