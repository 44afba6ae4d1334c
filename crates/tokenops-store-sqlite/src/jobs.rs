//! The durable job queue on SQLite. Claims run inside a `BEGIN IMMEDIATE` transaction on the
//! single writer, so two claimers can never take the same row.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::{Row, params};
use tokenops_domain::{Timestamp, new_id};
use tokenops_store::rows::{self, JOB_COLUMNS};
use tokenops_store::{Claimed, Job, JobStore, Lease, NewJob, QueueStats, StoreError, StoreResult};
use uuid::Uuid;

fn decode(row: &Row<'_>) -> StoreResult<Job> {
    rows::job(&codec::Cols(row))
}

#[async_trait]
impl JobStore for SqliteTx {
    async fn enqueue(&mut self, job: &NewJob, now: Timestamp) -> StoreResult<Option<Uuid>> {
        let id = new_id();
        let done = self.execute(
            "INSERT INTO jobs (id, kind, tenant_id, payload, status, attempts, max_attempts, run_at, dedupe_key, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, 'queued', 0, ?5, ?6, ?7, ?8, ?8)
             ON CONFLICT DO NOTHING",
            params![
                codec::id_text(id),
                &job.kind,
                job.tenant_id.map(|t| codec::id_text(t.as_uuid())),
                codec::json_text(&job.payload),
                i64::from(job.max_attempts),
                job.run_at.as_micros(),
                job.dedupe_key.as_deref(),
                now.as_micros(),
            ],
        )?;
        if done == 0 {
            return Ok(None);
        }
        self.enqueued = true;
        Ok(Some(id))
    }

    async fn claim(&mut self, now: Timestamp, lease_until: Timestamp, limit: u32) -> StoreResult<Vec<Job>> {
        self.require_write("claiming jobs")?;
        // One statement for the whole claim, with one fresh token for all its jobs (a lease is
        // the job's id with the token). Each kind of due job is read in its index's order up to
        // the limit, and only those few are sorted: with the two conditions OR-ed, SQLite
        // collected and sorted every due job for each claim, so a backlog slowed every claim
        // by its length. (Jobs due at the same microsecond come in the order they were
        // enqueued.)
        let sql = format!(
            "UPDATE jobs SET status = 'running', attempts = attempts + 1, lease_token = ?1, lease_until = ?2, updated_at = ?3
             WHERE id IN (
                 SELECT id FROM (
                     SELECT id, run_at FROM (
                         SELECT id, run_at FROM jobs WHERE status = 'queued' AND run_at <= ?3
                         ORDER BY run_at ASC LIMIT ?4
                     )
                     UNION ALL
                     SELECT id, run_at FROM (
                         SELECT id, run_at FROM jobs WHERE status = 'running' AND lease_until <= ?3
                         ORDER BY lease_until ASC LIMIT ?4
                     )
                 )
                 ORDER BY run_at ASC, id ASC LIMIT ?4
             )
             RETURNING {JOB_COLUMNS}"
        );
        let mut claimed = self.fetch_all(
            &sql,
            params![codec::id_text(new_id()), lease_until.as_micros(), now.as_micros(), i64::from(limit)],
            decode,
        )?;
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
        let jobs = self.claim(now, lease_until, limit).await?;
        // A second statement, inline on the writer, costs microseconds (one seek of `jobs_due`),
        // and runs only when the claim came back short: only then may the worker go idle.
        let next_due = if jobs.len() < usize::try_from(limit).unwrap_or(usize::MAX) {
            self.fetch_one(
                "SELECT MIN(run_at) AS next_due FROM jobs WHERE status = 'queued' AND run_at > ?1",
                params![now.as_micros()],
                |row| codec::get::<Option<i64>>(row, "next_due"),
            )?
            .map(codec::ts)
        } else {
            None
        };
        Ok(Claimed { jobs, next_due })
    }

    async fn extend_lease(&mut self, lease: Lease, lease_until: Timestamp, now: Timestamp) -> StoreResult<bool> {
        let done = self.execute(
            "UPDATE jobs SET lease_until = ?1, updated_at = ?2 WHERE id = ?3 AND status = 'running' AND lease_token = ?4",
            params![lease_until.as_micros(), now.as_micros(), codec::id_text(lease.job_id), codec::id_text(lease.token)],
        )?;
        Ok(done == 1)
    }

    async fn complete(&mut self, lease: Lease, now: Timestamp) -> StoreResult<bool> {
        let done = self.execute(
            "UPDATE jobs SET status = 'done', lease_token = NULL, lease_until = NULL, updated_at = ?1
             WHERE id = ?2 AND status = 'running' AND lease_token = ?3",
            params![now.as_micros(), codec::id_text(lease.job_id), codec::id_text(lease.token)],
        )?;
        Ok(done == 1)
    }

    async fn retry(&mut self, lease: Lease, run_at: Timestamp, error: &str, now: Timestamp) -> StoreResult<bool> {
        let done = self.execute(
            "UPDATE jobs SET status = 'queued', run_at = ?1, last_error = ?2, lease_token = NULL, lease_until = NULL, updated_at = ?3
             WHERE id = ?4 AND status = 'running' AND lease_token = ?5",
            params![
                run_at.as_micros(),
                error,
                now.as_micros(),
                codec::id_text(lease.job_id),
                codec::id_text(lease.token),
            ],
        )?;
        Ok(done == 1)
    }

    async fn bury(&mut self, lease: Lease, error: &str, now: Timestamp) -> StoreResult<bool> {
        let done = self.execute(
            "UPDATE jobs SET status = 'dead', last_error = ?1, lease_token = NULL, lease_until = NULL, updated_at = ?2
             WHERE id = ?3 AND status = 'running' AND lease_token = ?4",
            params![error, now.as_micros(), codec::id_text(lease.job_id), codec::id_text(lease.token)],
        )?;
        Ok(done == 1)
    }

    async fn release(&mut self, lease: Lease, now: Timestamp) -> StoreResult<bool> {
        let done = self.execute(
            "UPDATE jobs SET status = 'queued', attempts = attempts - 1, run_at = ?1, lease_token = NULL, lease_until = NULL, updated_at = ?1
             WHERE id = ?2 AND status = 'running' AND lease_token = ?3",
            params![now.as_micros(), codec::id_text(lease.job_id), codec::id_text(lease.token)],
        )?;
        Ok(done == 1)
    }

    async fn get(&mut self, id: Uuid) -> StoreResult<Option<Job>> {
        let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?1");
        self.fetch_optional(&sql, params![codec::id_text(id)], decode)
    }

    async fn stats(&mut self, now: Timestamp) -> StoreResult<Vec<(String, QueueStats)>> {
        self.fetch_all(
            "SELECT kind,
                COALESCE(SUM(CASE WHEN status = 'queued' THEN 1 ELSE 0 END), 0) AS queued,
                COALESCE(SUM(CASE WHEN status = 'running' THEN 1 ELSE 0 END), 0) AS running,
                COALESCE(SUM(CASE WHEN status = 'dead' THEN 1 ELSE 0 END), 0) AS dead,
                MIN(CASE WHEN status = 'queued' AND run_at <= ?1 THEN run_at END) AS oldest_due
             FROM jobs WHERE status <> 'done' GROUP BY kind ORDER BY kind",
            params![now.as_micros()],
            |row| rows::queue_stats(&codec::Cols(row), now),
        )
    }

    async fn prune_done(&mut self, cutoff: Timestamp) -> StoreResult<u64> {
        let done =
            self.execute("DELETE FROM jobs WHERE status = 'done' AND updated_at < ?1", params![cutoff.as_micros()])?;
        Ok(u64::try_from(done).unwrap_or(u64::MAX))
    }

    async fn live_payload_values(&mut self, kinds: &[&str], field: &str) -> StoreResult<Vec<String>> {
        let kinds = serde_json::to_string(kinds).map_err(|e| StoreError::Backend(e.into()))?;
        let path = format!("$.{field}");
        self.fetch_all(
            "SELECT json_extract(payload, ?2) AS value FROM jobs
             WHERE status IN ('queued', 'running') AND kind IN (SELECT value FROM json_each(?1))
               AND json_extract(payload, ?2) IS NOT NULL",
            params![kinds, path],
            |row| codec::get::<String>(row, "value"),
        )
    }
}
