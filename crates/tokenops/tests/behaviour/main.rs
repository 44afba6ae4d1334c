//! The behaviour suite: the running service driven over HTTP, the way an integrator would, one
//! module per area. One test binary keeps link time and disk use down.

mod accounts;
mod accounts_crash;
mod approvals;
mod binary;
mod conventions;
mod crash;
mod crash_load;
mod custody;
mod customers;
mod fixtures;
mod idempotency;
mod identity_provider;
mod jobs;
mod latency;
mod mail;
mod nonce_gaps;
mod openapi_client;
mod organisation;
mod paging;
mod policies;
mod policy_pipeline;
mod policy_templates;
mod postgres_crash;
mod sign_in;
mod smoke;
mod store_failures;
mod support;
mod token_attacks;
mod token_verification;
mod transactions;
mod transactions_crash;
mod webhook_deliveries;
mod webhooks;
