//! How a field is kept in its columns (`Codec`, and `Stored` for the types kept as they are),
//! and `stored_table!`, which states a table's columns once and makes from them its column list,
//! its `Table`, its decoder and its `Encode`, so the three cannot disagree in order.

use super::{ColumnValue, Columns, amount, asset, names};
use crate::encode::{asset_text, folded, int64, names_text, saturating_int4};
use crate::{CustodyKeyStatus, JobStatus, LedgerHoldStatus, StoreError, StoreResult};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt;
use tokenops_domain::account::{AccountRef, AccountStatus};
use tokenops_domain::approval::{ApprovalRequestStatus, ApprovalSource, ApprovalTaskState};
use tokenops_domain::asset::{Amount, AssetId};
use tokenops_domain::automation::{AutomationStatus, ExecutionStatus, TriggerType};
use tokenops_domain::chain::{Address, TxHash};
use tokenops_domain::contract::ContractStatus;
use tokenops_domain::customer::{CustomerRef, CustomerStatus};
use tokenops_domain::identity::{GroupStatus, UserStatus};
use tokenops_domain::operation::{BreakReason, FailureCode, LockStatus, OperationState, TxType};
use tokenops_domain::policy::{PolicyAction, PolicyStatus, RuleType, TemplateStatus};
use tokenops_domain::script::ScriptStatus;
use tokenops_domain::webhook::{DeliveryStatus, FailureClass, SignatureScheme, WebhookStatus};
use tokenops_domain::{TenantId, Timestamp};
use uuid::Uuid;

/// A field's table and its `N` columns: where a value that does not decode came from, named in
/// the corrupt-row error (`accounts.status "FROZEN"`).
#[derive(Debug, Clone, Copy)]
pub struct Place<const N: usize = 1> {
    pub table: &'static str,
    pub columns: [&'static str; N],
}

impl Place {
    pub fn column(&self) -> &'static str {
        let [column] = self.columns;
        column
    }
}

impl<const N: usize> Place<N> {
    /// A stored value that does not decode, or a value the column cannot hold.
    pub fn corrupt(&self, detail: impl fmt::Display) -> StoreError {
        StoreError::Corrupt(format!("{self} {detail}"))
    }

    /// A shared decoder's corrupt-row error, named by this place as well.
    pub fn locate(&self, error: StoreError) -> StoreError {
        match error {
            StoreError::Corrupt(detail) => self.corrupt(detail),
            other => other,
        }
    }
}

impl<const N: usize> fmt::Display for Place<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.table, self.columns.join("+"))
    }
}

/// How a field of type `T` is read from its `N` columns and written as their values.
pub trait Codec<T, const N: usize = 1> {
    fn read(row: &impl Columns, at: &Place<N>) -> StoreResult<T>;
    fn write(value: &T, at: &Place<N>) -> StoreResult<[ColumnValue; N]>;
}

/// A field kept in one column as its type says (`Stored`): the codec of a field that names none.
pub struct Plain;

/// A type kept in one column in the one way its type implies, present or NULL.
pub trait Stored: Sized {
    fn read(row: &impl Columns, at: &Place) -> StoreResult<Self>;
    fn write(&self) -> ColumnValue;
}

impl<T: Stored> Codec<T> for Plain {
    fn read(row: &impl Columns, at: &Place) -> StoreResult<T> {
        T::read(row, at)
    }

    fn write(value: &T, _: &Place) -> StoreResult<[ColumnValue; 1]> {
        Ok([value.write()])
    }
}

/// The types a backend reads directly (`Columns`), written through their `ColumnValue`
/// conversion, and their nullable forms where a column may be NULL.
macro_rules! stored_as_read {
    ($($ty:ty: $read:ident $(, $opt_read:ident)?;)*) => {$(
        impl Stored for $ty {
            fn read(row: &impl Columns, at: &Place) -> StoreResult<Self> {
                row.$read(at.column())
            }

            fn write(&self) -> ColumnValue {
                ColumnValue::from(self.to_owned())
            }
        }

        $(impl Stored for Option<$ty> {
            fn read(row: &impl Columns, at: &Place) -> StoreResult<Self> {
                row.$opt_read(at.column())
            }

            fn write(&self) -> ColumnValue {
                ColumnValue::from(self.to_owned())
            }
        })?
    )*};
}

stored_as_read! {
    bool: bool;
    Uuid: uuid, opt_uuid;
    // A NULL (or nil) tenant is the platform's.
    TenantId: tenant, opt_tenant;
    String: text, opt_text;
    Timestamp: timestamp, opt_timestamp;
    serde_json::Value: json, opt_json;
}

/// A list of strings in the backend's list form (`text[]`, or JSON array text on SQLite).
impl Stored for Vec<String> {
    fn read(row: &impl Columns, at: &Place) -> StoreResult<Self> {
        row.text_list(at.column())
    }

    fn write(&self) -> ColumnValue {
        ColumnValue::TextList(Some(self.clone()))
    }
}

/// An amount in minor units, a BIGINT.
impl Stored for Amount {
    fn read(row: &impl Columns, at: &Place) -> StoreResult<Self> {
        amount(row.int(at.column())?).map_err(|e| at.locate(e))
    }

    fn write(&self) -> ColumnValue {
        self.as_i64().into()
    }
}

/// A value kept as text in the spelling its type parses back: the domain's fixed-string enums,
/// references, asset codes and ledger identifiers.
pub trait StoredText: Sized {
    fn from_text(text: String, at: &Place) -> StoreResult<Self>;
    fn to_text(&self) -> String;
}

impl<T: StoredText> Stored for T {
    fn read(row: &impl Columns, at: &Place) -> StoreResult<Self> {
        T::from_text(row.text(at.column())?, at)
    }

    fn write(&self) -> ColumnValue {
        self.to_text().into()
    }
}

impl<T: StoredText> Stored for Option<T> {
    fn read(row: &impl Columns, at: &Place) -> StoreResult<Self> {
        row.opt_text(at.column())?.map(|text| T::from_text(text, at)).transpose()
    }

    fn write(&self) -> ColumnValue {
        self.as_ref().map(T::to_text).into()
    }
}

/// The enums kept as their fixed strings (`parse`, `as_str`); one the type does not know is a
/// corrupt row.
macro_rules! text_enums {
    ($($ty:ty),* $(,)?) => {$(
        impl StoredText for $ty {
            fn from_text(text: String, at: &Place) -> StoreResult<Self> {
                <$ty>::parse(&text).ok_or_else(|| at.corrupt(format_args!("{text:?}")))
            }

            fn to_text(&self) -> String {
                self.as_str().to_owned()
            }
        }
    )*};
}

text_enums! {
    AccountStatus, ApprovalRequestStatus, ApprovalSource, ApprovalTaskState, AutomationStatus,
    BreakReason, ContractStatus, CustodyKeyStatus, CustomerStatus, DeliveryStatus,
    ExecutionStatus, FailureClass, FailureCode, GroupStatus, JobStatus, LedgerHoldStatus,
    LockStatus, OperationState, PolicyAction, PolicyStatus, RuleType, ScriptStatus,
    SignatureScheme, TemplateStatus, TriggerType, TxType, UserStatus, WebhookStatus,
}

/// Client-chosen references, stored as they were accepted.
macro_rules! stored_references {
    ($($ty:ty),* $(,)?) => {$(
        impl StoredText for $ty {
            fn from_text(text: String, _: &Place) -> StoreResult<Self> {
                Ok(<$ty>::from_stored(text))
            }

            fn to_text(&self) -> String {
                self.as_str().to_owned()
            }
        }
    )*};
}

stored_references!(AccountRef, CustomerRef);

/// Ledger identifiers: `0x` and lower-case hex, as they display.
macro_rules! stored_hex_ids {
    ($($ty:ty),* $(,)?) => {$(
        impl StoredText for $ty {
            fn from_text(text: String, at: &Place) -> StoreResult<Self> {
                <$ty>::parse(&text).map_err(|e| at.corrupt(e))
            }

            fn to_text(&self) -> String {
                self.to_string()
            }
        }
    )*};
}

stored_hex_ids!(Address, TxHash);

/// The upper-case code, one spelling for the unique indexes.
impl StoredText for AssetId {
    fn from_text(text: String, at: &Place) -> StoreResult<Self> {
        asset(&text).map_err(|e| at.locate(e))
    }

    fn to_text(&self) -> String {
        asset_text(*self).to_owned()
    }
}

/// The unsigned counts, steps and versions the domain keeps, read back checked against their
/// type's range. Which integer column holds one is the field's codec: `SmallInt`, `Int`,
/// `SaturatingInt` or `BigInt`, after the column's PostgreSQL type.
pub trait Count: Copy + TryFrom<i64> + TryInto<i32> + fmt::Display {}

impl Count for u8 {}
impl Count for u16 {}
impl Count for u32 {}

fn count<T: Count>(value: i64, at: &Place) -> StoreResult<T> {
    T::try_from(value).map_err(|_| at.corrupt(value))
}

fn int4<T: Count>(value: T, at: &Place) -> StoreResult<i32> {
    value.try_into().map_err(|_| at.corrupt(format_args!("{value} out of range")))
}

/// The integer columns a count is kept in, each read back the same way (`count`) and written
/// its own.
macro_rules! count_codecs {
    ($($(#[$doc:meta])* $codec:ident: $($bound:path)? => |$value:ident, $at:ident| $write:expr;)*) => {$(
        $(#[$doc])*
        pub struct $codec;

        impl<T: Count $(+ $bound)?> Codec<T> for $codec {
            fn read(row: &impl Columns, at: &Place) -> StoreResult<T> {
                count(row.int(at.column())?, at)
            }

            fn write($value: &T, $at: &Place) -> StoreResult<[ColumnValue; 1]> {
                Ok([$write])
            }
        }
    )*};
}

count_codecs! {
    /// A SMALLINT.
    SmallInt: Into<i16> => |value, _at| ColumnValue::SmallInt(Some((*value).into()));
    /// A BIGINT holding a narrower count.
    BigInt: Into<i64> => |value, _at| ColumnValue::BigInt(Some((*value).into()));
    /// An INTEGER that must keep its value exactly (a step, a generation): a larger one is
    /// refused.
    Int: => |value, at| ColumnValue::Int(Some(int4(*value, at)?));
    /// An INTEGER version or count that saturates rather than wrapping
    /// (`encode::saturating_int4`).
    SaturatingInt: Into<u32> => |value, _at| ColumnValue::Int(Some(saturating_int4((*value).into())));
}

impl<T: Count> Codec<Option<T>> for Int {
    fn read(row: &impl Columns, at: &Place) -> StoreResult<Option<T>> {
        row.opt_int(at.column())?.map(|value| count(value, at)).transpose()
    }

    fn write(value: &Option<T>, at: &Place) -> StoreResult<[ColumnValue; 1]> {
        Ok([ColumnValue::Int(value.map(|value| int4(value, at)).transpose()?)])
    }
}

/// A BIGINT counter or ordinal of the full unsigned width: negative is corrupt, beyond
/// `i64::MAX` refused (`encode::int64`).
pub struct Unsigned;

fn non_negative(value: i64, at: &Place) -> StoreResult<u64> {
    u64::try_from(value).map_err(|_| at.corrupt(format_args!("negative: {value}")))
}

// The write exists for the `Codec` contract: no entity with an `Unsigned` field has an `Encode`
// yet (operations are written by their own statements on the hot path).
impl Codec<u64> for Unsigned {
    fn read(row: &impl Columns, at: &Place) -> StoreResult<u64> {
        non_negative(row.int(at.column())?, at)
    }

    fn write(value: &u64, _: &Place) -> StoreResult<[ColumnValue; 1]> {
        Ok([int64(*value)?.into()])
    }
}

impl Codec<Option<u64>> for Unsigned {
    fn read(row: &impl Columns, at: &Place) -> StoreResult<Option<u64>> {
        row.opt_int(at.column())?.map(|value| non_negative(value, at)).transpose()
    }

    fn write(value: &Option<u64>, _: &Place) -> StoreResult<[ColumnValue; 1]> {
        Ok([value.map(int64).transpose()?.into()])
    }
}

/// A list kept as the JSON text of an array of strings, in its order, the same on both
/// backends (`encode::names_text`): names, or ids.
pub struct JsonTextList;

impl Codec<Vec<String>> for JsonTextList {
    fn read(row: &impl Columns, at: &Place) -> StoreResult<Vec<String>> {
        names(&row.text(at.column())?).map_err(|e| at.locate(e))
    }

    fn write(value: &Vec<String>, _: &Place) -> StoreResult<[ColumnValue; 1]> {
        Ok([names_text(value).into()])
    }
}

impl Codec<Vec<Uuid>> for JsonTextList {
    fn read(row: &impl Columns, at: &Place) -> StoreResult<Vec<Uuid>> {
        let ids = names(&row.text(at.column())?).map_err(|e| at.locate(e))?;
        ids.iter().map(|id| Uuid::parse_str(id).map_err(|_| at.corrupt(format_args!("id {id:?}")))).collect()
    }

    fn write(value: &Vec<Uuid>, _: &Place) -> StoreResult<[ColumnValue; 1]> {
        let ids: Vec<String> = value.iter().map(Uuid::to_string).collect();
        Ok([names_text(&ids).into()])
    }
}

/// A value kept as the JSON document serde makes of it.
pub struct Serde;

impl<T: Serialize + DeserializeOwned> Codec<T> for Serde {
    fn read(row: &impl Columns, at: &Place) -> StoreResult<T> {
        serde_json::from_value(row.json(at.column())?).map_err(|e| at.corrupt(e))
    }

    fn write(value: &T, _: &Place) -> StoreResult<[ColumnValue; 1]> {
        Ok([serde_json::to_value(value).map_err(|e| StoreError::Backend(Box::new(e)))?.into()])
    }
}

/// Text written lower-cased (an email that is a username), read as stored.
pub struct Lowercase;

impl Codec<String> for Lowercase {
    fn read(row: &impl Columns, at: &Place) -> StoreResult<String> {
        row.text(at.column())
    }

    fn write(value: &String, _: &Place) -> StoreResult<[ColumnValue; 1]> {
        Ok([value.to_lowercase().into()])
    }
}

/// A name or key in its column and, in the next, its case-folded copy (`encode::folded`),
/// which carries its uniqueness; read from the first alone.
pub struct WithFolded;

impl Codec<String, 2> for WithFolded {
    fn read(row: &impl Columns, at: &Place<2>) -> StoreResult<String> {
        let [name, _] = at.columns;
        row.text(name)
    }

    fn write(value: &String, _: &Place<2>) -> StoreResult<[ColumnValue; 2]> {
        Ok([value.clone().into(), folded(value).into()])
    }
}

/// Declares a table's columns once, in order, and makes from them the column list `columns`
/// (what the SELECTs read and the INSERT binds), the `Table` (when the store writes it through
/// `TableWrites`), the decoder `fn decode(row) -> Entity`, and, with `, encode`, the entity's
/// `Encode`.
///
/// Each field is `field`, read and written by its type (`Stored`), or `field: Codec`; a field
/// kept in a column named otherwise, or in several, names them: `key [group_key]`,
/// `name [name, name_folded]: WithFolded`.
///
/// A field's name is its column's unless the field names its columns, so renaming a field
/// renames the column the store reads and writes: the compiler does not catch that, the store
/// conformance suites do. Name the old column in brackets when renaming a field alone.
macro_rules! stored_table {
    (
        $(#[$columns_doc:meta])*
        columns $columns:ident of $name:literal;
        $($(#[$table_doc:meta])* table $table:ident by $key:ident;)?
        decode $decoder:ident -> $entity:ident $(, $encode:ident)?;
        $fields:tt
    ) => {
        stored_table!(@columns [$(#[$columns_doc])*] $columns $fields);
        $($(#[$table_doc])*
        pub const $table: $crate::rows::Table =
            $crate::rows::Table { name: $name, columns: $columns, key: stringify!($key) };)?
        stored_table!(@decode $decoder $entity $name $fields);
        $(stored_table!(@$encode $entity $name $fields);)?
    };

    (@columns [$($doc:tt)*] $columns:ident {
        $first:ident $([$($first_column:ident),+])? $(: $first_codec:ty)?
        $(, $field:ident $([$($column:ident),+])? $(: $codec:ty)?)* $(,)?
    }) => {
        $($doc)*
        pub const $columns: &str = concat!(
            stored_table!(@names $first $($($first_column)+)?)
            $(, ", ", stored_table!(@names $field $($($column)+)?))*
        );
    };

    (@names $field:ident) => { stringify!($field) };
    (@names $field:ident $first:ident $($column:ident)*) => {
        concat!(stringify!($first) $(, ", ", stringify!($column))*)
    };

    (@decode $decoder:ident $entity:ident $name:literal {
        $($field:ident $([$($column:ident),+])? $(: $codec:ty)?),+ $(,)?
    }) => {
        pub fn $decoder(row: &impl $crate::rows::Columns) -> $crate::StoreResult<$entity> {
            Ok($entity {
                $($field: <stored_table!(@codec $($codec)?) as $crate::rows::Codec<_, _>>::read(
                    row,
                    &stored_table!(@place $name $field $($($column)+)?),
                )?,)+
            })
        }
    };

    (@encode $entity:ident $name:literal {
        $($field:ident $([$($column:ident),+])? $(: $codec:ty)?),+ $(,)?
    }) => {
        impl $crate::rows::Encode for $entity {
            fn values(&self) -> $crate::StoreResult<Vec<$crate::rows::ColumnValue>> {
                let mut values = Vec::new();
                $(values.extend(<stored_table!(@codec $($codec)?) as $crate::rows::Codec<_, _>>::write(
                    &self.$field,
                    &stored_table!(@place $name $field $($($column)+)?),
                )?);)+
                Ok(values)
            }
        }
    };

    (@codec) => { $crate::rows::Plain };
    (@codec $codec:ty) => { $codec };

    (@place $name:literal $field:ident) => {
        $crate::rows::Place { table: $name, columns: [stringify!($field)] }
    };
    (@place $name:literal $field:ident $($column:ident)+) => {
        $crate::rows::Place { table: $name, columns: [$(stringify!($column)),+] }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_is_written_in_its_columns_kind_with_its_narrowing() {
        let at = Place { table: "t", columns: ["n"] };
        let written = |values: StoreResult<[ColumnValue; 1]>| values.expect("written");
        assert_eq!(written(<SmallInt as Codec<u8>>::write(&7, &at)), [ColumnValue::SmallInt(Some(7))]);
        assert_eq!(written(<BigInt as Codec<u32>>::write(&u32::MAX, &at)), [ColumnValue::BigInt(Some(4_294_967_295))]);
        assert_eq!(written(<Int as Codec<Option<u16>>>::write(&None, &at)), [ColumnValue::Int(None)]);
        assert!(matches!(<Int as Codec<u32>>::write(&u32::MAX, &at), Err(StoreError::Corrupt(_))));
        assert_eq!(written(<SaturatingInt as Codec<u32>>::write(&u32::MAX, &at)), [ColumnValue::Int(Some(i32::MAX))]);
    }

    #[test]
    fn a_folded_name_is_written_beside_the_name() {
        let at = Place { table: "roles", columns: ["name", "name_folded"] };
        let values = <WithFolded as Codec<String, 2>>::write(&"straße".to_owned(), &at).expect("written");
        assert_eq!(values, [ColumnValue::from("straße"), ColumnValue::from("STRASSE")]);
        assert_eq!(at.corrupt("x").to_string(), StoreError::Corrupt("roles.name+name_folded x".into()).to_string());
    }
}
