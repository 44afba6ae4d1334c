//! Conversions between SQLite values and domain values, and the mapping of driver errors.

use rusqlite::Row;
use rusqlite::types::FromSql;
use tokenops_domain::paging::PageRequest;
use tokenops_domain::{TenantId, Timestamp};
pub use tokenops_store::encode::{asset_text, folded, names_text};
use tokenops_store::rows::Columns;
pub use tokenops_store::rows::names;
use tokenops_store::{StoreError, StoreResult};
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

pub fn text(row: &Row<'_>, name: &str) -> StoreResult<String> {
    get(row, name)
}

pub fn int(row: &Row<'_>, name: &str) -> StoreResult<i64> {
    get(row, name)
}

pub fn opt_ts(row: &Row<'_>, name: &str) -> StoreResult<Option<Timestamp>> {
    Ok(get::<Option<i64>>(row, name)?.map(ts))
}

pub fn page_limits(page: PageRequest) -> (i64, i64) {
    (i64::from(page.size), i64::try_from(page.offset()).unwrap_or(i64::MAX))
}

/// A row read through the shared decoders (`tokenops_store::rows`): uuids and JSON are text
/// here, and a value of the wrong type is the driver's error, as it always was on SQLite.
pub struct Cols<'a, 'r>(pub &'a Row<'r>);

/// A row decoded as the entity `T` by its one decoder (`rows::Decode`).
pub fn decoded<T: tokenops_store::rows::Decode>(row: &Row<'_>) -> StoreResult<T> {
    T::decode(&Cols(row))
}

impl Columns for Cols<'_, '_> {
    fn text(&self, name: &str) -> StoreResult<String> {
        get(self.0, name)
    }

    fn opt_text(&self, name: &str) -> StoreResult<Option<String>> {
        get(self.0, name)
    }

    fn int(&self, name: &str) -> StoreResult<i64> {
        get(self.0, name)
    }

    fn opt_int(&self, name: &str) -> StoreResult<Option<i64>> {
        get(self.0, name)
    }

    fn bool(&self, name: &str) -> StoreResult<bool> {
        get(self.0, name)
    }

    fn uuid(&self, name: &str) -> StoreResult<Uuid> {
        uuid(&self.text(name)?)
    }

    fn opt_uuid(&self, name: &str) -> StoreResult<Option<Uuid>> {
        opt_uuid(self.opt_text(name)?)
    }

    fn json(&self, name: &str) -> StoreResult<serde_json::Value> {
        json(&self.text(name)?)
    }

    fn opt_json(&self, name: &str) -> StoreResult<Option<serde_json::Value>> {
        self.opt_text(name)?.as_deref().map(json).transpose()
    }

    fn bytes(&self, name: &str) -> StoreResult<Vec<u8>> {
        get(self.0, name)
    }

    fn opt_bytes(&self, name: &str) -> StoreResult<Option<Vec<u8>>> {
        get(self.0, name)
    }

    fn text_list(&self, name: &str) -> StoreResult<Vec<String>> {
        names(&self.text(name)?)
    }
}
