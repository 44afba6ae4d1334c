//! Audit records as read from either backend.

use super::Columns;
use crate::StoreResult;
use tokenops_domain::audit::{AuditOutcome, AuditRecord, AuditSeal, AuditSource};
use tokenops_domain::audit_chain::AuditBlock;

/// A record with its seal's columns (NULL while unsealed): SQLite keeps them in the record's
/// row, PostgreSQL joins them from `audit_seals`.
pub const AUDIT_COLUMNS: &str = "id, tenant_id, occurred_at, created_at, action, category, source, actor_id, resource_type, resource_id, outcome, request_id, idempotency_key, http_status, detail, chain_seq, block_number, record_hash";

pub const AUDIT_BLOCK_COLUMNS: &str =
    "chain_id, block_number, previous_hash, hash, first_seq, record_count, sealed_at, head_signature";

pub fn audit_record(row: &impl Columns) -> StoreResult<AuditRecord> {
    Ok(AuditRecord {
        id: row.uuid("id")?,
        tenant_id: row.opt_tenant("tenant_id")?,
        occurred_at: row.timestamp("occurred_at")?,
        created_at: row.timestamp("created_at")?,
        action: row.text("action")?,
        category: row.text("category")?,
        source: row.parsed("source", "audit source", AuditSource::parse)?,
        actor_id: row.opt_text("actor_id")?,
        resource_type: row.text("resource_type")?,
        resource_id: row.opt_text("resource_id")?,
        outcome: row.parsed("outcome", "audit outcome", AuditOutcome::parse)?,
        request_id: row.opt_text("request_id")?,
        idempotency_key: row.opt_text("idempotency_key")?,
        // A status outside u16 was never written; it reads as absent, as it always has.
        http_status: row.opt_int("http_status")?.and_then(|s| u16::try_from(s).ok()),
        detail: row.json("detail")?,
        seal: match (row.opt_int("chain_seq")?, row.opt_int("block_number")?, row.opt_text("record_hash")?) {
            (Some(chain_seq), Some(block_number), Some(record_hash)) => {
                Some(AuditSeal { chain_seq, block_number, record_hash })
            }
            _ => None,
        },
    })
}

/// A stored block's number and hash, what a chain's verification compares.
pub fn audit_block_hash(row: &impl Columns) -> StoreResult<(i64, String)> {
    Ok((row.int("block_number")?, row.text("hash")?))
}

pub fn audit_block(row: &impl Columns) -> StoreResult<AuditBlock> {
    Ok(AuditBlock {
        chain_id: row.uuid("chain_id")?,
        number: row.int("block_number")?,
        previous_hash: row.text("previous_hash")?,
        hash: row.text("hash")?,
        first_seq: row.int("first_seq")?,
        record_count: row.int("record_count")?,
        sealed_at: row.timestamp("sealed_at")?,
        head_signature: row.text("head_signature")?,
    })
}
