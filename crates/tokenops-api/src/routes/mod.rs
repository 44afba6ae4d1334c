//! One router per area of the spec.

pub mod audit;
pub mod auth;
pub mod customers;
pub mod idp;
pub mod operations;
pub mod roles;
pub mod tenants;
pub mod users;
pub mod webhook_events;
