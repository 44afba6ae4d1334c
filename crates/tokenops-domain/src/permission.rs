//! The permission catalogue: every endpoint of the API is guarded by one of these names, roles
//! grant sets of them, and the platform roles' grants are fixed here.

use std::fmt;

macro_rules! catalogue {
    ($($variant:ident = $name:literal: $description:literal,)+) => {
        /// One named permission. The names are the API's (`GET /api/permissions`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Permission {
            $($variant,)+
        }

        impl Permission {
            /// Every permission, in catalogue order.
            pub const ALL: &'static [Permission] = &[$(Permission::$variant,)+];

            pub fn name(self) -> &'static str {
                match self {
                    $(Permission::$variant => $name,)+
                }
            }

            pub fn description(self) -> &'static str {
                match self {
                    $(Permission::$variant => $description,)+
                }
            }
        }
    };
}

catalogue! {
    CustomerRead = "customer:read": "List and read customers",
    CustomerWrite = "customer:write": "Register customers and change their status",
    AccountRead = "account:read": "List and read accounts",
    AccountWrite = "account:write": "Register accounts and change their status",
    BalanceRead = "balance:read": "Read account balances",
    ContractRead = "contract:read": "List and read token contracts",
    ContractManage = "contract:manage": "Register token contracts and change them",
    TransactionRead = "transaction:read": "List and read token operations, locks and breaks",
    TransactionSubmit = "transaction:submit": "Submit token operations (TRANSFER, LOCK, RELEASE, CANCEL)",
    TransactionMint = "transaction:mint": "Submit MINT and BURN operations: create and destroy money",
    PolicyRead = "policy:read": "Read policies, their versions and templates",
    PolicyCreate = "policy:create": "Create draft policies",
    PolicyVersionCreate = "policy:version:create": "Add policy versions",
    PolicyUpdate = "policy:update": "Change policy metadata, activate, archive, set the current version",
    TemplateCreate = "template:create": "Create the organisation's policy templates",
    ApprovalRead = "approval:read": "List approval requests and tasks",
    ApprovalRequest = "approval:request": "Raise and cancel approval requests",
    ApprovalDecide = "approval:decide": "Approve, reject and reassign approval tasks",
    ScriptRead = "script:read": "List, read and download scripts",
    ScriptWrite = "script:write": "Create, change, clone and delete scripts",
    AutomationRead = "automation:read": "List automations and their history",
    AutomationWrite = "automation:write": "Create automations and change their status",
    AutomationExecute = "automation:execute": "Run automations on demand",
    WebhookRead = "webhook:read": "List and read webhook registrations, events and deliveries",
    WebhookManage = "webhook:manage": "Register, change, test, rotate and delete webhooks",
    WebhookReplay = "webhook:replay": "Replay webhook deliveries",
    AuditRead = "audit:read": "Search and read the audit log",
    AuditExport = "audit:export": "Export the audit log as CSV",
    UserRead = "user:read": "List and read the organisation's users",
    UserCreate = "user:create": "Invite users (with the USER role, or a custom role)",
    AdminCreate = "admin:create": "Invite users as ADMIN, and manage ADMINs",
    SuperAdminCreate = "super_admin:create": "Invite users as SUPER_ADMIN, and manage SUPER_ADMINs",
    UserUpdate = "user:update": "Change a user's role, suspend and reactivate users",
    MemberRemove = "member:remove": "Remove users from the organisation",
    RoleRead = "role:read": "List and read roles and the permission catalogue",
    RoleCreate = "role:create": "Create custom roles",
    RoleUpdate = "role:update": "Edit custom roles and their permissions",
    RoleDelete = "role:delete": "Delete custom roles no one holds",
    GroupRead = "group:read": "List and read approval groups",
    GroupManage = "group:manage": "Create, rename and deactivate approval groups, add and remove members",
    ClientRead = "client:read": "List the organisation's machine clients",
    ClientManage = "client:manage": "Create and disable machine clients",
}

impl Permission {
    /// The permission named `name` (exact, lower-case as published).
    pub fn parse(name: &str) -> Option<Permission> {
        Permission::ALL.iter().copied().find(|p| p.name() == name)
    }

    fn bit(self) -> u64 {
        1 << (self as u32)
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

// The set is a bit field: the catalogue must fit in it.
const _: () = assert!(Permission::ALL.len() <= 64);

/// A set of permissions, cheap to copy and compare.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PermissionSet(u64);

impl PermissionSet {
    pub const EMPTY: PermissionSet = PermissionSet(0);

    pub fn all() -> Self {
        Permission::ALL.iter().copied().collect()
    }

    pub fn contains(self, permission: Permission) -> bool {
        self.0 & permission.bit() != 0
    }

    pub fn insert(&mut self, permission: Permission) {
        self.0 |= permission.bit();
    }

    pub fn remove(&mut self, permission: Permission) {
        self.0 &= !permission.bit();
    }

    /// Whether every permission of `other` is in this set.
    pub fn includes(self, other: PermissionSet) -> bool {
        other.0 & !self.0 == 0
    }

    /// The permissions of this set that `other` lacks.
    pub fn minus(self, other: PermissionSet) -> PermissionSet {
        PermissionSet(self.0 & !other.0)
    }

    /// The permissions in both sets.
    pub fn both(self, other: PermissionSet) -> PermissionSet {
        PermissionSet(self.0 & other.0)
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// In catalogue order.
    pub fn iter(self) -> impl Iterator<Item = Permission> {
        Permission::ALL.iter().copied().filter(move |p| self.contains(*p))
    }

    pub fn names(self) -> Vec<&'static str> {
        self.iter().map(Permission::name).collect()
    }

    /// Parses permission names; `Err` carries every unknown name, in the order given.
    pub fn parse_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<PermissionSet, Vec<String>> {
        let mut set = PermissionSet::EMPTY;
        let mut unknown = Vec::new();
        for name in names {
            match Permission::parse(name) {
                Some(p) => set.insert(p),
                None => unknown.push(name.to_owned()),
            }
        }
        if unknown.is_empty() { Ok(set) } else { Err(unknown) }
    }
}

impl FromIterator<Permission> for PermissionSet {
    fn from_iter<I: IntoIterator<Item = Permission>>(iter: I) -> Self {
        let mut set = PermissionSet::EMPTY;
        for p in iter {
            set.insert(p);
        }
        set
    }
}

impl fmt::Debug for PermissionSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.names()).finish()
    }
}

/// What the platform role `name` (SUPER_ADMIN, ADMIN, USER; exact upper case) grants.
///
/// - SUPER_ADMIN: everything.
/// - ADMIN: everything but making or managing SUPER_ADMINs.
/// - USER: operating customers, accounts and token operations, deciding approvals, running
///   automations, and reading what that work needs; no administration.
pub fn platform_grants(name: &str) -> Option<PermissionSet> {
    use Permission::*;
    match name {
        "SUPER_ADMIN" => Some(PermissionSet::all()),
        "ADMIN" => {
            let mut set = PermissionSet::all();
            set.remove(SuperAdminCreate);
            Some(set)
        }
        "USER" => Some(
            [
                CustomerRead,
                CustomerWrite,
                AccountRead,
                AccountWrite,
                BalanceRead,
                ContractRead,
                TransactionRead,
                TransactionSubmit,
                PolicyRead,
                ApprovalRead,
                ApprovalRequest,
                ApprovalDecide,
                ScriptRead,
                AutomationRead,
                AutomationExecute,
                WebhookRead,
                UserRead,
                RoleRead,
                GroupRead,
            ]
            .into_iter()
            .collect(),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_round_trip() {
        let mut names: Vec<_> = Permission::ALL.iter().map(|p| p.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Permission::ALL.len());
        for p in Permission::ALL {
            assert_eq!(Permission::parse(p.name()), Some(*p));
        }
        assert_eq!(Permission::parse("CUSTOMER:READ"), None);
    }

    #[test]
    fn the_spec_names_are_in_the_catalogue() {
        for name in [
            "super_admin:create",
            "admin:create",
            "user:create",
            "member:remove",
            "role:create",
            "group:manage",
            "policy:read",
            "policy:create",
            "policy:version:create",
            "policy:update",
        ] {
            assert!(Permission::parse(name).is_some(), "{name}");
        }
    }

    #[test]
    fn set_operations() {
        let a: PermissionSet = [Permission::CustomerRead, Permission::UserCreate].into_iter().collect();
        let b: PermissionSet = [Permission::CustomerRead].into_iter().collect();
        assert!(a.includes(b));
        assert!(!b.includes(a));
        assert_eq!(a.minus(b).names(), ["user:create"]);
        assert_eq!(
            PermissionSet::parse_names(["customer:read", "nope", "x:y"]),
            Err(vec!["nope".to_owned(), "x:y".to_owned()])
        );
    }

    #[test]
    fn platform_grants_rank_super_admin_over_admin_over_user() {
        let super_admin = platform_grants("SUPER_ADMIN").unwrap_or_default();
        let admin = platform_grants("ADMIN").unwrap_or_default();
        let user = platform_grants("USER").unwrap_or_default();
        assert!(super_admin.includes(admin) && admin != super_admin);
        assert!(admin.includes(user) && !user.contains(Permission::UserCreate));
        assert!(!admin.contains(Permission::SuperAdminCreate) && admin.contains(Permission::AdminCreate));
        assert_eq!(platform_grants("AUDITOR"), None);
    }
}
