//! The durable job queue on SQLite. Claims run inside a `BEGIN IMMEDIATE` transaction on the
//! single writer, so two claimers can never take the same row.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use sqlx::Row;
use sqlx::sqlite::SqliteRow;
use tokenops_domain::{Timestamp, new_id};
use tokenops_store::{Job, JobStatus, JobStore, Lease, NewJob, QueueStats, StoreError, StoreResult};
use uuid::Uuid;

const COLUMNS: &str = "id, kind, tenant_id, payload, status, attempts, max_attempts, run_at, lease_token, lease_until, last_error, created_at, updated_at";

fn decode(row: &SqliteRow) -> StoreResult<Job> {
    let text = |name: &str| row.try_get::<String, _>(name).map_err(codec::backend);
    let opt = |name: &str| row.try_get::<Option<String>, _>(name).map_err(codec::backend);
    let int = |name: &str| row.try_get::<i64, _>(name).map_err(codec::backend);
    let status = text("status")?;
    Ok(Job {
        id: codec::uuid(&text("id")?)?,
        kind: text("kind")?,
        tenant_id: codec::opt_tenant(opt("tenant_id")?)?,
        payload: codec::json(&text("payload")?)?,
        status: JobStatus::parse(&status).ok_or_else(|| StoreError::Corrupt(format!("job status {status:?}")))?,
        attempts: u32::try_from(int("attempts")?).unwrap_or(u32::MAX),
        max_attempts: u32::try_from(int("max_attempts")?).unwrap_or(u32::MAX),
        run_at: codec::ts(int("run_at")?),
        lease_token: codec::opt_uuid(opt("lease_token")?)?,
        lease_until: row.try_get::<Option<i64>, _>("lease_until").map_err(codec::backend)?.map(codec::ts),
        last_error: opt("last_error")?,
        created_at: codec::ts(int("created_at")?),
        updated_at: codec::ts(int("updated_at")?),
    })
}

#[async_trait]
impl JobStore for SqliteTx {
    async fn enqueue(&mut self, job: &NewJob, now: Timestamp) -> StoreResult<Option<Uuid>> {
        let id = new_id();
        let done = sqlx::query(
            "INSERT INTO jobs (id, kind, tenant_id, payload, status, attempts, max_attempts, run_at, dedupe_key, created_at, updated_at)
             VALUES ($1, $2, $3, $4, 'queued', 0, $5, $6, $7, $8, $8)
             ON CONFLICT DO NOTHING",
        )
        .bind(codec::id_text(id))
        .bind(&job.kind)
        .bind(job.tenant_id.map(|t| codec::id_text(t.as_uuid())))
        .bind(codec::json_text(&job.payload))
        .bind(i64::from(job.max_attempts))
        .bind(job.run_at.as_micros())
        .bind(job.dedupe_key.as_deref())
        .bind(now.as_micros())
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        if done.rows_affected() == 0 {
            return Ok(None);
        }
        self.enqueued = true;
        Ok(Some(id))
    }

    async fn claim(&mut self, now: Timestamp, lease_until: Timestamp, limit: u32) -> StoreResult<Vec<Job>> {
        self.require_write("claiming jobs")?;
        let due: Vec<String> = sqlx::query_scalar(
            "SELECT id FROM jobs
             WHERE (status = 'queued' AND run_at <= $1) OR (status = 'running' AND lease_until <= $1)
             ORDER BY run_at ASC, id ASC LIMIT $2",
        )
        .bind(now.as_micros())
        .bind(i64::from(limit))
        .fetch_all(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        let mut claimed = Vec::with_capacity(due.len());
        for id in due {
            let sql = format!(
                "UPDATE jobs SET status = 'running', attempts = attempts + 1, lease_token = $1, lease_until = $2, updated_at = $3
                 WHERE id = $4 RETURNING {COLUMNS}"
            );
            let row = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(codec::id_text(new_id()))
                .bind(lease_until.as_micros())
                .bind(now.as_micros())
                .bind(&id)
                .fetch_one(&mut *self.tx)
                .await
                .map_err(codec::backend)?;
            claimed.push(decode(&row)?);
        }
        Ok(claimed)
    }

    async fn extend_lease(&mut self, lease: Lease, lease_until: Timestamp, now: Timestamp) -> StoreResult<bool> {
        let done = sqlx::query(
            "UPDATE jobs SET lease_until = $1, updated_at = $2 WHERE id = $3 AND status = 'running' AND lease_token = $4",
        )
        .bind(lease_until.as_micros())
        .bind(now.as_micros())
        .bind(codec::id_text(lease.job_id))
        .bind(codec::id_text(lease.token))
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        Ok(done.rows_affected() == 1)
    }

    async fn complete(&mut self, lease: Lease, now: Timestamp) -> StoreResult<bool> {
        let done = sqlx::query(
            "UPDATE jobs SET status = 'done', lease_token = NULL, lease_until = NULL, updated_at = $1
             WHERE id = $2 AND status = 'running' AND lease_token = $3",
        )
        .bind(now.as_micros())
        .bind(codec::id_text(lease.job_id))
        .bind(codec::id_text(lease.token))
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        Ok(done.rows_affected() == 1)
    }

    async fn retry(&mut self, lease: Lease, run_at: Timestamp, error: &str, now: Timestamp) -> StoreResult<bool> {
        let done = sqlx::query(
            "UPDATE jobs SET status = 'queued', run_at = $1, last_error = $2, lease_token = NULL, lease_until = NULL, updated_at = $3
             WHERE id = $4 AND status = 'running' AND lease_token = $5",
        )
        .bind(run_at.as_micros())
        .bind(error)
        .bind(now.as_micros())
        .bind(codec::id_text(lease.job_id))
        .bind(codec::id_text(lease.token))
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        Ok(done.rows_affected() == 1)
    }

    async fn bury(&mut self, lease: Lease, error: &str, now: Timestamp) -> StoreResult<bool> {
        let done = sqlx::query(
            "UPDATE jobs SET status = 'dead', last_error = $1, lease_token = NULL, lease_until = NULL, updated_at = $2
             WHERE id = $3 AND status = 'running' AND lease_token = $4",
        )
        .bind(error)
        .bind(now.as_micros())
        .bind(codec::id_text(lease.job_id))
        .bind(codec::id_text(lease.token))
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        Ok(done.rows_affected() == 1)
    }

    async fn release(&mut self, lease: Lease, now: Timestamp) -> StoreResult<bool> {
        let done = sqlx::query(
            "UPDATE jobs SET status = 'queued', attempts = attempts - 1, run_at = $1, lease_token = NULL, lease_until = NULL, updated_at = $1
             WHERE id = $2 AND status = 'running' AND lease_token = $3",
        )
        .bind(now.as_micros())
        .bind(codec::id_text(lease.job_id))
        .bind(codec::id_text(lease.token))
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        Ok(done.rows_affected() == 1)
    }

    async fn get(&mut self, id: Uuid) -> StoreResult<Option<Job>> {
        let sql = format!("SELECT {COLUMNS} FROM jobs WHERE id = $1");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(codec::id_text(id))
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        row.as_ref().map(decode).transpose()
    }

    async fn stats(&mut self, now: Timestamp) -> StoreResult<QueueStats> {
        let row = sqlx::query(
            "SELECT
                COALESCE(SUM(CASE WHEN status = 'queued' THEN 1 ELSE 0 END), 0) AS queued,
                COALESCE(SUM(CASE WHEN status = 'running' THEN 1 ELSE 0 END), 0) AS running,
                COALESCE(SUM(CASE WHEN status = 'dead' THEN 1 ELSE 0 END), 0) AS dead,
                MIN(CASE WHEN status = 'queued' AND run_at <= $1 THEN run_at END) AS oldest_due
             FROM jobs WHERE status <> 'done'",
        )
        .bind(now.as_micros())
        .fetch_one(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        let count = |name: &str| -> StoreResult<u64> {
            Ok(u64::try_from(row.try_get::<i64, _>(name).map_err(codec::backend)?).unwrap_or(0))
        };
        let oldest: Option<i64> = row.try_get("oldest_due").map_err(codec::backend)?;
        Ok(QueueStats {
            queued: count("queued")?,
            running: count("running")?,
            dead: count("dead")?,
            oldest_due_age_ms: oldest.map(|at| codec::ts(at).millis_until(now)).unwrap_or(0).try_into().unwrap_or(0),
        })
    }

    async fn prune_done(&mut self, cutoff: Timestamp) -> StoreResult<u64> {
        let done = sqlx::query("DELETE FROM jobs WHERE status = 'done' AND updated_at < $1")
            .bind(cutoff.as_micros())
            .execute(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        Ok(done.rows_affected())
    }
}
