//! The one way to write: `Writes::begin` admits a request (claiming its Idempotency-Key), and the
//! returned `Write` holds a single transaction in which the change, its outbox events (each with
//! its dispatch job), its audit record and its idempotency record all commit together, or none.
//!
//! Idempotency-Key lifecycle: the write's transaction claims the key (IN_FLIGHT, with a lease) and
//! completes it (fenced on the claim token) with the response to replay; a write whose effect
//! happens outside its transaction holds the key first in a short transaction of its own
//! (`Writes::hold`). A caller's mistake after admission (404, 409, 422) is stored as the outcome
//! too; an invalid request (400) frees the key, so that corrected it may be sent again under it;
//! an internal failure releases the key so that the same request can be retried.

use crate::clock::Clock;
use crate::context::RequestContext;
use crate::error::{AppResult, Code, Error};
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::sync::{Arc, OnceLock};
use tokenops_domain::audit::{AuditOutcome, AuditRecord, AuditSource};
use tokenops_domain::event::{Event, EventType, ResourceRef};
use tokenops_domain::{TenantId, Timestamp, new_id};
use tokenops_store::{IdempotencyScope, IdempotencyState, NewJob, Store, StoreError, StoredResponse, Tx};
use uuid::Uuid;

/// The audit action a write records (what the audit log calls it), which is also the scope its
/// Idempotency-Keys live in. Not a token operation (`operations`).
#[derive(Debug)]
pub struct AuditAction {
    /// The action's name and the idempotency scope, for example `customer.create`.
    pub name: &'static str,
    /// The spec area, for example `CUSTOMERS`.
    pub category: &'static str,
    pub resource_type: &'static str,
    /// Whether the write's outcome is about who asks (an approver's decision, refused by
    /// separation of duties for another): its fingerprint then holds the caller, so the same
    /// key and body from another caller of the organisation is a different request (422), never
    /// the first caller's stored answer. Other writes leave the caller out: a bank retrying
    /// through another of its clients gets its original answer, not a refusal it might answer
    /// with a second submission.
    pub per_caller: bool,
}

impl AuditAction {
    /// This action, its Idempotency-Key answering only the caller that used it.
    pub const fn per_caller(self) -> Self {
        Self { per_caller: true, ..self }
    }
}

/// A resource type of one area: the category and resource type its audit actions share, declared
/// once per resource (`CUSTOMER.action("customer.create")`).
#[derive(Debug, Clone, Copy)]
pub struct AuditResource {
    pub category: &'static str,
    pub resource_type: &'static str,
}

impl AuditResource {
    /// The action `name` on this resource.
    pub const fn action(self, name: &'static str) -> AuditAction {
        AuditAction { name, category: self.category, resource_type: self.resource_type, per_caller: false }
    }
}

/// The Idempotency-Key of a request and the fingerprint of its payload.
#[derive(Debug, Clone)]
pub struct IdempotencyRequest {
    pub key: String,
    pub request_hash: String,
}

#[derive(Debug, Clone)]
struct Claim {
    scope: IdempotencyScope,
    token: Uuid,
    request_hash: String,
    lease_until: Timestamp,
    /// Claimed in a transaction of its own ([`Writes::hold`]), so it outlives the write's.
    committed: bool,
}

#[derive(Debug, Clone, Copy)]
pub struct WriteSettings {
    /// How long a claimed key counts as in flight before another request may take it over.
    pub idempotency_lease_ms: i64,
    pub job_max_attempts: u32,
}

/// The outcome of [`Writes::hold`].
pub enum Held {
    /// The key is this request's until its write completes it or it is released.
    Mine(HeldKey),
    /// The key already completed with the same payload: answer with the stored response.
    Replay(WriteResponse),
}

/// An Idempotency-Key claimed ahead of its write (see [`Writes::hold`]).
pub struct HeldKey {
    claim: Claim,
}

/// The outcome of admitting a write.
pub enum Admission {
    Proceed(Write),
    /// The key already completed with the same payload: answer with the stored response.
    Replay(WriteResponse),
}

/// A write's response as recorded under its Idempotency-Key and replayed to a repeat of the
/// request: what the API answered, and the resource the write named.
#[derive(Debug, Clone, PartialEq)]
pub struct WriteResponse {
    pub status: u16,
    pub body: serde_json::Value,
    /// Response headers worth replaying (for example `Location`).
    pub headers: Vec<(String, String)>,
    /// The resource the write named (its audit record's resource id), handed back on a replay so
    /// that no handler reads it out of a header. Not part of the replayed bytes. `None` when the
    /// write named none, and for records completed before the store kept it.
    pub resource_id: Option<String>,
}

impl From<StoredResponse> for WriteResponse {
    fn from(stored: StoredResponse) -> Self {
        let StoredResponse { status, body, headers, resource_id } = stored;
        Self { status, body, headers, resource_id }
    }
}

impl From<WriteResponse> for StoredResponse {
    fn from(response: WriteResponse) -> Self {
        let WriteResponse { status, body, headers, resource_id } = response;
        Self { status, body, headers, resource_id }
    }
}

pub struct Writes {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    settings: WriteSettings,
}

impl Writes {
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>, settings: WriteSettings) -> Self {
        Self { store, clock, settings }
    }

    /// Admits a write: claims the Idempotency-Key when there is one, then opens the transaction.
    pub async fn begin(
        &self,
        ctx: RequestContext,
        action: &'static AuditAction,
        idempotency: Option<IdempotencyRequest>,
        resource_id: Option<String>,
    ) -> AppResult<Admission> {
        // One transaction: the key is claimed in the write itself, so the accept path is a
        // single commit, and a crash before it leaves the key free (nothing happened).
        let mut tx = self.store.write().await?;
        let claim = match idempotency {
            None => None,
            Some(request) => {
                let claimed = match self.claim(tx.as_mut(), &ctx, action, request).await {
                    Ok(claimed) => claimed,
                    Err(e) => {
                        // Nothing of this request stays held (on PostgreSQL, the key's lock).
                        end(tx).await;
                        return Err(e);
                    }
                };
                match claimed {
                    Claimed::Mine(claim) => Some(claim),
                    Claimed::Replay(response) => {
                        // The record found may be a write's that has not committed yet (SQLite's
                        // group commit shares one transaction among writes): committing this
                        // empty write waits for that one, so a replay never answers about a
                        // resource a read cannot see yet.
                        tx.commit().await?;
                        return Ok(Admission::Replay(response.into()));
                    }
                }
            }
        };
        Ok(Admission::Proceed(self.open(tx, ctx, action, claim, resource_id)))
    }

    /// Claims the key in a transaction of its own, committed at once, for a write whose effect
    /// happens before its transaction (a test delivery): while the claim is held, a concurrent
    /// request with the same key meets the in-flight 409 instead of making the effect again, and
    /// a key that completed with this very request is replayed. The write that records the
    /// effect is then admitted by [`Writes::begin_held`]; a crash in between leaves the claim
    /// to its lease, after which a retry takes the key over.
    pub async fn hold(
        &self,
        ctx: &RequestContext,
        action: &'static AuditAction,
        request: IdempotencyRequest,
    ) -> AppResult<Held> {
        let mut tx = self.store.write().await?;
        let claimed = match self.claim(tx.as_mut(), ctx, action, request).await {
            Ok(claimed) => claimed,
            Err(e) => {
                end(tx).await;
                return Err(e);
            }
        };
        let held = match claimed {
            Claimed::Replay(response) => Held::Replay(response.into()),
            Claimed::Mine(claim) => Held::Mine(HeldKey { claim: Claim { committed: true, ..claim } }),
        };
        tx.commit().await?;
        Ok(held)
    }

    /// Admits the write of a key held by [`Writes::hold`]: its transaction completes the held
    /// claim (fenced on its token), as [`Writes::begin`]'s does its own.
    pub async fn begin_held(
        &self,
        ctx: RequestContext,
        action: &'static AuditAction,
        held: HeldKey,
        resource_id: Option<String>,
    ) -> AppResult<Write> {
        match self.store.write().await {
            Ok(tx) => Ok(self.open(tx, ctx, action, Some(held.claim), resource_id)),
            Err(e) => {
                self.release(Some(held.claim)).await;
                Err(e.into())
            }
        }
    }

    /// Frees a held key whose effect failed for a reason worth retrying.
    pub async fn release_held(&self, held: HeldKey) {
        self.release(Some(held.claim)).await;
    }

    fn open(
        &self,
        tx: Box<dyn Tx>,
        ctx: RequestContext,
        action: &'static AuditAction,
        claim: Option<Claim>,
        resource_id: Option<String>,
    ) -> Write {
        Write {
            tx,
            clock: Arc::clone(&self.clock),
            now: OnceLock::new(),
            ctx,
            action,
            claim,
            resource_id,
            detail: serde_json::Value::Null,
            outcome: AuditOutcome::Success,
            side_records: Vec::new(),
            job_max_attempts: self.settings.job_max_attempts,
        }
    }

    async fn claim(
        &self,
        tx: &mut dyn Tx,
        ctx: &RequestContext,
        action: &'static AuditAction,
        request: IdempotencyRequest,
    ) -> AppResult<Claimed> {
        let scope =
            // Keys belong to the caller's organisation (the platform's, for an operator).
            IdempotencyScope { tenant: ctx.caller.tenant, operation: action.name.to_owned(), key: request.key };
        let now = self.clock.now();
        let lease_until = now.plus_millis(self.settings.idempotency_lease_ms);
        let token = new_id();
        let mine = |scope| {
            Claimed::Mine(Claim {
                scope,
                token,
                request_hash: request.request_hash.clone(),
                lease_until,
                committed: false,
            })
        };
        // The claim first: a new key (the common case) then costs one statement, not a read and
        // an insert. A key another request is running under is busy at once on PostgreSQL (its
        // lock is held; SQLite admits one write at a time, so there it never is); an existing
        // key is read after the insert found it.
        match tx.idempotency().insert_claim(&scope, &request.request_hash, token, lease_until, now).await {
            Ok(()) => return Ok(mine(scope)),
            Err(StoreError::Conflict(_)) => {}
            Err(StoreError::Busy(_)) => return Err(in_flight(1)),
            Err(e) => return Err(e.into()),
        }
        let claimed = match tx.idempotency().get(&scope).await? {
            // Its holder gave it up between the insert and the read: the retry claims it.
            None => return Err(in_flight(1)),
            Some(record) if record.request_hash != request.request_hash => {
                return Err(Error::unprocessable(format!(
                    "Idempotency-Key {:?} was already used for a different request (another payload, or another caller); use a new key for a new request",
                    scope.key
                ))
                .with_code(Code::IdempotencyKeyReused));
            }
            Some(record) => match record.state {
                IdempotencyState::Completed(response) => Claimed::Replay(response),
                IdempotencyState::InFlight { lease_until: held_until, .. } if held_until > now => {
                    return Err(in_flight(retry_after_seconds(now, held_until)));
                }
                IdempotencyState::InFlight { token: stale, .. } => {
                    // The holder did not finish within its lease (it crashed): take the key over
                    // with a fresh claim, so that retention counts from this claim (the one that
                    // completes), not from the crashed one. Deleting only the stale token's claim
                    // fences a concurrent take-over: the loser's insert then conflicts.
                    tx.idempotency().release(&scope, stale).await?;
                    match tx.idempotency().insert_claim(&scope, &request.request_hash, token, lease_until, now).await {
                        Ok(()) => {}
                        Err(StoreError::Conflict(_) | StoreError::Busy(_)) => return Err(in_flight(1)),
                        Err(e) => return Err(e.into()),
                    }
                    mine(scope)
                }
            },
        };
        Ok(claimed)
    }

    /// Records a caller's mistake found after admission: the effect's transaction has been
    /// dropped (rolled back); the failed attempt's audit record commits with the error response
    /// stored under the Idempotency-Key, so that a retry with the same key replays it. An
    /// invalid request (`RefusedKey::Freed`) leaves nothing: its key rolled back with the effect
    /// and, as a request refused before admission, it has no record. If they cannot be recorded, the key
    /// is released (as after any internal failure) so that a retry runs anew instead of meeting
    /// an in-flight conflict until the lease expires. Returns the response as stored, with the
    /// write's resource id (see [`Writes::commit`]).
    pub async fn refuse(
        &self,
        write: Write,
        response: WriteResponse,
        reason: &str,
        key: RefusedKey,
    ) -> AppResult<WriteResponse> {
        let now = write.now();
        let Write { tx, ctx, action, claim, resource_id, .. } = write;
        end(tx).await;
        let response = StoredResponse::from(WriteResponse { resource_id: resource_id.clone(), ..response });
        // Only a claim that rolled back with the effect is freed: one held ahead of an effect
        // made outside the transaction (a test delivery) stays bound to its answer, since that
        // effect may have happened and must not happen twice.
        let held_ahead = claim.as_ref().is_some_and(|c| c.committed);
        if key == RefusedKey::Freed && !held_ahead {
            // An invalid request changed nothing and binds nothing: like one refused before
            // admission, it leaves no record (the key rolled back with the effect).
            return Ok(response.into());
        }
        let response = &response;
        let result: AppResult<()> = async {
            let mut tx = self.store.write().await?;
            let recorded: AppResult<()> = async {
                let record = audit_record(
                    &ctx,
                    action,
                    resource_id,
                    now,
                    self.clock.now(),
                    AuditOutcome::Failure,
                    response.status,
                    // The reason may quote a path value holding a NUL.
                    serde_json::json!({ "reason": tokenops_domain::audit::storable_text(reason.to_owned()) }),
                    claim.as_ref(),
                );
                tx.audit().record(&record).await?;
                let now = self.clock.now();
                // The claim rolled back with the effect (unless it was held ahead, committed on
                // its own): claim the key again for the refusal.
                if let Some(claim) = claim.as_ref().filter(|c| !c.committed) {
                    match tx
                        .idempotency()
                        .insert_claim(&claim.scope, &claim.request_hash, claim.token, claim.lease_until, now)
                        .await
                    {
                        Ok(()) => {}
                        Err(StoreError::Conflict(_) | StoreError::Busy(_)) => return Err(in_flight(1)),
                        Err(e) => return Err(e.into()),
                    }
                }
                if let Some(claim) = &claim
                    && !tx.idempotency().complete(&claim.scope, claim.token, response, now).await?
                {
                    return Err(in_flight(1));
                }
                Ok(())
            }
            .await;
            match recorded {
                Ok(()) => Ok(tx.commit().await?),
                Err(e) => {
                    end(tx).await;
                    Err(e)
                }
            }
        }
        .await;
        if let Err(e) = &result
            && !e.is_final_outcome()
        {
            self.release(claim).await;
        }
        result.map(|()| response.clone().into())
    }

    /// Commits the write (see [`Write::commit_inner`]); if the commit fails, the key is released
    /// so that the same request can be retried. The response is stored with the write's
    /// resource id (the one its audit record names, whatever `response` carried), so that a
    /// replay hands it back; it is returned as stored.
    pub async fn commit(&self, write: Write, response: WriteResponse) -> AppResult<WriteResponse> {
        let claim = write.claim.clone();
        let response = StoredResponse::from(WriteResponse { resource_id: write.resource_id.clone(), ..response });
        match write.commit_inner(&response).await {
            Ok(()) => Ok(response.into()),
            Err(e) => {
                if !e.is_final_outcome() {
                    self.release(claim).await;
                }
                Err(e)
            }
        }
    }

    /// Abandons a write after an internal failure: nothing of it remains and the key is free.
    pub async fn abandon(&self, write: Write) {
        let Write { tx, claim, .. } = write;
        end(tx).await;
        self.release(claim).await;
    }

    async fn release(&self, claim: Option<Claim>) {
        let Some(claim) = claim else { return };
        let result = async {
            let mut tx = self.store.write().await?;
            tx.idempotency().release(&claim.scope, claim.token).await?;
            tx.commit().await
        }
        .await;
        if let Err(e) = result {
            // The lease expires on its own; a retry after it takes the key over.
            tracing::warn!(error = %e, key = %claim.scope.key, "could not release an idempotency claim");
        }
    }
}

/// What a refused write does with its Idempotency-Key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusedKey {
    /// The refusal is the key's answer: the same key replays it.
    Bound,
    /// The request was invalid and changed nothing: corrected, it may be sent again under the
    /// same key (unless the key was held ahead of an outside effect: then it stays bound).
    Freed,
}

enum Claimed {
    Mine(Claim),
    Replay(StoredResponse),
}

fn in_flight(retry_after: u64) -> Error {
    Error::conflict("A request with this Idempotency-Key is still being processed; retry after the indicated delay with the same key")
        .with_code(Code::IdempotencyConflict)
        .with_retry_after(retry_after)
}

/// Whole seconds until the holder's lease ends, at least 1 and at most 5: most requests finish in
/// milliseconds, so a short wait is the useful hint; a crashed holder's lease is waited out by
/// repeated retries.
fn retry_after_seconds(now: Timestamp, held_until: Timestamp) -> u64 {
    let millis = now.millis_until(held_until);
    u64::try_from(millis.div_euclid(1_000) + 1).unwrap_or(1).clamp(1, 5)
}

/// Rolls back a write's transaction before the request is answered, so that a retry under the
/// same key finds it free. A rollback that fails leaves the transaction to its connection's end.
async fn end(tx: Box<dyn Tx>) {
    if let Err(e) = tx.rollback().await {
        tracing::warn!(error = %e, "rolling back a write's transaction");
    }
}

#[allow(clippy::too_many_arguments)]
fn audit_record(
    ctx: &RequestContext,
    action: &AuditAction,
    resource_id: Option<String>,
    occurred_at: Timestamp,
    created_at: Timestamp,
    outcome: AuditOutcome,
    http_status: u16,
    detail: serde_json::Value,
    claim: Option<&Claim>,
) -> AuditRecord {
    AuditRecord {
        id: new_id(),
        tenant_id: ctx.tenant,
        occurred_at,
        created_at,
        action: action.name.to_owned(),
        category: action.category.to_owned(),
        source: ctx.source,
        actor_id: Some(ctx.caller.subject.clone()),
        resource_type: action.resource_type.to_owned(),
        resource_id,
        outcome,
        request_id: Some(ctx.request_id.clone()),
        idempotency_key: claim.map(|c| c.scope.key.clone()),
        // A worker's write answered no HTTP request.
        http_status: (ctx.source == AuditSource::Api).then_some(http_status),
        detail,
        seal: None,
    }
}

/// One admitted write: a transaction and everything that must commit with it.
pub struct Write {
    tx: Box<dyn Tx>,
    clock: Arc<dyn Clock>,
    /// Read from the clock on first use, which comes after the write's locking reads: a change
    /// that waited for a row another write held is then stamped after it, so a row's
    /// `updatedAt` never goes back.
    now: OnceLock<Timestamp>,
    ctx: RequestContext,
    action: &'static AuditAction,
    claim: Option<Claim>,
    resource_id: Option<String>,
    detail: serde_json::Value,
    outcome: AuditOutcome,
    /// Records of other resources the write changed on the way (each account a customer's
    /// deactivation takes along), committed with the write's own, by the same request.
    side_records: Vec<(&'static AuditAction, String, serde_json::Value)>,
    job_max_attempts: u32,
}

impl Write {
    pub fn tx(&mut self) -> &mut dyn Tx {
        &mut *self.tx
    }

    /// The time of this write: every timestamp it records uses it. Ask for it after taking the
    /// locks the write needs (see the field).
    pub fn now(&self) -> Timestamp {
        *self.now.get_or_init(|| self.clock.now())
    }

    pub fn context(&self) -> &RequestContext {
        &self.ctx
    }

    /// Holds the caller to `permissions`, its grants as read under the lock of its own record:
    /// a permission taken away by a change that committed while this request ran is lacking
    /// for this write too, as it would be at the caller's next request. Never widens: a grant
    /// given meanwhile waits for the next request.
    pub(crate) fn hold_caller_to(&mut self, permissions: tokenops_domain::permission::PermissionSet) {
        self.ctx.caller.permissions = self.ctx.caller.permissions.both(permissions);
    }

    /// The request's Idempotency-Key, for events that background work emits on its behalf.
    pub fn idempotency_key(&self) -> Option<&str> {
        self.claim.as_ref().map(|c| c.scope.key.as_str())
    }

    /// The organisation this write acts on; an internal error for a platform-level write, whose
    /// services never ask.
    pub fn tenant(&self) -> AppResult<TenantId> {
        self.ctx.tenant.ok_or_else(|| Error::internal("an organisation-scoped write has no organisation"))
    }

    /// Records the attempt as failed while still committing its effects (a refused sign-in
    /// that counts towards the lockout).
    pub fn set_audit_failure(&mut self) {
        self.outcome = AuditOutcome::Failure;
    }

    /// Names the resource the audit record is about, once the write knows it.
    pub fn set_resource_id(&mut self, id: impl Into<String>) {
        self.resource_id = Some(id.into());
    }

    /// What changed, for the audit record.
    pub fn set_audit_detail(&mut self, detail: serde_json::Value) {
        self.detail = detail;
    }

    /// Another resource this write changed along the way gets a record of its own (`action`,
    /// `resource_id`, `detail`), by the same caller and request, committed with the write's.
    pub fn record_side_change(&mut self, action: &'static AuditAction, resource_id: String, detail: serde_json::Value) {
        self.side_records.push((action, resource_id, detail));
    }

    /// Appends an event to the outbox with the job that dispatches it.
    pub async fn emit(
        &mut self,
        event_type: EventType,
        resource: ResourceRef,
        data: serde_json::Value,
    ) -> AppResult<Uuid> {
        let now = self.now();
        let event = Event {
            id: new_id(),
            tenant_id: self.tenant()?,
            event_type: event_type.as_str().to_owned(),
            occurred_at: now,
            correlation_id: self.ctx.correlation_id.clone(),
            idempotency_key: self.claim.as_ref().map(|c| c.scope.key.clone()),
            resource,
            data,
            dispatched_at: None,
        };
        crate::events::publish(&mut *self.tx, &event, self.job_max_attempts, now).await?;
        Ok(event.id)
    }

    /// Enqueues background work that starts only if this write commits.
    pub async fn enqueue(&mut self, kind: &str, payload: serde_json::Value) -> AppResult<Option<Uuid>> {
        let now = self.now();
        let job = NewJob {
            kind: kind.to_owned(),
            tenant_id: self.ctx.tenant,
            payload: crate::trace::stamp(payload),
            run_at: now,
            max_attempts: self.job_max_attempts,
            dedupe_key: None,
        };
        Ok(self.tx.jobs().enqueue(&job, now).await?)
    }

    /// Commits the change with its audit record and, under its key, the response to replay.
    async fn commit_inner(mut self, response: &StoredResponse) -> AppResult<()> {
        match self.record_and_complete(response).await {
            Ok(()) => Ok(self.tx.commit().await?),
            Err(e) => {
                // Nothing of the write stays held (on PostgreSQL, the key's lock) once answered.
                end(self.tx).await;
                Err(e)
            }
        }
    }

    /// The write's audit records and its key's completion, the last statements before the
    /// commit.
    async fn record_and_complete(&mut self, response: &StoredResponse) -> AppResult<()> {
        let now = self.now();
        let record = audit_record(
            &self.ctx,
            self.action,
            self.resource_id.take(),
            now,
            now,
            self.outcome,
            response.status,
            std::mem::take(&mut self.detail),
            self.claim.as_ref(),
        );
        self.tx.audit().record(&record).await?;
        for (action, resource_id, detail) in std::mem::take(&mut self.side_records) {
            let side = audit_record(
                &self.ctx,
                action,
                Some(resource_id),
                now,
                now,
                AuditOutcome::Success,
                response.status,
                detail,
                self.claim.as_ref(),
            );
            self.tx.audit().record(&side).await?;
        }
        // If our lease ran out and another request took the key, our effect must not land.
        if let Some(claim) = &self.claim
            && !self.tx.idempotency().complete(&claim.scope, claim.token, response, now).await?
        {
            return Err(in_flight(1));
        }
        Ok(())
    }
}

// The request fingerprint of idempotency: the API's writes and the runs of automations key
// their submissions alike.
/// Canonical JSON (object keys sorted at every level), so that the same payload sent with other
/// whitespace or key order is the same request.
fn canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            separated(out, b'{', b'}', keys, |key, out| {
                write_json(key, out);
                out.push(b':');
                canonical(&map[key], out);
            });
        }
        Value::Array(items) => separated(out, b'[', b']', items, canonical),
        other => write_json(other, out),
    }
}

/// `open`, the items written by `each` with commas between them, `close`: JSON's shape of a
/// list and of an object alike.
fn separated<T>(
    out: &mut Vec<u8>,
    open: u8,
    close: u8,
    items: impl IntoIterator<Item = T>,
    mut each: impl FnMut(T, &mut Vec<u8>),
) {
    out.push(open);
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        each(item, out);
    }
    out.push(close);
}

fn write_json(value: &impl Serialize, out: &mut Vec<u8>) {
    // Writing JSON into memory fails only for a map with non-string keys, which `Value` has not.
    let _ = serde_json::to_writer(out, value);
}

/// The fingerprint of a write request: method, path, the caller where the action is
/// [`AuditAction::per_caller`], and canonical body.
pub fn fingerprint(method: &str, path: &str, caller: Option<&str>, body: &Value) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut text = Vec::with_capacity(256);
    text.extend_from_slice(method.as_bytes());
    text.push(b' ');
    text.extend_from_slice(path.as_bytes());
    text.push(b'\n');
    // Without a caller, the text is what it was before callers joined it, so keys stored then
    // still replay. As a JSON string, whatever a provider puts in `sub` cannot run into the body.
    if let Some(caller) = caller {
        write_json(&caller, &mut text);
        text.push(b'\n');
    }
    canonical(body, &mut text);
    let digest = Sha256::digest(&text);
    let mut hex = String::with_capacity(2 * digest.len());
    for b in digest {
        hex.push(char::from(HEX[usize::from(b >> 4)]));
        hex.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
    hex
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_short_and_positive() {
        let now = Timestamp::from_micros(0);
        assert_eq!(retry_after_seconds(now, now), 1);
        assert_eq!(retry_after_seconds(now, now.plus_millis(1_500)), 2);
        assert_eq!(retry_after_seconds(now, now.plus_millis(30_000)), 5);
    }
}
