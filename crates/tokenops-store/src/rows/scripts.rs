//! Scripts, their versions, automations and executions as read from and written to either
//! backend.

use super::{ColumnValue, Columns, Encode, Table};
use crate::encode::{execution_lists, names_text, saturating_int4, trigger_columns};
use crate::{StoreError, StoreResult};
use tokenops_domain::automation::{Automation, AutomationStatus, Execution, ExecutionStatus, Trigger, TriggerType};
use tokenops_domain::script::{ResolvedDependency, Script, ScriptStatus, ScriptVersion};
use uuid::Uuid;

pub fn script(row: &impl Columns) -> StoreResult<Script> {
    let dependencies: Vec<ResolvedDependency> = serde_json::from_value(row.json("dependencies")?)
        .map_err(|e| StoreError::Corrupt(format!("script dependencies: {e}")))?;
    Ok(Script {
        id: row.uuid("id")?,
        tenant_id: row.tenant("tenant_id")?,
        name: row.text("name")?,
        description: row.opt_text("description")?,
        status: row.parsed("status", "script status", ScriptStatus::parse)?,
        version: row.narrow("version", "script version")?,
        source: row.text("source")?,
        parameters: row.json("parameters")?,
        imports: row.names("imports")?,
        dependencies,
        root_script_id: row.uuid("root_script_id")?,
        cloned_from: row.opt_uuid("cloned_from")?,
        created_by: row.text("created_by")?,
        created_at: row.timestamp("created_at")?,
        updated_at: row.timestamp("updated_at")?,
        published_at: row.opt_timestamp("published_at")?,
    })
}

pub fn script_version(row: &impl Columns) -> StoreResult<ScriptVersion> {
    Ok(ScriptVersion {
        tenant_id: row.tenant("tenant_id")?,
        script_id: row.uuid("script_id")?,
        version: row.narrow("version", "script version")?,
        source: row.text("source")?,
        parameters: row.json("parameters")?,
        imports: row.names("imports")?,
        created_by: row.text("created_by")?,
        created_at: row.timestamp("created_at")?,
    })
}

pub fn automation(row: &impl Columns) -> StoreResult<Automation> {
    let kind = row.parsed("trigger_type", "trigger type", TriggerType::parse)?;
    let missing = |what: &str| StoreError::Corrupt(format!("a {} automation without its {what}", kind.as_str()));
    let trigger = match kind {
        TriggerType::OnDemand => Trigger::OnDemand,
        TriggerType::Scheduled => Trigger::Scheduled {
            cron: row.opt_text("cron")?.ok_or_else(|| missing("cron"))?,
            time_zone: row.opt_text("time_zone")?.ok_or_else(|| missing("time zone"))?,
        },
        TriggerType::Event => {
            Trigger::Event { event_type: row.opt_text("event_type")?.ok_or_else(|| missing("event type"))? }
        }
    };
    Ok(Automation {
        id: row.uuid("id")?,
        tenant_id: row.tenant("tenant_id")?,
        name: row.opt_text("name")?,
        script_id: row.uuid("script_id")?,
        root_script_id: row.uuid("root_script_id")?,
        user_id: row.text("user_id")?,
        creator_permissions: row.names("creator_permissions")?,
        trigger,
        status: row.parsed("status", "automation status", AutomationStatus::parse)?,
        parameters: row.json("parameters")?,
        consecutive_failures: row.narrow("consecutive_failures", "consecutive failures")?,
        next_run_at: row.opt_timestamp("next_run_at")?,
        created_at: row.timestamp("created_at")?,
        updated_at: row.timestamp("updated_at")?,
    })
}

pub fn execution(row: &impl Columns) -> StoreResult<Execution> {
    let submitted = row
        .names("submitted")?
        .iter()
        .map(|id| Uuid::parse_str(id).map_err(|_| StoreError::Corrupt(format!("submitted operation id {id:?}"))))
        .collect::<StoreResult<Vec<Uuid>>>()?;
    Ok(Execution {
        id: row.uuid("id")?,
        tenant_id: row.tenant("tenant_id")?,
        automation_id: row.uuid("automation_id")?,
        trigger: row.parsed("trigger_type", "trigger type", TriggerType::parse)?,
        status: row.parsed("status", "execution status", ExecutionStatus::parse)?,
        parameters: row.json("parameters")?,
        event_id: row.opt_uuid("event_id")?,
        scheduled_for: row.opt_timestamp("scheduled_for")?,
        log: row.names("log")?,
        submitted,
        error: row.opt_text("error")?,
        attempts: row.narrow("attempts", "execution attempts")?,
        created_at: row.timestamp("created_at")?,
        started_at: row.opt_timestamp("started_at")?,
        finished_at: row.opt_timestamp("finished_at")?,
    })
}

/// The columns of each table, in the order the decoders above read them.
pub const SCRIPT_COLUMNS: &str = "id, tenant_id, name, description, status, version, source, parameters, imports, dependencies, root_script_id, cloned_from, created_by, created_at, updated_at, published_at";
pub const SCRIPT_VERSION_COLUMNS: &str =
    "tenant_id, script_id, version, source, parameters, imports, created_by, created_at";
pub const AUTOMATION_COLUMNS: &str = "id, tenant_id, name, script_id, root_script_id, user_id, creator_permissions, trigger_type, cron, time_zone, event_type, status, parameters, consecutive_failures, next_run_at, created_at, updated_at";
pub const EXECUTION_COLUMNS: &str = "id, tenant_id, automation_id, trigger_type, status, parameters, scheduled_for, event_id, log, submitted, error, attempts, created_at, started_at, finished_at";

pub const SCRIPTS: Table = Table { name: "scripts", columns: SCRIPT_COLUMNS, key: "id" };
pub const SCRIPT_VERSIONS: Table = Table { name: "script_versions", columns: SCRIPT_VERSION_COLUMNS, key: "id" };
pub const AUTOMATIONS: Table = Table { name: "automations", columns: AUTOMATION_COLUMNS, key: "id" };
pub const EXECUTIONS: Table = Table { name: "automation_executions", columns: EXECUTION_COLUMNS, key: "id" };

/// The imports as the JSON text the table keeps on both backends, the resolved dependencies as
/// a JSON document.
impl Encode for Script {
    fn values(&self) -> StoreResult<Vec<ColumnValue>> {
        let dependencies = serde_json::to_value(&self.dependencies).map_err(|e| StoreError::Backend(Box::new(e)))?;
        Ok(vec![
            self.id.into(),
            self.tenant_id.into(),
            (&self.name).into(),
            self.description.as_ref().into(),
            self.status.as_str().into(),
            saturating_int4(self.version).into(),
            (&self.source).into(),
            (&self.parameters).into(),
            names_text(&self.imports).into(),
            dependencies.into(),
            self.root_script_id.into(),
            self.cloned_from.into(),
            (&self.created_by).into(),
            self.created_at.into(),
            self.updated_at.into(),
            self.published_at.into(),
        ])
    }
}

impl Encode for ScriptVersion {
    fn values(&self) -> StoreResult<Vec<ColumnValue>> {
        Ok(vec![
            self.tenant_id.into(),
            self.script_id.into(),
            saturating_int4(self.version).into(),
            (&self.source).into(),
            (&self.parameters).into(),
            names_text(&self.imports).into(),
            (&self.created_by).into(),
            self.created_at.into(),
        ])
    }
}

/// The creator's permissions as JSON text, the trigger in its own columns.
impl Encode for Automation {
    fn values(&self) -> StoreResult<Vec<ColumnValue>> {
        let (cron, time_zone, event_type) = trigger_columns(&self.trigger);
        Ok(vec![
            self.id.into(),
            self.tenant_id.into(),
            self.name.as_ref().into(),
            self.script_id.into(),
            self.root_script_id.into(),
            (&self.user_id).into(),
            names_text(&self.creator_permissions).into(),
            self.trigger.kind().as_str().into(),
            cron.into(),
            time_zone.into(),
            event_type.into(),
            self.status.as_str().into(),
            (&self.parameters).into(),
            saturating_int4(self.consecutive_failures).into(),
            self.next_run_at.into(),
            self.created_at.into(),
            self.updated_at.into(),
        ])
    }
}

/// The log and the submitted ids as the JSON text the table keeps.
impl Encode for Execution {
    fn values(&self) -> StoreResult<Vec<ColumnValue>> {
        let (log, submitted) = execution_lists(self);
        Ok(vec![
            self.id.into(),
            self.tenant_id.into(),
            self.automation_id.into(),
            self.trigger.as_str().into(),
            self.status.as_str().into(),
            (&self.parameters).into(),
            self.scheduled_for.into(),
            self.event_id.into(),
            log.into(),
            submitted.into(),
            self.error.as_ref().into(),
            saturating_int4(self.attempts).into(),
            self.created_at.into(),
            self.started_at.into(),
            self.finished_at.into(),
        ])
    }
}
