//! The behaviour suite: the running service driven over HTTP, the way an integrator would, one
//! module per area. One test binary keeps link time and disk use down.

/// The binary under test, as cargo built it for this run.
const BINARY: &str = env!("CARGO_BIN_EXE_tokenops");

/// Most areas run the service in-process (`TestApp`): the binary's allocator, counting, so that
/// script runs are held to their memory budget here as they are in the binary
/// (`tokenops_scripting::memory`; without it no run would ever be stopped for its memory).
#[global_allocator]
static ALLOCATOR: tokenops_scripting::CountingAllocator<mimalloc::MiMalloc> =
    tokenops_scripting::CountingAllocator::new(mimalloc::MiMalloc);

mod accounts;
mod accounts_crash;
mod approvals;
mod approvals_crash;
mod audit_chain;
mod audit_chain_crash;
mod audit_coverage;
mod audit_export;
mod automations;
mod automations_crash;
mod automations_sweep;
mod binary;
mod conventions;
mod crash;
mod crash_load;
mod custody;
mod customers;
mod demo;
mod fixtures;
mod idempotency;
mod identity_provider;
mod jobs;
mod latency;
mod mail;
mod nonce_gaps;
mod observability;
mod openapi_client;
mod organisation;
mod paging;
mod policies;
mod policy_pipeline;
mod policy_simulation;
mod policy_templates;
mod postgres_crash;
mod quickstart;
mod scripts;
mod sign_in;
mod smoke;
mod store_failures;
mod support;
mod token_attacks;
mod token_verification;
mod transactions;
mod transactions_crash;
mod two_nodes;
mod webhook_crash;
mod webhook_deliveries;
mod webhook_operations;
mod webhook_ssrf;
mod webhook_verifiers;
mod webhooks;
