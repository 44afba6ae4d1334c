//! `event.dispatch`: hands one outbox event on to its subscribers. Until webhook registrations
//! exist this marks the event dispatched; the webhooks area fans it out into deliveries here.

use super::{BatchContext, BatchFinished, JobError, JobHandler, kinds};
use async_trait::async_trait;
use std::sync::Arc;
use tokenops_store::{Job, Store};
use uuid::Uuid;

pub struct DispatchEvent {
    pub store: Arc<dyn Store>,
}

#[async_trait]
impl JobHandler for DispatchEvent {
    fn kind(&self) -> &'static str {
        kinds::EVENT_DISPATCH
    }

    fn batch_limit(&self) -> usize {
        256
    }

    async fn run_batch(&self, jobs: Vec<Job>, ctx: &BatchContext) -> Result<BatchFinished, JobError> {
        let now = ctx.clock().now();
        let (events, bad): (Vec<Job>, Vec<Job>) = jobs.into_iter().partition(|job| event_of(job).is_some());
        let failed = bad.into_iter().map(|job| (job, JobError::Permanent("payload has no eventId".into()))).collect();
        let mut tx = self.store.write().await?;
        // Idempotent: a second run finds the event already dispatched and changes nothing.
        for event_id in events.iter().filter_map(event_of) {
            tx.events().mark_dispatched(event_id, now).await?;
        }
        ctx.finish(tx, events.iter().map(|job| job.id).collect(), Vec::new(), failed).await
    }
}

fn event_of(job: &Job) -> Option<Uuid> {
    job.payload.get("eventId").and_then(|v| v.as_str()).and_then(|s| Uuid::parse_str(s).ok())
}
