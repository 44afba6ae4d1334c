-- Organisation administration: roles (the platform roles, as rows every organisation shares,
-- and each organisation's custom roles), approval groups and their members, and one-time reveals
-- of machine-client secrets; indexes for the lists and clean-ups that arrive with them.
-- Timestamps are INTEGER microseconds since the Unix epoch (UTC); identifiers are hyphenated
-- UUID text; JSON is text.
--
-- Names and keys compared ignoring case are stored twice: as given, and folded by the store
-- (`codec::folded`, Rust's Unicode case mappings, the same on both stores). The folded column
-- carries the uniqueness, so it never depends on SQLite's ASCII-only NOCASE.

-- A NULL tenant_id is a platform role: shared by every organisation, never edited, inserted
-- below with its fixed id. A custom role's name is unique in its organisation and never a
-- platform role's name (the store refuses it; platform rows are fixed). permissions is a JSON
-- array of permission names, in the order given.
CREATE TABLE roles (
    id           TEXT    NOT NULL PRIMARY KEY,
    tenant_id    TEXT,
    name         TEXT    NOT NULL,
    name_folded  TEXT    NOT NULL,
    description  TEXT    NOT NULL,
    permissions  TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
) STRICT;
CREATE UNIQUE INDEX roles_by_tenant_name ON roles (tenant_id, name_folded);
CREATE UNIQUE INDEX roles_platform_by_name ON roles (name_folded) WHERE tenant_id IS NULL;

INSERT INTO roles (id, tenant_id, name, name_folded, description, permissions, created_at, updated_at) VALUES
    ('00000000-0000-7000-8000-000000000001', NULL, 'SUPER_ADMIN', 'SUPER_ADMIN',
     'Owns the organisation: every permission, including creating administrators', '[]',
     1795219200000000, 1795219200000000),
    ('00000000-0000-7000-8000-000000000002', NULL, 'ADMIN', 'ADMIN',
     'Administers the organisation: users, roles, groups, policies and operations', '[]',
     1795219200000000, 1795219200000000),
    ('00000000-0000-7000-8000-000000000003', NULL, 'USER', 'USER',
     'Operates the organisation''s customers, accounts and token operations', '[]',
     1795219200000000, 1795219200000000);

-- Who holds a role (users and tenant machine clients), and the clients listed oldest first.
CREATE INDEX users_by_tenant_role ON users (tenant_id, role_id);
CREATE INDEX machine_clients_by_tenant_role ON machine_clients (tenant_id, role_id);
CREATE INDEX machine_clients_by_tenant_created ON machine_clients (tenant_id, created_at, id);

-- Approval groups (`#key` in approver expressions): the key is unique in its organisation.
CREATE TABLE approval_groups (
    id          TEXT    NOT NULL PRIMARY KEY,
    tenant_id   TEXT    NOT NULL,
    group_key   TEXT    NOT NULL,
    key_folded  TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    status      TEXT    NOT NULL CHECK (status IN ('ACTIVE', 'INACTIVE')),
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    UNIQUE (tenant_id, key_folded)
) STRICT;

-- One row per member; the primary key serves the members of a group.
CREATE TABLE approval_group_members (
    group_id   TEXT    NOT NULL,
    user_id    TEXT    NOT NULL,
    tenant_id  TEXT    NOT NULL,
    added_at   INTEGER NOT NULL,
    PRIMARY KEY (group_id, user_id)
) STRICT;
CREATE INDEX approval_group_members_by_user ON approval_group_members (tenant_id, user_id);

-- A machine client's secret, sealed, waiting to be revealed once; token_hash is SHA-256 hex of
-- the one-time token in the URL.
CREATE TABLE secret_reveals (
    token_hash     TEXT    NOT NULL PRIMARY KEY,
    client_id      TEXT    NOT NULL,
    sealed_secret  TEXT    NOT NULL,
    expires_at     INTEGER NOT NULL,
    created_at     INTEGER NOT NULL
) STRICT;
CREATE INDEX secret_reveals_by_expiry ON secret_reveals (expires_at);

-- The clean-ups of expired tokens and sessions.
CREATE INDEX refresh_tokens_by_expiry ON refresh_tokens (expires_at);
CREATE INDEX challenges_by_expiry ON challenges (expires_at);
