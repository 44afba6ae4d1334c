//! Token contracts and accounts on PostgreSQL.
//!
//! Inserts use `ON CONFLICT DO NOTHING` and report a duplicate as `StoreError::Conflict` from the
//! row count: a unique violation would abort the transaction, and callers go on as on SQLite.
//! No update can violate a unique index (the asset of a contract and the reference of an
//! account never change).
//!
//! Assets are stored as their upper-case code: the store upper-cases the ASCII letters of the
//! code it is given, and of every code it looks up or filters by, so that asset lookups ignore
//! case (ISO 4217 codes are ASCII letters) and the unique index sees one spelling.

use crate::{PostgresTx, codec};
use async_trait::async_trait;
use sqlx::postgres::PgRow;
use tokenops_domain::account::{AccountRef, AccountStatus, ContractStatus};
use tokenops_domain::customer::CustomerRef;
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::{
    AccountFilter, AccountRecord, AccountStore, ContractFilter, ContractRecord, ContractStore, StoreError, StoreResult,
};
use uuid::Uuid;

/// An asset code as stored and compared: its ASCII letters upper-cased.
fn asset_key(asset_id: &str) -> String {
    asset_id.to_ascii_uppercase()
}

// ---------------------------------------------------------------------------------------------
// Token contracts

const CONTRACT_COLUMNS: &str = "id, tenant_id, asset_id, name, symbol, decimals, status, address, adopt_address, failure_reason, created_at, updated_at";

/// The filter shared by the count and the page: `$1` the tenant, `$2` the asset, `$3` the status
/// (each NULL when not filtered on).
const CONTRACT_FILTER: &str =
    "tenant_id = $1 AND ($2::text IS NULL OR asset_id = $2) AND ($3::text IS NULL OR status = $3)";

fn decode_contract(row: &PgRow) -> StoreResult<ContractRecord> {
    let status: String = codec::get(row, "status")?;
    let decimals: i16 = codec::get(row, "decimals")?;
    Ok(ContractRecord {
        id: codec::get(row, "id")?,
        tenant_id: TenantId(codec::get(row, "tenant_id")?),
        asset_id: codec::get(row, "asset_id")?,
        name: codec::get(row, "name")?,
        symbol: codec::get(row, "symbol")?,
        decimals: u8::try_from(decimals).map_err(|_| StoreError::Corrupt(format!("contract decimals {decimals}")))?,
        status: ContractStatus::parse(&status)
            .ok_or_else(|| StoreError::Corrupt(format!("contract status {status:?}")))?,
        address: codec::get(row, "address")?,
        adopt_address: codec::get(row, "adopt_address")?,
        failure_reason: codec::get(row, "failure_reason")?,
        created_at: codec::ts(codec::get(row, "created_at")?),
        updated_at: codec::ts(codec::get(row, "updated_at")?),
    })
}

impl PostgresTx {
    /// The organisation's contract for the asset, locked when `lock` is `FOR UPDATE`.
    async fn fetch_contract(
        &mut self,
        tenant: TenantId,
        asset_id: &str,
        lock: &str,
    ) -> StoreResult<Option<ContractRecord>> {
        let sql = format!("SELECT {CONTRACT_COLUMNS} FROM contracts WHERE tenant_id = $1 AND asset_id = $2 {lock}");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.as_uuid())
            .bind(asset_key(asset_id))
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        row.as_ref().map(decode_contract).transpose()
    }
}

#[async_trait]
impl ContractStore for PostgresTx {
    async fn insert(&mut self, contract: &ContractRecord) -> StoreResult<()> {
        let sql = format!(
            "INSERT INTO contracts ({CONTRACT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
             ON CONFLICT DO NOTHING"
        );
        let done = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(contract.id)
            .bind(contract.tenant_id.as_uuid())
            .bind(asset_key(&contract.asset_id))
            .bind(&contract.name)
            .bind(&contract.symbol)
            .bind(i16::from(contract.decimals))
            .bind(contract.status.as_str())
            .bind(contract.address.as_deref())
            .bind(contract.adopt_address.as_deref())
            .bind(contract.failure_reason.as_deref())
            .bind(contract.created_at.as_micros())
            .bind(contract.updated_at.as_micros())
            .execute(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        if done.rows_affected() == 0 {
            return Err(codec::conflict("contract id or asset"));
        }
        Ok(())
    }

    async fn get(&mut self, tenant: TenantId, asset_id: &str) -> StoreResult<Option<ContractRecord>> {
        self.fetch_contract(tenant, asset_id, "").await
    }

    async fn get_for_update(&mut self, tenant: TenantId, asset_id: &str) -> StoreResult<Option<ContractRecord>> {
        self.fetch_contract(tenant, asset_id, "FOR UPDATE").await
    }

    async fn on_address(&mut self, address: &str) -> StoreResult<Vec<ContractRecord>> {
        let sql = format!("SELECT {CONTRACT_COLUMNS} FROM contracts WHERE address = $1 ORDER BY created_at, id");
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(address.to_ascii_lowercase())
            .fetch_all(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        rows.iter().map(decode_contract).collect()
    }

    async fn update(&mut self, contract: &ContractRecord) -> StoreResult<()> {
        sqlx::query(
            "UPDATE contracts SET name = $1, symbol = $2, decimals = $3, status = $4, address = $5, adopt_address = $6,
                                  failure_reason = $7, updated_at = $8
             WHERE tenant_id = $9 AND id = $10",
        )
        .bind(&contract.name)
        .bind(&contract.symbol)
        .bind(i16::from(contract.decimals))
        .bind(contract.status.as_str())
        .bind(contract.address.as_deref())
        .bind(contract.adopt_address.as_deref())
        .bind(contract.failure_reason.as_deref())
        .bind(contract.updated_at.as_micros())
        .bind(contract.tenant_id.as_uuid())
        .bind(contract.id)
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        Ok(())
    }

    async fn list(
        &mut self,
        tenant: TenantId,
        filter: &ContractFilter,
        page: PageRequest,
    ) -> StoreResult<Page<ContractRecord>> {
        let asset = filter.asset_id.as_deref().map(asset_key);
        let status = filter.status.map(ContractStatus::as_str);
        let total: i64 =
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM contracts WHERE {CONTRACT_FILTER}")))
                .bind(tenant.as_uuid())
                .bind(asset.as_deref())
                .bind(status)
                .fetch_one(&mut *self.tx)
                .await
                .map_err(codec::backend)?;
        let sql = format!(
            "SELECT {CONTRACT_COLUMNS} FROM contracts WHERE {CONTRACT_FILTER}
             ORDER BY created_at ASC, id ASC LIMIT $4 OFFSET $5"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.as_uuid())
            .bind(asset.as_deref())
            .bind(status)
            .bind(i64::from(page.size))
            .bind(codec::sql_i64(page.offset()))
            .fetch_all(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        let items = rows.iter().map(decode_contract).collect::<StoreResult<Vec<_>>>()?;
        Ok(Page { items, total: codec::count(total) })
    }
}

// ---------------------------------------------------------------------------------------------
// Accounts

const ACCOUNT_COLUMNS: &str = "id, tenant_id, account_ref, customer_ref, asset_id, status, wallet_address, failure_reason, generation, provisioned_at, created_at, updated_at";

/// The filter shared by the count and the page: `$1` the tenant, `$2` the customer, `$3` the
/// status, `$4` the asset (each NULL when not filtered on).
const ACCOUNT_FILTER: &str = "tenant_id = $1 AND ($2::text IS NULL OR customer_ref = $2)
     AND ($3::text IS NULL OR status = $3) AND ($4::text IS NULL OR asset_id = $4)";

fn decode_account(row: &PgRow) -> StoreResult<AccountRecord> {
    let status: String = codec::get(row, "status")?;
    let generation: i64 = codec::get(row, "generation")?;
    Ok(AccountRecord {
        id: codec::get(row, "id")?,
        tenant_id: TenantId(codec::get(row, "tenant_id")?),
        account_ref: AccountRef::from_stored(codec::get(row, "account_ref")?),
        customer_ref: CustomerRef::from_stored(codec::get(row, "customer_ref")?),
        asset_id: codec::get(row, "asset_id")?,
        status: AccountStatus::parse(&status)
            .ok_or_else(|| StoreError::Corrupt(format!("account status {status:?}")))?,
        wallet_address: codec::get(row, "wallet_address")?,
        failure_reason: codec::get(row, "failure_reason")?,
        generation: u32::try_from(generation)
            .map_err(|_| StoreError::Corrupt(format!("account generation {generation}")))?,
        provisioned_at: codec::opt_ts(codec::get(row, "provisioned_at")?),
        created_at: codec::ts(codec::get(row, "created_at")?),
        updated_at: codec::ts(codec::get(row, "updated_at")?),
    })
}

impl PostgresTx {
    /// The organisation's account with the reference, locked when `lock` is `FOR UPDATE`.
    async fn fetch_account(
        &mut self,
        tenant: TenantId,
        account_ref: &AccountRef,
        lock: &str,
    ) -> StoreResult<Option<AccountRecord>> {
        let sql = format!("SELECT {ACCOUNT_COLUMNS} FROM accounts WHERE tenant_id = $1 AND account_ref = $2 {lock}");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.as_uuid())
            .bind(account_ref.as_str())
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        row.as_ref().map(decode_account).transpose()
    }
}

#[async_trait]
impl AccountStore for PostgresTx {
    async fn insert(&mut self, account: &AccountRecord) -> StoreResult<()> {
        let sql = format!(
            "INSERT INTO accounts ({ACCOUNT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
             ON CONFLICT DO NOTHING"
        );
        let done = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(account.id)
            .bind(account.tenant_id.as_uuid())
            .bind(account.account_ref.as_str())
            .bind(account.customer_ref.as_str())
            .bind(asset_key(&account.asset_id))
            .bind(account.status.as_str())
            .bind(account.wallet_address.as_deref())
            .bind(account.failure_reason.as_deref())
            .bind(i64::from(account.generation))
            .bind(account.provisioned_at.map(Timestamp::as_micros))
            .bind(account.created_at.as_micros())
            .bind(account.updated_at.as_micros())
            .execute(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        if done.rows_affected() == 0 {
            return Err(codec::conflict("account id or reference"));
        }
        Ok(())
    }

    async fn get(&mut self, tenant: TenantId, account_ref: &AccountRef) -> StoreResult<Option<AccountRecord>> {
        self.fetch_account(tenant, account_ref, "").await
    }

    async fn get_for_update(
        &mut self,
        tenant: TenantId,
        account_ref: &AccountRef,
    ) -> StoreResult<Option<AccountRecord>> {
        self.fetch_account(tenant, account_ref, "FOR UPDATE").await
    }

    async fn update(&mut self, account: &AccountRecord) -> StoreResult<()> {
        sqlx::query(
            "UPDATE accounts SET customer_ref = $1, asset_id = $2, status = $3, wallet_address = $4, failure_reason = $5,
                                 generation = $6, provisioned_at = $7, updated_at = $8
             WHERE tenant_id = $9 AND id = $10",
        )
        .bind(account.customer_ref.as_str())
        .bind(asset_key(&account.asset_id))
        .bind(account.status.as_str())
        .bind(account.wallet_address.as_deref())
        .bind(account.failure_reason.as_deref())
        .bind(i64::from(account.generation))
        .bind(account.provisioned_at.map(Timestamp::as_micros))
        .bind(account.updated_at.as_micros())
        .bind(account.tenant_id.as_uuid())
        .bind(account.id)
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        Ok(())
    }

    async fn list(
        &mut self,
        tenant: TenantId,
        filter: &AccountFilter,
        page: PageRequest,
    ) -> StoreResult<Page<AccountRecord>> {
        let customer = filter.customer_ref.as_ref().map(CustomerRef::as_str);
        let status = filter.status.map(AccountStatus::as_str);
        let asset = filter.asset_id.as_deref().map(asset_key);
        let total: i64 =
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM accounts WHERE {ACCOUNT_FILTER}")))
                .bind(tenant.as_uuid())
                .bind(customer)
                .bind(status)
                .bind(asset.as_deref())
                .fetch_one(&mut *self.tx)
                .await
                .map_err(codec::backend)?;
        let sql = format!(
            "SELECT {ACCOUNT_COLUMNS} FROM accounts WHERE {ACCOUNT_FILTER}
             ORDER BY created_at ASC, id ASC LIMIT $5 OFFSET $6"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.as_uuid())
            .bind(customer)
            .bind(status)
            .bind(asset.as_deref())
            .bind(i64::from(page.size))
            .bind(codec::sql_i64(page.offset()))
            .fetch_all(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        let items = rows.iter().map(decode_account).collect::<StoreResult<Vec<_>>>()?;
        Ok(Page { items, total: codec::count(total) })
    }

    async fn provisioned_after(&mut self, after: Option<Uuid>, limit: u32) -> StoreResult<Vec<AccountRecord>> {
        let sql = format!(
            "SELECT {ACCOUNT_COLUMNS} FROM accounts
             WHERE status IN ('ACTIVE', 'INACTIVE') AND ($1 IS NULL OR id > $1)
             ORDER BY id LIMIT $2"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        rows.iter().map(decode_account).collect()
    }

    async fn for_customer_in_status(
        &mut self,
        tenant: TenantId,
        customer_ref: &CustomerRef,
        status: AccountStatus,
    ) -> StoreResult<Vec<AccountRecord>> {
        let sql = format!(
            "SELECT {ACCOUNT_COLUMNS} FROM accounts WHERE tenant_id = $1 AND customer_ref = $2 AND status = $3
             ORDER BY created_at ASC, id ASC FOR UPDATE"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.as_uuid())
            .bind(customer_ref.as_str())
            .bind(status.as_str())
            .fetch_all(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        rows.iter().map(decode_account).collect()
    }
}
