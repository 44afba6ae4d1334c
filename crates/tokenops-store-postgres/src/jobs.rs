//! The durable job queue on PostgreSQL. A claim is one statement that locks due rows with
//! `FOR UPDATE SKIP LOCKED`, so concurrent claimers on any node take disjoint sets of jobs; an
//! enqueue marks the transaction, whose commit wakes the workers of every node (`lib.rs`).

use crate::{PostgresTx, codec};
use async_trait::async_trait;
use sqlx::postgres::PgRow;
use tokenops_domain::{Timestamp, new_id};
use tokenops_store::rows::{self, JOB_COLUMNS};
use tokenops_store::{Claimed, Job, JobStore, Lease, NewJob, QueueStats, StoreResult};
use uuid::Uuid;

/// The rows a claim may take, with `$1` the claim time: queued and due, or running with an
/// expired lease (its worker is presumed dead).
const CLAIMABLE: &str = "((status = 'queued' AND run_at <= $1) OR (status = 'running' AND lease_until <= $1))";

/// A claim's first part, with `$1` the claim time and `$3` the limit: the due rows it takes,
/// locked, skipping those another claim holds. Queued jobs and expired leases are each read in
/// the order of their partial index (`jobs_queued_in_order`, `jobs_running_by_lease`: the
/// statuses stay literals so the planner can use them) up to the limit, and only those few are sorted: with the two conditions
/// OR-ed the planner read and sorted every due job, so a backlog slowed every claim by its
/// length (21–26 ms with 12,900 due). Rows one branch locks beyond the final limit stay
/// untaken; their locks end with the claim's transaction.
fn claim_due() -> String {
    "queued AS MATERIALIZED (
         SELECT id, run_at FROM jobs WHERE status = 'queued' AND run_at <= $1
         ORDER BY run_at, id
         LIMIT $3
         FOR UPDATE SKIP LOCKED
     ),
     expired AS MATERIALIZED (
         SELECT id, run_at FROM jobs WHERE status = 'running' AND lease_until <= $1
         ORDER BY lease_until
         LIMIT $3
         FOR UPDATE SKIP LOCKED
     ),
     due AS MATERIALIZED (
         SELECT id FROM (SELECT id, run_at FROM queued UNION ALL SELECT id, run_at FROM expired) AS both_kinds
         ORDER BY run_at, id
         LIMIT $3
     )"
    .to_owned()
}

/// A claim's second part, with `$2` the lease's end: takes the rows of `due`. The WHERE
/// re-checks that each locked row is still claimable: the row lock is what makes the claim
/// exclusive, and a row another session finished between our snapshot and our lock must not be
/// taken again.
fn claim_update() -> String {
    format!(
        "UPDATE jobs
         SET status = 'running', attempts = attempts + 1, lease_token = gen_random_uuid(),
             lease_until = $2, updated_at = $1
         WHERE id IN (SELECT id FROM due) AND {CLAIMABLE}
         RETURNING {JOB_COLUMNS}"
    )
}

fn decode(row: &PgRow) -> StoreResult<Job> {
    rows::job(&codec::Cols(row))
}

#[async_trait]
impl JobStore for PostgresTx {
    async fn enqueue(&mut self, job: &NewJob, now: Timestamp) -> StoreResult<Option<Uuid>> {
        let id = new_id();
        if job.dedupe_key.is_none() {
            // Nothing can refuse it (its id is new): held back and written with the
            // transaction's next statement (`deferred`).
            self.hold_back()?.job(id, job, now);
            self.enqueued = true;
            return Ok(Some(id));
        }
        // Without a conflict target, DO NOTHING also covers the partial unique index on the
        // dedupe key, and the transaction stays usable.
        let done = self.execute(sqlx::query(
            "INSERT INTO jobs (id, kind, tenant_id, payload, status, attempts, max_attempts, run_at, dedupe_key, created_at, updated_at)
             VALUES ($1, $2, $3, $4, 'queued', 0, $5, $6, $7, $8, $8)
             ON CONFLICT DO NOTHING",
        )
        .bind(id)
        .bind(&job.kind)
        .bind(job.tenant_id.map(|t| t.as_uuid()))
        .bind(&job.payload)
        .bind(i64::from(job.max_attempts))
        .bind(job.run_at.as_micros())
        .bind(job.dedupe_key.as_deref())
        .bind(now.as_micros())).await?;
        if done == 0 {
            return Ok(None);
        }
        // Its commit wakes the workers, here and (by NOTIFY) on the other nodes.
        self.enqueued = true;
        Ok(Some(id))
    }

    async fn enqueue_fresh_key(&mut self, job: &NewJob, now: Timestamp) -> StoreResult<()> {
        self.hold_back()?.job(new_id(), job, now);
        self.enqueued = true;
        Ok(())
    }

    async fn enqueue_all(&mut self, jobs: &[NewJob], now: Timestamp) -> StoreResult<()> {
        for job in jobs {
            self.enqueue(job, now).await?;
        }
        Ok(())
    }

    async fn claim(&mut self, now: Timestamp, lease_until: Timestamp, limit: u32) -> StoreResult<Vec<Job>> {
        let sql = format!("WITH {} {}", claim_due(), claim_update());
        let mut claimed = self
            .fetch_all(
                sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(now.as_micros())
                    .bind(lease_until.as_micros())
                    .bind(i64::from(limit)),
                decode,
            )
            .await?;
        // RETURNING has no order of its own.
        claimed.sort_by_key(|job| (job.run_at, job.id));
        Ok(claimed)
    }

    async fn claim_with_next_due(
        &mut self,
        now: Timestamp,
        lease_until: Timestamp,
        limit: u32,
    ) -> StoreResult<Claimed> {
        // The claim's own statement, with the next due time joined on: one round trip, as a
        // plain claim. The join keeps one row when nothing was claimed; the seek of `jobs_due`
        // runs only when the claim came back short, when the worker may go idle.
        let sql = format!(
            "WITH {}, claimed AS ({})
             SELECT claimed.*, next.next_due
             FROM (SELECT CASE WHEN (SELECT count(*) FROM claimed) < $3
                          THEN (SELECT MIN(run_at) FROM jobs WHERE status = 'queued' AND run_at > $1)
                          END AS next_due) AS next
             LEFT JOIN claimed ON TRUE",
            claim_due(),
            claim_update()
        );
        let query = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(now.as_micros())
            .bind(lease_until.as_micros())
            .bind(i64::from(limit));
        // Each row carries the same next due time; a row without an id is the one of an empty claim.
        let rows = self
            .fetch_all(query, |row| {
                let next_due = codec::opt_ts(codec::get::<Option<i64>>(row, "next_due")?);
                let job = match codec::get::<Option<Uuid>>(row, "id")? {
                    Some(_) => Some(decode(row)?),
                    None => None,
                };
                Ok((next_due, job))
            })
            .await?;
        let next_due = rows.first().and_then(|(next_due, _)| *next_due);
        let mut jobs: Vec<Job> = rows.into_iter().filter_map(|(_, job)| job).collect();
        // RETURNING has no order of its own.
        jobs.sort_by_key(|job| (job.run_at, job.id));
        Ok(Claimed { jobs, next_due })
    }

    async fn extend_lease(&mut self, lease: Lease, lease_until: Timestamp, now: Timestamp) -> StoreResult<bool> {
        let done = self.execute(sqlx::query(
            "UPDATE jobs SET lease_until = $1, updated_at = $2 WHERE id = $3 AND status = 'running' AND lease_token = $4",
        )
        .bind(lease_until.as_micros())
        .bind(now.as_micros())
        .bind(lease.job_id)
        .bind(lease.token)).await?;
        Ok(done == 1)
    }

    /// Sent with the rows the job's transaction held back, as its last statement before COMMIT.
    async fn complete(&mut self, lease: Lease, now: Timestamp) -> StoreResult<bool> {
        Ok(self.complete_all(&[lease], now).await? == 1)
    }

    /// Sent with the rows the batch's transaction held back, as its last statement before
    /// COMMIT.
    async fn complete_all(&mut self, leases: &[Lease], now: Timestamp) -> StoreResult<usize> {
        self.hold_back()?.jobs_done(leases, now);
        let written = self.flush_written().await?;
        Ok(written.map_or(0, |written| usize::try_from(written.jobs_done).unwrap_or(usize::MAX)))
    }

    async fn retry(&mut self, lease: Lease, run_at: Timestamp, error: &str, now: Timestamp) -> StoreResult<bool> {
        let done = self.execute(sqlx::query(
            "UPDATE jobs SET status = 'queued', run_at = $1, last_error = $2, lease_token = NULL, lease_until = NULL, updated_at = $3
             WHERE id = $4 AND status = 'running' AND lease_token = $5",
        )
        .bind(run_at.as_micros())
        .bind(error)
        .bind(now.as_micros())
        .bind(lease.job_id)
        .bind(lease.token)).await?;
        Ok(done == 1)
    }

    async fn bury(&mut self, lease: Lease, error: &str, now: Timestamp) -> StoreResult<bool> {
        let done = self.execute(sqlx::query(
            "UPDATE jobs SET status = 'dead', last_error = $1, lease_token = NULL, lease_until = NULL, updated_at = $2
             WHERE id = $3 AND status = 'running' AND lease_token = $4",
        )
        .bind(error)
        .bind(now.as_micros())
        .bind(lease.job_id)
        .bind(lease.token)).await?;
        Ok(done == 1)
    }

    async fn release(&mut self, lease: Lease, now: Timestamp) -> StoreResult<bool> {
        let done = self.execute(sqlx::query(
            "UPDATE jobs SET status = 'queued', attempts = attempts - 1, run_at = $1, lease_token = NULL, lease_until = NULL, updated_at = $1
             WHERE id = $2 AND status = 'running' AND lease_token = $3",
        )
        .bind(now.as_micros())
        .bind(lease.job_id)
        .bind(lease.token)).await?;
        Ok(done == 1)
    }

    async fn get(&mut self, id: Uuid) -> StoreResult<Option<Job>> {
        let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1");
        self.fetch_optional(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(id), decode).await
    }

    async fn stats(&mut self, now: Timestamp) -> StoreResult<Vec<(String, QueueStats)>> {
        let query = sqlx::query(
            "SELECT kind,
                COUNT(*) FILTER (WHERE status = 'queued')::BIGINT AS queued,
                COUNT(*) FILTER (WHERE status = 'running')::BIGINT AS running,
                COUNT(*) FILTER (WHERE status = 'dead')::BIGINT AS dead,
                MIN(run_at) FILTER (WHERE status = 'queued' AND run_at <= $1)::BIGINT AS oldest_due
             FROM jobs WHERE status <> 'done' GROUP BY kind ORDER BY kind",
        )
        .bind(now.as_micros());
        self.fetch_all(query, |row| rows::queue_stats(&codec::Cols(row), now)).await
    }

    async fn prune_done(&mut self, cutoff: Timestamp) -> StoreResult<u64> {
        self.execute(sqlx::query("DELETE FROM jobs WHERE status = 'done' AND updated_at < $1").bind(cutoff.as_micros()))
            .await
    }

    async fn live_payload_values(&mut self, kinds: &[&str], field: &str) -> StoreResult<Vec<String>> {
        self.fetch_all(
            sqlx::query(
                // One branch per status, each a literal, so each reads its partial index
                // (migration 0020) rather than the whole table with its finished jobs.
                "SELECT payload->>$2 AS value FROM jobs
             WHERE status = 'queued' AND kind = ANY($1::text[]) AND payload->>$2 IS NOT NULL
             UNION ALL
             SELECT payload->>$2 AS value FROM jobs
             WHERE status = 'running' AND kind = ANY($1::text[]) AND payload->>$2 IS NOT NULL",
            )
            .bind(kinds)
            .bind(field),
            |row| codec::get::<String>(row, "value"),
        )
        .await
    }
}
