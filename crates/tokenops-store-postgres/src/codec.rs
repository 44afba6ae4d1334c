//! Conversions between PostgreSQL values and domain values, and the mapping of driver errors.

use sqlx::postgres::PgRow;
use sqlx::{Column, Decode, Postgres, Row, Type, TypeInfo};
use tokenops_domain::{TenantId, Timestamp};
pub use tokenops_store::encode::{asset_text, folded, saturating_int4};
use tokenops_store::rows::Columns;
use tokenops_store::{StoreError, StoreResult};
use uuid::Uuid;

pub fn backend(error: sqlx::Error) -> StoreError {
    if let sqlx::Error::Database(db) = &error
        && db.is_unique_violation()
    {
        return StoreError::Conflict(db.message().to_owned());
    }
    if unreachable(&error) {
        return StoreError::Unavailable(Box::new(error));
    }
    StoreError::Backend(Box::new(error))
}

/// The server could not be reached or went away: no connection, a lost one, or a server
/// shutting down, crashing or starting (SQLSTATE class 08, and 57P01–57P03).
fn unreachable(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => {
            db.code().is_some_and(|code| code.starts_with("08") || matches!(&*code, "57P01" | "57P02" | "57P03"))
        }
        _ => false,
    }
}

/// Reads one column; a value that does not decode into its type is corrupt stored data.
pub fn get<'r, T>(row: &'r PgRow, name: &str) -> StoreResult<T>
where
    T: Decode<'r, Postgres> + Type<Postgres>,
{
    row.try_get(name).map_err(|error| match error {
        sqlx::Error::ColumnDecode { .. } => StoreError::Corrupt(error.to_string()),
        other => backend(other),
    })
}

/// The platform (no organisation) is stored as the nil UUID where a key column needs a value.
pub fn tenant_key(tenant: Option<TenantId>) -> Uuid {
    tenant.map(TenantId::as_uuid).unwrap_or(Uuid::nil())
}

/// A nullable tenant column: NULL (or the nil UUID) is the platform.
pub fn opt_tenant(id: Option<Uuid>) -> Option<TenantId> {
    id.filter(|u| !u.is_nil()).map(TenantId)
}

pub fn ts(micros: i64) -> Timestamp {
    Timestamp::from_micros(micros)
}

pub fn opt_ts(micros: Option<i64>) -> Option<Timestamp> {
    micros.map(ts)
}

/// A row count or counter read from the database (never negative in practice).
pub fn count(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// An offset or limit for SQL, saturating rather than wrapping.
pub fn sql_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The error raised when a statement that must not conflict silently did nothing.
///
/// Inserts use `ON CONFLICT DO NOTHING` and report a duplicate as `StoreError::Conflict` from
/// the row count: a unique violation would abort the transaction, and callers go on as on
/// SQLite.
pub use tokenops_store::conflict;

/// A row read through the shared decoders (`tokenops_store::rows`): uuids and JSON are native
/// types here, integers come in several widths, and a value that does not decode is corrupt.
pub struct Cols<'a>(pub &'a PgRow);

/// A row decoded as the entity `T` by its one decoder (`rows::Decode`).
pub fn decoded<T: tokenops_store::rows::Decode>(row: &PgRow) -> StoreResult<T> {
    T::decode(&Cols(row))
}

impl Cols<'_> {
    /// The width of an integer column: its type as the server reports it.
    fn int_type(&self, name: &str) -> StoreResult<&str> {
        let column = self.0.try_column(name).map_err(backend)?;
        Ok(column.type_info().name())
    }
}

impl Columns for Cols<'_> {
    fn text(&self, name: &str) -> StoreResult<String> {
        get(self.0, name)
    }

    fn opt_text(&self, name: &str) -> StoreResult<Option<String>> {
        get(self.0, name)
    }

    fn int(&self, name: &str) -> StoreResult<i64> {
        Ok(match self.int_type(name)? {
            "INT2" => i64::from(get::<i16>(self.0, name)?),
            "INT4" => i64::from(get::<i32>(self.0, name)?),
            _ => get(self.0, name)?,
        })
    }

    fn opt_int(&self, name: &str) -> StoreResult<Option<i64>> {
        Ok(match self.int_type(name)? {
            "INT2" => get::<Option<i16>>(self.0, name)?.map(i64::from),
            "INT4" => get::<Option<i32>>(self.0, name)?.map(i64::from),
            _ => get(self.0, name)?,
        })
    }

    fn bool(&self, name: &str) -> StoreResult<bool> {
        get(self.0, name)
    }

    fn uuid(&self, name: &str) -> StoreResult<Uuid> {
        get(self.0, name)
    }

    fn opt_uuid(&self, name: &str) -> StoreResult<Option<Uuid>> {
        get(self.0, name)
    }

    fn json(&self, name: &str) -> StoreResult<serde_json::Value> {
        get(self.0, name)
    }

    fn opt_json(&self, name: &str) -> StoreResult<Option<serde_json::Value>> {
        get(self.0, name)
    }

    fn bytes(&self, name: &str) -> StoreResult<Vec<u8>> {
        get(self.0, name)
    }

    fn opt_bytes(&self, name: &str) -> StoreResult<Option<Vec<u8>>> {
        get(self.0, name)
    }

    fn text_list(&self, name: &str) -> StoreResult<Vec<String>> {
        get(self.0, name)
    }
}
