//! Reading stored rows into entities once for every backend: the `Columns` a backend's row type
//! offers, and one decoder per entity (in `rows/`, named by aggregate) written against it.
//!
//! A backend keeps what its dialect stores differently (uuids, JSON, integer widths, the driver's
//! errors) inside its `Columns` impl; everything past the column read is shared here, so the two
//! backends cannot drift in what they accept. Each table's columns are declared once
//! (`stored_table!`, in `stored`), which makes its column list, decoder and encoder agree.

#[macro_use]
mod stored;

mod accounts;
mod approvals;
mod audit;
mod breaks;
mod contracts;
mod custody;
mod customers;
mod events;
mod groups;
mod idempotency;
mod jobs;
mod ledger;
mod locks;
mod machine_clients;
mod operations;
mod policies;
mod policy_templates;
mod roles;
mod scripts;
mod secret_reveals;
mod signing_keys;
mod tenants;
mod users;
mod webhooks;

pub use accounts::{ACCOUNT_COLUMNS, ACCOUNTS, ACCOUNTS_BY_ID, account};
pub use approvals::{
    APPROVAL_REQUEST_COLUMNS, APPROVAL_REQUESTS, APPROVAL_TASK_COLUMNS, APPROVAL_TASKS, approval_request, approval_task,
};
pub use audit::{AUDIT_BLOCK_COLUMNS, AUDIT_COLUMNS, audit_block, audit_block_hash, audit_record};
pub use breaks::{BREAK_COLUMNS, BREAKS, break_record};
pub use contracts::{CONTRACT_COLUMNS, CONTRACTS, CONTRACTS_BY_ID, contract};
pub use custody::{CUSTODY_KEY_COLUMNS, CUSTODY_KEYS, custody_key};
pub use customers::{CUSTOMER_COLUMNS, CUSTOMERS, customer};
pub use events::{EVENT_COLUMNS, EVENTS, event};
pub use groups::{GROUP_COLUMNS, GROUPS, GROUPS_BY_KEY, group};
pub use idempotency::{IDEMPOTENCY_COLUMNS, idempotency_record};
pub use jobs::{JOB_COLUMNS, job, queue_stats};
pub use ledger::{LEDGER_BLOCK_COLUMNS, ledger_block, ledger_hold, ledger_token, ledger_transaction};
pub use locks::{LOCK_COLUMNS, LOCKS, lock};
pub use machine_clients::{MACHINE_CLIENT_COLUMNS, MACHINE_CLIENTS, machine_client};
pub use operations::{
    OPERATION_COLUMNS, OPERATIONS, in_flight, operation, submission_reads, submission_reads_sql, submission_row,
};
pub use policies::{
    CURRENT_POLICY_VERSION, POLICIES, POLICY_COLUMNS, POLICY_VERSION_COLUMNS, POLICY_VERSIONS, policy, policy_version,
    policy_with_version, policy_with_version_columns,
};
pub use policy_templates::{TEMPLATE_COLUMNS, TEMPLATES, tenant_template};
pub use roles::{ROLE_COLUMNS, ROLE_UPDATE_COLUMNS, ROLES, role};
pub use scripts::{
    AUTOMATION_COLUMNS, AUTOMATIONS, EXECUTION_COLUMNS, EXECUTIONS, SCRIPT_COLUMNS, SCRIPT_VERSION_COLUMNS,
    SCRIPT_VERSIONS, SCRIPTS, automation, execution, script, script_version,
};
pub use secret_reveals::{SECRET_REVEAL_COLUMNS, SECRET_REVEALS, secret_reveal};
pub use signing_keys::{SIGNING_KEYS, signing_key};
pub(crate) use stored::{
    BigInt, Codec, Int, JsonTextList, Lowercase, Place, Plain, SaturatingInt, Serde, SmallInt, Stored, Unsigned,
    WithFolded,
};
pub use tenants::{TENANT_COLUMNS, TENANTS, tenant};
pub use users::{USER_COLUMNS, USERS, joined_user_columns, user};
pub use webhooks::{
    DELIVERIES, DELIVERY_COLUMNS, WEBHOOK_COLUMNS, WEBHOOK_SIGNING_KEYS, WEBHOOKS, delivery, webhook,
    webhook_signing_key,
};

use crate::keyset::KeyValue;
use crate::{StoreError, StoreResult};
use tokenops_domain::asset::{Amount, AssetId};
use tokenops_domain::{TenantId, Timestamp};
use uuid::Uuid;

/// One aggregate's table as both backends read and write it: its name, the columns its decoder
/// reads (the order an insert binds them in), and `key`, the column that finds one of an
/// organisation's rows (its id, or a reference unique within the organisation). Its statements
/// are dialect-neutral but for the placeholders, numbered in the backend's style (`sigil` `?` or
/// `$`).
#[derive(Debug, Clone, Copy)]
pub struct Table {
    pub name: &'static str,
    pub columns: &'static str,
    pub key: &'static str,
}

impl Table {
    /// The INSERT of one row, its values bound in `columns` order.
    pub fn insert_sql(&self, sigil: char) -> String {
        let values: Vec<String> = (1..=self.columns.split(',').count()).map(|n| format!("{sigil}{n}")).collect();
        format!("INSERT INTO {} ({}) VALUES ({})", self.name, self.columns, values.join(", "))
    }

    /// The INSERT of one row that leaves a row already there be (one whose unique key it
    /// shares): it then changes nothing, which the caller tells from the count.
    pub fn insert_new_sql(&self, sigil: char) -> String {
        format!("{} ON CONFLICT DO NOTHING", self.insert_sql(sigil))
    }

    /// The UPDATE of the `set` columns of the organisation's row with a key: the set columns'
    /// values bound first, in order, then the tenant's and the key's.
    pub fn update_sql(&self, sigil: char, set: &[&str]) -> String {
        let assignments: Vec<String> =
            set.iter().enumerate().map(|(n, column)| format!("{column} = {sigil}{}", n + 1)).collect();
        let (tenant, key) = (set.len() + 1, set.len() + 2);
        format!(
            "UPDATE {} SET {} WHERE tenant_id = {sigil}{tenant} AND {} = {sigil}{key}",
            self.name,
            assignments.join(", "),
            self.key
        )
    }

    /// The values [`update_sql`](Self::update_sql) binds for `set`, picked from `row` (its
    /// values in `columns` order): the set columns', then the tenant's and the key's.
    pub fn update_values(&self, row: &[ColumnValue], set: &[&str]) -> StoreResult<Vec<ColumnValue>> {
        let names: Vec<&str> = self.columns.split(',').map(str::trim).collect();
        let value = |column: &str| {
            names.iter().position(|name| *name == column).and_then(|place| row.get(place)).cloned().ok_or_else(|| {
                StoreError::Backend(format!("no value of column {column} of {} to write", self.name).into())
            })
        };
        set.iter().copied().chain(["tenant_id", self.key]).map(value).collect()
    }

    /// The organisation's row with a key: the tenant bound first, the key second; `suffix`, if
    /// any, ends the statement (PostgreSQL's `FOR UPDATE`).
    pub fn select_by_key_sql(&self, sigil: char, suffix: &str) -> String {
        let mut sql = format!(
            "SELECT {} FROM {} WHERE tenant_id = {sigil}1 AND {} = {sigil}2",
            self.columns, self.name, self.key
        );
        if !suffix.is_empty() {
            sql.push(' ');
            sql.push_str(suffix);
        }
        sql
    }
}

/// One column's value as both backends write it. Each kind keeps its SQL type when NULL, since
/// PostgreSQL binds a typed NULL (an absent `BigInt` is a BIGINT NULL); each backend turns it
/// into its own bound value in one place (its `conditions::Dialect::value`).
#[derive(Debug, Clone, PartialEq)]
pub enum ColumnValue {
    Bool(Option<bool>),
    SmallInt(Option<i16>),
    Int(Option<i32>),
    BigInt(Option<i64>),
    Text(Option<String>),
    /// A uuid: PostgreSQL's `uuid`, SQLite's hyphenated text.
    Uuid(Option<Uuid>),
    /// A JSON document: PostgreSQL's `jsonb`, SQLite's JSON text.
    Json(Option<serde_json::Value>),
    /// A list of strings: PostgreSQL's `text[]`, SQLite's JSON array text (as `Columns::text_list`
    /// reads them back).
    TextList(Option<Vec<String>>),
    Bytes(Option<Vec<u8>>),
}

/// Each Rust type an encoder writes, with the column kind it is written as, present or NULL.
macro_rules! column_values {
    ($($kind:ident: $from:ty => |$v:ident| $value:expr;)*) => {
        $(impl From<$from> for ColumnValue {
            fn from($v: $from) -> Self {
                ColumnValue::$kind(Some($value))
            }
        }
        impl From<Option<$from>> for ColumnValue {
            fn from(value: Option<$from>) -> Self {
                ColumnValue::$kind(value.map(|$v| $value))
            }
        })*
    };
}

column_values! {
    Bool: bool => |v| v;
    SmallInt: i16 => |v| v;
    Int: i32 => |v| v;
    BigInt: i64 => |v| v;
    BigInt: Timestamp => |v| v.as_micros();
    Text: String => |v| v;
    Text: &str => |v| v.to_owned();
    Text: &String => |v| v.clone();
    Uuid: Uuid => |v| v;
    Uuid: TenantId => |v| v.as_uuid();
    Json: serde_json::Value => |v| v;
    Json: &serde_json::Value => |v| v.clone();
    Bytes: Vec<u8> => |v| v;
    Bytes: &Vec<u8> => |v| v.clone();
}

impl From<KeyValue> for ColumnValue {
    fn from(value: KeyValue) -> Self {
        match value {
            KeyValue::Int(v) => v.into(),
            KeyValue::Text(v) => v.into(),
            KeyValue::Id(v) => v.into(),
        }
    }
}

/// An entity written as its table's row, the same on both backends: its values in its `Table`'s
/// columns order, what the inserts and updates written once (`TableWrites`) bind.
pub trait Encode {
    fn values(&self) -> StoreResult<Vec<ColumnValue>>;
}

/// An entity read from its table's row, the same on both backends: what a list written once
/// (`TableRows`) decodes its rows with.
pub trait Decode: Sized {
    fn decode(row: &impl Columns) -> StoreResult<Self>;
}

/// Each entity with its one decoder: what the lists and reads by key written once, and each
/// backend's `codec::decoded`, decode its rows with.
macro_rules! decoders {
    ($($entity:ty => $decoder:path),* $(,)?) => {
        $(impl Decode for $entity {
            fn decode(row: &impl Columns) -> StoreResult<Self> {
                $decoder(row)
            }
        })*
    };
}

decoders! {
    tokenops_domain::account::Account => account,
    tokenops_domain::approval::ApprovalRequest => approval_request,
    tokenops_domain::approval::ApprovalTask => approval_task,
    tokenops_domain::automation::Automation => automation,
    tokenops_domain::automation::Execution => execution,
    tokenops_domain::contract::Contract => contract,
    tokenops_domain::customer::Customer => customer,
    tokenops_domain::operation::Break => break_record,
    tokenops_domain::operation::Lock => lock,
    tokenops_domain::operation::Operation => operation,
    tokenops_domain::policy::Policy => policy,
    tokenops_domain::policy::PolicyVersion => policy_version,
    tokenops_domain::policy::TenantTemplate => tenant_template,
    tokenops_domain::script::Script => script,
    tokenops_domain::webhook::Delivery => delivery,
    tokenops_domain::script::ScriptVersion => script_version,
    crate::GroupRecord => group,
    crate::MachineClientRecord => machine_client,
    crate::RoleRecord => role,
    crate::SecretRevealRecord => secret_reveal,
    crate::SigningKeyRecord => signing_key,
    crate::WebhookSigningKeyRecord => webhook_signing_key,
    crate::TenantRecord => tenant,
    crate::UserRecord => user,
    crate::LedgerBlock => ledger_block,
    crate::LedgerTransaction => ledger_transaction,
    crate::LedgerToken => ledger_token,
    crate::LedgerHold => ledger_hold,
}

/// The named columns of one row. A value of the wrong type or one that does not decode is the
/// backend's error (`StoreError::Corrupt` where the driver can tell); a missing column is a bug
/// in the query and the backend's error too.
pub trait Columns {
    fn text(&self, name: &str) -> StoreResult<String>;
    fn opt_text(&self, name: &str) -> StoreResult<Option<String>>;
    /// An integer column of any width.
    fn int(&self, name: &str) -> StoreResult<i64>;
    fn opt_int(&self, name: &str) -> StoreResult<Option<i64>>;
    fn bool(&self, name: &str) -> StoreResult<bool>;
    fn uuid(&self, name: &str) -> StoreResult<Uuid>;
    fn opt_uuid(&self, name: &str) -> StoreResult<Option<Uuid>>;
    fn json(&self, name: &str) -> StoreResult<serde_json::Value>;
    fn opt_json(&self, name: &str) -> StoreResult<Option<serde_json::Value>>;
    fn bytes(&self, name: &str) -> StoreResult<Vec<u8>>;
    fn opt_bytes(&self, name: &str) -> StoreResult<Option<Vec<u8>>>;
    /// A list of strings stored in the backend's list form (a JSON array as text on SQLite, a
    /// `text[]` on PostgreSQL).
    fn text_list(&self, name: &str) -> StoreResult<Vec<String>>;

    /// A point in time, stored as microseconds since the epoch on both backends.
    fn timestamp(&self, name: &str) -> StoreResult<Timestamp> {
        Ok(Timestamp::from_micros(self.int(name)?))
    }

    fn opt_timestamp(&self, name: &str) -> StoreResult<Option<Timestamp>> {
        Ok(self.opt_int(name)?.map(Timestamp::from_micros))
    }

    fn tenant(&self, name: &str) -> StoreResult<TenantId> {
        self.uuid(name).map(TenantId)
    }

    /// A nullable tenant column: NULL (or the nil UUID, the platform's key) is the platform.
    fn opt_tenant(&self, name: &str) -> StoreResult<Option<TenantId>> {
        Ok(self.opt_uuid(name)?.filter(|u| !u.is_nil()).map(TenantId))
    }

    /// A text column parsed by `parse`, or `StoreError::Corrupt` naming `what`.
    fn parsed<T>(&self, name: &str, what: &str, parse: impl FnOnce(&str) -> Option<T>) -> StoreResult<T> {
        parsed(&self.text(name)?, what, parse)
    }

    /// A whole number of a narrower type (a step, a version, a count); one out of its range is
    /// corrupt, named `what`.
    fn narrow<T: TryFrom<i64>>(&self, name: &str, what: &str) -> StoreResult<T> {
        let value = self.int(name)?;
        T::try_from(value).map_err(|_| StoreError::Corrupt(format!("{what} {value}")))
    }

    /// A counter or ordinal that is never negative.
    fn unsigned(&self, name: &str, what: &str) -> StoreResult<u64> {
        unsigned(self.int(name)?, what)
    }
}

/// A row whose columns were selected under a prefix (a joined version's `v_id`), read by the
/// names its decoder knows them by.
pub struct Prefixed<'r, C> {
    pub row: &'r C,
    pub prefix: &'static str,
}

macro_rules! prefixed_reads {
    ($($read:ident -> $ty:ty),* $(,)?) => {
        impl<C: Columns> Columns for Prefixed<'_, C> {
            $(fn $read(&self, name: &str) -> StoreResult<$ty> {
                self.row.$read(&format!("{}{name}", self.prefix))
            })*
        }
    };
}

prefixed_reads! {
    text -> String, opt_text -> Option<String>, int -> i64, opt_int -> Option<i64>, bool -> bool,
    uuid -> Uuid, opt_uuid -> Option<Uuid>, json -> serde_json::Value, opt_json -> Option<serde_json::Value>,
    bytes -> Vec<u8>, opt_bytes -> Option<Vec<u8>>, text_list -> Vec<String>,
}

/// A stored counter or ordinal, never negative; a negative one is corrupt, named `what`.
pub fn unsigned(value: i64, what: &str) -> StoreResult<u64> {
    u64::try_from(value).map_err(|_| StoreError::Corrupt(format!("negative {what}: {value}")))
}

/// `text` parsed by `parse`, or `StoreError::Corrupt` naming `what`.
pub fn parsed<T>(text: &str, what: &str, parse: impl FnOnce(&str) -> Option<T>) -> StoreResult<T> {
    parse(text).ok_or_else(|| StoreError::Corrupt(format!("{what} {text:?}")))
}

/// A stored asset code; one that is not a tokenisable currency's upper-case code (as the
/// backends store it, one spelling for the unique index) is a corrupt row.
pub fn asset(text: &str) -> StoreResult<AssetId> {
    AssetId::parse(text).ok().filter(|a| a.code() == text).ok_or_else(|| StoreError::Corrupt(format!("asset {text:?}")))
}

/// A stored amount in minor units; zero, negative or beyond the largest amount is a corrupt row.
pub fn amount(units: i64) -> StoreResult<Amount> {
    u128::try_from(units)
        .ok()
        .and_then(Amount::from_minor_units)
        .ok_or_else(|| StoreError::Corrupt(format!("amount {units}")))
}

pub fn names(text: &str) -> StoreResult<Vec<String>> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("name list: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCKS: Table = Table { name: "locks", columns: "id, tenant_id, status", key: "id" };

    #[test]
    fn a_tables_statements_number_their_placeholders_in_the_backends_style() {
        assert_eq!(LOCKS.insert_sql('$'), "INSERT INTO locks (id, tenant_id, status) VALUES ($1, $2, $3)");
        assert_eq!(LOCKS.insert_sql('?'), "INSERT INTO locks (id, tenant_id, status) VALUES (?1, ?2, ?3)");
        assert_eq!(
            LOCKS.select_by_key_sql('$', "FOR UPDATE"),
            "SELECT id, tenant_id, status FROM locks WHERE tenant_id = $1 AND id = $2 FOR UPDATE"
        );
        assert_eq!(
            LOCKS.select_by_key_sql('?', ""),
            "SELECT id, tenant_id, status FROM locks WHERE tenant_id = ?1 AND id = ?2"
        );
    }

    #[test]
    fn an_update_sets_the_named_columns_of_the_row_found_by_its_tenant_and_key() {
        assert_eq!(LOCKS.update_sql('$', &["status"]), "UPDATE locks SET status = $1 WHERE tenant_id = $2 AND id = $3");
        let tenant = Uuid::from_u128(1);
        let row = [ColumnValue::from(Uuid::from_u128(2)), tenant.into(), ColumnValue::Text(None)];
        let values = LOCKS.update_values(&row, &["status"]).expect("every column has a value");
        assert_eq!(values, vec![ColumnValue::Text(None), tenant.into(), Uuid::from_u128(2).into()]);
        assert!(LOCKS.update_values(&row, &["amount"]).is_err());
        assert!(LOCKS.update_values(&row[..2], &["status"]).is_err());
    }
}
