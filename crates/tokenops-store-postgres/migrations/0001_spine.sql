-- The platform spine: customers, the events outbox, audit records, idempotency records, jobs
-- and platform settings. The same tables, columns and indexes as the SQLite spine, in
-- PostgreSQL types: timestamps are BIGINT microseconds since the Unix epoch (UTC), the one
-- canonical encoding of the project (deliberately not timestamptz); identifiers are uuid; JSON
-- is jsonb. Counters that hold a u32 are BIGINT so that every u32 fits.

CREATE TABLE customers (
    id            uuid    NOT NULL PRIMARY KEY,
    tenant_id     uuid    NOT NULL,
    customer_ref  text    NOT NULL,
    display_name  text,
    status        text    NOT NULL CHECK (status IN ('ACTIVE', 'INACTIVE')),
    created_at    bigint  NOT NULL,
    updated_at    bigint  NOT NULL,
    UNIQUE (tenant_id, customer_ref)
);
CREATE INDEX customers_by_tenant_created ON customers (tenant_id, created_at, id);

CREATE TABLE events (
    id               uuid    NOT NULL PRIMARY KEY,
    tenant_id        uuid    NOT NULL,
    event_type       text    NOT NULL,
    occurred_at      bigint  NOT NULL,
    correlation_id   text,
    idempotency_key  text,
    resource_type    text    NOT NULL,
    resource_id      text    NOT NULL,
    data             jsonb   NOT NULL,
    dispatched_at    bigint
);
CREATE INDEX events_by_tenant_occurred ON events (tenant_id, occurred_at, id);

CREATE TABLE audit_records (
    id               uuid    NOT NULL PRIMARY KEY,
    tenant_id        uuid,
    occurred_at      bigint  NOT NULL,
    created_at       bigint  NOT NULL,
    action           text    NOT NULL,
    category         text    NOT NULL,
    source           text    NOT NULL,
    actor_id         text,
    resource_type    text    NOT NULL,
    resource_id      text,
    outcome          text    NOT NULL CHECK (outcome IN ('SUCCESS', 'FAILURE')),
    request_id       text,
    idempotency_key  text,
    http_status      integer,
    detail           jsonb   NOT NULL
);
CREATE INDEX audit_records_by_tenant_occurred ON audit_records (tenant_id, occurred_at, id);

-- The platform (no organisation) is the nil UUID in tenant_id: the column is part of the key.
CREATE TABLE idempotency_records (
    tenant_id         uuid    NOT NULL,
    operation         text    NOT NULL,
    idempotency_key   text    NOT NULL,
    request_hash      text    NOT NULL,
    state             text    NOT NULL CHECK (state IN ('IN_FLIGHT', 'COMPLETED')),
    lease_token       uuid,
    lease_until       bigint,
    response_status   integer,
    response_body     text,
    response_headers  jsonb,
    created_at        bigint  NOT NULL,
    completed_at      bigint,
    PRIMARY KEY (tenant_id, operation, idempotency_key)
);
CREATE INDEX idempotency_records_by_created ON idempotency_records (created_at);

CREATE TABLE jobs (
    id            uuid    NOT NULL PRIMARY KEY,
    kind          text    NOT NULL,
    tenant_id     uuid,
    payload       jsonb   NOT NULL,
    status        text    NOT NULL CHECK (status IN ('queued', 'running', 'done', 'dead')),
    attempts      bigint  NOT NULL,
    max_attempts  bigint  NOT NULL,
    run_at        bigint  NOT NULL,
    lease_token   uuid,
    lease_until   bigint,
    last_error    text,
    dedupe_key    text,
    created_at    bigint  NOT NULL,
    updated_at    bigint  NOT NULL
);
CREATE INDEX jobs_due ON jobs (status, run_at);
CREATE INDEX jobs_leased ON jobs (status, lease_until);
CREATE UNIQUE INDEX jobs_one_live_per_dedupe_key ON jobs (dedupe_key)
    WHERE dedupe_key IS NOT NULL AND status IN ('queued', 'running');

CREATE TABLE settings (
    name   text NOT NULL PRIMARY KEY,
    value  text NOT NULL
);
