-- Policies: the organisations' own (TENANT) templates, policies and their versions. SYSTEM
-- templates ship in code and have no rows. JSON documents are kept as sent (text); timestamps
-- are INTEGER microseconds since the Unix epoch (UTC); enumerations are their wire names.

-- A template's key is unique in its organisation. default_content is never validated on save.
CREATE TABLE policy_templates (
    tenant_id         TEXT    NOT NULL,
    template_key      TEXT    NOT NULL,
    template_version  INTEGER NOT NULL CHECK (template_version >= 1),
    name              TEXT    NOT NULL,
    description       TEXT    NOT NULL,
    action            TEXT    NOT NULL,
    status            TEXT    NOT NULL CHECK (status IN ('ACTIVE', 'DEPRECATED')),
    default_content   TEXT    NOT NULL,
    created_by        TEXT    NOT NULL,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, template_key)
) STRICT, WITHOUT ROWID;

-- version is the current version's number. A policy copies what it needs of its template at
-- creation (action, key): later template changes do not reach it.
CREATE TABLE policies (
    id            TEXT    NOT NULL PRIMARY KEY,
    tenant_id     TEXT    NOT NULL,
    status        TEXT    NOT NULL CHECK (status IN ('DRAFT', 'ACTIVE', 'ARCHIVED')),
    rule_type     TEXT    NOT NULL,
    action        TEXT    NOT NULL,
    template_key  TEXT    NOT NULL,
    version       INTEGER NOT NULL CHECK (version >= 1),
    name          TEXT,
    description   TEXT,
    created_by    TEXT    NOT NULL,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
) STRICT;
-- Lists, newest first.
CREATE INDEX policies_by_tenant_created ON policies (tenant_id, created_at, id);
-- The slot check and the pipeline's read: the policies of an action in a status.
CREATE INDEX policies_by_tenant_action ON policies (tenant_id, action, status);

-- Written once, never changed.
CREATE TABLE policy_versions (
    id              TEXT    NOT NULL PRIMARY KEY,
    tenant_id       TEXT    NOT NULL,
    policy_id       TEXT    NOT NULL REFERENCES policies (id),
    version_number  INTEGER NOT NULL CHECK (version_number >= 1),
    content         TEXT    NOT NULL,
    change_summary  TEXT,
    created_by      TEXT    NOT NULL,
    created_at      INTEGER NOT NULL,
    UNIQUE (policy_id, version_number)
) STRICT;
