//! Runs of automations as durable jobs. `automation.run` runs one execution: RUNNING, the
//! script in the sandbox on a blocking thread against a host acting as the automation's user,
//! then SUCCEEDED or FAILED with its log, the operations it submitted and its error, and a
//! WORKER audit record. `automations.schedule` (periodic) turns due SCHEDULED automations into
//! QUEUED runs, one per planned instant.
//!
//! A run that dies midway runs again whole (the job is retried): each submission's
//! Idempotency-Key is derived from the execution and the submission's ordinal, so what the first
//! attempt submitted is answered again, not submitted twice. The same holds when two workers run
//! one execution at once (a lease lost to a slow run): one makes each submission, the other is
//! answered it or retries later, and only the first end is recorded. A temporary failure of the
//! store or a key still in flight is no outcome of the script: the attempt stops and the job
//! runs it again later, whole, instead of recording FAILED.

use async_trait::async_trait;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use tokenops_domain::audit::{AuditOutcome, AuditSource};
use tokenops_domain::automation::{Automation, AutomationStatus, Execution, ExecutionStatus, Trigger, TriggerType};
use tokenops_domain::paging::PageRequest;
use tokenops_domain::permission::{Permission, PermissionSet};
use tokenops_domain::script::ScriptStatus;
use tokenops_domain::{Clock, TenantId, Timestamp};
use tokenops_scripting::{Compiler, Host, Limits, ParamValue, RunOutcome};
use tokenops_store::{Job, NewJob, Store, Tx};
use uuid::Uuid;

use super::{RUN, as_overrides, next_run_after};
use crate::accounts::{AccountOut, Accounts};
use crate::context::{Caller, Principal, RequestContext};
use crate::error::{AppResult, Code, Error};
use crate::jobs::{BatchContext, BatchFinished, JobError, JobHandler, kinds};
use crate::operations::{OperationOut, Operations, Submission};
use crate::scripts::declarations;
use crate::write::{Admission, IdempotencyRequest, RefusedKey, WriteResponse, Writes};

/// Runs disable their automation after this many failures in a row (0: never).
#[derive(Debug, Clone, Copy)]
pub struct RunSettings {
    pub disable_after_failures: u32,
    pub job_max_attempts: u32,
}

/// What runs a script against an organisation, for automation runs and dry runs alike: the
/// sandbox's compiler and limits, and the services its host reads and submits through.
pub struct Sandbox {
    pub clock: Arc<dyn Clock>,
    pub compiler: Arc<Compiler>,
    pub limits: Limits,
    pub accounts: Arc<Accounts>,
    pub operations: Arc<Operations>,
}

pub struct RunAutomation {
    pub store: Arc<dyn Store>,
    pub sandbox: Arc<Sandbox>,
    pub writes: Arc<Writes>,
    pub settings: RunSettings,
}

fn execution_of(job: &Job) -> Option<Uuid> {
    job.payload.get("executionId").and_then(Value::as_str).and_then(|s| Uuid::parse_str(s).ok())
}

#[async_trait]
impl JobHandler for RunAutomation {
    fn kind(&self) -> &'static str {
        kinds::AUTOMATION_RUN
    }

    async fn run_batch(&self, jobs: Vec<Job>, ctx: &BatchContext) -> Result<BatchFinished, JobError> {
        let mut done = Vec::new();
        let mut failed = Vec::new();
        for job in jobs {
            match self.run_one(&job).await {
                Ok(()) => done.push(job.id),
                Err(e) => failed.push((job, e)),
            }
        }
        let tx = self.store.write().await?;
        ctx.finish(tx, done, Vec::new(), failed).await
    }

    /// A run whose job is buried (its attempts spent by crashes, or its end never recorded)
    /// ends FAILED in the burial, so that no run stays QUEUED or RUNNING for ever.
    async fn on_dead(&self, job: &Job, tx: &mut dyn Tx, reason: &str, now: Timestamp) -> Result<(), JobError> {
        let (Some(id), Some(tenant)) = (execution_of(job), job.tenant_id) else { return Ok(()) };
        let Some(mut execution) = tx.executions().get_for_update(tenant, id).await? else { return Ok(()) };
        if execution.status.is_final() {
            return Ok(());
        }
        execution.started_at.get_or_insert(now);
        let error = Some(format!("the run's job ran out of attempts: {reason}"));
        // What an interrupted attempt submitted is not known here; the operations keep their
        // own record under the run's keys.
        let result = RunResult {
            log: std::mem::take(&mut execution.log),
            submitted: std::mem::take(&mut execution.submitted),
            error,
            ..RunResult::default()
        };
        record_end(tx, tenant, execution, result, now, self.settings).await
    }
}

impl RunAutomation {
    async fn run_one(&self, job: &Job) -> Result<(), JobError> {
        let (Some(id), Some(tenant)) = (execution_of(job), job.tenant_id) else {
            return Err(JobError::Permanent("payload has no executionId or the job no tenant".into()));
        };
        // RUNNING, one more attempt: in its own commit, so the history shows a run under way.
        let started = {
            let mut tx = self.store.write().await?;
            let Some(mut execution) = tx.executions().get_for_update(tenant, id).await? else {
                return Err(JobError::Permanent(format!("execution {id} not found")));
            };
            if execution.status.is_final() {
                return Ok(());
            }
            execution.status = ExecutionStatus::Running;
            execution.attempts += 1;
            execution.started_at.get_or_insert(self.sandbox.clock.now());
            tx.executions().update(&execution).await?;
            tx.commit().await?;
            execution
        };
        let outcome = self.run_script(tenant, &started).await;
        if let Some(reason) = outcome.transient {
            // Left RUNNING: the job's next attempt runs the script again, and its submissions
            // are answered under the same keys; the burial records FAILED if none succeeds.
            return Err(JobError::Retry(reason));
        }
        self.finish(tenant, id, outcome).await
    }

    /// Runs the execution's script, the result being the log, the operations submitted, and
    /// the error if it failed (or the temporary failure that stopped it).
    async fn run_script(&self, tenant: TenantId, execution: &Execution) -> RunResult {
        let prepared = match self.prepare(tenant, execution).await {
            Ok(prepared) => prepared,
            Err(Halt::Fail(error)) => return RunResult { error: Some(error), ..RunResult::default() },
            Err(Halt::Retry(reason)) => return RunResult { transient: Some(reason), ..RunResult::default() },
        };
        let submissions = Submissions::Make { execution_id: execution.id, writes: self.writes.clone() };
        let script = Script { source: prepared.source, sources: prepared.sources, values: prepared.values };
        self.sandbox.run(tenant, prepared.caller, submissions, script, prepared.event).await
    }

    /// What a run needs from the store: the script's code and the versions its imports
    /// resolved, the parameters' values, the event, and the automation's user as a caller. A
    /// store that cannot be read is a reason to retry, not the run's failure.
    async fn prepare(&self, tenant: TenantId, execution: &Execution) -> Result<Prepared, Halt> {
        let mut tx = self.store.read().await?;
        let automation =
            tx.automations().get(tenant, execution.automation_id).await?.ok_or(Halt::fail("the automation is gone"))?;
        let script = tx.scripts().get(tenant, automation.script_id).await?.ok_or(Halt::fail("the script is gone"))?;
        let script = super::runnable(&automation, script).map_err(Halt::Fail)?;
        let sources = run_sources(tx.as_mut(), tenant, &script, true).await?;
        let decls = declarations(&script.parameters).map_err(|e| Halt::Fail(e.to_string()))?;
        let values = tokenops_scripting::params::fit(&decls, &as_overrides(&decls, &execution.parameters)).map_err(
            |problems| Halt::Fail(format!("the parameters no longer fit the script: {}", problems.join("; "))),
        )?;
        let event = match execution.event_id {
            Some(id) => tx.events().get(tenant, id).await?.map(|e| {
                json!({
                    "id": e.id,
                    "type": e.event_type,
                    "occurredAt": e.occurred_at.to_spaced_utc(),
                    "correlationId": e.correlation_id,
                    "resource": { "type": e.resource.kind, "id": e.resource.id },
                    "data": e.data,
                })
            }),
            None => None,
        };
        drop(tx);
        let caller = caller_of(self.store.as_ref(), tenant, &automation).await?;
        Ok(Prepared { source: script.source, sources, values, event, caller })
    }

    /// Records the run's end in its own commit, unless another worker running the same
    /// execution recorded one first (its lease was taken over): the first end stands.
    async fn finish(&self, tenant: TenantId, id: Uuid, result: RunResult) -> Result<(), JobError> {
        let mut tx = self.store.write().await?;
        let Some(execution) = tx.executions().get_for_update(tenant, id).await? else {
            return Err(JobError::Permanent(format!("execution {id} not found")));
        };
        if execution.status.is_final() {
            return Ok(());
        }
        record_end(tx.as_mut(), tenant, execution, result, self.sandbox.clock.now(), self.settings).await?;
        tx.commit().await?;
        Ok(())
    }
}

/// The Idempotency-Key of a run's submissions: this prefix, the execution, its ordinal. The API
/// refuses keys with it, so that it marks a run's submissions only (and no client's key can
/// meet a run's).
pub const RUN_KEY_PREFIX: &str = "automation-run:";

/// Whether an operation (and so each event about it) was submitted by an automation's run,
/// by the key the run submitted it under: such events start no EVENT automation, so a run
/// can never set off a chain of runs (an automation on `transaction.confirmed` that submits
/// would otherwise trigger itself without end).
pub(crate) fn submitted_by_a_run(idempotency_key: Option<&str>) -> bool {
    idempotency_key.is_some_and(|key| key.starts_with(RUN_KEY_PREFIX))
}

/// Why a run cannot start: a failure to record, or a temporary one to retry.
pub(crate) enum Halt {
    Fail(String),
    Retry(String),
}

impl Halt {
    fn fail(message: &str) -> Halt {
        Halt::Fail(message.to_owned())
    }
}

impl From<tokenops_store::StoreError> for Halt {
    fn from(e: tokenops_store::StoreError) -> Self {
        Halt::Retry(e.to_string())
    }
}

/// The sources a run of `script`'s current version imports, by name: the versions its
/// publication resolved, and an import of an import as its script is now (see the scripts
/// area's note). With `published_only` (an automation's run), an import of an import that is a
/// DRAFT fails the run: its code changes without publication. A dry run tries drafts.
pub(crate) async fn run_sources(
    tx: &mut dyn Tx,
    tenant: TenantId,
    script: &tokenops_domain::script::Script,
    published_only: bool,
) -> Result<HashMap<String, String>, Halt> {
    let mut sources = HashMap::new();
    for dependency in &script.dependencies {
        let version =
            tx.scripts().version(tenant, dependency.script_id, dependency.version).await?.ok_or_else(|| {
                Halt::Fail(format!("version {} of {:?} is gone", dependency.version, dependency.name))
            })?;
        sources.insert(dependency.name.clone(), version.source);
    }
    let mut pending: Vec<String> = script
        .imports
        .iter()
        .filter(|name| !sources.contains_key(*name))
        .cloned()
        .chain(sources.values().flat_map(|s| crate::scripts::imported_names(s)))
        .collect();
    while let Some(name) = pending.pop() {
        if sources.contains_key(&name) {
            continue;
        }
        if let Some(found) = tx.scripts().by_name(tenant, &name).await? {
            if published_only && found.status == ScriptStatus::Draft {
                return Err(Halt::Fail(format!(
                    "the script {name:?} it imports through another is a DRAFT: an automation runs published code only"
                )));
            }
            pending.extend(crate::scripts::imported_names(&found.source));
            sources.insert(name, found.source);
        }
    }
    Ok(sources)
}

/// A script to run: its code, the sources of its imports by name, its parameters' values.
pub(crate) struct Script {
    pub source: String,
    pub sources: HashMap<String, String>,
    pub values: BTreeMap<String, ParamValue>,
}

impl Sandbox {
    /// Runs `script` on a blocking thread as `caller`, its submissions made or captured as
    /// `submissions` says, and gives what the host recorded with the outcome: a completed run's
    /// value as the log's last line (`result: …`), a failed one's error as
    /// `KIND: message (line, column)`.
    pub(crate) async fn run(
        &self,
        tenant: TenantId,
        caller: Caller,
        submissions: Submissions,
        script: Script,
        event: Option<Value>,
    ) -> RunResult {
        let host = Arc::new(RunHost {
            runtime: tokio::runtime::Handle::current(),
            tenant,
            caller,
            accounts: self.accounts.clone(),
            operations: self.operations.clone(),
            clock: self.clock.clone(),
            submissions,
            ordinal: AtomicUsize::new(0),
            record: Mutex::new(RunResult::default()),
        });
        let compiler = self.compiler.clone();
        let limits = self.limits.clone();
        let runner_host = host.clone();
        // A thread of its own with the stack a run needs (`RUN_STACK_BYTES`), not the blocking
        // pool's 2 MiB.
        let (sent, outcome) = tokio::sync::oneshot::channel();
        let spawned = std::thread::Builder::new()
            .name("tokenops-script".into())
            .stack_size(tokenops_scripting::RUN_STACK_BYTES)
            .spawn(move || {
                let _ = sent.send(compiler.run(
                    &script.source,
                    &script.sources,
                    &script.values,
                    event,
                    runner_host,
                    &limits,
                ));
            });
        let outcome = match spawned {
            Ok(_) => outcome.await.map_err(|_| "its thread ended without an outcome".to_owned()),
            Err(e) => Err(format!("no thread could be started for it: {e}")),
        };
        recorded(&host, outcome)
    }
}

/// What the host recorded, with the run's outcome.
fn recorded(host: &RunHost, outcome: Result<RunOutcome, String>) -> RunResult {
    let mut result = std::mem::take(&mut *host.record.lock().unwrap_or_else(PoisonError::into_inner));
    match outcome {
        Ok(RunOutcome::Completed { value }) => {
            if let Some(value) = value {
                result.log.push(format!("result: {value}"));
            }
        }
        Ok(RunOutcome::Failed { error }) => {
            let position = match (error.line, error.column) {
                (Some(line), Some(column)) => format!(" (line {line}, column {column})"),
                _ => String::new(),
            };
            result.error = Some(format!("{}: {}{position}", error.kind.code(), error.message));
        }
        Err(why) => result.error = Some(format!("the run stopped: {why}")),
    }
    result
}

/// Records a run's end in `tx` with a WORKER audit record; failures in a row past the setting
/// disable the automation (audited too).
async fn record_end(
    tx: &mut dyn Tx,
    tenant: TenantId,
    mut execution: Execution,
    result: RunResult,
    now: Timestamp,
    settings: RunSettings,
) -> Result<(), JobError> {
    let failed = result.error.is_some();
    execution.status = if failed { ExecutionStatus::Failed } else { ExecutionStatus::Succeeded };
    execution.log = result.log;
    execution.submitted = result.submitted;
    execution.error = result.error;
    execution.finished_at = Some(now);
    tx.executions().update(&execution).await?;
    let outcome = if failed { AuditOutcome::Failure } else { AuditOutcome::Success };
    let detail = json!({ "executionId": execution.id, "status": execution.status.as_str(), "error": execution.error });
    crate::audit::record_worker(&mut *tx, tenant, &RUN, execution.automation_id.to_string(), outcome, detail, now)
        .await?;
    if let Some(mut automation) = tx.automations().get_for_update(tenant, execution.automation_id).await? {
        automation.consecutive_failures = if failed { automation.consecutive_failures.saturating_add(1) } else { 0 };
        let limit = settings.disable_after_failures;
        if failed
            && limit > 0
            && automation.consecutive_failures >= limit
            && automation.status == AutomationStatus::Active
        {
            automation.status = AutomationStatus::Disabled;
            automation.next_run_at = None;
            let detail = json!({ "status": "DISABLED", "consecutiveFailures": automation.consecutive_failures });
            crate::audit::record_worker(
                &mut *tx,
                tenant,
                &super::UPDATE_STATUS,
                automation.id.to_string(),
                AuditOutcome::Success,
                detail,
                now,
            )
            .await?;
        }
        automation.updated_at = now;
        tx.automations().update(&automation).await?;
    }
    Ok(())
}

struct Prepared {
    source: String,
    sources: HashMap<String, String>,
    values: BTreeMap<String, ParamValue>,
    event: Option<Value>,
    caller: Caller,
}

/// What a run leaves in its record.
#[derive(Debug, Default)]
pub(crate) struct RunResult {
    pub log: Vec<String>,
    pub submitted: Vec<Uuid>,
    /// A dry run's submissions, as the script made them, in order.
    pub captured: Vec<Value>,
    pub error: Option<String>,
    /// A temporary failure a host call met (the store, a key in flight): the run's outcome
    /// says nothing of the script, so it is not recorded.
    pub transient: Option<String>,
}

/// The caller the run acts as: the automation's creator with what it holds now. A user must
/// be ACTIVE and a client enabled, with their role's permissions; a creator the organisation
/// has no record of (an external provider's subject) acts with what it held at creation.
async fn caller_of(store: &dyn Store, tenant: TenantId, automation: &Automation) -> Result<Caller, Halt> {
    let caller = |principal, permissions| Caller {
        subject: automation.user_id.clone(),
        tenant: Some(tenant),
        principal,
        permissions,
    };
    if let Ok(id) = Uuid::parse_str(&automation.user_id) {
        let standing = store.subject_standing(Some(tenant), id).await?;
        let known =
            standing.user.map(|s| (Principal::User(id), s)).or(standing.client.map(|s| (Principal::Client(id), s)));
        if let Some((principal, standing)) = known {
            if !standing.active {
                return Err(Halt::fail("the automation's user is no longer active"));
            }
            let permissions = match standing.role_id {
                Some(role_id) => {
                    let mut tx = store.read().await?;
                    crate::identity::access::role_grants(&mut *tx, tenant, role_id).await.map_err(|e| {
                        if e.is_final_outcome() { Halt::Fail(e.to_string()) } else { Halt::Retry(e.to_string()) }
                    })?
                }
                None => PermissionSet::EMPTY,
            };
            return Ok(caller(principal, permissions));
        }
    }
    let permissions = automation.creator_permissions.iter().filter_map(|n| Permission::parse(n)).collect();
    Ok(caller(Principal::External, permissions))
}

/// What a run does with its submissions: makes them (a run of an execution), or captures them
/// (a dry run).
pub(crate) enum Submissions {
    Make { execution_id: Uuid, writes: Arc<Writes> },
    Capture,
}

/// The host API of one run: reads of the organisation, and submissions through the same
/// service as `POST /api/transactions`, as the run's caller (the automation's user, or the
/// caller of a dry run).
pub(crate) struct RunHost {
    pub runtime: tokio::runtime::Handle,
    pub tenant: TenantId,
    pub caller: Caller,
    pub accounts: Arc<Accounts>,
    pub operations: Arc<Operations>,
    pub clock: Arc<dyn Clock>,
    pub submissions: Submissions,
    /// Submissions asked for so far, refused ones included: the next one's ordinal, so that a
    /// refused submission's key is never reused for another request.
    pub ordinal: AtomicUsize,
    pub record: Mutex<RunResult>,
}

impl RunHost {
    fn allowed(&self, permission: Permission) -> Result<(), String> {
        if self.caller.permissions.contains(permission) {
            Ok(())
        } else {
            Err(format!("the run's user lacks {}", permission.name()))
        }
    }

    fn json<T: serde::Serialize>(value: &T) -> Result<Value, String> {
        serde_json::to_value(value).map_err(|e| e.to_string())
    }

    /// The script sees the error's message; one the same call may outgrow (the store, a key
    /// still in flight) also marks the run as stopped by a temporary failure.
    fn failed(&self, error: &Error) -> String {
        let message = error.to_string();
        if is_temporary(error) {
            let mut record = self.record.lock().unwrap_or_else(PoisonError::into_inner);
            record.transient.get_or_insert_with(|| message.clone());
        }
        message
    }

    /// Submits `request` under the key of the run's `ordinal`-th submission: a rerun of the
    /// execution is answered the first attempt's operation.
    async fn submit_async(
        &self,
        execution_id: Uuid,
        writes: &Writes,
        request: &Value,
        ordinal: usize,
    ) -> Result<(Uuid, Value), String> {
        let submission = submission_of(request)?;
        let ctx = RequestContext {
            caller: self.caller.clone(),
            tenant: Some(self.tenant),
            request_id: format!("run-{execution_id}"),
            correlation_id: Some(execution_id.to_string()),
            source: AuditSource::Worker,
        };
        let key = format!("{RUN_KEY_PREFIX}{execution_id}:{ordinal}");
        let idempotency = IdempotencyRequest {
            key,
            request_hash: crate::write::fingerprint("POST", "/api/transactions", None, request),
        };
        let admission = writes
            .begin(ctx, &crate::operations::SUBMIT, Some(idempotency), None)
            .await
            .map_err(|e| self.failed(&e))?;
        let id = match admission {
            Admission::Replay(stored) => stored_operation(&stored)?,
            Admission::Proceed(mut w) => match self.operations.submit(&mut w, submission).await {
                Ok(operation) => {
                    let body = Self::json(&OperationOut::from(&operation))?;
                    let response = WriteResponse {
                        status: 202,
                        body,
                        headers: vec![("Location".into(), format!("/api/transactions/{}", operation.id))],
                        resource_id: Some(operation.id.to_string()),
                    };
                    w.set_resource_id(operation.id.to_string());
                    writes.commit(w, response).await.map_err(|e| self.failed(&e))?;
                    operation.id
                }
                Err(error) if !error.is_final_outcome() => {
                    // Not the request's answer: the key is freed for the next attempt.
                    writes.abandon(w).await;
                    return Err(self.failed(&error));
                }
                Err(error) => {
                    let message = error.to_string();
                    let response = WriteResponse {
                        status: error.status(),
                        body: json!({ "message": message }),
                        headers: Vec::new(),
                        resource_id: None,
                    };
                    if let Err(e) = writes.refuse(w, response, &message, RefusedKey::Bound).await {
                        return Err(self.failed(&e));
                    }
                    return Err(message);
                }
            },
        };
        let operation = self.operations.get(self.tenant, id).await.map_err(|e| self.failed(&e))?;
        Ok((id, Self::json(&OperationOut::from(&operation))?))
    }

    /// A dry run's submission: checked by every rule that needs no store (the contracts,
    /// accounts and locks it names are not read), recorded, and answered with the request and a
    /// stand-in id (`dry-run-N`) instead of an operation.
    fn capture(&self, request: &Value, ordinal: usize) -> Result<Value, String> {
        let submission = submission_of(request)?;
        crate::operations::check_without_store(&submission, &self.caller).map_err(|e| e.to_string())?;
        let mut answer = request.clone();
        if let Some(map) = answer.as_object_mut() {
            map.insert("transactionId".into(), Value::String(format!("dry-run-{}", ordinal + 1)));
            map.insert("state".into(), Value::String("DRY_RUN".into()));
        }
        self.record.lock().unwrap_or_else(PoisonError::into_inner).captured.push(request.clone());
        Ok(answer)
    }
}

/// An error the same call may outgrow: the service's own failure (the store unavailable), or
/// an Idempotency-Key another worker holds in flight (it runs the same execution).
fn is_temporary(error: &Error) -> bool {
    !error.is_final_outcome() || error.code == Code::IdempotencyConflict
}

/// A transaction body as `POST /api/transactions` takes it.
fn submission_of(request: &Value) -> Result<Submission, String> {
    let object = request.as_object().ok_or("a transaction is a map of its fields")?;
    let known = ["txType", "assetId", "accountRef", "counterpartyRef", "amount", "params"];
    if let Some(unknown) = object.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(format!("a transaction has no field {unknown:?}"));
    }
    let text = |name: &str| -> Result<Option<String>, String> {
        match object.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!("{name} must be a string")),
        }
    };
    Ok(Submission {
        tx_type: text("txType")?,
        asset_id: text("assetId")?,
        account_ref: text("accountRef")?,
        counterparty_ref: text("counterpartyRef")?,
        amount: text("amount")?,
        params: object.get("params").cloned(),
    })
}

/// The operations list's filter from a script's map: `state`, `accountRef`, `txType`.
fn operation_filter(filter: &Value) -> Result<tokenops_domain::operation::OperationFilter, String> {
    use tokenops_domain::operation::{OperationFilter, OperationState, TxType};
    let get = |name: &str| filter.get(name).and_then(Value::as_str);
    Ok(OperationFilter {
        state: get("state").map(|s| OperationState::parse(s).ok_or(format!("unknown state {s:?}"))).transpose()?,
        account_ref: get("accountRef")
            .map(|r| tokenops_domain::account::AccountRef::parse(r).map_err(|e| e.to_string()))
            .transpose()?,
        tx_type: get("txType").map(|t| TxType::parse(t).ok_or(format!("unknown txType {t:?}"))).transpose()?,
        ..OperationFilter::default()
    })
}

/// The operation a stored answer is about, or the refusal it stored.
fn stored_operation(stored: &WriteResponse) -> Result<Uuid, String> {
    if stored.status != 202 {
        return Err(stored.body["message"].as_str().unwrap_or("the submission was refused").to_owned());
    }
    stored
        .resource_id
        .as_deref()
        .and_then(|id| Uuid::parse_str(id).ok())
        .ok_or_else(|| "the stored answer names no operation".to_owned())
}

impl Host for RunHost {
    fn balance(&self, account_ref: &str) -> Result<Value, String> {
        self.allowed(Permission::BalanceRead)?;
        let balance = self.runtime.block_on(self.accounts.balance(self.tenant, account_ref, self.clock.now()));
        Self::json(&balance.map_err(|e| self.failed(&e))?)
    }

    fn account(&self, account_ref: &str) -> Result<Value, String> {
        self.allowed(Permission::AccountRead)?;
        let account =
            self.runtime.block_on(self.accounts.get(self.tenant, account_ref)).map_err(|e| self.failed(&e))?;
        Self::json(&AccountOut::from(&account))
    }

    fn operation(&self, id: &str) -> Result<Value, String> {
        self.allowed(Permission::TransactionRead)?;
        let id = Uuid::parse_str(id).map_err(|_| format!("{id:?} is not an operation id"))?;
        let operation = self.runtime.block_on(self.operations.get(self.tenant, id)).map_err(|e| self.failed(&e))?;
        Self::json(&OperationOut::from(&operation))
    }

    fn operations(&self, filter: &Value) -> Result<Value, String> {
        self.allowed(Permission::TransactionRead)?;
        let filter = operation_filter(filter)?;
        let page = PageRequest { page: 0, size: 100 };
        let found =
            self.runtime.block_on(self.operations.list(self.tenant, &filter, page)).map_err(|e| self.failed(&e))?;
        Self::json(&found.items.iter().map(OperationOut::from).collect::<Vec<_>>())
    }

    fn locks(&self, account_ref: &str) -> Result<Value, String> {
        self.allowed(Permission::TransactionRead)?;
        let page = PageRequest { page: 0, size: 100 };
        let locks = self
            .runtime
            .block_on(self.operations.locks_of(self.tenant, account_ref, None, page))
            .map_err(|e| self.failed(&e))?;
        Self::json(&locks.items.iter().map(crate::operations::LockOut::from).collect::<Vec<_>>())
    }

    fn submit(&self, request: &Value) -> Result<Value, String> {
        self.allowed(Permission::TransactionSubmit)?;
        let ordinal = self.ordinal.fetch_add(1, Ordering::Relaxed);
        match &self.submissions {
            Submissions::Capture => self.capture(request, ordinal),
            Submissions::Make { execution_id, writes } => {
                let (id, operation) =
                    self.runtime.block_on(self.submit_async(*execution_id, writes, request, ordinal))?;
                self.record.lock().unwrap_or_else(PoisonError::into_inner).submitted.push(id);
                Ok(operation)
            }
        }
    }

    fn log(&self, line: &str) {
        self.record.lock().unwrap_or_else(PoisonError::into_inner).log.push(line.to_owned());
    }
}

/// `automations.schedule`: every due SCHEDULED automation gets one QUEUED run for the instant it
/// was due, and its next run planned after now (runs missed while nothing ran are not made up).
pub struct ScheduleAutomations {
    pub store: Arc<dyn Store>,
    pub settings: RunSettings,
}

#[async_trait]
impl JobHandler for ScheduleAutomations {
    fn kind(&self) -> &'static str {
        kinds::AUTOMATIONS_SCHEDULE
    }

    async fn run_batch(&self, jobs: Vec<Job>, ctx: &BatchContext) -> Result<BatchFinished, JobError> {
        let now = ctx.clock().now();
        let mut tx = self.store.write().await?;
        for mut automation in tx.automations().due(now, 500).await? {
            let Some(due) = automation.next_run_at else { continue };
            if let Trigger::Scheduled { .. } = &automation.trigger {
                queue_run(tx.as_mut(), &automation, TriggerType::Scheduled, Some(due), None, now, self.settings)
                    .await
                    .map_err(JobError::retry)?;
            }
            automation.next_run_at = next_run_after(&automation.trigger, now);
            automation.updated_at = now;
            tx.automations().update(&automation).await?;
        }
        ctx.finish(tx, jobs.iter().map(|j| j.id).collect(), Vec::new(), Vec::new()).await
    }
}

/// A QUEUED run of `automation` with its job, with the automation's parameter values. A second
/// run for the same planned instant or event is not made (the store refuses it).
pub async fn queue_run(
    tx: &mut dyn Tx,
    automation: &Automation,
    trigger: TriggerType,
    scheduled_for: Option<Timestamp>,
    event_id: Option<Uuid>,
    now: Timestamp,
    settings: RunSettings,
) -> AppResult<()> {
    let execution = Execution {
        event_id,
        scheduled_for,
        ..Execution::queued(automation.tenant_id, automation.id, trigger, automation.parameters.clone(), now)
    };
    match tx.executions().insert(&execution).await {
        Ok(()) => {}
        Err(tokenops_store::StoreError::Conflict(_)) => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    let job = NewJob {
        kind: kinds::AUTOMATION_RUN.to_owned(),
        tenant_id: Some(automation.tenant_id),
        payload: crate::trace::stamp(json!({ "executionId": execution.id })),
        run_at: now,
        max_attempts: settings.job_max_attempts,
        dedupe_key: None,
    };
    tx.jobs().enqueue(&job, now).await?;
    Ok(())
}
