//! Roles: the platform roles (read-only, fixed grants) and each organisation's custom roles
//! (create, edit, delete, permission assignment), role lookup by name for invitations and
//! machine clients, and the rule of who may hand out a role (the spec's invite rule 2).

use serde::Serialize;
use std::sync::Arc;
use tokenops_domain::paging::{Page, PageRequest, SortDirection, SortKey};
use tokenops_domain::permission::{Permission, PermissionSet, platform_grants};
use tokenops_domain::role::{self as platform, platform_role};
use tokenops_domain::{TenantId, Timestamp, new_id};
use tokenops_store::Store;
use tokenops_store::{RoleRecord, Tx, UserFilter};
use uuid::Uuid;

use super::access::grants_of;
use super::users::UserSummary;
use crate::context::{Caller, missing_permission};
use crate::error::{AppResult, Code, Error, OrConflict};
use crate::write::{AuditAction, AuditResource, Write};

const ROLE: AuditResource = AuditResource { category: "ORGANISATION", resource_type: "role" };
pub const CREATE: AuditAction = ROLE.action("role.create");
pub const UPDATE: AuditAction = ROLE.action("role.update");
pub const DELETE: AuditAction = ROLE.action("role.delete");

/// A role as the API returns it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoleOut {
    pub id: Uuid,
    pub name: String,
    pub description: String,
    /// A platform role (SUPER_ADMIN, ADMIN, USER): shared by every organisation, read-only.
    pub platform: bool,
    /// The permissions the role grants, in catalogue order.
    pub permissions: Vec<&'static str>,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
}

/// A role the organisation can assign, with what it grants.
#[derive(Debug, Clone)]
pub struct Role {
    pub record: RoleRecord,
    pub grants: PermissionSet,
}

impl Role {
    fn of(record: RoleRecord) -> Self {
        let grants = match platform_role(record.id) {
            Some(p) => platform_grants(p.name).unwrap_or_default(),
            None => grants_of(&record),
        };
        Self { record, grants }
    }

    pub fn is_platform(&self) -> bool {
        self.record.tenant_id.is_none()
    }

    pub fn out(&self) -> RoleOut {
        RoleOut {
            id: self.record.id,
            name: self.record.name.clone(),
            description: self.record.description.clone(),
            platform: self.is_platform(),
            permissions: self.grants.names(),
            created_at: self.record.created_at,
            updated_at: self.record.updated_at,
        }
    }

    /// What a caller must hold to hand this role to someone, or to act on someone who holds
    /// it (spec, invite rule 2): SUPER_ADMIN needs `super_admin:create`, ADMIN `admin:create`,
    /// USER `user:create`, a custom role `user:create` plus every permission it grants.
    pub fn required_to_assign(&self) -> PermissionSet {
        let mut required = PermissionSet::EMPTY;
        match platform_role(self.record.id).map(|p| p.name) {
            Some("SUPER_ADMIN") => required.insert(Permission::SuperAdminCreate),
            Some("ADMIN") => required.insert(Permission::AdminCreate),
            Some(_) => required.insert(Permission::UserCreate),
            None => {
                required = self.grants;
                required.insert(Permission::UserCreate);
            }
        }
        required
    }

    /// 403 unless `caller` may hand out this role.
    pub fn check_assignable_by(&self, caller: &Caller) -> AppResult<()> {
        self.check_caller_holds_its_grants(caller, GRANT_REFUSAL)
    }

    /// 403 unless `caller` may act on this role or on a holder of it (edit or delete the role,
    /// change or remove the holder): what handing the role out needs, or an editor could strip
    /// a role and then act on holders it outranks.
    pub fn check_actionable_by(&self, caller: &Caller) -> AppResult<()> {
        self.check_caller_holds_its_grants(
            caller,
            "You cannot act on a role, or on its holders, that grants permissions you do not hold",
        )
    }

    fn check_caller_holds_its_grants(&self, caller: &Caller, refusal: &str) -> AppResult<()> {
        let mut missing = self.required_to_assign().minus(caller.permissions);
        if self.is_platform() || missing.contains(Permission::UserCreate) {
            return match missing.iter().next() {
                None => Ok(()),
                Some(p) => Err(missing_permission(p)),
            };
        }
        missing.remove(Permission::UserCreate);
        if missing.is_empty() { Ok(()) } else { Err(refused_for_lacking(refusal, missing)) }
    }
}

const GRANT_REFUSAL: &str = "You cannot grant permissions you do not hold";

fn refused_for_lacking(refusal: &str, missing: PermissionSet) -> Error {
    Error::forbidden(format!("{refusal}: {}", missing.names().join(", "))).with_code(Code::PermissionDenied)
}

/// `Role {name} not found` (404).
pub fn role_not_found(name: &str) -> Error {
    Error::not_found(format!("Role {name} not found")).with_code(Code::RoleNotFound)
}

/// The role name an invitation or a machine client gives: blank or absent means USER.
pub fn role_name_or_user(name: Option<&str>) -> &str {
    name.map(str::trim).filter(|n| !n.is_empty()).unwrap_or(platform::USER.name)
}

/// The role `name` names in the organisation, to hand out: platform names match
/// case-insensitively; any other name is a custom role, locked for the rest of the write, so a
/// deletion or a change of its grants racing the assignment waits for it (and then counts the
/// new holder) or is read by it (a deleted role is not found). `None` when there is none, which
/// the caller answers; an `Err` is only ever the store failing.
#[must_use = "`None` means no such role: answer it"]
pub async fn role_named(tx: &mut dyn Tx, tenant: TenantId, name: &str) -> AppResult<Option<Role>> {
    let Some(found) = tx.roles().find_by_name(tenant, name).await?.map(Role::of) else {
        return Ok(None);
    };
    if found.is_platform() {
        // Shared and read-only: nothing can change under the assignment.
        return Ok(Some(found));
    }
    Ok(tx.roles().get_for_update(tenant, found.record.id).await?.map(Role::of))
}

/// The role with this id in the organisation (platform or custom).
pub async fn role_by_id(tx: &mut dyn Tx, tenant: TenantId, id: Uuid) -> AppResult<Option<Role>> {
    Ok(tx.roles().get(tenant, id).await?.map(Role::of))
}

/// A validated custom role: name 1–100 characters, description up to 500, permission names.
#[derive(Debug, Clone)]
pub struct NewRole {
    pub name: String,
    pub description: String,
    pub permissions: Vec<String>,
}

/// A validated change of a custom role; absent fields stay.
#[derive(Debug, Clone, Default)]
pub struct RoleChange {
    pub name: Option<String>,
    pub description: Option<String>,
    pub permissions: Option<Vec<String>>,
}

/// Parses permission names: 400 `Unknown permissions: {names}.` naming every unknown one.
pub fn parse_permissions(names: &[String]) -> AppResult<PermissionSet> {
    PermissionSet::parse_names(names.iter().map(String::as_str)).map_err(|unknown| {
        Error::bad_request(format!("Unknown permissions: {}.", unknown.join(", "))).with_code(Code::UnknownPermissions)
    })
}

/// A custom role may only grant what its author holds (403 naming the rest).
fn check_grantable(caller: &Caller, grants: PermissionSet) -> AppResult<()> {
    let missing = grants.minus(caller.permissions);
    if missing.is_empty() { Ok(()) } else { Err(refused_for_lacking(GRANT_REFUSAL, missing)) }
}

fn reserved(name: &str) -> Error {
    Error::conflict(format!("Role name {name} is reserved for a platform role")).with_code(Code::RoleNameReserved)
}

fn name_in_use(name: &str) -> Error {
    Error::conflict(format!("Role name {name} is in use")).with_code(Code::RoleNameInUse)
}

fn not_found(id: Uuid) -> Error {
    Error::not_found(format!("Role {id} not found")).with_code(Code::RoleNotFound)
}

fn platform_read_only() -> Error {
    Error::of(Code::PlatformRoleReadOnly)
}

/// The roles of an organisation and its custom-role writes.
pub struct Roles {
    store: Arc<dyn Store>,
}

impl Roles {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }
}

impl Roles {
    /// The roles the organisation can assign (platform and custom), one page, sorted.
    pub async fn list(&self, tenant: TenantId, sort: &[SortKey], page: PageRequest) -> AppResult<Page<Role>> {
        let mut tx = self.store.read().await?;
        let roles = tx.roles().list(tenant, sort, page).await?;
        Ok(roles.map(Role::of))
    }

    /// A role with one page of its holders, ordered by first name then last name.
    pub async fn get(&self, tenant: TenantId, id: Uuid, holders: PageRequest) -> AppResult<(Role, Page<UserSummary>)> {
        let mut tx = self.store.read().await?;
        let role = role_by_id(tx.as_mut(), tenant, id).await?.ok_or_else(|| not_found(id))?;
        let filter = UserFilter { role_id: Some(id), ..UserFilter::default() };
        let by_name = [
            SortKey { column: "first_name", direction: SortDirection::Asc },
            SortKey { column: "last_name", direction: SortDirection::Asc },
        ];
        let users = tx.users().list(tenant, &filter, &by_name, holders).await?;
        Ok((role, users.map(|u| UserSummary::from(&u))))
    }

    pub async fn create(&self, w: &mut Write, new: NewRole) -> AppResult<Role> {
        let tenant = w.tenant()?;
        if platform::is_platform_role(&new.name) {
            return Err(reserved(&new.name));
        }
        let grants = parse_permissions(&new.permissions)?;
        check_grantable(&w.context().caller, grants)?;
        let now = w.now();
        let record = RoleRecord {
            id: new_id(),
            tenant_id: Some(tenant),
            name: new.name,
            description: new.description,
            permissions: grants.names().into_iter().map(str::to_owned).collect(),
            created_at: now,
            updated_at: now,
        };
        w.tx().roles().insert(&record).await.or_conflict(|| name_in_use(&record.name))?;
        let role = Role::of(record);
        w.set_resource_id(role.record.id.to_string());
        w.set_audit_detail(serde_json::json!({ "after": role.out() }));
        Ok(role)
    }

    pub async fn update(&self, w: &mut Write, id: Uuid, change: RoleChange) -> AppResult<Role> {
        let tenant = w.tenant()?;
        let record = w.tx().roles().get_for_update(tenant, id).await?.ok_or_else(|| not_found(id))?;
        let before = Role::of(record.clone());
        if before.is_platform() {
            return Err(platform_read_only());
        }
        // Editing a role acts on everyone who holds it.
        before.check_actionable_by(&w.context().caller)?;
        let mut record = record;
        if let Some(name) = change.name {
            if platform::is_platform_role(&name) {
                return Err(reserved(&name));
            }
            record.name = name;
        }
        if let Some(description) = change.description {
            record.description = description;
        }
        if let Some(names) = change.permissions {
            let grants = parse_permissions(&names)?;
            // Adding a permission grants it to every holder: only what the editor holds.
            check_grantable(&w.context().caller, grants.minus(before.grants))?;
            record.permissions = grants.names().into_iter().map(str::to_owned).collect();
        }
        record.updated_at = w.now();
        w.tx().roles().update(&record).await.or_conflict(|| name_in_use(&record.name))?;
        let after = Role::of(record);
        w.set_audit_detail(serde_json::json!({ "before": before.out(), "after": after.out() }));
        Ok(after)
    }

    /// Deletes a custom role no user or machine client holds (409 otherwise).
    pub async fn delete(&self, w: &mut Write, id: Uuid) -> AppResult<()> {
        let tenant = w.tenant()?;
        let record = w.tx().roles().get_for_update(tenant, id).await?.ok_or_else(|| not_found(id))?;
        let role = Role::of(record);
        if role.is_platform() {
            return Err(platform_read_only());
        }
        role.check_actionable_by(&w.context().caller)?;
        let holders = w.tx().roles().count_holders(tenant, id).await?;
        if holders > 0 {
            return Err(Error::conflict(format!(
                "Role {} is in use by {holders} user(s) or client(s); assign them another role first",
                role.record.name
            ))
            .with_code(Code::RoleInUse));
        }
        w.tx().roles().delete(tenant, id).await?;
        w.set_audit_detail(serde_json::json!({ "before": role.out() }));
        Ok(())
    }
}
