-- Policies: the organisations' own (TENANT) templates, policies and their versions. SYSTEM
-- templates ship in code and have no rows. JSON documents are kept as sent (text, not jsonb,
-- which would reorder keys); timestamps are bigint microseconds since the Unix epoch (UTC);
-- enumerations are their wire names.

-- A template's key is unique in its organisation. default_content is never validated on save.
CREATE TABLE policy_templates (
    tenant_id         uuid    NOT NULL,
    template_key      text    COLLATE "C" NOT NULL,
    template_version  integer NOT NULL CHECK (template_version >= 1),
    name              text    NOT NULL,
    description       text    NOT NULL,
    action            text    COLLATE "C" NOT NULL,
    status            text    COLLATE "C" NOT NULL CHECK (status IN ('ACTIVE', 'DEPRECATED')),
    default_content   text    NOT NULL,
    created_by        text    NOT NULL,
    created_at        bigint  NOT NULL,
    updated_at        bigint  NOT NULL,
    PRIMARY KEY (tenant_id, template_key)
);

-- version is the current version's number. A policy copies what it needs of its template at
-- creation (action, key): later template changes do not reach it.
CREATE TABLE policies (
    id            uuid    NOT NULL PRIMARY KEY,
    tenant_id     uuid    NOT NULL,
    status        text    COLLATE "C" NOT NULL CHECK (status IN ('DRAFT', 'ACTIVE', 'ARCHIVED')),
    rule_type     text    COLLATE "C" NOT NULL,
    action        text    COLLATE "C" NOT NULL,
    template_key  text    COLLATE "C" NOT NULL,
    version       integer NOT NULL CHECK (version >= 1),
    name          text,
    description   text,
    created_by    text    NOT NULL,
    created_at    bigint  NOT NULL,
    updated_at    bigint  NOT NULL
);
-- Lists, newest first.
CREATE INDEX policies_by_tenant_created ON policies (tenant_id, created_at, id);
-- The slot check and the pipeline's read: the policies of an action in a status.
CREATE INDEX policies_by_tenant_action ON policies (tenant_id, action, status);

-- Written once, never changed.
CREATE TABLE policy_versions (
    id              uuid    NOT NULL PRIMARY KEY,
    tenant_id       uuid    NOT NULL,
    policy_id       uuid    NOT NULL REFERENCES policies (id),
    version_number  integer NOT NULL CHECK (version_number >= 1),
    content         text    NOT NULL,
    change_summary  text,
    created_by      text    NOT NULL,
    created_at      bigint  NOT NULL,
    UNIQUE (policy_id, version_number)
);
