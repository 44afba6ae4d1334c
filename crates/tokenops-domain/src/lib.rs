//! Plain types and pure rules of tokenops: identifiers, the canonical timestamp, the customer
//! state rules, events, audit vocabulary, paging primitives, the permission catalogue and the
//! platform roles. Nothing here performs I/O.

pub mod account;
pub mod asset;
pub mod audit;
pub mod customer;
pub mod event;
pub mod ids;
pub mod operation;
pub mod paging;
pub mod permission;
pub mod role;
pub mod timestamp;

pub use ids::{TenantId, new_id};
pub use timestamp::Timestamp;
