//! `event.dispatch`: hands one outbox event on to its subscribers: marks it dispatched and, in the
//! same transaction, fans it out into one delivery per registration subscribed to its type at
//! that moment (`webhooks::fan_out`), and one run per ACTIVE EVENT automation listening for it
//! (`automations::runs::queue_run`), unless a run submitted what the event is about (no chains
//! of runs: `automations::runs::submitted_by_a_run`).

use super::{BatchContext, BatchFinished, JobError, JobHandler, kinds};
use async_trait::async_trait;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;
use tokenops_domain::TenantId;
use tokenops_domain::automation::{Automation, TriggerType};
use tokenops_domain::webhook::Webhook;
use tokenops_store::{Job, Store};
use uuid::Uuid;

pub struct DispatchEvent {
    pub store: Arc<dyn Store>,
    /// The attempts of each delivery job it enqueues.
    pub job_max_attempts: u32,
    /// The settings of the automation runs it queues.
    pub runs: crate::automations::runs::RunSettings,
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
        // Idempotent: a second run finds the event already dispatched and changes nothing, so
        // an event fans out once. The batch's events are marked and read in one go; each
        // organisation's registrations, and its automations of each event type, are read once.
        let asked: Vec<(TenantId, Uuid)> =
            events.iter().filter_map(|job| Some((job.tenant_id?, event_of(job)?))).collect();
        let marked = tx.events().mark_dispatched(&asked, now).await?;
        // Each organisation's registrations read up front, in organisation order: the locks
        // `live_for_dispatch` takes are then taken in one order by every batch.
        let mut tenants: Vec<TenantId> = marked.iter().map(|e| e.tenant_id).collect();
        tenants.sort_unstable();
        tenants.dedup();
        let mut registrations: HashMap<TenantId, Vec<Webhook>> = HashMap::with_capacity(tenants.len());
        for tenant in tenants {
            registrations.insert(
                tenant,
                crate::webhooks::live_for_dispatch(tx.as_mut(), tenant).await.map_err(JobError::retry)?,
            );
        }
        let mut listeners: HashMap<(TenantId, String), Vec<Automation>> = HashMap::new();
        for event in &marked {
            let tenant = event.tenant_id;
            let subscribers = registrations.get(&tenant).map(Vec::as_slice).unwrap_or_default();
            crate::webhooks::fan_out(tx.as_mut(), event, subscribers, now, self.job_max_attempts)
                .await
                .map_err(JobError::retry)?;
            if crate::automations::runs::submitted_by_a_run(event.idempotency_key.as_deref()) {
                continue;
            }
            let automations = match listeners.entry((tenant, event.event_type.clone())) {
                Entry::Occupied(known) => known.into_mut(),
                Entry::Vacant(slot) => slot.insert(tx.automations().for_event(tenant, &event.event_type).await?),
            };
            for automation in automations.iter() {
                crate::automations::runs::queue_run(
                    tx.as_mut(),
                    automation,
                    TriggerType::Event,
                    None,
                    Some(event.id),
                    now,
                    self.runs,
                )
                .await
                .map_err(JobError::retry)?;
            }
        }
        ctx.finish(tx, events.iter().map(|job| job.id).collect(), Vec::new(), failed).await
    }
}

fn event_of(job: &Job) -> Option<Uuid> {
    job.payload.get("eventId").and_then(|v| v.as_str()).and_then(|s| Uuid::parse_str(s).ok())
}
