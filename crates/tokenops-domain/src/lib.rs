//! Plain types and pure rules of tokenops: identifiers, the canonical timestamp, the customer
//! state rules, events, audit vocabulary, paging primitives, the permission catalogue and the
//! platform roles. Nothing here performs I/O, save that `SystemClock`, the real adapter of the
//! `Clock` port every layer reads the time through, reads the system's time.
//! The policy catalogue and decision-table engine are `policy`; the approval step rules `approval`;
//! webhook registrations and deliveries `webhook`; scripts' and automations' statuses and the cron
//! schedule `script` and `automation`.

pub mod account;
pub mod approval;
pub mod asset;
pub mod audit;
pub mod audit_chain;
pub mod automation;
pub mod chain;
pub mod clock;
pub mod contract;
pub mod customer;
pub mod event;
pub mod identity;
pub mod ids;
pub mod json_depth;
pub mod operation;
pub mod paging;
pub mod permission;
pub mod policy;
pub mod role;
pub mod script;
pub mod timestamp;
pub mod webhook;
mod wire;

pub use clock::{Clock, ManualClock, SystemClock};
pub use ids::{TenantId, new_id};
pub use timestamp::Timestamp;
