//! Writes a transaction holds back and sends as one statement: audit records, events, jobs
//! without a dedupe key, new operations and operation updates, the rows every step of the
//! pipeline and every accepted request leave and whose statements answer nothing the caller
//! reads; and the completions that end a transaction (a write's idempotency claim, a job's or a
//! batch's jobs), which ride on that statement: their answer, whether the claim or the leases were
//! still ours, is the statement's, read just before the COMMIT.
//!
//! On PostgreSQL each statement is a round trip costing both processes CPU; a batch of 128
//! confirmations wrote some 500 single-row statements. Held back, they go as one statement (a
//! data-modifying CTE per table, each a multi-row `INSERT … SELECT FROM UNNEST` or `UPDATE …
//! FROM UNNEST`) just before the transaction's next statement of any kind or its COMMIT, so
//! every statement still sees what came before it and the COMMIT covers everything. What can
//! refuse such a row (an id taken twice) is counted and reported at that point instead.

use crate::codec;
use crate::query::PgQuery;
use std::collections::{HashMap, HashSet};
use tokenops_domain::audit::AuditRecord;
use tokenops_domain::event::Event;
use tokenops_domain::operation::{FailureCode, Operation};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::rows::OPERATION_COLUMNS;
use tokenops_store::{IdempotencyScope, Lease, NewJob, StoreResult, encode};
use uuid::Uuid;

/// The held-back rows of one transaction.
#[derive(Default)]
pub(crate) struct Deferred {
    audit: Vec<AuditRecord>,
    events: Vec<Event>,
    /// Each with the id it was given and the time of its enqueue.
    jobs: Vec<(Uuid, NewJob, Timestamp)>,
    /// New operations, then updates of stored ones.
    new_operations: Vec<Operation>,
    operations: Vec<Operation>,
    /// Where each operation's latest state sits in `new_operations` (true) or `operations`: a
    /// second change of one row replaces the first, since one statement must not change a row
    /// twice, nor update a row it inserts.
    operation_slots: HashMap<(TenantId, Uuid), (bool, usize)>,
    /// The ids of the audit records, events and new operations held back: one held twice is
    /// refused at once.
    held_ids: HashSet<Uuid>,
    completion: Option<Completion>,
    /// Jobs completed under their leases, with the time.
    jobs_done: Option<(Vec<Lease>, Timestamp)>,
}

/// An idempotency claim completed with the response to replay: `IdempotencyStore::complete`,
/// fenced by the claim's token.
pub(crate) struct Completion {
    pub(crate) scope: IdempotencyScope,
    pub(crate) token: Uuid,
    pub(crate) status: i32,
    pub(crate) body: String,
    pub(crate) headers: serde_json::Value,
    pub(crate) resource_id: Option<String>,
    pub(crate) now: Timestamp,
}

/// How many rows of each kind one flush wrote, to be checked against what was held back.
pub(crate) struct Written {
    audit: i64,
    events: i64,
    new_operations: i64,
    /// Claims completed: 0 when the held-back completion's claim was no longer ours.
    pub(crate) completed: i64,
    /// Jobs completed: fewer than held back when a lease was no longer ours.
    pub(crate) jobs_done: i64,
}

impl Deferred {
    pub(crate) fn is_empty(&self) -> bool {
        self.audit.is_empty()
            && self.events.is_empty()
            && self.jobs.is_empty()
            && self.new_operations.is_empty()
            && self.operations.is_empty()
            && self.completion.is_none()
            && self.jobs_done.is_none()
    }

    /// Holds the completion of the transaction's idempotency claim back for the next flush.
    pub(crate) fn completion(&mut self, completion: Completion) {
        self.completion = Some(completion);
    }

    /// Holds the completion of jobs back for the next flush (a second call replaces the first:
    /// a transaction completes its jobs once).
    pub(crate) fn jobs_done(&mut self, leases: &[Lease], now: Timestamp) {
        self.jobs_done = Some((leases.to_vec(), now));
    }

    pub(crate) fn audit(&mut self, record: &AuditRecord) -> StoreResult<()> {
        if !self.held_ids.insert(record.id) {
            return Err(codec::conflict("audit record id"));
        }
        self.audit.push(record.clone());
        Ok(())
    }

    pub(crate) fn event(&mut self, event: &Event) -> StoreResult<()> {
        if !self.held_ids.insert(event.id) {
            return Err(codec::conflict("event id"));
        }
        self.events.push(event.clone());
        Ok(())
    }

    pub(crate) fn job(&mut self, id: Uuid, job: &NewJob, now: Timestamp) {
        self.jobs.push((id, job.clone(), now));
    }

    pub(crate) fn new_operation(&mut self, operation: &Operation) -> StoreResult<()> {
        if !self.held_ids.insert(operation.id) {
            return Err(codec::conflict("operation id"));
        }
        self.operation_slots.insert((operation.tenant_id, operation.id), (true, self.new_operations.len()));
        self.new_operations.push(operation.clone());
        Ok(())
    }

    pub(crate) fn operation(&mut self, operation: &Operation) {
        match self.operation_slots.get(&(operation.tenant_id, operation.id)) {
            Some(&(true, slot)) => self.new_operations[slot] = operation.clone(),
            Some(&(false, slot)) => self.operations[slot] = operation.clone(),
            None => {
                self.operation_slots.insert((operation.tenant_id, operation.id), (false, self.operations.len()));
                self.operations.push(operation.clone());
            }
        }
    }

    /// The one statement writing everything held back, emptying the buffers, with what the
    /// check after it expects; `None` when nothing is held back.
    pub(crate) fn take(&mut self) -> StoreResult<Option<(PgQuery<'static>, Expected)>> {
        if self.is_empty() {
            return Ok(None);
        }
        let Deferred { audit, events, jobs, new_operations, operations, completion, jobs_done, .. } =
            std::mem::take(self);
        let expected = Expected { audit: audit.len(), events: events.len(), new_operations: new_operations.len() };
        // Each part's `$#` are numbered in turn, in the order the values are bound below.
        let mut next = 1;
        let mut parts = Vec::new();
        if !audit.is_empty() {
            parts.push(numbered(
                "a AS (INSERT INTO audit_records (id, tenant_id, occurred_at, created_at, action, category, source, actor_id,
                                                  resource_type, resource_id, outcome, request_id, idempotency_key, http_status, detail)
                       SELECT * FROM UNNEST($#::uuid[], $#::uuid[], $#::bigint[], $#::bigint[], $#::text[], $#::text[],
                                            $#::text[], $#::text[], $#::text[], $#::text[], $#::text[], $#::text[],
                                            $#::text[], $#::int4[], $#::jsonb[])
                       ON CONFLICT DO NOTHING RETURNING id, tenant_id, created_at),
                 au AS (INSERT INTO audit_unsealed (record_id, chain_id, record_created_at)
                        SELECT id, COALESCE(tenant_id, '00000000-0000-0000-0000-000000000000'::uuid), created_at FROM a)",
                &mut next,
            ));
        }
        if !events.is_empty() {
            parts.push(numbered(
                "e AS (INSERT INTO events (id, tenant_id, event_type, occurred_at, correlation_id, idempotency_key,
                                           resource_type, resource_id, data, dispatched_at)
                       SELECT * FROM UNNEST($#::uuid[], $#::uuid[], $#::text[], $#::bigint[], $#::text[], $#::text[],
                                            $#::text[], $#::text[], $#::jsonb[], $#::bigint[])
                       ON CONFLICT DO NOTHING RETURNING 1)",
                &mut next,
            ));
        }
        if !jobs.is_empty() {
            parts.push(numbered(
                "j AS (INSERT INTO jobs (id, kind, tenant_id, payload, status, attempts, max_attempts, run_at, dedupe_key,
                                         created_at, updated_at)
                       SELECT id, kind, tenant_id, payload, 'queued', 0, max_attempts, run_at, dedupe_key, created_at, created_at
                       FROM UNNEST($#::uuid[], $#::text[], $#::uuid[], $#::jsonb[], $#::bigint[], $#::bigint[], $#::text[],
                                   $#::bigint[])
                            AS j(id, kind, tenant_id, payload, max_attempts, run_at, dedupe_key, created_at)
                       RETURNING 1)",
                &mut next,
            ));
        }
        if !new_operations.is_empty() {
            parts.push(numbered(
                &format!(
                    "n AS (INSERT INTO operations ({OPERATION_COLUMNS})
                           SELECT * FROM UNNEST($#::uuid[], $#::uuid[], $#::text[], $#::text[], $#::text[], $#::text[], $#::text[],
                                                $#::bigint[], $#::jsonb[], $#::uuid[], $#::text[], $#::text[], $#::bigint[],
                                                $#::text[], $#::text[], $#::text[], $#::text[], $#::text[], $#::text[],
                                                $#::bigint[], $#::bigint[], $#::text[])
                           ON CONFLICT DO NOTHING RETURNING 1)"
                ),
                &mut next,
            ));
        }
        if !operations.is_empty() {
            parts.push(numbered(
                "o AS (UPDATE operations o
                       SET state = u.state, tx_hash = u.tx_hash, block_number = u.block_number, failure_code = u.failure_code,
                           reason_code = u.reason_code, signed_transaction = u.signed_transaction, updated_at = u.updated_at,
                           revert_reason = u.revert_reason
                       FROM UNNEST($#::uuid[], $#::uuid[], $#::text[], $#::text[], $#::bigint[], $#::text[], $#::text[],
                                   $#::text[], $#::bigint[], $#::text[])
                            AS u(tenant_id, id, state, tx_hash, block_number, failure_code, reason_code, signed_transaction, updated_at,
                                 revert_reason)
                       WHERE o.tenant_id = u.tenant_id AND o.id = u.id
                       RETURNING 1)",
                &mut next,
            ));
        }
        if completion.is_some() {
            parts.push(numbered(
                "c AS (UPDATE idempotency_records
                       SET state = 'COMPLETED', lease_token = NULL, lease_until = NULL, response_status = $#, response_body = $#,
                           response_headers = $#, completed_at = $#, resource_id = $#
                       WHERE tenant_id = $# AND operation = $# AND idempotency_key = $# AND state = 'IN_FLIGHT'
                             AND lease_token = $#
                       RETURNING 1)",
                &mut next,
            ));
        }
        if jobs_done.is_some() {
            // Rows locked in id order, as the runner's heartbeat extends them.
            parts.push(numbered(
                "held AS (SELECT jobs.id FROM jobs JOIN UNNEST($#::uuid[], $#::uuid[]) AS l(id, token)
                              ON jobs.id = l.id AND jobs.status = 'running' AND jobs.lease_token = l.token
                          ORDER BY jobs.id
                          FOR UPDATE OF jobs),
                 d AS (UPDATE jobs SET status = 'done', lease_token = NULL, lease_until = NULL, updated_at = $#
                       FROM held WHERE jobs.id = held.id
                       RETURNING 1)",
                &mut next,
            ));
        }
        let count = |present: bool, name: &str| {
            if present { format!("(SELECT COUNT(*) FROM {name})") } else { "0::bigint".to_owned() }
        };
        // Every CTE runs whether or not the outer query reads it; reading the counts checks them.
        let sql = format!(
            "WITH {} SELECT {} AS audit, {} AS events, {} AS new_operations, {} AS completed, {} AS jobs_done",
            parts.join(", "),
            count(!audit.is_empty(), "a"),
            count(!events.is_empty(), "e"),
            count(!new_operations.is_empty(), "n"),
            count(completion.is_some(), "c"),
            count(jobs_done.is_some(), "d")
        );
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        if !audit.is_empty() {
            query = bind_audit(query, &audit);
        }
        if !events.is_empty() {
            query = bind_events(query, &events);
        }
        if !jobs.is_empty() {
            query = bind_jobs(query, &jobs);
        }
        if !new_operations.is_empty() {
            query = bind_new_operations(query, &new_operations)?;
        }
        if !operations.is_empty() {
            query = bind_operations(query, &operations)?;
        }
        if let Some(c) = completion {
            query = query
                .bind(c.status)
                .bind(c.body)
                .bind(c.headers)
                .bind(c.now.as_micros())
                .bind(c.resource_id)
                .bind(codec::tenant_key(c.scope.tenant))
                .bind(c.scope.operation)
                .bind(c.scope.key)
                .bind(c.token);
        }
        if let Some((leases, now)) = jobs_done {
            query = query
                .bind(leases.iter().map(|lease| lease.job_id).collect::<Vec<_>>())
                .bind(leases.iter().map(|lease| lease.token).collect::<Vec<_>>())
                .bind(now.as_micros());
        }
        Ok(Some((query, expected)))
    }
}

/// `template` with each `$#` numbered in turn from `*next`, which is left past the last: a
/// part's parameters follow those of the parts before it in the one statement.
fn numbered(template: &str, next: &mut usize) -> String {
    let mut parts = template.split("$#");
    let mut out = parts.next().unwrap_or_default().to_owned();
    for rest in parts {
        out.push('$');
        out.push_str(&next.to_string());
        *next += 1;
        out.push_str(rest);
    }
    out
}

/// What a flush must have written: every audit record and event held back (`ON CONFLICT DO
/// NOTHING` leaves out one whose id is taken, which the single-row statements reported as a
/// conflict).
pub(crate) struct Expected {
    audit: usize,
    events: usize,
    new_operations: usize,
}

impl Expected {
    pub(crate) fn check(&self, written: &Written) -> StoreResult<()> {
        if usize::try_from(written.audit).ok() != Some(self.audit) {
            return Err(codec::conflict("audit record id"));
        }
        if usize::try_from(written.events).ok() != Some(self.events) {
            return Err(codec::conflict("event id"));
        }
        if usize::try_from(written.new_operations).ok() != Some(self.new_operations) {
            return Err(codec::conflict("operation id"));
        }
        Ok(())
    }
}

pub(crate) fn decode_written(row: &sqlx::postgres::PgRow) -> StoreResult<Written> {
    Ok(Written {
        audit: codec::get(row, "audit")?,
        events: codec::get(row, "events")?,
        new_operations: codec::get(row, "new_operations")?,
        completed: codec::get(row, "completed")?,
        jobs_done: codec::get(row, "jobs_done")?,
    })
}

fn bind_audit(query: PgQuery<'static>, records: &[AuditRecord]) -> PgQuery<'static> {
    let column = |f: &dyn Fn(&AuditRecord) -> Option<String>| records.iter().map(f).collect::<Vec<_>>();
    query
        .bind(records.iter().map(|r| r.id).collect::<Vec<_>>())
        .bind(records.iter().map(|r| r.tenant_id.map(TenantId::as_uuid)).collect::<Vec<_>>())
        .bind(records.iter().map(|r| r.occurred_at.as_micros()).collect::<Vec<_>>())
        .bind(records.iter().map(|r| r.created_at.as_micros()).collect::<Vec<_>>())
        .bind(records.iter().map(|r| r.action.clone()).collect::<Vec<_>>())
        .bind(records.iter().map(|r| r.category.clone()).collect::<Vec<_>>())
        .bind(records.iter().map(|r| r.source.as_str().to_owned()).collect::<Vec<_>>())
        .bind(column(&|r| r.actor_id.clone()))
        .bind(records.iter().map(|r| r.resource_type.clone()).collect::<Vec<_>>())
        .bind(column(&|r| r.resource_id.clone()))
        .bind(records.iter().map(|r| r.outcome.as_str().to_owned()).collect::<Vec<_>>())
        .bind(column(&|r| r.request_id.clone()))
        .bind(column(&|r| r.idempotency_key.clone()))
        .bind(records.iter().map(|r| r.http_status.map(i32::from)).collect::<Vec<_>>())
        .bind(records.iter().map(|r| r.detail.clone()).collect::<Vec<_>>())
}

fn bind_events(query: PgQuery<'static>, events: &[Event]) -> PgQuery<'static> {
    query
        .bind(events.iter().map(|e| e.id).collect::<Vec<_>>())
        .bind(events.iter().map(|e| e.tenant_id.as_uuid()).collect::<Vec<_>>())
        .bind(events.iter().map(|e| e.event_type.clone()).collect::<Vec<_>>())
        .bind(events.iter().map(|e| e.occurred_at.as_micros()).collect::<Vec<_>>())
        .bind(events.iter().map(|e| e.correlation_id.clone()).collect::<Vec<_>>())
        .bind(events.iter().map(|e| e.idempotency_key.clone()).collect::<Vec<_>>())
        .bind(events.iter().map(|e| e.resource.kind.clone()).collect::<Vec<_>>())
        .bind(events.iter().map(|e| e.resource.id.clone()).collect::<Vec<_>>())
        .bind(events.iter().map(|e| e.data.clone()).collect::<Vec<_>>())
        .bind(events.iter().map(|e| e.dispatched_at.map(Timestamp::as_micros)).collect::<Vec<_>>())
}

fn bind_jobs(query: PgQuery<'static>, jobs: &[(Uuid, NewJob, Timestamp)]) -> PgQuery<'static> {
    query
        .bind(jobs.iter().map(|(id, _, _)| *id).collect::<Vec<_>>())
        .bind(jobs.iter().map(|(_, job, _)| job.kind.clone()).collect::<Vec<_>>())
        .bind(jobs.iter().map(|(_, job, _)| job.tenant_id.map(TenantId::as_uuid)).collect::<Vec<_>>())
        .bind(jobs.iter().map(|(_, job, _)| job.payload.clone()).collect::<Vec<_>>())
        .bind(jobs.iter().map(|(_, job, _)| i64::from(job.max_attempts)).collect::<Vec<_>>())
        .bind(jobs.iter().map(|(_, job, _)| job.run_at.as_micros()).collect::<Vec<_>>())
        .bind(jobs.iter().map(|(_, job, _)| job.dedupe_key.clone()).collect::<Vec<_>>())
        .bind(jobs.iter().map(|(_, _, now)| now.as_micros()).collect::<Vec<_>>())
}

/// The operations' block numbers as BIGINTs, refused rather than wrapped.
fn block_numbers(operations: &[Operation]) -> StoreResult<Vec<Option<i64>>> {
    operations.iter().map(|o| o.block_number.map(encode::int64).transpose()).collect()
}

fn bind_new_operations(query: PgQuery<'static>, operations: &[Operation]) -> StoreResult<PgQuery<'static>> {
    let block_numbers = block_numbers(operations)?;
    let text = |f: &dyn Fn(&Operation) -> Option<String>| operations.iter().map(f).collect::<Vec<_>>();
    Ok(query
        .bind(operations.iter().map(|o| o.id).collect::<Vec<_>>())
        .bind(operations.iter().map(|o| o.tenant_id.as_uuid()).collect::<Vec<_>>())
        .bind(operations.iter().map(|o| o.tx_type.as_str().to_owned()).collect::<Vec<_>>())
        .bind(operations.iter().map(|o| codec::asset_text(o.asset_id).to_owned()).collect::<Vec<_>>())
        .bind(operations.iter().map(|o| o.account_ref.as_str().to_owned()).collect::<Vec<_>>())
        .bind(operations.iter().map(|o| o.customer_ref.as_str().to_owned()).collect::<Vec<_>>())
        .bind(text(&|o| o.counterparty_ref.as_ref().map(|r| r.as_str().to_owned())))
        .bind(operations.iter().map(|o| o.amount.as_i64()).collect::<Vec<_>>())
        .bind(operations.iter().map(|o| o.params.clone()).collect::<Vec<_>>())
        .bind(operations.iter().map(|o| o.lock_id).collect::<Vec<_>>())
        .bind(operations.iter().map(|o| o.state.as_str().to_owned()).collect::<Vec<_>>())
        .bind(text(&|o| o.tx_hash.map(|h| h.to_string())))
        .bind(block_numbers)
        .bind(text(&|o| o.failure_code.map(|c| FailureCode::as_str(c).to_owned())))
        .bind(text(&|o| o.reason_code.clone()))
        .bind(text(&|o| o.signed_transaction.clone()))
        .bind(operations.iter().map(|o| o.submitted_by.clone()).collect::<Vec<_>>())
        .bind(text(&|o| o.idempotency_key.clone()))
        .bind(text(&|o| o.correlation_id.clone()))
        .bind(operations.iter().map(|o| o.created_at.as_micros()).collect::<Vec<_>>())
        .bind(operations.iter().map(|o| o.updated_at.as_micros()).collect::<Vec<_>>())
        .bind(text(&|o| o.revert_reason.clone())))
}

fn bind_operations(query: PgQuery<'static>, operations: &[Operation]) -> StoreResult<PgQuery<'static>> {
    let block_numbers = block_numbers(operations)?;
    Ok(query
        .bind(operations.iter().map(|o| o.tenant_id.as_uuid()).collect::<Vec<_>>())
        .bind(operations.iter().map(|o| o.id).collect::<Vec<_>>())
        .bind(operations.iter().map(|o| o.state.as_str().to_owned()).collect::<Vec<_>>())
        .bind(operations.iter().map(|o| o.tx_hash.map(|h| h.to_string())).collect::<Vec<_>>())
        .bind(block_numbers)
        .bind(operations.iter().map(|o| o.failure_code.map(|c| FailureCode::as_str(c).to_owned())).collect::<Vec<_>>())
        .bind(operations.iter().map(|o| o.reason_code.clone()).collect::<Vec<_>>())
        .bind(operations.iter().map(|o| o.signed_transaction.clone()).collect::<Vec<_>>())
        .bind(operations.iter().map(|o| o.updated_at.as_micros()).collect::<Vec<_>>())
        .bind(operations.iter().map(|o| o.revert_reason.clone()).collect::<Vec<_>>()))
}

#[cfg(test)]
mod tests {
    use super::numbered;

    #[test]
    fn parts_are_numbered_in_turn_after_the_ones_before() {
        let mut next = 1;
        assert_eq!(numbered("a AS (SELECT $#, $#)", &mut next), "a AS (SELECT $1, $2)");
        assert_eq!(
            numbered("b AS (SELECT $#::uuid[]) WHERE x = $#", &mut next),
            "b AS (SELECT $3::uuid[]) WHERE x = $4"
        );
        assert_eq!(numbered("no parameters", &mut next), "no parameters");
        assert_eq!(next, 5);
    }
}
