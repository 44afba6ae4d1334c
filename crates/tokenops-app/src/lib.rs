//! The application layer: one service per area of the spec, the write helper that makes every
//! write all-or-nothing, the durable job runner and its handlers, and the Clock port. The spec's
//! rules and state machines live here, named in the spec's words.

pub mod accounts;
pub mod approvals;
pub mod audit;
pub mod audit_chain;
pub mod automations;
pub mod chain;
pub mod clock;
pub mod codes;
pub mod context;
pub mod contracts;
pub mod customers;
pub mod error;
pub mod events;
pub mod identity;
pub mod jobs;
pub mod lock_expiry;
pub mod mail;
pub mod nonce_gaps;
pub mod operations;
pub mod policies;
pub mod reconciliation;
pub mod resume;
pub mod scripts;
pub mod settlement;
pub mod signals;
pub mod trace;
pub mod webhooks;
pub mod write;

pub use error::{AppResult, Code, Error};

use clock::Clock;
use jobs::{Backoff, DispatchEvent, JobHandler, JobRunner, Maintenance, MaintenanceSettings, RunnerSettings};
use std::sync::Arc;
use std::time::Duration;
use tokenops_store::Store;
use write::{WriteSettings, Writes};

/// Tunables of the app layer. Defaults are the production values; tests shorten them.
#[derive(Debug, Clone)]
pub struct AppSettings {
    pub idempotency_lease_ms: i64,
    pub idempotency_retention_ms: i64,
    pub finished_job_retention_ms: i64,
    pub job_max_attempts: u32,
    pub job_lease_ms: i64,
    pub job_backoff_base_ms: i64,
    pub job_backoff_cap_ms: i64,
    pub worker_concurrency: usize,
    pub worker_poll_interval: Duration,
    pub maintenance_interval: Duration,
    /// How often expired locks are looked for.
    pub lock_sweep_interval: Duration,
    /// How often ledger balances are reconciled with positions.
    pub reconcile_interval: Duration,
    /// How often in-flight operations that no job carries are looked for, and how long such an
    /// operation must have been unchanged to be resumed.
    pub resume_sweep_interval: Duration,
    /// How often wallets held back by a nonce gap are looked for.
    pub nonce_gap_sweep_interval: Duration,
    /// How long a signature may take from custody to the store: a nonce handed out more
    /// recently is never filled, and a wallet is looked at only once a recorded signature has
    /// waited this long.
    pub nonce_gap_grace: Duration,
    pub shutdown_grace: Duration,
    /// How long settlement waits between receipt polls.
    pub receipt_poll_ms: i64,
    /// How long an approval request stays PENDING before it expires.
    pub approval_lifetime_ms: i64,
    /// How long after its submission an operation the policy step cannot decide (the policies
    /// unreadable) may wait before it fails POLICY_TIMEOUT.
    pub policy_decision_timeout_ms: i64,
    /// The sandbox's limits for every script run (and the compiler's).
    pub script_limits: tokenops_scripting::Limits,
    /// How often due SCHEDULED automations are looked for.
    pub automation_schedule_interval: Duration,
    /// Failed runs in a row after which the service sets an automation DISABLED (0: never).
    pub automation_disable_after_failures: u32,
    /// How often the audit sealer runs (`audit.seal`).
    pub audit_seal_interval: Duration,
    /// The embedded provider's brute-force rule for passwords (login, activate).
    pub sign_in_lockout: tokenops_identity::LockoutPolicy,
}

impl Default for AppSettings {
    fn default() -> Self {
        Self {
            idempotency_lease_ms: 30_000,
            idempotency_retention_ms: 24 * 3_600_000,
            finished_job_retention_ms: 24 * 3_600_000,
            job_max_attempts: 10,
            job_lease_ms: 60_000,
            job_backoff_base_ms: 1_000,
            job_backoff_cap_ms: 600_000,
            worker_concurrency: 8,
            worker_poll_interval: Duration::from_secs(2),
            maintenance_interval: Duration::from_secs(600),
            lock_sweep_interval: Duration::from_secs(5),
            reconcile_interval: Duration::from_secs(600),
            resume_sweep_interval: Duration::from_secs(60),
            nonce_gap_sweep_interval: Duration::from_secs(5),
            nonce_gap_grace: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(10),
            receipt_poll_ms: 200,
            approval_lifetime_ms: 72 * 3_600_000,
            policy_decision_timeout_ms: 300_000,
            script_limits: tokenops_scripting::Limits::default(),
            automation_schedule_interval: Duration::from_secs(5),
            automation_disable_after_failures: 5,
            audit_seal_interval: Duration::from_secs(10),
            sign_in_lockout: tokenops_identity::LockoutPolicy::default(),
        }
    }
}

/// The parts the app is given rather than builds: the master-key sealer, where mail goes, the
/// embedded identity provider's settings, custody and the ledger.
pub struct Adapters {
    pub sealer: Arc<tokenops_identity::Sealer>,
    pub mail: Arc<dyn mail::MailTransport>,
    pub provider: identity::ProviderSettings,
    pub custody: Arc<dyn tokenops_custody::Custody>,
    pub ledger: Arc<dyn tokenops_ledger::Ledger>,
    /// The webhook transport and settings.
    pub webhooks: webhooks::WebhookAdapters,
}

/// The wired application: what the API and the workers call.
pub struct App {
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    pub settings: AppSettings,
    pub writes: Writes,
    pub customers: customers::Customers,
    pub contracts: contracts::Contracts,
    pub accounts: accounts::Accounts,
    pub operations: operations::Operations,
    /// The settlement pipeline the operation jobs run.
    pub settlement: Arc<settlement::Pipeline>,
    pub audit: audit::AuditLog,
    /// The audit log's sealed chain: the sealer, the signed heads, verification.
    pub audit_chain: Arc<audit_chain::AuditChain>,
    pub events: events::EventHistory,
    pub users: identity::users::Users,
    pub roles: identity::roles::Roles,
    pub groups: identity::groups::Groups,
    pub approvals: approvals::Approvals,
    pub clients: identity::clients::Clients,
    pub templates: policies::templates::Templates,
    pub policies: policies::Policies,
    pub scripts: scripts::Scripts,
    pub dry_runs: scripts::dry_run::DryRuns,
    pub automations: automations::Automations,
    pub webhooks: Arc<webhooks::Webhooks>,
    pub identity: Arc<identity::IdentityProvider>,
    /// The ledger the organisations' tokens live on.
    pub ledger: Arc<dyn tokenops_ledger::Ledger>,
    pub sealer: Arc<tokenops_identity::Sealer>,
    pub jobs: Arc<JobRunner>,
}

impl App {
    /// What a node that runs workers does before they start: sends the stored signed
    /// transactions of unsettled operations again (see `settlement::resend_unsettled`).
    pub async fn recover(&self) -> AppResult<usize> {
        settlement::resend_unsettled(&self.settlement).await.map_err(|e| Error::internal(e.to_string()))
    }

    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>, settings: AppSettings, adapters: Adapters) -> Arc<Self> {
        let approval_settings = approvals::ApprovalSettings {
            lifetime_ms: settings.approval_lifetime_ms,
            job_max_attempts: settings.job_max_attempts,
        };
        let pipeline = Arc::new(settlement::Pipeline {
            store: store.clone(),
            custody: adapters.custody.clone(),
            ledger: adapters.ledger.clone(),
            settings: settlement::SettlementSettings {
                receipt_poll_ms: settings.receipt_poll_ms,
                job_max_attempts: settings.job_max_attempts,
                policy_decision_timeout_ms: settings.policy_decision_timeout_ms,
            },
            approvals: approval_settings,
        });
        // A POLICY request's resolution moves its operation on in the pipeline.
        let approval_effect: Arc<dyn approvals::ResolutionEffect> =
            Arc::new(settlement::PolicyResolution(pipeline.clone()));
        let delivery_keys =
            Arc::new(webhooks::DeliveryKeys::new(store.clone(), adapters.sealer.clone(), clock.clone()));
        // Heads are signed with the webhook JWS key: the one key the platform always publishes.
        let audit_chain = Arc::new(audit_chain::AuditChain::new(
            store.clone(),
            clock.clone(),
            delivery_keys.clone(),
            adapters.webhooks.settings.issuer.clone(),
        ));
        let webhooks = Arc::new(webhooks::Webhooks::new(
            store.clone(),
            clock.clone(),
            adapters.sealer.clone(),
            adapters.webhooks,
            delivery_keys,
        ));
        let compiler = Arc::new(tokenops_scripting::Compiler::new(settings.script_limits.clone()));
        let write_settings = WriteSettings {
            idempotency_lease_ms: settings.idempotency_lease_ms,
            job_max_attempts: settings.job_max_attempts,
        };
        let run_settings = automations::runs::RunSettings {
            disable_after_failures: settings.automation_disable_after_failures,
            job_max_attempts: settings.job_max_attempts,
        };
        if !tokenops_scripting::memory::counting() {
            // A binary that does not declare the counting allocator (see the scripting crate's
            // `memory`) runs scripts without their memory budget.
            tracing::warn!(
                "the global allocator does not count allocations: script runs are not held to TOKENOPS_SCRIPT_MAX_MEMORY_BYTES"
            );
        }
        // The reads and submissions of script runs, dry runs included.
        let sandbox = Arc::new(automations::runs::Sandbox {
            clock: clock.clone(),
            compiler: compiler.clone(),
            limits: settings.script_limits.clone(),
            accounts: Arc::new(accounts::Accounts::new(store.clone(), adapters.ledger.clone())),
            operations: Arc::new(operations::Operations::new(store.clone())),
        });
        let dry_runs = scripts::dry_run::DryRuns {
            store: store.clone(),
            sandbox: sandbox.clone(),
            slots: tokio::sync::Semaphore::new(scripts::dry_run::CONCURRENT_DRY_RUNS),
        };
        let handlers: Vec<Arc<dyn JobHandler>> = vec![
            Arc::new(automations::runs::RunAutomation {
                store: store.clone(),
                sandbox,
                writes: Arc::new(Writes::new(store.clone(), clock.clone(), write_settings)),
                settings: run_settings,
            }),
            Arc::new(automations::runs::ScheduleAutomations { store: store.clone(), settings: run_settings }),
            Arc::new(webhooks::DeliverWebhook(webhooks.clone())),
            Arc::new(webhooks::RotateDeliveryKey {
                keys: webhooks.keys.clone(),
                store: store.clone(),
                rotation_days: webhooks.settings().jws_key_rotation_days,
            }),
            Arc::new(audit_chain::SealAuditChain(audit_chain.clone())),
            Arc::new(approvals::ExpireApprovals {
                store: store.clone(),
                settings: approval_settings,
                effect: approval_effect.clone(),
            }),
            Arc::new(settlement::Evaluate(pipeline.clone())),
            Arc::new(settlement::Settle(pipeline.clone())),
            Arc::new(settlement::Track(pipeline.clone())),
            Arc::new(lock_expiry::ExpireLocks(pipeline.clone())),
            Arc::new(reconciliation::Reconcile(pipeline.clone())),
            Arc::new(resume::ResumeStranded {
                pipeline: pipeline.clone(),
                unchanged_for: settings.resume_sweep_interval,
            }),
            Arc::new(nonce_gaps::HealNonceGaps { pipeline: pipeline.clone(), grace: settings.nonce_gap_grace }),
            Arc::new(mail::SendMail {
                store: store.clone(),
                sealer: adapters.sealer.clone(),
                transport: adapters.mail.clone(),
            }),
            Arc::new(DispatchEvent {
                store: store.clone(),
                job_max_attempts: settings.job_max_attempts,
                runs: run_settings,
            }),
            Arc::new(contracts::DeployContract { store: store.clone(), ledger: adapters.ledger.clone() }),
            Arc::new(accounts::ProvisionAccount {
                store: store.clone(),
                custody: adapters.custody.clone(),
                ledger: adapters.ledger.clone(),
                job_max_attempts: settings.job_max_attempts,
            }),
            Arc::new(Maintenance {
                store: store.clone(),
                settings: MaintenanceSettings {
                    idempotency_retention_ms: settings.idempotency_retention_ms,
                    finished_job_retention_ms: settings.finished_job_retention_ms,
                },
            }),
        ];
        let runner = JobRunner::new(
            store.clone(),
            clock.clone(),
            RunnerSettings {
                concurrency: settings.worker_concurrency,
                lease_ms: settings.job_lease_ms,
                poll_interval: settings.worker_poll_interval,
                backoff: Backoff { base_ms: settings.job_backoff_base_ms, cap_ms: settings.job_backoff_cap_ms },
                periodic: vec![
                    (jobs::kinds::MAINTENANCE_PRUNE, settings.maintenance_interval),
                    (jobs::kinds::LOCKS_EXPIRE, settings.lock_sweep_interval),
                    (jobs::kinds::POSITIONS_RECONCILE, settings.reconcile_interval),
                    (jobs::kinds::OPERATIONS_RESUME, settings.resume_sweep_interval),
                    (jobs::kinds::NONCE_GAPS_HEAL, settings.nonce_gap_sweep_interval),
                    (jobs::kinds::AUTOMATIONS_SCHEDULE, settings.automation_schedule_interval),
                    // The key's age is days; an hour's lateness does not matter.
                    (jobs::kinds::WEBHOOKS_ROTATE_KEY, Duration::from_secs(3_600)),
                    (jobs::kinds::AUDIT_SEAL, settings.audit_seal_interval),
                ],
                shutdown_grace: settings.shutdown_grace,
            },
            handlers,
        );
        Arc::new(Self {
            writes: Writes::new(store.clone(), clock.clone(), write_settings),
            customers: customers::Customers::new(store.clone()),
            contracts: contracts::Contracts::new(store.clone()),
            accounts: accounts::Accounts::new(store.clone(), adapters.ledger.clone()),
            operations: operations::Operations::new(store.clone()),
            settlement: pipeline,
            audit: audit::AuditLog::new(store.clone(), clock.clone()),
            audit_chain,
            events: events::EventHistory::new(store.clone()),
            users: identity::users::Users::new(store.clone()),
            roles: identity::roles::Roles::new(store.clone()),
            groups: identity::groups::Groups::new(store.clone()),
            approvals: approvals::Approvals::new(store.clone(), approval_settings, approval_effect),
            clients: identity::clients::Clients::new(store.clone()),
            templates: policies::templates::Templates::new(store.clone()),
            policies: policies::Policies::new(store.clone()),
            scripts: scripts::Scripts::new(store.clone(), compiler),
            dry_runs,
            automations: automations::Automations::new(store.clone()),
            webhooks,
            identity: Arc::new(identity::IdentityProvider::new(
                store.clone(),
                clock.clone(),
                adapters.sealer.clone(),
                adapters.provider,
            )),
            ledger: adapters.ledger,
            sealer: adapters.sealer,
            jobs: Arc::new(runner),
            store,
            clock,
            settings,
        })
    }
}
