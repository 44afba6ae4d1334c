//! Runs of automations as durable jobs. `automation.run` runs one execution: RUNNING, the
//! script in the sandbox on a blocking thread against a host acting as the automation's user,
//! then SUCCEEDED or FAILED with its log, the operations it submitted and its error, and a
//! WORKER audit record. `automations.schedule` (periodic) turns due SCHEDULED automations into
//! QUEUED runs, one per planned instant.
//!
//! A run that dies midway runs again whole (the job is retried): each submission's
//! Idempotency-Key is derived from the execution and the submission's ordinal, so what the first
//! attempt submitted is answered again, not submitted twice.

use async_trait::async_trait;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use tokenops_domain::audit::AuditOutcome;
use tokenops_domain::automation::{Automation, AutomationStatus, Execution, ExecutionStatus, Trigger, TriggerType};
use tokenops_domain::paging::PageRequest;
use tokenops_domain::permission::{Permission, PermissionSet};
use tokenops_domain::{Clock, TenantId, Timestamp, new_id};
use tokenops_scripting::{Compiler, Host, Limits, ParamValue, RunOutcome};
use tokenops_store::{Job, NewJob, Store, Tx};
use uuid::Uuid;

use super::{RUN, as_overrides, next_run_after};
use crate::accounts::{AccountOut, Accounts};
use crate::context::{Caller, Principal, RequestContext};
use crate::error::AppResult;
use crate::jobs::{BatchContext, BatchFinished, JobError, JobHandler, kinds};
use crate::operations::{OperationOut, Operations, Submission};
use crate::scripts::declarations;
use crate::write::{Admission, IdempotencyRequest, WriteResponse, Writes};

/// Runs disable their automation after this many failures in a row (0: never).
#[derive(Debug, Clone, Copy)]
pub struct RunSettings {
    pub disable_after_failures: u32,
    pub job_max_attempts: u32,
}

pub struct RunAutomation {
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    pub compiler: Arc<Compiler>,
    pub limits: Limits,
    pub writes: Arc<Writes>,
    pub accounts: Arc<Accounts>,
    pub operations: Arc<Operations>,
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
            execution.started_at.get_or_insert(self.clock.now());
            tx.executions().update(&execution).await?;
            tx.commit().await?;
            execution
        };
        let outcome = self.run_script(tenant, &started).await;
        self.finish(tenant, started, outcome).await
    }

    /// Runs the execution's script, the result being the log, the operations submitted, and
    /// the error if it failed.
    async fn run_script(&self, tenant: TenantId, execution: &Execution) -> RunResult {
        let prepared = match self.prepare(tenant, execution).await {
            Ok(prepared) => prepared,
            Err(error) => return RunResult { error: Some(error), ..RunResult::default() },
        };
        let host = Arc::new(RunHost {
            runtime: tokio::runtime::Handle::current(),
            tenant,
            execution_id: execution.id,
            caller: prepared.caller,
            writes: self.writes.clone(),
            accounts: self.accounts.clone(),
            operations: self.operations.clone(),
            clock: self.clock.clone(),
            record: Mutex::new(RunResult::default()),
        });
        let compiler = self.compiler.clone();
        let limits = self.limits.clone();
        let runner_host = host.clone();
        let outcome = tokio::task::spawn_blocking(move || {
            compiler.run(&prepared.source, &prepared.sources, &prepared.values, prepared.event, runner_host, &limits)
        })
        .await;
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
            Err(join) => result.error = Some(format!("the run stopped: {join}")),
        }
        result
    }

    /// What a run needs from the store: the script's code and the versions its imports
    /// resolved, the parameters' values, the event, and the automation's user as a caller.
    async fn prepare(&self, tenant: TenantId, execution: &Execution) -> Result<Prepared, String> {
        let mut tx = self.store.read().await.map_err(|e| e.to_string())?;
        let automation = tx
            .automations()
            .get(tenant, execution.automation_id)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("the automation is gone")?;
        let script = tx
            .scripts()
            .get(tenant, automation.script_id)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("the script is gone")?;
        let mut sources = HashMap::new();
        for dependency in &script.dependencies {
            let version = tx
                .scripts()
                .version(tenant, dependency.script_id, dependency.version)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("version {} of {:?} is gone", dependency.version, dependency.name))?;
            sources.insert(dependency.name.clone(), version.source);
        }
        // An import of an import: its script as it is now (see the scripts area's note).
        let mut pending: Vec<String> = sources.values().flat_map(|s| crate::scripts::imported_names(s)).collect();
        while let Some(name) = pending.pop() {
            if sources.contains_key(&name) {
                continue;
            }
            if let Some(found) = tx.scripts().by_name(tenant, &name).await.map_err(|e| e.to_string())? {
                pending.extend(crate::scripts::imported_names(&found.source));
                sources.insert(name, found.source);
            }
        }
        let decls = declarations(&script.parameters).map_err(|e| e.to_string())?;
        let values = tokenops_scripting::params::fit(&decls, &as_overrides(&decls, &execution.parameters))
            .map_err(|problems| format!("the parameters no longer fit the script: {}", problems.join("; ")))?;
        let event = match execution.event_id {
            Some(id) => {
                let event = tx.events().get(tenant, id).await.map_err(|e| e.to_string())?;
                event.map(|e| {
                    json!({
                        "id": e.id,
                        "type": e.event_type,
                        "occurredAt": e.occurred_at.to_spaced_utc(),
                        "correlationId": e.correlation_id,
                        "resource": { "type": e.resource.kind, "id": e.resource.id },
                        "data": e.data,
                    })
                })
            }
            None => None,
        };
        drop(tx);
        let caller = caller_of(self.store.as_ref(), tenant, &automation).await?;
        Ok(Prepared { source: script.source, sources, values, event, caller })
    }

    /// Records the run's end in its own commit.
    async fn finish(&self, tenant: TenantId, execution: Execution, result: RunResult) -> Result<(), JobError> {
        let mut tx = self.store.write().await?;
        record_end(tx.as_mut(), tenant, execution, result, self.clock.now(), self.settings).await?;
        tx.commit().await?;
        Ok(())
    }
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
    let record = crate::audit::worker_record(tenant, &RUN, execution.automation_id.to_string(), outcome, detail, now);
    tx.audit().record(&record).await?;
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
            let record = crate::audit::worker_record(
                tenant,
                &super::UPDATE_STATUS,
                automation.id.to_string(),
                AuditOutcome::Success,
                detail,
                now,
            );
            tx.audit().record(&record).await?;
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
struct RunResult {
    log: Vec<String>,
    submitted: Vec<Uuid>,
    error: Option<String>,
}

/// The caller the run acts as: the automation's creator with what it holds now. A user must
/// be ACTIVE and a client enabled, with their role's permissions; a creator the organisation
/// has no record of (an external provider's subject) acts with what it held at creation.
async fn caller_of(store: &dyn Store, tenant: TenantId, automation: &Automation) -> Result<Caller, String> {
    let caller = |principal, permissions| Caller {
        subject: automation.user_id.clone(),
        tenant: Some(tenant),
        principal,
        permissions,
    };
    if let Ok(id) = Uuid::parse_str(&automation.user_id) {
        let standing = store.subject_standing(Some(tenant), id).await.map_err(|e| e.to_string())?;
        let known =
            standing.user.map(|s| (Principal::User(id), s)).or(standing.client.map(|s| (Principal::Client(id), s)));
        if let Some((principal, standing)) = known {
            if !standing.active {
                return Err("the automation's user is no longer active".into());
            }
            let permissions = match standing.role_id {
                Some(role_id) => {
                    let mut tx = store.read().await.map_err(|e| e.to_string())?;
                    crate::identity::access::role_grants(&mut *tx, tenant, role_id).await.map_err(|e| e.to_string())?
                }
                None => PermissionSet::EMPTY,
            };
            return Ok(caller(principal, permissions));
        }
    }
    let permissions = automation.creator_permissions.iter().filter_map(|n| Permission::parse(n)).collect();
    Ok(caller(Principal::External, permissions))
}

/// The host API of one run: reads of the organisation, and submissions through the same
/// service as `POST /api/transactions`, as the automation's user.
struct RunHost {
    runtime: tokio::runtime::Handle,
    tenant: TenantId,
    execution_id: Uuid,
    caller: Caller,
    writes: Arc<Writes>,
    accounts: Arc<Accounts>,
    operations: Arc<Operations>,
    clock: Arc<dyn Clock>,
    record: Mutex<RunResult>,
}

impl RunHost {
    fn allowed(&self, permission: Permission) -> Result<(), String> {
        if self.caller.permissions.contains(permission) {
            Ok(())
        } else {
            Err(format!("the automation's user lacks {}", permission.name()))
        }
    }

    fn json<T: serde::Serialize>(value: &T) -> Result<Value, String> {
        serde_json::to_value(value).map_err(|e| e.to_string())
    }

    /// Submits `request` under the key of the run's `ordinal`-th submission: a rerun of the
    /// execution is answered the first attempt's operation.
    async fn submit_async(&self, request: Value, ordinal: usize) -> Result<(Uuid, Value), String> {
        self.allowed(Permission::TransactionSubmit)?;
        let submission = submission_of(&request)?;
        let ctx = RequestContext {
            caller: self.caller.clone(),
            tenant: Some(self.tenant),
            request_id: format!("run-{}", self.execution_id),
            correlation_id: Some(self.execution_id.to_string()),
        };
        let key = format!("automation-run:{}:{ordinal}", self.execution_id);
        let idempotency =
            IdempotencyRequest { key, request_hash: crate::write::fingerprint("POST", "/api/transactions", &request) };
        let admission = self
            .writes
            .begin(ctx, &crate::operations::SUBMIT, Some(idempotency), None)
            .await
            .map_err(|e| e.to_string())?;
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
                    self.writes.commit(w, response).await.map_err(|e| e.to_string())?;
                    operation.id
                }
                Err(error) => {
                    let message = error.to_string();
                    let response = WriteResponse {
                        status: error.status(),
                        body: json!({ "message": message }),
                        headers: Vec::new(),
                        resource_id: None,
                    };
                    let _ = self.writes.refuse(w, response, &message).await;
                    return Err(message);
                }
            },
        };
        let operation = self.operations.get(self.tenant, id).await.map_err(|e| e.to_string())?;
        Ok((id, Self::json(&OperationOut::from(&operation))?))
    }
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
        self.allowed(Permission::AccountRead)?;
        let balance = self.runtime.block_on(self.accounts.balance(self.tenant, account_ref, self.clock.now()));
        Self::json(&balance.map_err(|e| e.to_string())?)
    }

    fn account(&self, account_ref: &str) -> Result<Value, String> {
        self.allowed(Permission::AccountRead)?;
        let account = self.runtime.block_on(self.accounts.get(self.tenant, account_ref)).map_err(|e| e.to_string())?;
        Self::json(&AccountOut::from(&account))
    }

    fn operation(&self, id: &str) -> Result<Value, String> {
        self.allowed(Permission::TransactionRead)?;
        let id = Uuid::parse_str(id).map_err(|_| format!("{id:?} is not an operation id"))?;
        let operation = self.runtime.block_on(self.operations.get(self.tenant, id)).map_err(|e| e.to_string())?;
        Self::json(&OperationOut::from(&operation))
    }

    fn operations(&self, filter: Value) -> Result<Value, String> {
        self.allowed(Permission::TransactionRead)?;
        let filter = operation_filter(&filter)?;
        let page = PageRequest { page: 0, size: 100 };
        let found =
            self.runtime.block_on(self.operations.list(self.tenant, &filter, page)).map_err(|e| e.to_string())?;
        Self::json(&found.items.iter().map(OperationOut::from).collect::<Vec<_>>())
    }

    fn locks(&self, account_ref: &str) -> Result<Value, String> {
        self.allowed(Permission::TransactionRead)?;
        let page = PageRequest { page: 0, size: 100 };
        let locks = self
            .runtime
            .block_on(self.operations.locks_of(self.tenant, account_ref, None, page))
            .map_err(|e| e.to_string())?;
        Self::json(&locks.items.iter().map(crate::operations::LockOut::from).collect::<Vec<_>>())
    }

    fn submit(&self, request: Value) -> Result<Value, String> {
        let ordinal = {
            let record = self.record.lock().unwrap_or_else(PoisonError::into_inner);
            record.submitted.len()
        };
        let (id, operation) = self.runtime.block_on(self.submit_async(request, ordinal))?;
        self.record.lock().unwrap_or_else(PoisonError::into_inner).submitted.push(id);
        Ok(operation)
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
                    .map_err(|e| JobError::Retry(e.to_string()))?;
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
        id: new_id(),
        tenant_id: automation.tenant_id,
        automation_id: automation.id,
        trigger,
        status: ExecutionStatus::Queued,
        parameters: automation.parameters.clone(),
        event_id,
        scheduled_for,
        log: Vec::new(),
        submitted: Vec::new(),
        error: None,
        attempts: 0,
        created_at: now,
        started_at: None,
        finished_at: None,
    };
    match tx.executions().insert(&execution).await {
        Ok(()) => {}
        Err(tokenops_store::StoreError::Conflict(_)) => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    let job = NewJob {
        kind: kinds::AUTOMATION_RUN.to_owned(),
        tenant_id: Some(automation.tenant_id),
        payload: json!({ "executionId": execution.id }),
        run_at: now,
        max_attempts: settings.job_max_attempts,
        dedupe_key: None,
    };
    tx.jobs().enqueue(&job, now).await?;
    Ok(())
}
