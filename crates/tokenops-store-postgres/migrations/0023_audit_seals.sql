-- A record's seal moves out of the record into a narrow table of its own, and the sealer's work
-- list becomes a queue of its own. Sealing used to update each record: a new version of a wide
-- row with fifteen indexes, each given a new entry (48-58 ms per block of 1,000 under load).
-- Now a record is written once and never updated; sealing inserts narrow rows into a table of
-- two indexes and deletes the same number from the queue.
-- chain_id, as in audit_blocks: the organisation's id, or the nil UUID for records of none.
CREATE TABLE audit_seals (
    record_id     uuid   PRIMARY KEY,
    chain_id      uuid   NOT NULL,
    chain_seq     bigint NOT NULL,
    block_number  bigint NOT NULL,
    record_hash   text   NOT NULL
);
-- A verifier and the search's totals read a chain in order.
CREATE UNIQUE INDEX audit_seals_by_chain ON audit_seals (chain_id, chain_seq);

-- Every record not sealed yet, written with the record (in its transaction) and deleted by the
-- statement that seals it.
CREATE TABLE audit_unsealed (
    record_id          uuid   PRIMARY KEY,
    chain_id           uuid   NOT NULL,
    record_created_at  bigint NOT NULL
);
CREATE INDEX audit_unsealed_by_chain ON audit_unsealed (chain_id, record_created_at, record_id);

INSERT INTO audit_seals (record_id, chain_id, chain_seq, block_number, record_hash)
SELECT id, COALESCE(tenant_id, '00000000-0000-0000-0000-000000000000'), chain_seq, block_number, record_hash
FROM audit_records WHERE chain_seq IS NOT NULL;

INSERT INTO audit_unsealed (record_id, chain_id, record_created_at)
SELECT id, COALESCE(tenant_id, '00000000-0000-0000-0000-000000000000'), created_at
FROM audit_records WHERE chain_seq IS NULL;

-- Their indexes (audit_records_unsealed, audit_records_by_chain_seq) go with them.
ALTER TABLE audit_records DROP COLUMN chain_seq, DROP COLUMN block_number, DROP COLUMN record_hash;
