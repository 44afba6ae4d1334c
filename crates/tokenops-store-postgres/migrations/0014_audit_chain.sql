-- The audit log's sealed chain (docs/audit.md): each record's place in its organisation's chain,
-- set by the sealer, and the blocks with their hashes and signed heads. A record is written
-- unsealed (chain_seq NULL); the sealer takes the unsealed records it can see, so one that
-- commits late is sealed in a later block, never skipped.
ALTER TABLE audit_records ADD COLUMN chain_seq bigint;
ALTER TABLE audit_records ADD COLUMN block_number bigint;
ALTER TABLE audit_records ADD COLUMN record_hash text;
-- The sealer's work list: small, since a sealed record leaves it.
CREATE INDEX audit_records_unsealed ON audit_records (tenant_id, created_at, id) WHERE chain_seq IS NULL;
-- A verifier reads a chain in order.
CREATE UNIQUE INDEX audit_records_by_chain_seq ON audit_records (tenant_id, chain_seq) WHERE chain_seq IS NOT NULL;

-- chain_id: the organisation's id, or the nil UUID for records of no organisation.
CREATE TABLE audit_blocks (
    chain_id        uuid    NOT NULL,
    block_number    bigint NOT NULL,
    previous_hash   text    NOT NULL,
    hash            text    NOT NULL,
    first_seq       bigint NOT NULL,
    record_count    bigint NOT NULL,
    sealed_at       bigint NOT NULL,
    head_signature  text    NOT NULL,
    PRIMARY KEY (chain_id, block_number)
);

-- The search's equality filters, each with the default order (occurred_at) behind it so that a
-- filtered page is read in order from the index. The occurred_at range alone uses
-- audit_records_by_tenant_occurred (migration 1).
CREATE INDEX audit_records_by_actor ON audit_records (tenant_id, actor_id, occurred_at);
CREATE INDEX audit_records_by_request ON audit_records (tenant_id, request_id, occurred_at);
CREATE INDEX audit_records_by_action ON audit_records (tenant_id, action, occurred_at);
CREATE INDEX audit_records_by_source ON audit_records (tenant_id, source, occurred_at);
CREATE INDEX audit_records_by_resource_type ON audit_records (tenant_id, resource_type, occurred_at);
CREATE INDEX audit_records_by_resource_id ON audit_records (tenant_id, resource_id, occurred_at);
