//! Token operations on PostgreSQL: `OperationStore`.
//!
//! Inserts use `ON CONFLICT DO NOTHING` and report a duplicate as `StoreError::Conflict` from the
//! row count (see `codec::conflict`).
//!
//! Lists are built from the filters actually given (each a fixed fragment, numbered after the
//! tenant; `clause`), so that every combination, prepared once and planned generically, is a
//! plain indexed statement rather than one with `$n IS NULL OR …` terms. No request text reaches
//! the SQL.

use crate::clause::{self, Clause};
use crate::{PostgresTx, codec};
use async_trait::async_trait;
use std::sync::LazyLock;
use tokenops_domain::account::AccountRef;
use tokenops_domain::asset::AssetId;
use tokenops_domain::contract::ContractStatus;
use tokenops_domain::operation::{Operation, OperationFilter};
use tokenops_domain::paging::{KeysetPosition, KeysetRequest, Page, PageRequest};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::rows::{self, OPERATION_COLUMNS};
use tokenops_store::{InFlight, OperationStore, StoreResult, SubmissionReads};
use tokenops_store::{conditions, sorting};
use uuid::Uuid;

/// Built once: it runs on every accepted submission.
static SUBMISSION_READS: LazyLock<String> =
    LazyLock::new(|| rows::submission_reads_sql("$1", "$2", "$3", "a.account_ref = ANY($4)"));

/// An operation list's WHERE clause on PostgreSQL, whose row comparison reads the keyset's
/// position off the index.
fn selection(filter: &OperationFilter, after: Option<KeysetPosition>) -> Clause {
    conditions::operation_selection(filter, after, "state", |at, id| format!("(created_at, id) < ({at}, {id})"))
}

#[async_trait]
impl OperationStore for PostgresTx {
    async fn submission_reads(
        &mut self,
        tenant: TenantId,
        asset: AssetId,
        accounts: &[AccountRef],
    ) -> StoreResult<SubmissionReads> {
        let query = sqlx::query(SUBMISSION_READS.as_str())
            .bind(tenant.as_uuid())
            .bind(codec::asset_text(asset))
            .bind(ContractStatus::Active.as_str())
            .bind(accounts.iter().map(AccountRef::as_str).collect::<Vec<_>>());
        let found = self.fetch_all(query, |row| rows::submission_row(&codec::Cols(row))).await?;
        Ok(rows::submission_reads(found))
    }

    /// Held back and written with the transaction's next statement (`deferred`).
    async fn insert(&mut self, op: &Operation) -> StoreResult<()> {
        self.hold_back()?.new_operation(op)
    }

    async fn get_many(&mut self, ids: &[(TenantId, Uuid)], for_update: bool) -> StoreResult<Vec<Option<Operation>>> {
        // Locked in id order, as every batch locks them, so two batches never wait on each other
        // in opposite orders.
        let lock = if for_update { "ORDER BY id FOR UPDATE" } else { "" };
        let sql = format!("SELECT {OPERATION_COLUMNS} FROM operations WHERE id = ANY($1) {lock}");
        let wanted: Vec<Uuid> = ids.iter().map(|(_, id)| *id).collect();
        let operations: Vec<Operation> =
            self.fetch_all(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(&wanted), codec::decoded).await?;
        let mut found = std::collections::HashMap::with_capacity(operations.len());
        for operation in operations {
            found.insert((operation.tenant_id, operation.id), operation);
        }
        Ok(ids.iter().map(|key| found.remove(key)).collect())
    }

    async fn unsettled_signed(&mut self, limit: u32) -> StoreResult<Vec<Operation>> {
        let sql = format!(
            "SELECT {OPERATION_COLUMNS} FROM operations
             WHERE state IN ('PENDING_SETTLEMENT', 'SETTLING') AND signed_transaction IS NOT NULL
             ORDER BY created_at, id LIMIT $1"
        );
        self.fetch_all(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(i64::from(limit)), codec::decoded).await
    }

    async fn in_flight_unchanged_since(&mut self, before: Timestamp, limit: u32) -> StoreResult<Vec<InFlight>> {
        // The organisations are walked by one index seek each (a loose index scan), and each
        // one's in-flight operations are a range of the (tenant, state) index (LATERAL lets it
        // be a lookup per organisation): the sweep never needs to read settled operations.
        self.fetch_all(
            sqlx::query(
                "WITH RECURSIVE tenant(id) AS (
                 SELECT (SELECT tenant_id FROM operations ORDER BY tenant_id LIMIT 1)
                 UNION ALL
                 SELECT (SELECT tenant_id FROM operations WHERE tenant_id > tenant.id ORDER BY tenant_id LIMIT 1)
                 FROM tenant
                 WHERE tenant.id IS NOT NULL
             )
             SELECT o.* FROM tenant CROSS JOIN LATERAL (
                 SELECT tenant_id, id, state, updated_at FROM operations
                 WHERE tenant_id = tenant.id AND state IN ('SUBMITTED', 'PENDING_SETTLEMENT', 'SETTLING')
                   AND updated_at < $1
             ) AS o
             ORDER BY o.updated_at, o.id LIMIT $2",
            )
            .bind(before.as_micros())
            .bind(i64::from(limit)),
            |row| rows::in_flight(&codec::Cols(row)),
        )
        .await
    }

    /// Held back and written with the transaction's next statement (`deferred`): a step's batch
    /// updates all its operations in one statement.
    async fn update(&mut self, op: &Operation) -> StoreResult<()> {
        self.hold_back()?.operation(op);
        Ok(())
    }

    async fn list(
        &mut self,
        tenant: TenantId,
        filter: &OperationFilter,
        page: PageRequest,
    ) -> StoreResult<Page<Operation>> {
        let clause = selection(filter, None);
        self.flush().await?;
        self.page_of(&clause, tenant, &rows::OPERATIONS, sorting::NEWEST_FIRST, page, codec::decoded).await
    }

    async fn list_after(
        &mut self,
        tenant: TenantId,
        filter: &OperationFilter,
        window: KeysetRequest,
    ) -> StoreResult<Vec<Operation>> {
        let clause = selection(filter, window.after);
        let limit = clause.placeholder(clause.next());
        let sql = format!("{} LIMIT {limit}", clause.rows_sql("operations", OPERATION_COLUMNS, sorting::NEWEST_FIRST));
        self.fetch_all(
            clause::bind(&clause, tenant, sqlx::query(sqlx::AssertSqlSafe(sql))).bind(i64::from(window.limit)),
            codec::decoded,
        )
        .await
    }
}
