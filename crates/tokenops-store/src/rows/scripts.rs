//! Scripts, their versions, automations and executions as read from and written to either
//! backend.

use super::{Codec, ColumnValue, Columns, JsonTextList, Place, SaturatingInt, Serde, Stored};
use crate::StoreResult;
use tokenops_domain::automation::{Automation, Execution, Trigger, TriggerType};
use tokenops_domain::script::{Script, ScriptVersion};

stored_table! {
    columns SCRIPT_COLUMNS of "scripts";
    table SCRIPTS by id;
    decode script -> Script, encode;
    {
        id, tenant_id, name, description, status,
        version: SaturatingInt,
        source, parameters,
        imports: JsonTextList,
        // The resolved dependencies, as a JSON document.
        dependencies: Serde,
        root_script_id, cloned_from, created_by, created_at, updated_at, published_at,
    }
}

stored_table! {
    columns SCRIPT_VERSION_COLUMNS of "script_versions";
    table SCRIPT_VERSIONS by id;
    decode script_version -> ScriptVersion, encode;
    {
        tenant_id, script_id,
        version: SaturatingInt,
        source, parameters,
        imports: JsonTextList,
        created_by, created_at,
    }
}

stored_table! {
    columns AUTOMATION_COLUMNS of "automations";
    table AUTOMATIONS by id;
    decode automation -> Automation, encode;
    {
        id, tenant_id, name, script_id, root_script_id, user_id,
        creator_permissions: JsonTextList,
        trigger [trigger_type, cron, time_zone, event_type]: TriggerColumns,
        status, parameters,
        consecutive_failures: SaturatingInt,
        next_run_at, created_at, updated_at,
    }
}

stored_table! {
    columns EXECUTION_COLUMNS of "automation_executions";
    table EXECUTIONS by id;
    decode execution -> Execution, encode;
    {
        id, tenant_id, automation_id,
        trigger [trigger_type],
        status, parameters, scheduled_for, event_id,
        log: JsonTextList,
        // The operations the run submitted.
        submitted: JsonTextList,
        error,
        attempts: SaturatingInt,
        created_at, started_at, finished_at,
    }
}

/// An automation's trigger in its own columns: its kind, then the cron and time zone of a
/// scheduled one or the event type of one run on an event, NULL where its kind has none.
struct TriggerColumns;

impl Codec<Trigger, 4> for TriggerColumns {
    fn read(row: &impl Columns, at: &Place<4>) -> StoreResult<Trigger> {
        let [kind, cron, time_zone, event_type] = at.columns;
        let kind = TriggerType::read(row, &Place { table: at.table, columns: [kind] })?;
        let present = |column: &str| {
            row.opt_text(column)?.ok_or_else(|| at.corrupt(format_args!("{} without its {column}", kind.as_str())))
        };
        Ok(match kind {
            TriggerType::OnDemand => Trigger::OnDemand,
            TriggerType::Scheduled => Trigger::Scheduled { cron: present(cron)?, time_zone: present(time_zone)? },
            TriggerType::Event => Trigger::Event { event_type: present(event_type)? },
        })
    }

    fn write(trigger: &Trigger, _: &Place<4>) -> StoreResult<[ColumnValue; 4]> {
        let (cron, time_zone, event_type) = match trigger {
            Trigger::OnDemand => (None, None, None),
            Trigger::Scheduled { cron, time_zone } => (Some(cron), Some(time_zone), None),
            Trigger::Event { event_type } => (None, None, Some(event_type)),
        };
        Ok([trigger.kind().as_str().into(), cron.into(), time_zone.into(), event_type.into()])
    }
}
