//! Roles: the platform roles every organisation has (SUPER_ADMIN, ADMIN, USER), read-only,
//! matched case-insensitively and granting what `permission::platform_grants` says. Custom
//! roles of an organisation are stored with the permissions they grant.

use uuid::Uuid;

/// A platform role: the same id, name and grants in every deployment and organisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlatformRole {
    pub id: Uuid,
    pub name: &'static str,
}

pub const SUPER_ADMIN: PlatformRole =
    PlatformRole { id: Uuid::from_u128(0x00000000_0000_7000_8000_000000000001), name: "SUPER_ADMIN" };
pub const ADMIN: PlatformRole =
    PlatformRole { id: Uuid::from_u128(0x00000000_0000_7000_8000_000000000002), name: "ADMIN" };
pub const USER: PlatformRole =
    PlatformRole { id: Uuid::from_u128(0x00000000_0000_7000_8000_000000000003), name: "USER" };

pub const PLATFORM_ROLES: [PlatformRole; 3] = [SUPER_ADMIN, ADMIN, USER];

/// The platform role named `name`, compared case-insensitively.
pub fn platform_role_named(name: &str) -> Option<PlatformRole> {
    PLATFORM_ROLES.into_iter().find(|r| r.name.eq_ignore_ascii_case(name))
}

/// The platform role with this id.
pub fn platform_role(id: Uuid) -> Option<PlatformRole> {
    PLATFORM_ROLES.into_iter().find(|r| r.id == id)
}

/// Whether `name` names a platform role; platform names match case-insensitively.
pub fn is_platform_role(name: &str) -> bool {
    platform_role_named(name).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platform_roles_are_fixed_and_matched_case_insensitively() {
        assert_eq!(SUPER_ADMIN.id.to_string(), "00000000-0000-7000-8000-000000000001");
        assert_eq!(USER.id.to_string(), "00000000-0000-7000-8000-000000000003");
        assert_eq!(platform_role_named("super_admin"), Some(SUPER_ADMIN));
        assert_eq!(platform_role(ADMIN.id), Some(ADMIN));
        assert!(!is_platform_role("AUDITOR"));
    }
}
