//! Customers: the client-chosen reference, the status set and the allowed status changes.

use crate::wire::wire_enum;
use crate::{TenantId, Timestamp};
use uuid::Uuid;

pub const REFERENCE_MAX_LEN: usize = 64;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReferenceError {
    #[error("must not be blank")]
    Blank,
    #[error("must be at most {REFERENCE_MAX_LEN} characters")]
    TooLong,
    #[error("may contain only letters, digits and . _ : -")]
    BadCharacter,
    #[error("must not be . or .. (a URL reads them as a path step, so the reference could not be read back)")]
    DotSegment,
}

/// The reference rule shared by every client-chosen reference (customers, accounts).
pub fn validate_reference(text: &str) -> Result<(), ReferenceError> {
    if text.trim().is_empty() {
        return Err(ReferenceError::Blank);
    }
    if text.chars().count() > REFERENCE_MAX_LEN {
        return Err(ReferenceError::TooLong);
    }
    if !text.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')) {
        return Err(ReferenceError::BadCharacter);
    }
    // RFC 3986 §5.2.4: clients remove these segments before sending, so `/api/customers/..`
    // would reach another resource.
    if matches!(text, "." | "..") {
        return Err(ReferenceError::DotSegment);
    }
    Ok(())
}

/// Declares a client-chosen reference type: text that passed [`validate_reference`], shown as
/// itself and serialised as a string.
macro_rules! reference {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub fn parse(text: &str) -> Result<Self, $crate::customer::ReferenceError> {
                $crate::customer::validate_reference(text)?;
                Ok(Self(text.to_owned()))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// For values read back from the store, which only ever holds parsed references.
            pub fn from_stored(text: String) -> Self {
                Self(text)
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}({})", stringify!($name), self.0)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}
pub(crate) use reference;

reference! {
    /// A client-chosen customer reference: 1 to 64 characters of `A-Z a-z 0-9 . _ : -`, so that
    /// it is safe in a URL path segment without escaping.
    CustomerRef
}

wire_enum! {
    /// The statuses a customer can hold.
    CustomerStatus {
        Active => "ACTIVE",
        Inactive => "INACTIVE",
    }
}

impl CustomerStatus {
    /// A customer moves freely between ACTIVE and INACTIVE; asking for the current status is
    /// allowed and changes nothing (see [`StatusChange`]).
    pub fn change_to(self, target: CustomerStatus) -> StatusChange {
        if self == target { StatusChange::Unchanged } else { StatusChange::Changed { from: self, to: target } }
    }
}

/// The result of asking a customer to take a status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusChange {
    Unchanged,
    Changed { from: CustomerStatus, to: CustomerStatus },
}

/// A registered customer of an organisation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Customer {
    pub id: Uuid,
    pub tenant_id: TenantId,
    pub customer_ref: CustomerRef,
    pub display_name: Option<String>,
    pub status: CustomerStatus,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

pub const DISPLAY_NAME_MAX_LEN: usize = 200;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_accept_the_safe_alphabet_only() {
        assert!(CustomerRef::parse("cust-001:A_b.c").is_ok());
        assert_eq!(CustomerRef::parse("  "), Err(ReferenceError::Blank));
        assert_eq!(CustomerRef::parse("a/b"), Err(ReferenceError::BadCharacter));
        assert_eq!(CustomerRef::parse("ä"), Err(ReferenceError::BadCharacter));
        assert_eq!(CustomerRef::parse(&"x".repeat(65)), Err(ReferenceError::TooLong));
        assert!(CustomerRef::parse(&"x".repeat(64)).is_ok());
        assert_eq!(CustomerRef::parse("."), Err(ReferenceError::DotSegment));
        assert_eq!(CustomerRef::parse(".."), Err(ReferenceError::DotSegment));
        assert!(CustomerRef::parse("...").is_ok());
        assert!(CustomerRef::parse(".a").is_ok());
    }

    #[test]
    fn same_status_is_unchanged() {
        assert_eq!(CustomerStatus::Active.change_to(CustomerStatus::Active), StatusChange::Unchanged);
        assert_eq!(
            CustomerStatus::Active.change_to(CustomerStatus::Inactive),
            StatusChange::Changed { from: CustomerStatus::Active, to: CustomerStatus::Inactive }
        );
    }
}
