//! `approvals.expire`: enqueued by each request for its deadline; expires every PENDING request
//! whose deadline has passed (EXPIRED, its pending tasks EXPIRED, `approval.expired`, an audit
//! record), each in a transaction of its own. Running again changes nothing.

use async_trait::async_trait;
use std::sync::Arc;
use tokenops_domain::approval::ApprovalRequestStatus;
use tokenops_domain::audit::AuditOutcome;
use tokenops_domain::event::EventType;
use tokenops_store::{Job, Store};

use super::{ApprovalSettings, EXPIRE, EventContext, ResolutionEffect, close, publish};
use crate::jobs::{Finished, JobContext, JobError, JobHandler, kinds};

/// How many due requests one run expires; a larger backlog is left to the next run.
const BATCH: u32 = 200;

pub struct ExpireApprovals {
    pub store: Arc<dyn Store>,
    pub settings: ApprovalSettings,
    pub effect: Arc<dyn ResolutionEffect>,
}

#[async_trait]
impl JobHandler for ExpireApprovals {
    fn kind(&self) -> &'static str {
        kinds::APPROVALS_EXPIRE
    }

    async fn run(&self, _job: &Job, ctx: &JobContext) -> Result<Finished, JobError> {
        let now = ctx.clock().now();
        let due = {
            let mut tx = self.store.read().await?;
            tx.approvals().pending_past_expiry(now, BATCH).await?
        };
        for candidate in due {
            let tenant = candidate.tenant_id;
            let mut tx = self.store.write().await?;
            let Some(mut request) = tx.approvals().get_request_for_update(tenant, candidate.id).await? else {
                continue;
            };
            // Decided or cancelled since it was listed.
            if request.status != ApprovalRequestStatus::Pending || request.expires_at > now {
                continue;
            }
            let mut tasks = tx.approvals().tasks_of(tenant, request.id, true).await?;
            close(&mut *tx, &*self.effect, &mut request, &mut tasks, ApprovalRequestStatus::Expired, None, now)
                .await
                .map_err(JobError::retry)?;
            let events = EventContext { tenant, now, correlation_id: None, idempotency_key: None };
            publish(&mut *tx, &events, EventType::ApprovalExpired, &request, &tasks, self.settings.job_max_attempts)
                .await
                .map_err(JobError::retry)?;
            crate::audit::record_worker(
                &mut *tx,
                tenant,
                &EXPIRE,
                request.id.to_string(),
                AuditOutcome::Success,
                serde_json::json!({ "expiresAt": request.expires_at }),
                now,
            )
            .await?;
            tx.commit().await?;
        }
        ctx.finish(self.store.write().await?).await
    }
}
