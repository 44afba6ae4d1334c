-- Token operations, their locks, breaks (what needs an operator's look) and positions (what the
-- service expects each account's ledger balances to be). The same tables, columns and indexes as
-- the SQLite migration, in PostgreSQL types: timestamps are BIGINT microseconds since the Unix
-- epoch (UTC); identifiers are uuid; params is jsonb; amounts are BIGINT minor units (an i64).
-- Assets are their upper-case ISO 4217 code (the store upper-cases the ASCII letters it is
-- given). Enumerations are their names, as the domain spells them.
--
-- The texts a list filters on, and may come to sort by (codes, references and statuses), are
-- COLLATE "C": code point order, the order of SQLite's BINARY collation, so that both stores
-- list alike whatever the server's locale.

-- params is the submitted JSON object; lock_id names the lock a RELEASE or CANCEL completes (a
-- LOCK's own id); signed_transaction keeps the signed ledger transaction (hex) between signing
-- and sending; block_number is a u64 that fits an i64.
CREATE TABLE operations (
    id                  uuid    NOT NULL PRIMARY KEY,
    tenant_id           uuid    NOT NULL,
    tx_type             text    COLLATE "C" NOT NULL
                                CHECK (tx_type IN ('TRANSFER', 'LOCK', 'RELEASE', 'CANCEL', 'MINT', 'BURN')),
    asset_id            text    COLLATE "C" NOT NULL,
    account_ref         text    COLLATE "C" NOT NULL,
    customer_ref        text    COLLATE "C" NOT NULL,
    counterparty_ref    text    COLLATE "C",
    amount              bigint  NOT NULL,
    params              jsonb   NOT NULL,
    lock_id             uuid,
    state               text    COLLATE "C" NOT NULL
                                CHECK (state IN ('SUBMITTED', 'AWAITING_APPROVAL', 'PENDING_SETTLEMENT', 'SETTLING',
                                                 'CONFIRMED', 'FAILED', 'CANCELLED')),
    tx_hash             text,
    block_number        bigint  CHECK (block_number >= 0),
    failure_code        text    COLLATE "C"
                                CHECK (failure_code IN ('VALIDATION_REJECTED', 'APPROVAL_REJECTED', 'SIGNING_REJECTED',
                                                        'CHAIN_FAILED', 'RETRY_EXHAUSTED', 'UNPROCESSABLE',
                                                        'POLICY_EXPIRED', 'POLICY_TIMEOUT')),
    reason_code         text    COLLATE "C",
    signed_transaction  text,
    submitted_by        text    NOT NULL,
    idempotency_key     text,
    correlation_id      text,
    created_at          bigint  NOT NULL,
    updated_at          bigint  NOT NULL
);
-- Lists (newest first, then id) and keyset pages, unfiltered and by each indexed filter; an
-- account's operations are those it originates and those it is the counterparty of (one index
-- each; the store merges the two in list order).
CREATE INDEX operations_by_tenant_created ON operations (tenant_id, created_at, id);
CREATE INDEX operations_by_tenant_account ON operations (tenant_id, account_ref, created_at, id);
CREATE INDEX operations_by_tenant_counterparty ON operations (tenant_id, counterparty_ref, created_at, id);
CREATE INDEX operations_by_tenant_state ON operations (tenant_id, state, created_at, id);

-- One per LOCK operation (the same id). completed_by is the RELEASE or CANCEL (or expiry)
-- completing it, once one is in flight.
CREATE TABLE locks (
    id                uuid    NOT NULL PRIMARY KEY,
    tenant_id         uuid    NOT NULL,
    account_ref       text    COLLATE "C" NOT NULL,
    counterparty_ref  text    COLLATE "C",
    asset_id          text    COLLATE "C" NOT NULL,
    amount            bigint  NOT NULL,
    expires_at        bigint,
    status            text    COLLATE "C" NOT NULL
                              CHECK (status IN ('PENDING', 'ACTIVE', 'RELEASED', 'CANCELLED', 'EXPIRED', 'FAILED')),
    completed_by      uuid,
    created_at        bigint  NOT NULL,
    updated_at        bigint  NOT NULL
);
-- An account's locks (newest first), in any status or in one.
CREATE INDEX locks_by_tenant_account ON locks (tenant_id, account_ref, created_at, id);
CREATE INDEX locks_by_tenant_account_status ON locks (tenant_id, account_ref, status, created_at, id);
-- The expiry sweep: only the locks it may have to expire, soonest first. Its query repeats this
-- predicate literally, so that the planner can prove the index applies.
CREATE INDEX locks_expiring ON locks (expires_at, id)
    WHERE status = 'ACTIVE' AND completed_by IS NULL AND expires_at IS NOT NULL;

-- transaction_id is the operation concerned, when there is one.
CREATE TABLE breaks (
    id              uuid    NOT NULL PRIMARY KEY,
    tenant_id       uuid    NOT NULL,
    transaction_id  uuid,
    account_ref     text    COLLATE "C" NOT NULL,
    asset_id        text    COLLATE "C" NOT NULL,
    reason          text    COLLATE "C" NOT NULL
                            CHECK (reason IN ('CHAIN_FAILED', 'RETRY_EXHAUSTED', 'BALANCE_MISMATCH')),
    detail          text    NOT NULL,
    detected_at     bigint  NOT NULL
);
-- Lists (newest first, then id), unfiltered and by each filter.
CREATE INDEX breaks_by_tenant_detected ON breaks (tenant_id, detected_at, id);
CREATE INDEX breaks_by_tenant_account ON breaks (tenant_id, account_ref, detected_at, id);
CREATE INDEX breaks_by_tenant_reason ON breaks (tenant_id, reason, detected_at, id);

-- total includes held (both minor units); a missing row is a zero position.
CREATE TABLE positions (
    tenant_id    uuid    NOT NULL,
    account_ref  text    COLLATE "C" NOT NULL,
    total        bigint  NOT NULL,
    held         bigint  NOT NULL,
    updated_at   bigint  NOT NULL,
    PRIMARY KEY (tenant_id, account_ref)
);
