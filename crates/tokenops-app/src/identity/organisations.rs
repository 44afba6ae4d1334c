//! Organisations: the platform operator creates one with its owner, who is invited as
//! SUPER_ADMIN; the invitation mail (with a temporary password) commits with both.

use crate::error::{AppResult, Code, Error, OrConflict};
use crate::mail::{self, MailMessage};
use crate::write::{AuditAction, Write};
use serde::Serialize;
use tokenops_domain::identity::UserStatus;
use tokenops_domain::{TenantId, Timestamp};
use tokenops_identity::passwords;
use tokenops_store::{TenantRecord, UserRecord};
use uuid::Uuid;

pub const CREATE: AuditAction =
    AuditAction { name: "tenant.create", category: "ORGANISATION", resource_type: "tenant", per_caller: false };

/// A validated request to create an organisation.
#[derive(Debug, Clone)]
pub struct NewOrganisation {
    pub id: TenantId,
    pub name: String,
    pub owner_email: String,
    pub owner_first_name: String,
    pub owner_last_name: String,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OwnerOut {
    pub id: Uuid,
    pub email: String,
    pub status: String,
    pub role: String,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OrganisationOut {
    pub id: Uuid,
    pub name: String,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    pub owner: OwnerOut,
}

/// An organisation as its creation answered it, with its owner as they are now; `None` when
/// there is no such organisation.
pub async fn read(store: &dyn tokenops_store::Store, id: TenantId) -> AppResult<Option<OrganisationOut>> {
    let mut tx = store.read().await?;
    let Some(tenant) = tx.tenants().get(id).await? else { return Ok(None) };
    let owner =
        tx.users().get(id, tenant.owner_user_id).await?.ok_or_else(|| {
            Error::internal(format!("organisation {} names an owner that does not exist", id.as_uuid()))
        })?;
    let role = match tokenops_domain::role::platform_role(owner.role_id) {
        Some(platform) => platform.name.to_owned(),
        None => tx.roles().get(id, owner.role_id).await?.map(|r| r.name).unwrap_or_default(),
    };
    Ok(Some(OrganisationOut {
        id: tenant.id.as_uuid(),
        name: tenant.name,
        created_at: tenant.created_at,
        owner: OwnerOut { id: owner.id, email: owner.email, status: owner.status.as_str().to_owned(), role },
    }))
}

fn invitation(
    email: &str,
    first_name: &str,
    organisation: &str,
    temporary_password: &str,
    sign_in_url: &str,
) -> MailMessage {
    // An invitation may come without the person's names (the invite body is not validated up
    // front), so the greeting falls back to a plain one.
    let greeting = if first_name.is_empty() { "Hello".to_owned() } else { format!("Hello {first_name}") };
    MailMessage {
        to: email.to_owned(),
        subject: format!("You are invited to {organisation} on tokenops"),
        body: format!(
            "{greeting},\n\nYou have been invited to {organisation} on tokenops.\n\nSign in at {sign_in_url} with your email address and this temporary password, then choose your own password:\n\nTemporary password: {temporary_password}\n\nThe temporary password works only until you have chosen your own.\n"
        ),
    }
}

/// A temporary password and its argon2id hash, made before the write begins: hashing takes
/// tens of milliseconds and must not hold SQLite's single writer.
pub struct TemporaryPassword {
    pub plain: zeroize::Zeroizing<String>,
    pub hash: String,
}

pub async fn temporary_password() -> AppResult<TemporaryPassword> {
    let plain = passwords::generate_temporary_password();
    let hash = super::signin::hash(plain.to_string()).await?;
    Ok(TemporaryPassword { plain, hash })
}

/// Who is invited: a new user of `tenant`, INVITED until the temporary password is used.
pub struct Invitee {
    pub id: Uuid,
    pub tenant: TenantId,
    pub email: String,
    pub first_name: String,
    pub last_name: String,
    pub role_id: Uuid,
}

/// Adds an invited user (an organisation's owner or a member) and mails the invitation with the
/// temporary password. An email registered in any organisation is a 409.
pub async fn invite(
    w: &mut Write,
    sealer: &tokenops_identity::Sealer,
    sign_in_url: &str,
    invitee: Invitee,
    organisation: &str,
    temporary: TemporaryPassword,
) -> AppResult<UserRecord> {
    let now = w.now();
    let TemporaryPassword { plain: temporary, hash: temporary_hash } = temporary;
    let user = UserRecord {
        id: invitee.id,
        tenant_id: invitee.tenant,
        email: invitee.email.to_lowercase(),
        first_name: invitee.first_name,
        last_name: invitee.last_name,
        status: UserStatus::Invited,
        role_id: invitee.role_id,
        password_hash: None,
        temporary_password_hash: Some(temporary_hash),
        failed_sign_ins: 0,
        first_failed_sign_in_at: None,
        locked_until: None,
        created_at: now,
        updated_at: now,
    };
    w.tx().users().insert(&user).await.or_conflict(|| {
        Error::conflict(format!("The email {} is already registered", user.email)).with_code(Code::EmailExists)
    })?;
    let message = invitation(&user.email, &user.first_name, organisation, &temporary, sign_in_url);
    w.enqueue(crate::jobs::kinds::MAIL_SEND, mail::job_payload(sealer, &message).map_err(Error::internal)?).await?;
    Ok(user)
}

/// Creates the organisation, invites its owner and enqueues the invitation.
pub async fn create(
    w: &mut Write,
    sealer: &tokenops_identity::Sealer,
    sign_in_url: &str,
    new: NewOrganisation,
    temporary: TemporaryPassword,
) -> AppResult<OrganisationOut> {
    let now = w.now();
    let owner = Invitee {
        id: tokenops_domain::new_id(),
        tenant: new.id,
        email: new.owner_email,
        first_name: new.owner_first_name,
        last_name: new.owner_last_name,
        role_id: tokenops_domain::role::SUPER_ADMIN.id,
    };
    let tenant = TenantRecord { id: new.id, name: new.name, owner_user_id: owner.id, created_at: now, updated_at: now };
    w.tx().tenants().insert(&tenant).await?;
    let owner = invite(w, sealer, sign_in_url, owner, &tenant.name, temporary).await?;
    w.set_resource_id(tenant.id.to_string());
    w.set_audit_detail(serde_json::json!({ "name": tenant.name, "ownerId": owner.id, "ownerEmail": owner.email }));
    Ok(OrganisationOut {
        id: tenant.id.as_uuid(),
        name: tenant.name,
        created_at: now,
        owner: OwnerOut { id: owner.id, email: owner.email, status: "INVITED".into(), role: "SUPER_ADMIN".into() },
    })
}
