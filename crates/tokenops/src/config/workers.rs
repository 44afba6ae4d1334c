//! The workers' settings: the node's role and threads, the jobs (attempts, leases, backoff,
//! retention), the sweeps' intervals, and the rest of what the application services take
//! (`AppSettings`: idempotency records, approvals, policy decisions, automations, scripts, the
//! sign-in lockout).

use super::identity;
use super::scripts;
use super::sources::Reader;
use super::store::DatabaseUrl;
use tokenops_app::AppSettings;

/// Which parts of the service this node runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// HTTP API and workers (the default).
    All,
    /// HTTP API only: jobs are left to worker nodes.
    Api,
    /// Workers only, with the operational endpoints (health, readiness, metrics).
    Worker,
}

impl Role {
    pub fn runs_api(self) -> bool {
        matches!(self, Role::All | Role::Api)
    }
    pub fn runs_workers(self) -> bool {
        matches!(self, Role::All | Role::Worker)
    }
}

pub(super) struct Node {
    pub role: Role,
    /// Threads of the workers' runtime (`serve`).
    pub worker_threads: usize,
}

pub(super) fn node(r: &mut Reader) -> Node {
    // One by default: more settle faster, but their jobs then hold SQLite's writer and the
    // cores so often that the 202's p99 leaves 20 ms at a third of the rate (measured with
    // `scripts/bench`: ARCHITECTURE.md, "Throughput").
    let worker_threads = r.count("TOKENOPS_WORKER_THREADS", 1, 1, 64);
    let role = r.parse("TOKENOPS_ROLE", Role::All, "must be all, api or worker", |v| match v {
        "all" => Some(Role::All),
        "api" => Some(Role::Api),
        "worker" => Some(Role::Worker),
        _ => None,
    });
    Node { role, worker_threads }
}

/// Jobs run at once per node unless configured. A job spends most of its time waiting for its
/// commit to be durable: on SQLite that wait is shared by the whole group, so many jobs cost
/// little; on PostgreSQL each running job holds one of the pool's connections, which the API
/// needs too, so fewer run (measured with `scripts/bench`: ARCHITECTURE.md, "Throughput").
fn default_worker_concurrency(database: &DatabaseUrl) -> usize {
    match database {
        DatabaseUrl::Sqlite(_) => 256,
        DatabaseUrl::Postgres { .. } => 32,
    }
}

pub(super) fn app_settings(r: &mut Reader, database: &DatabaseUrl) -> AppSettings {
    let defaults = AppSettings::default();
    // The spec requires idempotency records to be kept at least 24 hours.
    let retention_secs = r.integer("TOKENOPS_IDEMPOTENCY_RETENTION_SECS", 86_400, 86_400, 90 * 86_400);
    AppSettings {
        idempotency_lease_ms: r.integer(
            "TOKENOPS_IDEMPOTENCY_LEASE_MS",
            defaults.idempotency_lease_ms,
            1_000,
            3_600_000,
        ),
        idempotency_retention_ms: retention_secs * 1_000,
        finished_job_retention_ms: r.integer(
            "TOKENOPS_JOB_RETENTION_SECS",
            defaults.finished_job_retention_ms / 1_000,
            60,
            90 * 86_400,
        ) * 1_000,
        job_max_attempts: u32::try_from(r.integer(
            "TOKENOPS_JOB_MAX_ATTEMPTS",
            i64::from(defaults.job_max_attempts),
            1,
            1_000,
        ))
        .unwrap_or(10),
        job_lease_ms: r.integer("TOKENOPS_JOB_LEASE_MS", defaults.job_lease_ms, 100, 3_600_000),
        job_backoff_base_ms: r.integer("TOKENOPS_JOB_BACKOFF_BASE_MS", defaults.job_backoff_base_ms, 1, 3_600_000),
        job_backoff_cap_ms: r.integer("TOKENOPS_JOB_BACKOFF_CAP_MS", defaults.job_backoff_cap_ms, 1, 86_400_000),
        worker_concurrency: r.count("TOKENOPS_WORKER_CONCURRENCY", default_worker_concurrency(database), 1, 256),
        worker_poll_interval: r.millis("TOKENOPS_WORKER_POLL_MS", 2_000, 10, 60_000),
        maintenance_interval: r.seconds("TOKENOPS_MAINTENANCE_INTERVAL_SECS", 600, 1, 86_400),
        shutdown_grace: r.millis("TOKENOPS_SHUTDOWN_GRACE_MS", 10_000, 0, 600_000),
        receipt_poll_ms: r.integer("TOKENOPS_RECEIPT_POLL_MS", defaults.receipt_poll_ms, 10, 600_000),
        lock_sweep_interval: r.millis("TOKENOPS_LOCK_SWEEP_MS", 5_000, 10, 3_600_000),
        reconcile_interval: r.seconds("TOKENOPS_RECONCILE_INTERVAL_SECS", 600, 1, 86_400),
        resume_sweep_interval: r.seconds("TOKENOPS_RESUME_SWEEP_SECS", 60, 1, 86_400),
        nonce_gap_sweep_interval: r.millis("TOKENOPS_NONCE_GAP_SWEEP_MS", 5_000, 10, 3_600_000),
        nonce_gap_grace: r.millis("TOKENOPS_NONCE_GAP_GRACE_MS", 10_000, 10, 3_600_000),
        // From a second (tests) to a year.
        approval_lifetime_ms: r.integer(
            "TOKENOPS_APPROVAL_LIFETIME_MS",
            defaults.approval_lifetime_ms,
            1_000,
            365 * 86_400_000,
        ),
        // From a second (tests) to a day.
        policy_decision_timeout_ms: r.integer(
            "TOKENOPS_POLICY_DECISION_TIMEOUT_MS",
            defaults.policy_decision_timeout_ms,
            1_000,
            86_400_000,
        ),
        script_limits: scripts::limits(r, &defaults.script_limits),
        automation_schedule_interval: r.millis("TOKENOPS_AUTOMATION_SCHEDULE_MS", 5_000, 10, 3_600_000),
        audit_seal_interval: r.millis("TOKENOPS_AUDIT_SEAL_MS", 10_000, 10, 86_400_000),
        automation_disable_after_failures: u32::try_from(r.integer(
            "TOKENOPS_AUTOMATION_DISABLE_AFTER_FAILURES",
            i64::from(defaults.automation_disable_after_failures),
            0,
            1_000,
        ))
        .unwrap_or(5),
        sign_in_lockout: identity::lockout(r, &defaults.sign_in_lockout),
    }
}
