//! Conversions between SQLite values and domain values, and the mapping of driver errors.

use rusqlite::Row;
use rusqlite::types::FromSql;
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::StoreError;
use uuid::Uuid;

pub fn backend(error: rusqlite::Error) -> StoreError {
    if let rusqlite::Error::SqliteFailure(failure, message) = &error
        && matches!(
            failure.extended_code,
            rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE | rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
        )
    {
        return StoreError::Conflict(message.clone().unwrap_or_else(|| failure.to_string()));
    }
    StoreError::Backend(Box::new(error))
}

/// The column `name` of `row`, decoded.
pub fn get<T: FromSql>(row: &Row<'_>, name: &str) -> Result<T, StoreError> {
    row.get(name).map_err(backend)
}

pub fn id_text(id: Uuid) -> String {
    id.hyphenated().to_string()
}

/// The platform (no organisation) is stored as the nil UUID where a key column needs a value.
pub fn tenant_text(tenant: Option<TenantId>) -> String {
    id_text(tenant.map(TenantId::as_uuid).unwrap_or(Uuid::nil()))
}

pub fn uuid(text: &str) -> Result<Uuid, StoreError> {
    Uuid::parse_str(text).map_err(|e| StoreError::Corrupt(format!("uuid {text:?}: {e}")))
}

pub fn opt_uuid(text: Option<String>) -> Result<Option<Uuid>, StoreError> {
    text.as_deref().map(uuid).transpose()
}

pub fn tenant(text: &str) -> Result<TenantId, StoreError> {
    uuid(text).map(TenantId)
}

pub fn opt_tenant(text: Option<String>) -> Result<Option<TenantId>, StoreError> {
    Ok(opt_uuid(text)?.filter(|u| !u.is_nil()).map(TenantId))
}

pub fn ts(micros: i64) -> Timestamp {
    Timestamp::from_micros(micros)
}

pub fn json(text: &str) -> Result<serde_json::Value, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("json: {e}")))
}

pub fn json_text(value: &serde_json::Value) -> String {
    value.to_string()
}

/// A name or key as compared ignoring case (role names, group keys): the upper case of its lower
/// case, by Rust's full Unicode mappings, so that "straße" and "STRASSE", or the Kelvin sign and
/// "k", fold alike. The PostgreSQL store folds identically; uniqueness is on the folded column.
pub fn folded(text: &str) -> String {
    text.to_lowercase().to_uppercase()
}

/// A list of names as stored: a JSON array of strings, in the given order.
pub fn names_text(names: &[String]) -> String {
    serde_json::Value::from(names.to_vec()).to_string()
}

pub fn names(text: &str) -> Result<Vec<String>, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("name list: {e}")))
}
