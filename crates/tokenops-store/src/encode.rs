//! Values as both backends write them where the two store the same spelling: case-folded names,
//! asset codes, and the lists kept as JSON text. What is spelled per dialect stays in each
//! backend's `codec`; reading rows back is `rows`.

use crate::{StoreError, StoreResult};
use tokenops_domain::asset::AssetId;
use tokenops_domain::automation::{Execution, Trigger};
use uuid::Uuid;

/// A name or key as compared ignoring case (role names, group keys): the upper case of its lower
/// case, by Rust's full Unicode mappings, so that "straße" and "STRASSE", or the Kelvin sign and
/// "k", fold alike, independent of a server's locale. Uniqueness is on the folded column.
pub fn folded(text: &str) -> String {
    text.to_lowercase().to_uppercase()
}

/// A count or number for a 64-bit integer column (PostgreSQL's BIGINT, SQLite's INTEGER). The
/// numbers stored so (ledger blocks, nonces, seconds) stay far below `i64::MAX`, so a larger one
/// is a bug, refused rather than wrapped.
pub fn int64(value: u64) -> StoreResult<i64> {
    i64::try_from(value)
        .map_err(|_| StoreError::Backend(format!("{value} does not fit a 64-bit integer column").into()))
}

/// A count or number for a 32-bit integer column (PostgreSQL's INTEGER) that must keep its
/// value exactly (a step, a generation): a larger one is refused, named `what`.
pub fn int4(value: u32, what: &str) -> StoreResult<i32> {
    i32::try_from(value).map_err(|_| StoreError::Corrupt(format!("{what} {value} out of range")))
}

/// A version, count or step for a 32-bit integer column, saturating rather than wrapping.
pub fn saturating_int4(value: u32) -> i32 {
    i32::try_from(value).unwrap_or(i32::MAX)
}

/// An asset as stored: its upper-case ISO 4217 code, one spelling for the unique index.
pub fn asset_text(asset_id: AssetId) -> &'static str {
    asset_id.code()
}

/// A list of names as stored: a JSON array of strings, in the given order.
pub fn names_text(names: &[String]) -> String {
    serde_json::Value::from(names.to_vec()).to_string()
}

/// An automation trigger's own columns: cron, time zone, event type.
pub fn trigger_columns(trigger: &Trigger) -> (Option<&str>, Option<&str>, Option<&str>) {
    match trigger {
        Trigger::OnDemand => (None, None, None),
        Trigger::Scheduled { cron, time_zone } => (Some(cron), Some(time_zone), None),
        Trigger::Event { event_type } => (None, None, Some(event_type)),
    }
}

/// An execution's log lines and submitted ids as the JSON arrays the table keeps.
pub fn execution_lists(e: &Execution) -> (String, String) {
    let submitted: Vec<String> = e.submitted.iter().map(Uuid::to_string).collect();
    (serde_json::Value::from(e.log.clone()).to_string(), serde_json::Value::from(submitted).to_string())
}
