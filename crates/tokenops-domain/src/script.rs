//! Scripts: their statuses and the rules that move them (the spec names PUBLISHED, OUTDATED,
//! DEPRECATED and deleted and leaves the rest to the service), and the entity as the store keeps
//! it. The machine:
//!
//! | from | trigger | to | guard |
//! |---|---|---|---|
//! | (none) | POST /api/scripts, or clone | DRAFT | compiles, name free, imports exist |
//! | DRAFT | PATCH code | DRAFT (version + 1) | compiles |
//! | DRAFT, OUTDATED | PATCH status PUBLISHED | PUBLISHED | every import PUBLISHED; imports resolved to their current versions |
//! | PUBLISHED | PATCH code | PUBLISHED (version + 1) | compiles; its published dependants become OUTDATED |
//! | PUBLISHED | a dependency gets a new version | OUTDATED | (by the service) |
//! | PUBLISHED, OUTDATED | PATCH status DRAFT (unpublish) | DRAFT | no PUBLISHED or OUTDATED script depends on it (409) |
//! | PUBLISHED, OUTDATED | PATCH status DEPRECATED | DEPRECATED | |
//! | DEPRECATED | PATCH status PUBLISHED | PUBLISHED | as publishing |
//! | not PUBLISHED | DELETE | deleted | no ACTIVE automation, no dependant (409) |
//!
//! Code sent for an OUTDATED or DEPRECATED script is 409 (the spec): an OUTDATED script is
//! published again, which takes its dependencies' current versions, before its code changes.

use crate::wire::wire_enum;
use uuid::Uuid;

use crate::{TenantId, Timestamp};

wire_enum! {
    ScriptStatus {
        Draft => "DRAFT",
        Published => "PUBLISHED",
        Outdated => "OUTDATED",
        Deprecated => "DEPRECATED",
        Deleted => "DELETED",
    }
}

impl ScriptStatus {
    /// The statuses a caller may ask for in PATCH (deletion is DELETE; OUTDATED is the
    /// service's to set).
    pub const REQUESTABLE: [ScriptStatus; 3] = [ScriptStatus::Draft, ScriptStatus::Published, ScriptStatus::Deprecated];

    /// Whether a script in this status counts as published for its dependants: one that others
    /// may import at publication, and that may not be unpublished under them.
    pub fn is_published(self) -> bool {
        matches!(self, ScriptStatus::Published | ScriptStatus::Outdated)
    }
}

/// Why a script change is refused. `Invalid` is a 400, `Conflict` a 409.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScriptRefusal {
    Invalid(String),
    Conflict(String),
}

/// A status change asked for by PATCH: `dependants` counts the published scripts that import
/// this one.
pub fn check_status_change(from: ScriptStatus, to: ScriptStatus, dependants: usize) -> Result<(), ScriptRefusal> {
    use ScriptStatus::*;
    if !ScriptStatus::REQUESTABLE.contains(&to) {
        let allowed: Vec<&str> = ScriptStatus::REQUESTABLE.iter().map(|s| s.as_str()).collect();
        return Err(ScriptRefusal::Invalid(format!(
            "status {} cannot be requested; one of {}",
            to.as_str(),
            allowed.join(", ")
        )));
    }
    match (from, to) {
        (Deleted, _) => Err(ScriptRefusal::Conflict("the script is deleted".into())),
        (Published | Outdated, Draft) if dependants > 0 => Err(ScriptRefusal::Conflict(format!(
            "{dependants} published script(s) depend on this script: it cannot be unpublished"
        ))),
        (Published | Outdated, Draft) => Ok(()),
        (Draft | Outdated | Deprecated, Published) => Ok(()),
        (Published | Outdated, Deprecated) => Ok(()),
        (from, to) if from == to => Err(ScriptRefusal::Conflict(format!("the script is already {}", to.as_str()))),
        (from, to) => Err(ScriptRefusal::Conflict(format!("a {} script cannot become {}", from.as_str(), to.as_str()))),
    }
}

/// New code for a script in `status`.
pub fn check_code_change(status: ScriptStatus) -> Result<(), ScriptRefusal> {
    match status {
        ScriptStatus::Draft | ScriptStatus::Published => Ok(()),
        other => Err(ScriptRefusal::Conflict(format!("code cannot be sent for a {} script", other.as_str()))),
    }
}

/// Deleting a script: `active_automations` run it, `dependants` (scripts not deleted) import it.
pub fn check_delete(status: ScriptStatus, active_automations: usize, dependants: usize) -> Result<(), ScriptRefusal> {
    let conflict = |why: String| Err(ScriptRefusal::Conflict(why));
    match status {
        ScriptStatus::Deleted => conflict("the script is deleted".into()),
        ScriptStatus::Published => {
            conflict("a PUBLISHED script cannot be deleted: unpublish or deprecate it first".into())
        }
        _ if active_automations > 0 => conflict(format!("{active_automations} ACTIVE automation(s) run this script")),
        _ if dependants > 0 => conflict(format!("{dependants} script(s) import this script")),
        _ => Ok(()),
    }
}

/// A script's dependency as resolved at publication: the imported script and its version then.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedDependency {
    pub name: String,
    pub script_id: Uuid,
    pub version: u32,
}

/// A script as the store keeps it. `parameters` is the declaration list extracted at compile
/// (JSON, as the API shows it); `imports` the names its source imports; `dependencies` the
/// imports resolved at its last publication (empty until published).
#[derive(Debug, Clone, PartialEq)]
pub struct Script {
    pub id: Uuid,
    pub tenant_id: TenantId,
    pub name: String,
    pub description: Option<String>,
    pub status: ScriptStatus,
    pub version: u32,
    pub source: String,
    pub parameters: serde_json::Value,
    pub imports: Vec<String>,
    pub dependencies: Vec<ResolvedDependency>,
    /// The script a clone chain began with (itself when not a clone).
    pub root_script_id: Uuid,
    pub cloned_from: Option<Uuid>,
    pub created_by: String,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub published_at: Option<Timestamp>,
}

/// One version of a script's code, kept for good: a dependant runs the version it resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptVersion {
    pub tenant_id: TenantId,
    pub script_id: Uuid,
    pub version: u32,
    pub source: String,
    pub parameters: serde_json::Value,
    pub imports: Vec<String>,
    pub created_by: String,
    pub created_at: Timestamp,
}

impl Script {
    /// The version row of the script's current code.
    pub fn current_version(&self) -> ScriptVersion {
        ScriptVersion {
            tenant_id: self.tenant_id,
            script_id: self.id,
            version: self.version,
            source: self.source.clone(),
            parameters: self.parameters.clone(),
            imports: self.imports.clone(),
            created_by: self.created_by.clone(),
            created_at: self.updated_at,
        }
    }
}

/// The criteria of the script list. Deleted scripts are listed only when asked for by status.
#[derive(Debug, Clone, Default)]
pub struct ScriptFilter {
    pub status: Option<ScriptStatus>,
    pub name: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use ScriptStatus::*;

    #[test]
    fn the_status_table_holds() {
        assert_eq!(check_status_change(Draft, Published, 0), Ok(()));
        assert_eq!(check_status_change(Outdated, Published, 3), Ok(()), "republishing takes current versions");
        assert_eq!(check_status_change(Deprecated, Published, 0), Ok(()));
        assert_eq!(check_status_change(Published, Draft, 0), Ok(()));
        assert!(matches!(check_status_change(Published, Draft, 1), Err(ScriptRefusal::Conflict(_))));
        assert!(matches!(check_status_change(Outdated, Draft, 2), Err(ScriptRefusal::Conflict(_))));
        assert_eq!(check_status_change(Published, Deprecated, 5), Ok(()), "dependants keep their resolved version");
        assert!(matches!(check_status_change(Draft, Deprecated, 0), Err(ScriptRefusal::Conflict(_))));
        assert!(matches!(check_status_change(Published, Published, 0), Err(ScriptRefusal::Conflict(_))));
        assert!(matches!(check_status_change(Draft, Draft, 0), Err(ScriptRefusal::Conflict(_))));
        assert!(matches!(check_status_change(Deleted, Published, 0), Err(ScriptRefusal::Conflict(_))));
        for unsupported in [Outdated, Deleted] {
            assert!(matches!(check_status_change(Draft, unsupported, 0), Err(ScriptRefusal::Invalid(_))));
        }
    }

    #[test]
    fn code_goes_only_to_draft_and_published_scripts() {
        assert_eq!(check_code_change(Draft), Ok(()));
        assert_eq!(check_code_change(Published), Ok(()));
        for status in [Outdated, Deprecated, Deleted] {
            assert!(matches!(check_code_change(status), Err(ScriptRefusal::Conflict(_))), "{status:?}");
        }
    }

    #[test]
    fn deletion_is_refused_while_published_run_or_imported() {
        assert_eq!(check_delete(Draft, 0, 0), Ok(()));
        assert_eq!(check_delete(Deprecated, 0, 0), Ok(()));
        assert!(matches!(check_delete(Published, 0, 0), Err(ScriptRefusal::Conflict(_))));
        assert!(matches!(check_delete(Deprecated, 1, 0), Err(ScriptRefusal::Conflict(_))));
        assert!(matches!(check_delete(Draft, 0, 1), Err(ScriptRefusal::Conflict(_))));
        assert!(matches!(check_delete(Deleted, 0, 0), Err(ScriptRefusal::Conflict(_))));
    }
}
