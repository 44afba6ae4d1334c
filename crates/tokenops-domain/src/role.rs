//! Roles: the platform roles every organisation has (SUPER_ADMIN, ADMIN, USER), read-only and
//! matched case-insensitively. Custom roles per organisation join them with the identity area.

use crate::Timestamp;
use uuid::Uuid;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Role {
    pub id: Uuid,
    pub name: String,
    pub description: String,
    /// A platform role, shared by every organisation and never edited.
    pub platform: bool,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// When the platform roles were defined (this release): their createdAt and updatedAt.
const PLATFORM_ROLES_DEFINED_AT: Timestamp = Timestamp::from_micros(1_795_219_200_000_000); // 2026-11-21T00:00:00Z

/// The platform roles, with identifiers that are the same in every deployment.
pub fn platform_roles() -> Vec<Role> {
    [
        (
            "00000000-0000-7000-8000-000000000001",
            "SUPER_ADMIN",
            "Owns the organisation: every permission, including creating administrators",
        ),
        (
            "00000000-0000-7000-8000-000000000002",
            "ADMIN",
            "Administers the organisation: users, roles, groups, policies and operations",
        ),
        (
            "00000000-0000-7000-8000-000000000003",
            "USER",
            "Operates the organisation's customers, accounts and token operations",
        ),
    ]
    .into_iter()
    .map(|(id, name, description)| Role {
        id: Uuid::parse_str(id).unwrap_or(Uuid::nil()),
        name: name.to_owned(),
        description: description.to_owned(),
        platform: true,
        created_at: PLATFORM_ROLES_DEFINED_AT,
        updated_at: PLATFORM_ROLES_DEFINED_AT,
    })
    .collect()
}

/// Whether `name` names a platform role; platform names match case-insensitively.
pub fn is_platform_role(name: &str) -> bool {
    platform_roles().iter().any(|r| r.name.eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platform_roles_are_fixed_and_matched_case_insensitively() {
        let roles = platform_roles();
        assert_eq!(roles.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["SUPER_ADMIN", "ADMIN", "USER"]);
        assert!(roles.iter().all(|r| !r.id.is_nil() && r.platform));
        assert!(is_platform_role("super_admin"));
        assert!(!is_platform_role("AUDITOR"));
    }
}
