//! The statuses of an organisation's users and approval groups.

/// INVITED until the first password is set; ACTIVE; SUSPENDED by an administrator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UserStatus {
    Invited,
    Active,
    Suspended,
}

impl UserStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            UserStatus::Invited => "INVITED",
            UserStatus::Active => "ACTIVE",
            UserStatus::Suspended => "SUSPENDED",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "INVITED" => Some(UserStatus::Invited),
            "ACTIVE" => Some(UserStatus::Active),
            "SUSPENDED" => Some(UserStatus::Suspended),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupStatus {
    Active,
    Inactive,
}

impl GroupStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            GroupStatus::Active => "ACTIVE",
            GroupStatus::Inactive => "INACTIVE",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "ACTIVE" => Some(GroupStatus::Active),
            "INACTIVE" => Some(GroupStatus::Inactive),
            _ => None,
        }
    }
}
