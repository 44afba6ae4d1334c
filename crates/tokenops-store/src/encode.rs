//! Values as both backends write them where the two store the same spelling: case-folded names,
//! asset codes, and the lists kept as JSON text. What is spelled per dialect stays in each
//! backend's `codec`; reading rows back is `rows`.

use crate::{StoreError, StoreResult};
use tokenops_domain::asset::AssetId;

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
