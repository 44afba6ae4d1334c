//! The statuses of an organisation's users and approval groups.

use crate::wire::wire_enum;

wire_enum! {
    /// INVITED until the first password is set; ACTIVE; SUSPENDED by an administrator.
    UserStatus {
        Invited => "INVITED",
        Active => "ACTIVE",
        Suspended => "SUSPENDED",
    }
}

wire_enum! {
    GroupStatus {
        Active => "ACTIVE",
        Inactive => "INACTIVE",
    }
}
