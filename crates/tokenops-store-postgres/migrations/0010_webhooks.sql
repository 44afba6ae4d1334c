-- Webhook registrations, their deliveries and the platform's JWS_ES256 signing key. The same
-- tables, columns and indexes as the SQLite migration, in PostgreSQL types: timestamps are
-- BIGINT microseconds since the Unix epoch (UTC); identifiers are uuid. Texts compared are
-- COLLATE "C", as SQLite compares them.

-- A deleted registration keeps its row (deleted_at set) so that its deliveries still name it;
-- its URL is free again: the URL is unique per organisation among registrations not deleted.
-- event_types is a JSON array of type names, as text. Secrets are sealed under the master key.
CREATE TABLE webhooks (
    id                          uuid    NOT NULL PRIMARY KEY,
    tenant_id                   uuid    NOT NULL,
    url                         text    COLLATE "C" NOT NULL,
    signature_scheme            text    COLLATE "C" NOT NULL CHECK (signature_scheme IN ('HMAC_SHA256', 'JWS_ES256')),
    event_types                 text    NOT NULL,
    status                      text    COLLATE "C" NOT NULL CHECK (status IN ('ACTIVE', 'INACTIVE', 'SUSPENDED')),
    consecutive_failures        integer NOT NULL CHECK (consecutive_failures >= 0),
    sealed_secret               text,
    sealed_previous_secret      text,
    previous_secret_expires_at  bigint,
    created_at                  bigint  NOT NULL,
    updated_at                  bigint  NOT NULL,
    deleted_at                  bigint
);
CREATE UNIQUE INDEX webhooks_live_url ON webhooks (tenant_id, url) WHERE deleted_at IS NULL;
-- The list: newest first.
CREATE INDEX webhooks_by_tenant_created ON webhooks (tenant_id, created_at, id);

-- One event's delivery to one registration at one generation (1, then one more per replay).
CREATE TABLE webhook_deliveries (
    id                uuid    NOT NULL PRIMARY KEY,
    tenant_id         uuid    NOT NULL,
    event_id          uuid    NOT NULL REFERENCES events (id),
    webhook_id        uuid    NOT NULL REFERENCES webhooks (id),
    generation        integer NOT NULL CHECK (generation >= 1),
    status            text    COLLATE "C" NOT NULL
                      CHECK (status IN ('PENDING', 'RETRY_PENDING', 'DELIVERED', 'PARKED', 'CANCELLED')),
    attempts          integer NOT NULL CHECK (attempts >= 0),
    created_at        bigint  NOT NULL,
    updated_at        bigint  NOT NULL,
    next_retry_at     bigint,
    failure_class     text    COLLATE "C" CHECK (failure_class IN ('UNREACHABLE', 'TIMEOUT', 'REJECTED')),
    failure_reason    text,
    parked_at         bigint,
    last_attempt_at   bigint,
    last_status_code  integer,
    UNIQUE (event_id, webhook_id, generation)
);
-- An event's deliveries, and the latest generation of each (event, registration).
CREATE INDEX webhook_deliveries_by_event ON webhook_deliveries (event_id, webhook_id, generation);
-- A registration's queued deliveries (deletion cancels them, resumption sends them).
CREATE INDEX webhook_deliveries_queued ON webhook_deliveries (webhook_id, created_at)
    WHERE status IN ('PENDING', 'RETRY_PENDING');
-- The replay budget: replays (generation above 1) of an organisation in the last hour.
CREATE INDEX webhook_deliveries_replays ON webhook_deliveries (tenant_id, created_at) WHERE generation > 1;

-- The platform's keys for JWS_ES256 deliveries (one signs; all are published).
CREATE TABLE webhook_signing_keys (
    kid         text    COLLATE "C" NOT NULL PRIMARY KEY,
    sealed_key  text    NOT NULL,
    created_at  bigint  NOT NULL
);
