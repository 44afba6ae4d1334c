-- Scripts, their versions, automations and their executions. JSON documents are kept as text;
-- timestamps are INTEGER microseconds since the Unix epoch (UTC); enumerations are their wire
-- names.

-- A script's name is unique among its organisation's scripts that are not deleted. `imports`
-- is the JSON array of the names its source imports; `dependencies` the imports resolved at its
-- last publication ([{name, scriptId, version}]).
CREATE TABLE scripts (
    id              TEXT    NOT NULL PRIMARY KEY,
    tenant_id       TEXT    NOT NULL,
    name            TEXT    NOT NULL,
    description     TEXT,
    status          TEXT    NOT NULL CHECK (status IN ('DRAFT', 'PUBLISHED', 'OUTDATED', 'DEPRECATED', 'DELETED')),
    version         INTEGER NOT NULL CHECK (version >= 1),
    source          TEXT    NOT NULL,
    parameters      TEXT    NOT NULL,
    imports         TEXT    NOT NULL,
    dependencies    TEXT    NOT NULL,
    root_script_id  TEXT    NOT NULL,
    cloned_from     TEXT,
    created_by      TEXT    NOT NULL,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    published_at    INTEGER
) STRICT;
CREATE UNIQUE INDEX scripts_live_name ON scripts (tenant_id, name) WHERE status <> 'DELETED';
CREATE INDEX scripts_by_tenant_created ON scripts (tenant_id, created_at, id);

-- Every version of a script's code, kept so that a dependant runs the version it resolved.
CREATE TABLE script_versions (
    tenant_id   TEXT    NOT NULL,
    script_id   TEXT    NOT NULL,
    version     INTEGER NOT NULL CHECK (version >= 1),
    source      TEXT    NOT NULL,
    parameters  TEXT    NOT NULL,
    imports     TEXT    NOT NULL,
    created_by  TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (script_id, version)
) STRICT, WITHOUT ROWID;

-- The trigger's own fields are set for its type only: cron and time_zone for SCHEDULED,
-- event_type for EVENT. next_run_at is the next scheduled run of an ACTIVE SCHEDULED one.
-- creator_permissions (a JSON array of names) is what the creator held at creation: the runs'
-- permissions when the creator is neither a user nor a client of the organisation (a subject
-- of an external identity provider, whose permissions only its tokens carry).
CREATE TABLE automations (
    id                    TEXT    NOT NULL PRIMARY KEY,
    tenant_id             TEXT    NOT NULL,
    name                  TEXT,
    script_id             TEXT    NOT NULL,
    root_script_id        TEXT    NOT NULL,
    user_id               TEXT    NOT NULL,
    creator_permissions   TEXT    NOT NULL DEFAULT '[]',
    trigger_type          TEXT    NOT NULL CHECK (trigger_type IN ('ON_DEMAND', 'SCHEDULED', 'EVENT')),
    cron                  TEXT,
    time_zone             TEXT,
    event_type            TEXT,
    status                TEXT    NOT NULL CHECK (status IN ('ACTIVE', 'INACTIVE', 'DISABLED', 'DELETED')),
    parameters            TEXT    NOT NULL,
    consecutive_failures  INTEGER NOT NULL DEFAULT 0,
    next_run_at           INTEGER,
    created_at            INTEGER NOT NULL,
    updated_at            INTEGER NOT NULL
) STRICT;
CREATE INDEX automations_by_tenant_created ON automations (tenant_id, created_at, id);
CREATE INDEX automations_by_script ON automations (tenant_id, script_id, status);
CREATE INDEX automations_due ON automations (next_run_at) WHERE status = 'ACTIVE' AND trigger_type = 'SCHEDULED';
CREATE INDEX automations_by_event ON automations (tenant_id, event_type) WHERE status = 'ACTIVE' AND trigger_type = 'EVENT';

-- One run. `log` and `submitted` are JSON arrays (log lines; the ids of the operations it
-- submitted). A scheduled run is unique per planned instant and an event run per event, so a
-- repeated trigger never runs twice.
CREATE TABLE automation_executions (
    id              TEXT    NOT NULL PRIMARY KEY,
    tenant_id       TEXT    NOT NULL,
    automation_id   TEXT    NOT NULL,
    trigger_type    TEXT    NOT NULL,
    status          TEXT    NOT NULL CHECK (status IN ('QUEUED', 'RUNNING', 'SUCCEEDED', 'FAILED')),
    parameters      TEXT    NOT NULL,
    scheduled_for   INTEGER,
    event_id        TEXT,
    log             TEXT    NOT NULL,
    submitted       TEXT    NOT NULL,
    error           TEXT,
    attempts        INTEGER NOT NULL DEFAULT 0,
    created_at      INTEGER NOT NULL,
    started_at      INTEGER,
    finished_at     INTEGER
) STRICT;
CREATE INDEX executions_by_automation ON automation_executions (tenant_id, automation_id, created_at, id);
CREATE UNIQUE INDEX executions_once_per_schedule ON automation_executions (automation_id, scheduled_for) WHERE scheduled_for IS NOT NULL;
CREATE UNIQUE INDEX executions_once_per_event ON automation_executions (automation_id, event_id) WHERE event_id IS NOT NULL;
