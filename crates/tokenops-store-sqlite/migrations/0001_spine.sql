-- The platform spine: customers, the events outbox, audit records, idempotency records, jobs
-- and platform settings. Timestamps are INTEGER microseconds since the Unix epoch (UTC);
-- identifiers are hyphenated UUID text; JSON is text. STRICT refuses values of the wrong type.

CREATE TABLE customers (
    id            TEXT    NOT NULL PRIMARY KEY,
    tenant_id     TEXT    NOT NULL,
    customer_ref  TEXT    NOT NULL,
    display_name  TEXT,
    status        TEXT    NOT NULL CHECK (status IN ('ACTIVE', 'INACTIVE')),
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    UNIQUE (tenant_id, customer_ref)
) STRICT;
CREATE INDEX customers_by_tenant_created ON customers (tenant_id, created_at, id);

CREATE TABLE events (
    id               TEXT    NOT NULL PRIMARY KEY,
    tenant_id        TEXT    NOT NULL,
    event_type       TEXT    NOT NULL,
    occurred_at      INTEGER NOT NULL,
    correlation_id   TEXT,
    idempotency_key  TEXT,
    resource_type    TEXT    NOT NULL,
    resource_id      TEXT    NOT NULL,
    data             TEXT    NOT NULL,
    dispatched_at    INTEGER
) STRICT;
CREATE INDEX events_by_tenant_occurred ON events (tenant_id, occurred_at, id);

CREATE TABLE audit_records (
    id               TEXT    NOT NULL PRIMARY KEY,
    tenant_id        TEXT,
    occurred_at      INTEGER NOT NULL,
    created_at       INTEGER NOT NULL,
    action           TEXT    NOT NULL,
    category         TEXT    NOT NULL,
    source           TEXT    NOT NULL,
    actor_id         TEXT,
    resource_type    TEXT    NOT NULL,
    resource_id      TEXT,
    outcome          TEXT    NOT NULL CHECK (outcome IN ('SUCCESS', 'FAILURE')),
    request_id       TEXT,
    idempotency_key  TEXT,
    http_status      INTEGER,
    detail           TEXT    NOT NULL
) STRICT;
CREATE INDEX audit_records_by_tenant_occurred ON audit_records (tenant_id, occurred_at, id);

CREATE TABLE idempotency_records (
    tenant_id         TEXT    NOT NULL,
    operation         TEXT    NOT NULL,
    idempotency_key   TEXT    NOT NULL,
    request_hash      TEXT    NOT NULL,
    state             TEXT    NOT NULL CHECK (state IN ('IN_FLIGHT', 'COMPLETED')),
    lease_token       TEXT,
    lease_until       INTEGER,
    response_status   INTEGER,
    response_body     TEXT,
    response_headers  TEXT,
    created_at        INTEGER NOT NULL,
    completed_at      INTEGER,
    PRIMARY KEY (tenant_id, operation, idempotency_key)
) STRICT;
CREATE INDEX idempotency_records_by_created ON idempotency_records (created_at);

CREATE TABLE jobs (
    id            TEXT    NOT NULL PRIMARY KEY,
    kind          TEXT    NOT NULL,
    tenant_id     TEXT,
    payload       TEXT    NOT NULL,
    status        TEXT    NOT NULL CHECK (status IN ('queued', 'running', 'done', 'dead')),
    attempts      INTEGER NOT NULL,
    max_attempts  INTEGER NOT NULL,
    run_at        INTEGER NOT NULL,
    lease_token   TEXT,
    lease_until   INTEGER,
    last_error    TEXT,
    dedupe_key    TEXT,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
) STRICT;
CREATE INDEX jobs_due ON jobs (status, run_at);
CREATE INDEX jobs_leased ON jobs (status, lease_until);
CREATE UNIQUE INDEX jobs_one_live_per_dedupe_key ON jobs (dedupe_key)
    WHERE dedupe_key IS NOT NULL AND status IN ('queued', 'running');

CREATE TABLE settings (
    name   TEXT NOT NULL PRIMARY KEY,
    value  TEXT NOT NULL
) STRICT;
