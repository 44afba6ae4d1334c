//! Jobs: `NewJob`, `Job`, `Lease`, `Claimed`, `QueueStats` and `JobStore`.

use async_trait::async_trait;
use tokenops_domain::{TenantId, Timestamp};
use uuid::Uuid;

use crate::StoreResult;

#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    pub kind: String,
    pub tenant_id: Option<TenantId>,
    pub payload: serde_json::Value,
    pub run_at: Timestamp,
    pub max_attempts: u32,
    /// At most one queued or running job holds a given dedupe key; a second enqueue is skipped.
    pub dedupe_key: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobStatus {
    Queued,
    Running,
    Done,
    Dead,
}

impl JobStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Queued => "queued",
            JobStatus::Running => "running",
            JobStatus::Done => "done",
            JobStatus::Dead => "dead",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "queued" => Some(JobStatus::Queued),
            "running" => Some(JobStatus::Running),
            "done" => Some(JobStatus::Done),
            "dead" => Some(JobStatus::Dead),
            _ => None,
        }
    }
}

/// A job as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub id: Uuid,
    pub kind: String,
    pub tenant_id: Option<TenantId>,
    pub payload: serde_json::Value,
    pub status: JobStatus,
    /// Claims so far, the current one included.
    pub attempts: u32,
    pub max_attempts: u32,
    pub run_at: Timestamp,
    pub lease_token: Option<Uuid>,
    pub lease_until: Option<Timestamp>,
    pub last_error: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// Proof that a worker holds a job: completion and retry are refused without the current token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lease {
    pub job_id: Uuid,
    pub token: Uuid,
}

/// What a claim took, and when the queue's next job falls due.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Claimed {
    pub jobs: Vec<Job>,
    /// When the claim took fewer jobs than it could (none other was due): the earliest `run_at`
    /// of a queued job not due yet. An idle worker sleeps until then rather than until its next
    /// poll. `None` after a full claim, or when no job is queued for later.
    pub next_due: Option<Timestamp>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueStats {
    pub queued: u64,
    pub running: u64,
    pub dead: u64,
    /// Age of the oldest job that is due and waiting, in milliseconds.
    pub oldest_due_age_ms: u64,
}

impl QueueStats {
    /// The whole queue's figures from those of each kind.
    pub fn total(by_kind: &[(String, QueueStats)]) -> QueueStats {
        by_kind.iter().fold(QueueStats::default(), |total, (_, kind)| QueueStats {
            queued: total.queued + kind.queued,
            running: total.running + kind.running,
            dead: total.dead + kind.dead,
            oldest_due_age_ms: total.oldest_due_age_ms.max(kind.oldest_due_age_ms),
        })
    }
}

#[async_trait]
pub trait JobStore: Send {
    /// Enqueues inside the caller's transaction; `None` when the dedupe key was already held.
    async fn enqueue(&mut self, job: &NewJob, now: Timestamp) -> StoreResult<Option<Uuid>>;
    /// `enqueue` for a job whose dedupe key no live job can hold (a new delivery's first
    /// attempt, the attempt after the one running): nothing can refuse it, so a backend may
    /// hold it back and write it with the transaction's next statement, as a job without a key.
    async fn enqueue_fresh_key(&mut self, job: &NewJob, now: Timestamp) -> StoreResult<()> {
        self.enqueue(job, now).await.map(|_| ())
    }
    /// `enqueue` for several jobs without dedupe keys (a backend may insert them in one
    /// statement).
    async fn enqueue_all(&mut self, jobs: &[NewJob], now: Timestamp) -> StoreResult<()> {
        for job in jobs {
            self.enqueue(job, now).await?;
        }
        Ok(())
    }
    /// Claims up to `limit` due jobs (queued and due, or running with an expired lease), in
    /// `run_at` order, giving each a lease token no earlier claim of it had, until
    /// `lease_until`, and counting the attempt. (A lease is its job's id with the token, so the
    /// jobs of one claim may share a token.)
    async fn claim(&mut self, now: Timestamp, lease_until: Timestamp, limit: u32) -> StoreResult<Vec<Job>>;
    /// `claim`, telling also when the next job falls due (`Claimed::next_due`), in the same
    /// statement where the backend can: the worker loop claims this way, so learning when to
    /// wake costs no round trip of its own.
    async fn claim_with_next_due(&mut self, now: Timestamp, lease_until: Timestamp, limit: u32)
    -> StoreResult<Claimed>;
    /// Extends a running job's lease to `lease_until` (the worker's heartbeat); false when the
    /// lease is no longer this worker's.
    async fn extend_lease(&mut self, lease: Lease, lease_until: Timestamp, now: Timestamp) -> StoreResult<bool>;
    /// Marks the job done; false when the lease is no longer this worker's (fencing).
    async fn complete(&mut self, lease: Lease, now: Timestamp) -> StoreResult<bool>;
    /// `complete` for several leases (a backend may do it in one statement); how many it
    /// completed.
    async fn complete_all(&mut self, leases: &[Lease], now: Timestamp) -> StoreResult<usize> {
        let mut completed = 0;
        for lease in leases {
            completed += usize::from(self.complete(*lease, now).await?);
        }
        Ok(completed)
    }
    /// Puts the job back to run at `run_at`, recording the error; false when fenced out.
    async fn retry(&mut self, lease: Lease, run_at: Timestamp, error: &str, now: Timestamp) -> StoreResult<bool>;
    /// Marks the job dead after its last attempt; false when fenced out.
    async fn bury(&mut self, lease: Lease, error: &str, now: Timestamp) -> StoreResult<bool>;
    /// Gives a leased job back unrun (shutdown): it is due at once and the attempt is not counted.
    async fn release(&mut self, lease: Lease, now: Timestamp) -> StoreResult<bool>;
    async fn get(&mut self, id: Uuid) -> StoreResult<Option<Job>>;
    /// The queue's figures per job kind (kinds with live or dead jobs only), by kind.
    async fn stats(&mut self, now: Timestamp) -> StoreResult<Vec<(String, QueueStats)>>;
    /// Deletes finished (done) jobs updated before `cutoff`; returns how many.
    async fn prune_done(&mut self, cutoff: Timestamp) -> StoreResult<u64>;
    /// The string `field` of the payload of every live (queued or running) job of `kinds`:
    /// which resources some job will still act on.
    async fn live_payload_values(&mut self, kinds: &[&str], field: &str) -> StoreResult<Vec<String>>;
}
