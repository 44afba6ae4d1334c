-- Identity and organisations: organisations (tenants), users, machine clients, the embedded
-- provider's signing keys, refresh tokens and sign-in challenge sessions. The same tables,
-- columns and indexes as the SQLite migration, in PostgreSQL types: timestamps are BIGINT
-- microseconds since the Unix epoch (UTC); identifiers are uuid; counters that hold a u32 are
-- BIGINT. Secrets are stored only hashed (passwords, tokens, client secrets) or sealed (signing
-- keys).
--
-- Texts that lists sort by (user names, email and status; signing key ids) are COLLATE "C": code
-- point order, the order of SQLite's BINARY collation, so that both stores list alike whatever
-- the server's locale.

CREATE TABLE tenants (
    id             uuid    NOT NULL PRIMARY KEY,
    name           text    NOT NULL,
    owner_user_id  uuid    NOT NULL,
    created_at     bigint  NOT NULL,
    updated_at     bigint  NOT NULL
);

-- The email is the username: lower-cased by the store, unique across every organisation.
CREATE TABLE users (
    id                       uuid    NOT NULL PRIMARY KEY,
    tenant_id                uuid    NOT NULL,
    email                    text    COLLATE "C" NOT NULL UNIQUE,
    first_name               text    COLLATE "C" NOT NULL,
    last_name                text    COLLATE "C" NOT NULL,
    status                   text    COLLATE "C" NOT NULL CHECK (status IN ('INVITED', 'ACTIVE', 'SUSPENDED')),
    role_id                  uuid    NOT NULL,
    password_hash            text,
    temporary_password_hash  text,
    failed_sign_ins          bigint  NOT NULL DEFAULT 0,
    first_failed_sign_in_at  bigint,
    locked_until             bigint,
    created_at               bigint  NOT NULL,
    updated_at               bigint  NOT NULL
);
CREATE INDEX users_by_tenant_name ON users (tenant_id, last_name, first_name);
CREATE INDEX users_by_tenant_created ON users (tenant_id, created_at);

-- A NULL tenant_id is a platform operator client.
CREATE TABLE machine_clients (
    id           uuid     NOT NULL PRIMARY KEY,
    tenant_id    uuid,
    name         text     NOT NULL,
    role_id      uuid,
    secret_hash  text     NOT NULL,
    active       boolean  NOT NULL,
    created_at   bigint   NOT NULL
);

CREATE TABLE signing_keys (
    kid         text    COLLATE "C" NOT NULL PRIMARY KEY,
    sealed_key  text    NOT NULL,
    created_at  bigint  NOT NULL,
    retire_at   bigint
);

CREATE TABLE refresh_tokens (
    token_hash  text    NOT NULL PRIMARY KEY,
    user_id     uuid    NOT NULL,
    tenant_id   uuid    NOT NULL,
    expires_at  bigint  NOT NULL,
    revoked_at  bigint,
    created_at  bigint  NOT NULL
);
CREATE INDEX refresh_tokens_by_user ON refresh_tokens (user_id);

CREATE TABLE challenges (
    session_hash  text    NOT NULL PRIMARY KEY,
    user_id       uuid    NOT NULL,
    expires_at    bigint  NOT NULL
);
