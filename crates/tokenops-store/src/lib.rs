//! The store's API of intent: one trait per aggregate, reached through a transaction handle
//! (`Tx`), and the `Store` that opens transactions. Backends (SQLite, PostgreSQL) implement
//! these traits; nothing above this crate sees SQL. One file per aggregate; methods are named for
//! intent, and implementations run inside the `Tx` that handed them out.
//!
//! Identity secrets are only ever stored hashed (passwords: argon2id PHC strings; opaque tokens:
//! SHA-256 hex) or sealed (signing keys: AES-256-GCM under the master key).
//!
//! Every tenant-scoped call takes the tenant first, so another organisation's row cannot be
//! reached by construction.

mod accounts;
mod approvals;
mod audit;
mod automations;
mod breaks;
mod challenges;
pub mod conditions;
mod contracts;
mod custody;
mod customers;
pub mod encode;
mod error;
mod events;
mod exclusive;
mod executions;
mod groups;
mod idempotency;
mod jobs;
pub mod keyset;
mod ledger;
mod locks;
mod machine_clients;
mod operations;
mod policies;
mod policy_templates;
mod positions;
mod priority;
mod refresh_tokens;
mod roles;
pub mod rows;
mod scripts;
mod secret_reveals;
mod settings;
mod signing_keys;
pub mod sorting;
mod standing;
mod table_rows;
mod table_writes;
mod tenants;
mod users;
mod webhooks;

pub use accounts::*;
pub use approvals::*;
pub use audit::*;
pub use automations::*;
pub use breaks::*;
pub use challenges::*;
pub use contracts::*;
pub use custody::*;
pub use customers::*;
pub use error::{StoreError, StoreResult};
pub use events::*;
pub use exclusive::Exclusive;
pub use executions::*;
pub use groups::*;
pub use idempotency::*;
pub use jobs::*;
pub use ledger::*;
pub use locks::*;
pub use machine_clients::*;
pub use operations::*;
pub use policies::*;
pub use policy_templates::*;
pub use positions::*;
pub use priority::{in_background, is_background};
pub use refresh_tokens::*;
pub use roles::*;
pub use scripts::*;
pub use secret_reveals::*;
pub use settings::*;
pub use signing_keys::*;
pub use standing::*;
pub use table_rows::TableRows;
pub use table_writes::{TableWrites, conflict};
pub use tenants::*;
pub use users::*;
pub use webhooks::*;

use async_trait::async_trait;
use std::time::Duration;

/// The checksum recorded with an applied migration: a migration whose text changed after it was
/// applied is refused at start instead of leaving the database silently different from the code.
pub fn migration_checksum(sql: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(sql.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether migration `version` (`name`) is still to be applied, from the checksum recorded when
/// it was (none: never applied) and the one of its text now; an applied migration whose text has
/// changed since is refused, for both backends alike.
pub fn migration_pending(version: i64, name: &str, checksum: &str, recorded: Option<&str>) -> StoreResult<bool> {
    match recorded {
        None => Ok(true),
        Some(recorded) if recorded == checksum => Ok(false),
        Some(_) => Err(StoreError::Corrupt(format!(
            "migration {version} ({name}) differs from the one applied to this database; migrations are never edited once applied"
        ))),
    }
}

/// `c` and its single-character lower- and upper-case forms: both backends build their
/// case-insensitive search patterns from it (`[éÉ]`), because neither SQLite's `lower()` (ASCII
/// only) nor PostgreSQL's (locale-dependent) folds the same way.
pub fn case_forms(c: char) -> Vec<char> {
    fn single(mut chars: impl Iterator<Item = char>) -> Option<char> {
        let first = chars.next()?;
        chars.next().is_none().then_some(first)
    }
    let mut forms = vec![c];
    for form in [single(c.to_lowercase()), single(c.to_uppercase())].into_iter().flatten() {
        if !forms.contains(&form) {
            forms.push(form);
        }
    }
    forms
}

/// The range of ASCII-folded text that every value starting with `query` (ignoring case) lies
/// in: `(lower, upper)`, the query lower-cased and its successor, for both backends to find
/// candidates through an index of the ASCII-folded column (SQLite's NOCASE, PostgreSQL's
/// `lower(… COLLATE "C")`), before the exact pattern of [`case_forms`] checks them. `None` for a
/// query with a non-ASCII character, whose case forms such an index does not fold alike.
pub fn ascii_prefix_range(query: &str) -> Option<(String, String)> {
    if query.is_empty() || !query.is_ascii() {
        return None;
    }
    let lower = query.to_ascii_lowercase();
    let mut upper = lower.clone();
    let last = upper.pop()?;
    // Folding may raise the successor further (`@` + 1 is `A`, compared as `a`): the range only
    // widens, and the exact pattern still decides.
    upper.push(char::from_u32(u32::from(last) + 1)?);
    Some((lower, upper))
}

/// Which backend a store runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

/// A connection to one store. Cheap to share; open transactions with `write` or `read`.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    fn backend(&self) -> Backend;

    /// Opens a write transaction. On SQLite writers are serialised (one writer connection,
    /// `BEGIN IMMEDIATE`), so a transaction that reads then writes never fails with "locked".
    async fn write(&self) -> StoreResult<Box<dyn Tx>>;

    /// Opens a read transaction: a consistent snapshot for lists and their totals.
    async fn read(&self) -> StoreResult<Box<dyn Tx>>;

    /// The standing of a token's subject `id` (see `SubjectStanding`); the user is looked up in
    /// `tenant` only. One statement outside any transaction, since every request resolves its
    /// caller's access by it.
    async fn subject_standing(
        &self,
        tenant: Option<tokenops_domain::TenantId>,
        id: uuid::Uuid,
    ) -> StoreResult<SubjectStanding>;

    /// Succeeds when the store answers a trivial query: the readiness probe.
    async fn ping(&self) -> StoreResult<()>;

    /// Takes `role` for this process if no other process (or other handle of this one) holds it
    /// on this store (for PostgreSQL: this schema): `None` while another does. Held until the
    /// answer is dropped or its holder dies; see [`Exclusive`].
    async fn exclusive(&self, role: &str) -> StoreResult<Option<Exclusive>>;

    /// Waits until a job may have become runnable (a commit enqueued one) or `timeout` passes.
    /// Spurious wake-ups are allowed; callers poll after each.
    async fn wait_for_jobs(&self, timeout: Duration);

    /// Closes every connection after in-flight transactions finish.
    async fn close(&self);
}

/// The aggregate accessors of a [`Tx`] whose type implements every store trait itself (both
/// backends' transactions): `impl Tx for MyTx { tokenops_store::tx_accessors!(); … }`. The list
/// of aggregates is written here once.
#[macro_export]
macro_rules! tx_accessors {
    () => {
        fn customers(&mut self) -> &mut dyn $crate::CustomerStore {
            self
        }
        fn contracts(&mut self) -> &mut dyn $crate::ContractStore {
            self
        }
        fn accounts(&mut self) -> &mut dyn $crate::AccountStore {
            self
        }
        fn operations(&mut self) -> &mut dyn $crate::OperationStore {
            self
        }
        fn locks(&mut self) -> &mut dyn $crate::LockStore {
            self
        }
        fn breaks(&mut self) -> &mut dyn $crate::BreakStore {
            self
        }
        fn positions(&mut self) -> &mut dyn $crate::PositionStore {
            self
        }
        fn events(&mut self) -> &mut dyn $crate::EventStore {
            self
        }
        fn audit(&mut self) -> &mut dyn $crate::AuditStore {
            self
        }
        fn idempotency(&mut self) -> &mut dyn $crate::IdempotencyStore {
            self
        }
        fn jobs(&mut self) -> &mut dyn $crate::JobStore {
            self
        }
        fn settings(&mut self) -> &mut dyn $crate::SettingStore {
            self
        }
        fn custody_keys(&mut self) -> &mut dyn $crate::CustodyKeyStore {
            self
        }
        fn ledger(&mut self) -> &mut dyn $crate::LedgerStore {
            self
        }
        fn tenants(&mut self) -> &mut dyn $crate::TenantStore {
            self
        }
        fn users(&mut self) -> &mut dyn $crate::UserStore {
            self
        }
        fn machine_clients(&mut self) -> &mut dyn $crate::MachineClientStore {
            self
        }
        fn signing_keys(&mut self) -> &mut dyn $crate::SigningKeyStore {
            self
        }
        fn refresh_tokens(&mut self) -> &mut dyn $crate::RefreshTokenStore {
            self
        }
        fn challenges(&mut self) -> &mut dyn $crate::ChallengeStore {
            self
        }
        fn roles(&mut self) -> &mut dyn $crate::RoleStore {
            self
        }
        fn groups(&mut self) -> &mut dyn $crate::GroupStore {
            self
        }
        fn secret_reveals(&mut self) -> &mut dyn $crate::SecretRevealStore {
            self
        }
        fn policy_templates(&mut self) -> &mut dyn $crate::PolicyTemplateStore {
            self
        }
        fn policies(&mut self) -> &mut dyn $crate::PolicyStore {
            self
        }
        fn approvals(&mut self) -> &mut dyn $crate::ApprovalStore {
            self
        }
        fn scripts(&mut self) -> &mut dyn $crate::ScriptStore {
            self
        }
        fn automations(&mut self) -> &mut dyn $crate::AutomationStore {
            self
        }
        fn executions(&mut self) -> &mut dyn $crate::ExecutionStore {
            self
        }
        fn webhooks(&mut self) -> &mut dyn $crate::WebhookStore {
            self
        }
    };
}

/// One database transaction. Dropping it without `commit` rolls it back.
#[async_trait]
pub trait Tx: Send {
    fn customers(&mut self) -> &mut dyn CustomerStore;
    fn contracts(&mut self) -> &mut dyn ContractStore;
    fn accounts(&mut self) -> &mut dyn AccountStore;
    fn operations(&mut self) -> &mut dyn OperationStore;
    fn locks(&mut self) -> &mut dyn LockStore;
    fn breaks(&mut self) -> &mut dyn BreakStore;
    fn positions(&mut self) -> &mut dyn PositionStore;
    fn events(&mut self) -> &mut dyn EventStore;
    fn audit(&mut self) -> &mut dyn AuditStore;
    fn idempotency(&mut self) -> &mut dyn IdempotencyStore;
    fn jobs(&mut self) -> &mut dyn JobStore;
    fn settings(&mut self) -> &mut dyn SettingStore;
    fn custody_keys(&mut self) -> &mut dyn CustodyKeyStore;
    fn ledger(&mut self) -> &mut dyn LedgerStore;
    fn tenants(&mut self) -> &mut dyn TenantStore;
    fn users(&mut self) -> &mut dyn UserStore;
    fn machine_clients(&mut self) -> &mut dyn MachineClientStore;
    fn signing_keys(&mut self) -> &mut dyn SigningKeyStore;
    fn refresh_tokens(&mut self) -> &mut dyn RefreshTokenStore;
    fn challenges(&mut self) -> &mut dyn ChallengeStore;
    fn roles(&mut self) -> &mut dyn RoleStore;
    fn groups(&mut self) -> &mut dyn GroupStore;
    fn secret_reveals(&mut self) -> &mut dyn SecretRevealStore;
    fn policy_templates(&mut self) -> &mut dyn PolicyTemplateStore;
    fn policies(&mut self) -> &mut dyn PolicyStore;
    fn approvals(&mut self) -> &mut dyn ApprovalStore;
    fn scripts(&mut self) -> &mut dyn ScriptStore;
    fn automations(&mut self) -> &mut dyn AutomationStore;
    fn executions(&mut self) -> &mut dyn ExecutionStore;
    fn webhooks(&mut self) -> &mut dyn WebhookStore;

    async fn commit(self: Box<Self>) -> StoreResult<()>;

    /// Ends the transaction without its changes, now: what it holds (row and advisory locks on
    /// PostgreSQL) is free when this returns. Dropping a transaction rolls it back too, but a
    /// backend may finish that later (PostgreSQL's pool flushes the ROLLBACK when the connection
    /// is released, in a task of its own), which a caller answering at once must not leave to
    /// chance: a retry under the same Idempotency-Key would meet the key still held.
    async fn rollback(self: Box<Self>) -> StoreResult<()> {
        drop(self);
        Ok(())
    }
}
