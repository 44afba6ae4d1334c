//! Automations: what runs a published script, when (on demand, on a schedule, on an event), as
//! whom, and the rules of their statuses; and an execution's record. The schedule's cron
//! grammar is `schedule`.

pub mod schedule;

use crate::wire::wire_enum;
use uuid::Uuid;

use crate::{TenantId, Timestamp};

wire_enum! {
    AutomationStatus {
        Active => "ACTIVE",
        Inactive => "INACTIVE",
        Disabled => "DISABLED",
        Deleted => "DELETED",
    }
}

/// PATCH status: the spec refuses (400) a move to the current status and any move away from
/// DELETED; every other move is allowed.
pub fn check_status_change(from: AutomationStatus, to: AutomationStatus) -> Result<(), String> {
    if from == AutomationStatus::Deleted {
        return Err("a DELETED automation cannot change status".into());
    }
    if from == to {
        return Err(format!("the automation is already {}", to.as_str()));
    }
    Ok(())
}

wire_enum! {
    TriggerType {
        OnDemand => "ON_DEMAND",
        Scheduled => "SCHEDULED",
        Event => "EVENT",
    }
}

/// What starts an automation's runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    OnDemand,
    /// A cron expression read in `time_zone` (an IANA name).
    Scheduled {
        cron: String,
        time_zone: String,
    },
    /// An event type of the webhook table.
    Event {
        event_type: String,
    },
}

impl Trigger {
    pub fn kind(&self) -> TriggerType {
        match self {
            Trigger::OnDemand => TriggerType::OnDemand,
            Trigger::Scheduled { .. } => TriggerType::Scheduled,
            Trigger::Event { .. } => TriggerType::Event,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Automation {
    pub id: Uuid,
    pub tenant_id: TenantId,
    pub name: Option<String>,
    pub script_id: Uuid,
    pub root_script_id: Uuid,
    /// The user the runs act as (the creator), whose permissions their submissions need.
    pub user_id: String,
    /// What the creator held at creation: the runs' permissions when the creator is neither a
    /// user nor a client of the organisation (an external provider's subject).
    pub creator_permissions: Vec<String>,
    pub trigger: Trigger,
    pub status: AutomationStatus,
    /// The parameters' values for scheduled and event runs (JSON object by name); an on-demand
    /// run's overrides go over them.
    pub parameters: serde_json::Value,
    /// Failed runs in a row; the service sets DISABLED at the configured count.
    pub consecutive_failures: u32,
    /// The next scheduled run (SCHEDULED only).
    pub next_run_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

wire_enum! {
    ExecutionStatus {
        Queued => "QUEUED",
        Running => "RUNNING",
        Succeeded => "SUCCEEDED",
        Failed => "FAILED",
    }
}

impl ExecutionStatus {
    pub fn is_final(self) -> bool {
        matches!(self, ExecutionStatus::Succeeded | ExecutionStatus::Failed)
    }
}

/// One run of an automation, as its history shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Execution {
    pub id: Uuid,
    pub tenant_id: TenantId,
    pub automation_id: Uuid,
    pub trigger: TriggerType,
    pub status: ExecutionStatus,
    /// Every declared parameter's value for this run (JSON object by name).
    pub parameters: serde_json::Value,
    /// The event an EVENT run was handed.
    pub event_id: Option<Uuid>,
    /// The planned instant of a SCHEDULED run.
    pub scheduled_for: Option<Timestamp>,
    pub log: Vec<String>,
    pub submitted: Vec<Uuid>,
    pub error: Option<String>,
    pub attempts: u32,
    pub created_at: Timestamp,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
}

impl Execution {
    /// A run just asked for: QUEUED, not yet attempted, with every parameter's value.
    pub fn queued(
        tenant_id: TenantId,
        automation_id: Uuid,
        trigger: TriggerType,
        parameters: serde_json::Value,
        now: Timestamp,
    ) -> Execution {
        Execution {
            id: crate::new_id(),
            tenant_id,
            automation_id,
            trigger,
            status: ExecutionStatus::Queued,
            parameters,
            event_id: None,
            scheduled_for: None,
            log: Vec::new(),
            submitted: Vec::new(),
            error: None,
            attempts: 0,
            created_at: now,
            started_at: None,
            finished_at: None,
        }
    }
}

/// The criteria of the automation list. Deleted automations are listed only when asked for.
#[derive(Debug, Clone, Default)]
pub struct AutomationFilter {
    pub status: Option<AutomationStatus>,
    pub script_id: Option<Uuid>,
    pub trigger: Option<TriggerType>,
}

/// The criteria of an automation's history.
#[derive(Debug, Clone, Default)]
pub struct ExecutionFilter {
    pub status: Option<ExecutionStatus>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use AutomationStatus::*;

    #[test]
    fn a_status_change_refuses_the_current_status_and_leaving_deleted() {
        for from in AutomationStatus::ALL {
            for to in AutomationStatus::ALL {
                let allowed = from != Deleted && from != to;
                assert_eq!(check_status_change(from, to).is_ok(), allowed, "{from:?} -> {to:?}");
            }
        }
    }
}
