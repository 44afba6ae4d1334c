-- Token operations, their locks, breaks (what needs an operator's look) and positions (what the
-- service expects each account's ledger balances to be). Timestamps are INTEGER microseconds
-- since the Unix epoch (UTC); identifiers are hyphenated UUID text; JSON is text; amounts are
-- INTEGER minor units (an i64). Assets are their upper-case ISO 4217 code (the store
-- upper-cases the ASCII letters it is given). Enumerations are their names, as the domain spells
-- them.

-- params is the submitted JSON object; lock_id names the lock a RELEASE or CANCEL completes (a
-- LOCK's own id); signed_transaction keeps the signed ledger transaction (hex) between signing
-- and sending; block_number is a u64 that fits an i64.
CREATE TABLE operations (
    id                  TEXT    NOT NULL PRIMARY KEY,
    tenant_id           TEXT    NOT NULL,
    tx_type             TEXT    NOT NULL
                                CHECK (tx_type IN ('TRANSFER', 'LOCK', 'RELEASE', 'CANCEL', 'MINT', 'BURN')),
    asset_id            TEXT    NOT NULL,
    account_ref         TEXT    NOT NULL,
    customer_ref        TEXT    NOT NULL,
    counterparty_ref    TEXT,
    amount              INTEGER NOT NULL,
    params              TEXT    NOT NULL,
    lock_id             TEXT,
    state               TEXT    NOT NULL
                                CHECK (state IN ('SUBMITTED', 'AWAITING_APPROVAL', 'PENDING_SETTLEMENT', 'SETTLING',
                                                 'CONFIRMED', 'FAILED', 'CANCELLED')),
    tx_hash             TEXT,
    block_number        INTEGER CHECK (block_number >= 0),
    failure_code        TEXT
                                CHECK (failure_code IN ('VALIDATION_REJECTED', 'APPROVAL_REJECTED', 'SIGNING_REJECTED',
                                                        'CHAIN_FAILED', 'RETRY_EXHAUSTED', 'UNPROCESSABLE',
                                                        'POLICY_EXPIRED', 'POLICY_TIMEOUT')),
    reason_code         TEXT,
    signed_transaction  TEXT,
    submitted_by        TEXT    NOT NULL,
    idempotency_key     TEXT,
    correlation_id      TEXT,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL
) STRICT;
-- Lists (newest first, then id) and keyset pages, unfiltered and by each indexed filter; an
-- account's operations are those it originates and those it is the counterparty of (one index
-- each, joined by SQLite's OR optimisation).
CREATE INDEX operations_by_tenant_created ON operations (tenant_id, created_at, id);
CREATE INDEX operations_by_tenant_account ON operations (tenant_id, account_ref, created_at, id);
CREATE INDEX operations_by_tenant_counterparty ON operations (tenant_id, counterparty_ref, created_at, id);
CREATE INDEX operations_by_tenant_state ON operations (tenant_id, state, created_at, id);

-- One per LOCK operation (the same id). completed_by is the RELEASE or CANCEL (or expiry)
-- completing it, once one is in flight.
CREATE TABLE locks (
    id                TEXT    NOT NULL PRIMARY KEY,
    tenant_id         TEXT    NOT NULL,
    account_ref       TEXT    NOT NULL,
    counterparty_ref  TEXT,
    asset_id          TEXT    NOT NULL,
    amount            INTEGER NOT NULL,
    expires_at        INTEGER,
    status            TEXT    NOT NULL
                              CHECK (status IN ('PENDING', 'ACTIVE', 'RELEASED', 'CANCELLED', 'EXPIRED', 'FAILED')),
    completed_by      TEXT,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL
) STRICT;
-- An account's locks (newest first), in any status or in one.
CREATE INDEX locks_by_tenant_account ON locks (tenant_id, account_ref, created_at, id);
CREATE INDEX locks_by_tenant_account_status ON locks (tenant_id, account_ref, status, created_at, id);
-- The expiry sweep: only the locks it may have to expire, soonest first. Its query repeats this
-- predicate literally, so that SQLite can prove the index applies.
CREATE INDEX locks_expiring ON locks (expires_at, id)
    WHERE status = 'ACTIVE' AND completed_by IS NULL AND expires_at IS NOT NULL;

-- transaction_id is the operation concerned, when there is one.
CREATE TABLE breaks (
    id              TEXT    NOT NULL PRIMARY KEY,
    tenant_id       TEXT    NOT NULL,
    transaction_id  TEXT,
    account_ref     TEXT    NOT NULL,
    asset_id        TEXT    NOT NULL,
    reason          TEXT    NOT NULL
                            CHECK (reason IN ('CHAIN_FAILED', 'RETRY_EXHAUSTED', 'BALANCE_MISMATCH')),
    detail          TEXT    NOT NULL,
    detected_at     INTEGER NOT NULL
) STRICT;
-- Lists (newest first, then id), unfiltered and by each filter.
CREATE INDEX breaks_by_tenant_detected ON breaks (tenant_id, detected_at, id);
CREATE INDEX breaks_by_tenant_account ON breaks (tenant_id, account_ref, detected_at, id);
CREATE INDEX breaks_by_tenant_reason ON breaks (tenant_id, reason, detected_at, id);

-- total includes held (both minor units); a missing row is a zero position.
CREATE TABLE positions (
    tenant_id    TEXT    NOT NULL,
    account_ref  TEXT    NOT NULL,
    total        INTEGER NOT NULL,
    held         INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, account_ref)
) STRICT, WITHOUT ROWID;
