//! Automations: create from a PUBLISHED script, list, change status, request a run on demand,
//! and read the history of runs. Runs themselves are durable jobs (`runs`): an execution row
//! is written QUEUED with its `automation.run` job in the request's transaction, and the job
//! runs the script in the sandbox.

pub mod runs;

use serde::Serialize;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use tokenops_domain::automation::schedule::Schedule;
use tokenops_domain::automation::{
    Automation, AutomationFilter, AutomationStatus, Execution, ExecutionFilter, Trigger, TriggerType,
    check_status_change,
};
use tokenops_domain::event::EventType;
use tokenops_domain::paging::{Page, PageRequest, SortKey};
use tokenops_domain::script::{Script, ScriptStatus};
use tokenops_domain::{TenantId, Timestamp, new_id};
use tokenops_scripting::{Override, ParamValue};
use tokenops_store::{Store, Tx};
use uuid::Uuid;

use crate::error::{AppResult, Code, Error};
use crate::jobs::kinds;
use crate::scripts::{declarations, not_fitting};
use crate::write::{AuditAction, AuditResource, Write};

const AUTOMATION: AuditResource = AuditResource { category: "AUTOMATIONS", resource_type: "automation" };
pub const CREATE: AuditAction = AUTOMATION.action("automation.create");
pub const UPDATE_STATUS: AuditAction = AUTOMATION.action("automation.update_status");
pub const EXECUTE: AuditAction = AUTOMATION.action("automation.execute");
/// The audit action of a run's end (a WORKER record).
pub const RUN: AuditAction = AUTOMATION.action("automation.run");

/// An automation as the API returns it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutomationOut {
    pub automation_id: Uuid,
    pub name: Option<String>,
    pub script_id: Uuid,
    pub root_script_id: Uuid,
    /// The user whose permissions the runs act with (the creator).
    pub user_id: String,
    /// ON_DEMAND, SCHEDULED or EVENT.
    pub trigger_type: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_type: Option<String>,
    /// ACTIVE, INACTIVE, DISABLED or DELETED.
    pub status: String,
    /// The parameters' values of scheduled and event runs (and the base of on-demand ones).
    #[schema(value_type = Object)]
    pub parameters: Value,
    pub consecutive_failures: u32,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub next_run_at: Option<Timestamp>,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
}

impl From<&Automation> for AutomationOut {
    fn from(a: &Automation) -> Self {
        let (cron, time_zone, event_type) = match &a.trigger {
            Trigger::OnDemand => (None, None, None),
            Trigger::Scheduled { cron, time_zone } => (Some(cron.clone()), Some(time_zone.clone()), None),
            Trigger::Event { event_type } => (None, None, Some(event_type.clone())),
        };
        Self {
            automation_id: a.id,
            name: a.name.clone(),
            script_id: a.script_id,
            root_script_id: a.root_script_id,
            user_id: a.user_id.clone(),
            trigger_type: a.trigger.kind().as_str().to_owned(),
            cron,
            time_zone,
            event_type,
            status: a.status.as_str().to_owned(),
            parameters: a.parameters.clone(),
            consecutive_failures: a.consecutive_failures,
            next_run_at: a.next_run_at,
            created_at: a.created_at,
            updated_at: a.updated_at,
        }
    }
}

/// One run as the history shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionOut {
    pub execution_id: Uuid,
    pub automation_id: Uuid,
    /// ON_DEMAND, SCHEDULED or EVENT.
    pub trigger: String,
    /// QUEUED, RUNNING, SUCCEEDED or FAILED.
    pub status: String,
    #[schema(value_type = Object)]
    pub parameters: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_id: Option<Uuid>,
    #[schema(value_type = Option<String>, format = DateTime)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduled_for: Option<Timestamp>,
    pub log: Vec<String>,
    /// The operations the run submitted.
    pub submitted: Vec<Uuid>,
    pub error: Option<String>,
    pub attempts: u32,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub started_at: Option<Timestamp>,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub finished_at: Option<Timestamp>,
}

impl From<&Execution> for ExecutionOut {
    fn from(e: &Execution) -> Self {
        Self {
            execution_id: e.id,
            automation_id: e.automation_id,
            trigger: e.trigger.as_str().to_owned(),
            status: e.status.as_str().to_owned(),
            parameters: e.parameters.clone(),
            event_id: e.event_id,
            scheduled_for: e.scheduled_for,
            log: e.log.clone(),
            submitted: e.submitted.clone(),
            error: e.error.clone(),
            attempts: e.attempts,
            created_at: e.created_at,
            started_at: e.started_at,
            finished_at: e.finished_at,
        }
    }
}

/// A new automation as the caller sends it.
#[derive(Debug, Clone)]
pub struct NewAutomation {
    pub name: Option<String>,
    pub script_id: Uuid,
    pub trigger: Trigger,
    /// Values for the script's parameters (`{key, value, type}`), for every run.
    pub parameters: Vec<Override>,
}

fn not_found(id: Uuid) -> Error {
    Error::not_found(format!("Automation {id} not found")).with_code(Code::AutomationNotFound)
}

/// The automation `id` of `tenant`; a deleted one is kept for its history but is not found.
async fn live(tx: &mut dyn Tx, tenant: TenantId, id: Uuid) -> AppResult<Automation> {
    let found = tx.automations().get(tenant, id).await?;
    found.filter(|a| a.status != AutomationStatus::Deleted).ok_or_else(|| not_found(id))
}

/// The automation's script, or (inner `Err`) why the automation may not run it now: a deleted
/// script (an automation switched off so that its script could be deleted neither comes back
/// on, 400 a transition not allowed, nor runs), or one set back to DRAFT, whose code may be
/// changed by anyone who edits scripts and was never published.
async fn runnable_script(tx: &mut dyn Tx, automation: &Automation) -> AppResult<Result<Script, String>> {
    let id = automation.id;
    // Locked: an unpublication or deletion counts the ACTIVE automations under the same lock,
    // so the two cannot both commit (on PostgreSQL's read committed they could).
    let script = tx.scripts().get_for_update(automation.tenant_id, automation.script_id).await?;
    let script = script.ok_or_else(|| Error::internal(format!("automation {id}: its script is gone")))?;
    Ok(runnable(automation, script))
}

/// `runnable_script`'s rule, for a script already read.
fn runnable(automation: &Automation, script: Script) -> Result<Script, String> {
    let id = automation.id;
    match script.status {
        ScriptStatus::Deleted => Err(format!(
            "Automation {id} runs script {}, which was deleted: create an automation on a PUBLISHED script",
            script.id
        )),
        ScriptStatus::Draft => Err(format!(
            "Automation {id} runs script {}, which is a DRAFT again: an automation runs published code only",
            script.id
        )),
        _ => Ok(script),
    }
}

fn conflict(message: String) -> Error {
    Error::conflict(message).with_code(Code::AutomationStateConflict)
}

/// The values as a JSON object by name.
pub fn values_json(values: &std::collections::BTreeMap<String, ParamValue>) -> Value {
    Value::Object(values.iter().map(|(k, v)| (k.clone(), v.to_json())).collect::<Map<_, _>>())
}

/// A JSON object of values (as `values_json` wrote it) as overrides, for `fit`.
pub fn as_overrides(decls: &[tokenops_scripting::ParamDecl], values: &Value) -> Vec<Override> {
    let Some(object) = values.as_object() else { return Vec::new() };
    object
        .iter()
        .filter_map(|(key, value)| {
            let kind = decls.iter().find(|d| d.name == *key)?.kind;
            Some(Override { key: key.clone(), value: value.clone(), kind: kind.as_str().to_owned() })
        })
        .collect()
}

/// The trigger's own checks: a cron expression that fires at some time after `now`, in a
/// known time zone; an event type of the webhook table.
pub fn check_trigger(trigger: &Trigger, now: Timestamp) -> AppResult<()> {
    match trigger {
        Trigger::OnDemand => Ok(()),
        Trigger::Scheduled { cron, time_zone } => {
            Schedule::time_zone(time_zone).map_err(|e| Error::invalid_field("timeZone", e))?;
            let schedule = Schedule::parse(cron, time_zone).map_err(|e| Error::invalid_field("cron", e))?;
            match schedule.next_after(now) {
                Some(_) => Ok(()),
                // "0 0 31 2 *": an automation that could never run.
                None => {
                    Err(Error::invalid_field("cron", format!("{cron:?} names no date that exists: it would never run")))
                }
            }
        }
        Trigger::Event { event_type } => match EventType::parse(event_type) {
            Some(_) => Ok(()),
            None => Err(Error::invalid_field("eventType", format!("{event_type:?} is not an event type"))),
        },
    }
}

/// The next planned run of a SCHEDULED trigger strictly after `after`.
pub(crate) fn next_run_after(trigger: &Trigger, after: Timestamp) -> Option<Timestamp> {
    match trigger {
        Trigger::Scheduled { cron, time_zone } => Schedule::parse(cron, time_zone).ok()?.next_after(after),
        _ => None,
    }
}

pub struct Automations {
    store: Arc<dyn Store>,
}

impl Automations {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }

    pub async fn list(
        &self,
        tenant: TenantId,
        filter: &AutomationFilter,
        sort: &[SortKey],
        page: PageRequest,
    ) -> AppResult<Page<AutomationOut>> {
        let mut tx = self.store.read().await?;
        Ok(tx.automations().list(tenant, filter, sort, page).await?.map(|a| AutomationOut::from(&a)))
    }

    /// 404 for an unknown or deleted automation.
    pub async fn get(&self, tenant: TenantId, id: Uuid) -> AppResult<AutomationOut> {
        let mut tx = self.store.read().await?;
        Ok(AutomationOut::from(&live(tx.as_mut(), tenant, id).await?))
    }

    /// The automation's runs (404 for an unknown or deleted automation).
    pub async fn history(
        &self,
        tenant: TenantId,
        id: Uuid,
        filter: &ExecutionFilter,
        sort: &[SortKey],
        page: PageRequest,
    ) -> AppResult<Page<ExecutionOut>> {
        let mut tx = self.store.read().await?;
        live(tx.as_mut(), tenant, id).await?;
        Ok(tx.executions().list(tenant, id, filter, sort, page).await?.map(|e| ExecutionOut::from(&e)))
    }

    /// ACTIVE, acting as the caller (a user): 404 for an unknown script, 409 for one not
    /// PUBLISHED, 400 for a trigger or parameter values that do not fit.
    pub async fn create(&self, w: &mut Write, new: NewAutomation) -> AppResult<AutomationOut> {
        let tenant = w.tenant()?;
        check_trigger(&new.trigger, w.now())?;
        if let Some(name) = &new.name
            && (name.trim().is_empty() || name.chars().count() > 100)
        {
            return Err(Error::invalid_field("name", "must be 1 to 100 characters, not blank"));
        }
        // Locked, as in `runnable_script`.
        let script = w.tx().scripts().get_for_update(tenant, new.script_id).await?;
        let script = script.filter(|s| s.status != ScriptStatus::Deleted).ok_or_else(|| {
            Error::not_found(format!("Script {} not found", new.script_id)).with_code(Code::ScriptNotFound)
        })?;
        if script.status != ScriptStatus::Published {
            return Err(conflict(format!(
                "Script {} is {}: an automation needs a PUBLISHED script",
                script.id,
                script.status.as_str()
            )));
        }
        let decls = declarations(&script.parameters)?;
        let values = tokenops_scripting::params::fit(&decls, &new.parameters)
            .map_err(|problems| not_fitting(Error::bad_request, "parameters", problems))?;
        let now = w.now();
        let automation = Automation {
            id: new_id(),
            tenant_id: tenant,
            name: new.name,
            script_id: script.id,
            root_script_id: script.root_script_id,
            user_id: w.context().caller.subject.clone(),
            creator_permissions: w.context().caller.permissions.names().into_iter().map(str::to_owned).collect(),
            next_run_at: next_run_after(&new.trigger, now),
            trigger: new.trigger,
            status: AutomationStatus::Active,
            parameters: values_json(&values),
            consecutive_failures: 0,
            created_at: now,
            updated_at: now,
        };
        w.tx().automations().insert(&automation).await?;
        let out = AutomationOut::from(&automation);
        w.set_resource_id(automation.id.to_string());
        w.set_audit_detail(json!({ "after": out }));
        Ok(out)
    }

    /// 400 for the current status, a move away from DELETED, or ACTIVE once the script was
    /// deleted; a SCHEDULED automation set
    /// ACTIVE plans its next run from now, and a manual change clears the failure count.
    pub async fn set_status(&self, w: &mut Write, id: Uuid, status: AutomationStatus) -> AppResult<AutomationOut> {
        let tenant = w.tenant()?;
        let mut automation = w.tx().automations().get_for_update(tenant, id).await?.ok_or_else(|| not_found(id))?;
        check_status_change(automation.status, status).map_err(|e| Error::invalid_field("status", e))?;
        if status == AutomationStatus::Active {
            runnable_script(w.tx(), &automation).await?.map_err(|e| Error::invalid_field("status", e))?;
        }
        let before = AutomationOut::from(&automation);
        let now = w.now();
        automation.status = status;
        automation.consecutive_failures = 0;
        automation.next_run_at =
            if status == AutomationStatus::Active { next_run_after(&automation.trigger, now) } else { None };
        automation.updated_at = now;
        w.tx().automations().update(&automation).await?;
        let out = AutomationOut::from(&automation);
        w.set_resource_id(id.to_string());
        w.set_audit_detail(json!({ "before": before, "after": out }));
        Ok(out)
    }

    /// A run on demand, QUEUED with its job: 404 for an unknown automation, 409 unless ACTIVE
    /// and ON_DEMAND, 422 for overrides that do not fit the script's parameters.
    pub async fn execute(&self, w: &mut Write, id: Uuid, overrides: Vec<Override>) -> AppResult<ExecutionOut> {
        let tenant = w.tenant()?;
        let automation = live(w.tx(), tenant, id).await?;
        if automation.status != AutomationStatus::Active {
            return Err(conflict(format!(
                "Automation {id} is {}: only an ACTIVE one runs",
                automation.status.as_str()
            )));
        }
        if automation.trigger.kind() != TriggerType::OnDemand {
            return Err(conflict(format!(
                "Automation {id} is triggered {}: only an ON_DEMAND one runs on request",
                automation.trigger.kind().as_str()
            )));
        }
        let script = runnable_script(w.tx(), &automation).await?.map_err(conflict)?;
        let decls = declarations(&script.parameters)?;
        // The automation's own values first, then the call's overrides over them.
        let mut merged = as_overrides(&decls, &automation.parameters);
        merged.retain(|base| !overrides.iter().any(|o| o.key == base.key));
        merged.extend(overrides);
        let values = tokenops_scripting::params::fit(&decls, &merged).map_err(|problems| {
            not_fitting(Error::unprocessable, "overrides", problems).with_code(Code::OverridesDoNotFit)
        })?;
        let now = w.now();
        let execution = Execution::queued(tenant, id, TriggerType::OnDemand, values_json(&values), now);
        w.tx().executions().insert(&execution).await?;
        w.enqueue(kinds::AUTOMATION_RUN, json!({ "executionId": execution.id })).await?;
        let out = ExecutionOut::from(&execution);
        w.set_resource_id(id.to_string());
        w.set_audit_detail(json!({ "execution": out }));
        Ok(out)
    }
}
