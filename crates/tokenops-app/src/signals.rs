//! The service's own signals for operators: what the metrics endpoint reads from the store at
//! scrape time (the job queue per kind, approvals waiting), and the figures recorded as things
//! happen (operation states entered, failures by code, time from acceptance to a terminal
//! state, breaks by reason, ledger send errors).

use std::collections::BTreeMap;
use tokenops_domain::Timestamp;
use tokenops_domain::operation::{Break, Operation, OperationState};
use tokenops_domain::webhook::WebhookStatus;
use tokenops_ledger::LedgerError;
/// How many jobs of a kind wait, run and died, and how long the oldest due one has waited: the
/// store's own figures, which a scrape passes on as they are.
pub use tokenops_store::QueueStats;

use crate::{App, AppResult};

/// What a scrape reads from the store.
#[derive(Debug, Clone, Default)]
pub struct Signals {
    /// The queue's figures per job kind: every kind with a handler (zero when none waits), and
    /// any other kind found in the queue.
    pub queue: BTreeMap<String, QueueStats>,
    /// Approval requests PENDING in all organisations, and the age of the oldest, in ms.
    pub approvals_waiting: u64,
    pub oldest_approval_age_ms: u64,
    /// Webhook deliveries waiting, by their registration's status (every status, zero when
    /// none waits).
    pub webhook_backlog: BTreeMap<&'static str, u64>,
}

impl App {
    pub async fn signals(&self) -> AppResult<Signals> {
        let mut queue: BTreeMap<String, QueueStats> =
            self.jobs.kinds().map(|kind| (kind.to_owned(), QueueStats::default())).collect();
        queue.extend(self.jobs.stats().await?);
        let mut tx = self.store.read().await?;
        let (approvals_waiting, oldest) = tx.approvals().pending_summary().await?;
        let now = self.clock.now();
        let oldest_approval_age_ms = oldest.map_or(0, |at| at.millis_until(now).try_into().unwrap_or(0));
        let mut webhook_backlog: BTreeMap<&'static str, u64> =
            WebhookStatus::ALL.iter().map(|status| (status.as_str(), 0)).collect();
        for (status, waiting) in tx.webhooks().backlog_by_registration_status().await? {
            if let Some(count) = WebhookStatus::parse(&status).and_then(|s| webhook_backlog.get_mut(s.as_str())) {
                *count = waiting;
            }
        }
        Ok(Signals { queue, approvals_waiting, oldest_approval_age_ms, webhook_backlog })
    }
}

/// An operation entered its state (accepted, or moved by a step): counted by type and state;
/// a terminal state also records the time since acceptance and, for FAILED, the code.
pub fn operation_entered(operation: &Operation, now: Timestamp) {
    let (tx_type, state) = (operation.tx_type.as_str(), operation.state.as_str());
    metrics::counter!("tokenops_operations_entered_total", "type" => tx_type, "state" => state).increment(1);
    if !operation.state.is_terminal() {
        return;
    }
    let seconds = operation.created_at.millis_until(now) as f64 / 1_000.0;
    metrics::histogram!("tokenops_operation_terminal_seconds", "type" => tx_type, "state" => state).record(seconds);
    if operation.state == OperationState::Failed {
        let code = operation.failure_code.map_or("UNKNOWN", |c| c.as_str());
        metrics::counter!("tokenops_operations_failed_total", "type" => tx_type, "code" => code).increment(1);
    }
}

/// A break was recorded.
pub fn break_recorded(found: &Break) {
    metrics::counter!("tokenops_breaks_total", "reason" => found.reason.as_str()).increment(1);
}

/// Reconciliation passed over an account this round, because operations touching it were on
/// their way (`in_flight`) or its position moved while it looked (`moving`): an account that is
/// never quiet is never compared, and this shows it.
pub fn reconciliation_skipped(why: &'static str) {
    metrics::counter!("tokenops_reconciliation_skipped_total", "why" => why).increment(1);
}

/// One webhook attempt ended (`delivered`, `retry` or `parked`), after `seconds` on the wire.
pub fn webhook_attempted(outcome: &'static str, seconds: f64) {
    metrics::counter!("tokenops_webhook_attempts_total", "outcome" => outcome).increment(1);
    metrics::histogram!("tokenops_webhook_attempt_duration_seconds", "outcome" => outcome).record(seconds);
}

/// The ledger refused or did not take a signed transaction, by kind of error.
pub fn ledger_send_failed(error: &LedgerError) {
    let kind = match error {
        LedgerError::Temporary { .. } => "temporary",
        LedgerError::Unreachable { .. } => "unreachable",
        LedgerError::Final { .. } => "final",
        LedgerError::Superseded { .. } => "superseded",
        LedgerError::Elsewhere { .. } => "elsewhere",
        LedgerError::Signing(_) => "signing",
    };
    metrics::counter!("tokenops_ledger_send_errors_total", "kind" => kind).increment(1);
}
