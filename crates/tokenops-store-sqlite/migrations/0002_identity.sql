-- Identity and organisations: organisations (tenants), users, machine clients, the embedded
-- provider's signing keys, refresh tokens and sign-in challenge sessions. Timestamps are INTEGER
-- microseconds since the Unix epoch (UTC); identifiers are hyphenated UUID text. Secrets are
-- stored only hashed (passwords, tokens, client secrets) or sealed (signing keys).

CREATE TABLE tenants (
    id             TEXT    NOT NULL PRIMARY KEY,
    name           TEXT    NOT NULL,
    owner_user_id  TEXT    NOT NULL,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
) STRICT;

-- The email is the username: lower-cased by the store, unique across every organisation.
CREATE TABLE users (
    id                       TEXT    NOT NULL PRIMARY KEY,
    tenant_id                TEXT    NOT NULL,
    email                    TEXT    NOT NULL UNIQUE,
    first_name               TEXT    NOT NULL,
    last_name                TEXT    NOT NULL,
    status                   TEXT    NOT NULL CHECK (status IN ('INVITED', 'ACTIVE', 'SUSPENDED')),
    role_id                  TEXT    NOT NULL,
    password_hash            TEXT,
    temporary_password_hash  TEXT,
    failed_sign_ins          INTEGER NOT NULL DEFAULT 0,
    first_failed_sign_in_at  INTEGER,
    locked_until             INTEGER,
    created_at               INTEGER NOT NULL,
    updated_at               INTEGER NOT NULL
) STRICT;
CREATE INDEX users_by_tenant_name ON users (tenant_id, last_name, first_name);
CREATE INDEX users_by_tenant_created ON users (tenant_id, created_at);

-- A NULL tenant_id is a platform operator client.
CREATE TABLE machine_clients (
    id           TEXT    NOT NULL PRIMARY KEY,
    tenant_id    TEXT,
    name         TEXT    NOT NULL,
    role_id      TEXT,
    secret_hash  TEXT    NOT NULL,
    active       INTEGER NOT NULL CHECK (active IN (0, 1)),
    created_at   INTEGER NOT NULL
) STRICT;

CREATE TABLE signing_keys (
    kid         TEXT    NOT NULL PRIMARY KEY,
    sealed_key  TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    retire_at   INTEGER
) STRICT;

CREATE TABLE refresh_tokens (
    token_hash  TEXT    NOT NULL PRIMARY KEY,
    user_id     TEXT    NOT NULL,
    tenant_id   TEXT    NOT NULL,
    expires_at  INTEGER NOT NULL,
    revoked_at  INTEGER,
    created_at  INTEGER NOT NULL
) STRICT;
CREATE INDEX refresh_tokens_by_user ON refresh_tokens (user_id);

CREATE TABLE challenges (
    session_hash  TEXT    NOT NULL PRIMARY KEY,
    user_id       TEXT    NOT NULL,
    expires_at    INTEGER NOT NULL
) STRICT;
