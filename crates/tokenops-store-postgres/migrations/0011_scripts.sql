-- Scripts, their versions, automations and their executions. Parameters and dependencies are
-- jsonb; lists of names (imports, log lines, submitted ids) are JSON arrays as text, as on
-- SQLite; timestamps are bigint microseconds since the Unix epoch (UTC); enumerations are their
-- wire names.

-- A script's name is unique among its organisation's scripts that are not deleted. `imports`
-- is the JSON array of the names its source imports; `dependencies` the imports resolved at its
-- last publication ([{name, scriptId, version}]).
CREATE TABLE scripts (
    id              uuid    NOT NULL PRIMARY KEY,
    tenant_id       uuid    NOT NULL,
    name            text    COLLATE "C" NOT NULL,
    description     text,
    status          text    NOT NULL CHECK (status IN ('DRAFT', 'PUBLISHED', 'OUTDATED', 'DEPRECATED', 'DELETED')),
    version         integer NOT NULL CHECK (version >= 1),
    source          text    NOT NULL,
    parameters      jsonb   NOT NULL,
    imports         text    NOT NULL,
    dependencies    jsonb   NOT NULL,
    root_script_id  uuid    NOT NULL,
    cloned_from     uuid,
    created_by      text    NOT NULL,
    created_at      bigint  NOT NULL,
    updated_at      bigint  NOT NULL,
    published_at    bigint
);
CREATE UNIQUE INDEX scripts_live_name ON scripts (tenant_id, name) WHERE status <> 'DELETED';
CREATE INDEX scripts_by_tenant_created ON scripts (tenant_id, created_at, id);

-- Every version of a script's code, kept so that a dependant runs the version it resolved.
CREATE TABLE script_versions (
    tenant_id   uuid    NOT NULL,
    script_id   uuid    NOT NULL,
    version     integer NOT NULL CHECK (version >= 1),
    source      text    NOT NULL,
    parameters  jsonb   NOT NULL,
    imports     text    NOT NULL,
    created_by  text    NOT NULL,
    created_at  bigint  NOT NULL,
    PRIMARY KEY (script_id, version)
);

-- The trigger's own fields are set for its type only: cron and time_zone for SCHEDULED,
-- event_type for EVENT. next_run_at is the next scheduled run of an ACTIVE SCHEDULED one.
-- creator_permissions (a JSON array of names) is what the creator held at creation: the runs'
-- permissions when the creator is neither a user nor a client of the organisation (a subject
-- of an external identity provider, whose permissions only its tokens carry).
CREATE TABLE automations (
    id                    uuid    NOT NULL PRIMARY KEY,
    tenant_id             uuid    NOT NULL,
    name                  text,
    script_id             uuid    NOT NULL,
    root_script_id        uuid    NOT NULL,
    user_id               text    NOT NULL,
    creator_permissions   text    NOT NULL DEFAULT '[]',
    trigger_type          text    NOT NULL CHECK (trigger_type IN ('ON_DEMAND', 'SCHEDULED', 'EVENT')),
    cron                  text,
    time_zone             text,
    event_type            text,
    status                text    NOT NULL CHECK (status IN ('ACTIVE', 'INACTIVE', 'DISABLED', 'DELETED')),
    parameters            jsonb   NOT NULL,
    consecutive_failures  integer NOT NULL DEFAULT 0,
    next_run_at           bigint,
    created_at            bigint  NOT NULL,
    updated_at            bigint  NOT NULL
);
CREATE INDEX automations_by_tenant_created ON automations (tenant_id, created_at, id);
CREATE INDEX automations_by_script ON automations (tenant_id, script_id, status);
CREATE INDEX automations_due ON automations (next_run_at) WHERE status = 'ACTIVE' AND trigger_type = 'SCHEDULED';
CREATE INDEX automations_by_event ON automations (tenant_id, event_type) WHERE status = 'ACTIVE' AND trigger_type = 'EVENT';

-- One run. `log` and `submitted` are JSON arrays (log lines; the ids of the operations it
-- submitted). A scheduled run is unique per planned instant and an event run per event, so a
-- repeated trigger never runs twice.
CREATE TABLE automation_executions (
    id              uuid    NOT NULL PRIMARY KEY,
    tenant_id       uuid    NOT NULL,
    automation_id   uuid    NOT NULL,
    trigger_type    text    NOT NULL,
    status          text    NOT NULL CHECK (status IN ('QUEUED', 'RUNNING', 'SUCCEEDED', 'FAILED')),
    parameters      jsonb   NOT NULL,
    scheduled_for   bigint,
    event_id        uuid,
    log             text    NOT NULL,
    submitted       text    NOT NULL,
    error           text,
    attempts        integer NOT NULL DEFAULT 0,
    created_at      bigint  NOT NULL,
    started_at      bigint,
    finished_at     bigint
);
CREATE INDEX executions_by_automation ON automation_executions (tenant_id, automation_id, created_at, id);
CREATE UNIQUE INDEX executions_once_per_schedule ON automation_executions (automation_id, scheduled_for) WHERE scheduled_for IS NOT NULL;
CREATE UNIQUE INDEX executions_once_per_event ON automation_executions (automation_id, event_id) WHERE event_id IS NOT NULL;
