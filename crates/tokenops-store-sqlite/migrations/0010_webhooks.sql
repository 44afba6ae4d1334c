-- Webhook registrations, their deliveries and the platform's JWS_ES256 signing key.
-- Timestamps are integer microseconds since the Unix epoch (UTC).

-- A deleted registration keeps its row (deleted_at set) so that its deliveries still name it;
-- its URL is free again: the URL is unique per organisation among registrations not deleted.
-- event_types is a JSON array of type names. Secrets are sealed under the master key.
CREATE TABLE webhooks (
    id                          TEXT    NOT NULL PRIMARY KEY,
    tenant_id                   TEXT    NOT NULL,
    url                         TEXT    NOT NULL,
    signature_scheme            TEXT    NOT NULL CHECK (signature_scheme IN ('HMAC_SHA256', 'JWS_ES256')),
    event_types                 TEXT    NOT NULL,
    status                      TEXT    NOT NULL CHECK (status IN ('ACTIVE', 'INACTIVE', 'SUSPENDED')),
    consecutive_failures        INTEGER NOT NULL CHECK (consecutive_failures >= 0),
    sealed_secret               TEXT,
    sealed_previous_secret      TEXT,
    previous_secret_expires_at  INTEGER,
    created_at                  INTEGER NOT NULL,
    updated_at                  INTEGER NOT NULL,
    deleted_at                  INTEGER
) STRICT;
CREATE UNIQUE INDEX webhooks_live_url ON webhooks (tenant_id, url) WHERE deleted_at IS NULL;
-- The list: newest first.
CREATE INDEX webhooks_by_tenant_created ON webhooks (tenant_id, created_at, id);

-- One event's delivery to one registration at one generation (1, then one more per replay).
CREATE TABLE webhook_deliveries (
    id                TEXT    NOT NULL PRIMARY KEY,
    tenant_id         TEXT    NOT NULL,
    event_id          TEXT    NOT NULL REFERENCES events (id),
    webhook_id        TEXT    NOT NULL REFERENCES webhooks (id),
    generation        INTEGER NOT NULL CHECK (generation >= 1),
    status            TEXT    NOT NULL
                      CHECK (status IN ('PENDING', 'RETRY_PENDING', 'DELIVERED', 'PARKED', 'CANCELLED')),
    attempts          INTEGER NOT NULL CHECK (attempts >= 0),
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    next_retry_at     INTEGER,
    failure_class     TEXT    CHECK (failure_class IN ('UNREACHABLE', 'TIMEOUT', 'REJECTED')),
    failure_reason    TEXT,
    parked_at         INTEGER,
    last_attempt_at   INTEGER,
    last_status_code  INTEGER,
    UNIQUE (event_id, webhook_id, generation)
) STRICT;
-- An event's deliveries, and the latest generation of each (event, registration).
CREATE INDEX webhook_deliveries_by_event ON webhook_deliveries (event_id, webhook_id, generation);
-- A registration's queued deliveries (deletion cancels them, resumption sends them).
CREATE INDEX webhook_deliveries_queued ON webhook_deliveries (webhook_id, created_at)
    WHERE status IN ('PENDING', 'RETRY_PENDING');
-- The replay budget: replays (generation above 1) of an organisation in the last hour.
CREATE INDEX webhook_deliveries_replays ON webhook_deliveries (tenant_id, created_at) WHERE generation > 1;

-- The platform's keys for JWS_ES256 deliveries (one signs; all are published).
CREATE TABLE webhook_signing_keys (
    kid         TEXT    NOT NULL PRIMARY KEY,
    sealed_key  TEXT    NOT NULL,
    created_at  INTEGER NOT NULL
) STRICT;
