-- Token contracts (one per asset per organisation) and accounts (one wallet each, once
-- provisioned). Timestamps are INTEGER microseconds since the Unix epoch (UTC); identifiers are
-- hyphenated UUID text. Assets are their upper-case ISO 4217 code (the store upper-cases the
-- ASCII letters it is given, and of every code it looks up, so lookups ignore case); addresses
-- are 0x and 40 lower-case hex digits.

-- address is set once deployed or adopted; adopt_address is the existing token to adopt, as
-- requested; failure_reason is why deployment failed (FAILED only).
CREATE TABLE contracts (
    id              TEXT    NOT NULL PRIMARY KEY,
    tenant_id       TEXT    NOT NULL,
    asset_id        TEXT    NOT NULL,
    name            TEXT    NOT NULL,
    symbol          TEXT    NOT NULL,
    decimals        INTEGER NOT NULL CHECK (decimals BETWEEN 0 AND 255),
    status          TEXT    NOT NULL CHECK (status IN ('PENDING', 'ACTIVE', 'INACTIVE', 'FAILED')),
    address         TEXT,
    adopt_address   TEXT,
    failure_reason  TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    UNIQUE (tenant_id, asset_id)
) STRICT;
CREATE INDEX contracts_by_tenant_created ON contracts (tenant_id, created_at, id);
CREATE INDEX contracts_by_tenant_status ON contracts (tenant_id, status, created_at, id);

-- wallet_address is recorded as soon as custody creates the wallet (while still PENDING);
-- generation counts the registrations of the reference (a u32).
CREATE TABLE accounts (
    id              TEXT    NOT NULL PRIMARY KEY,
    tenant_id       TEXT    NOT NULL,
    account_ref     TEXT    NOT NULL,
    customer_ref    TEXT    NOT NULL,
    asset_id        TEXT    NOT NULL,
    status          TEXT    NOT NULL CHECK (status IN ('PENDING', 'ACTIVE', 'INACTIVE', 'FAILED')),
    wallet_address  TEXT,
    failure_reason  TEXT,
    generation      INTEGER NOT NULL CHECK (generation BETWEEN 0 AND 4294967295),
    provisioned_at  INTEGER,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    UNIQUE (tenant_id, account_ref)
) STRICT;
-- Lists (oldest first, then id), unfiltered and by each filter; the customer's accounts in a
-- status (the customer cascades) use the first columns of accounts_by_tenant_customer_status.
CREATE INDEX accounts_by_tenant_created ON accounts (tenant_id, created_at, id);
CREATE INDEX accounts_by_tenant_customer_status ON accounts (tenant_id, customer_ref, status, created_at, id);
CREATE INDEX accounts_by_tenant_status ON accounts (tenant_id, status, created_at, id);
CREATE INDEX accounts_by_tenant_asset ON accounts (tenant_id, asset_id, created_at, id);

-- A token serves one contract of one organisation (the address is NULL while PENDING or FAILED):
-- adopting a token another contract uses is refused here, whatever the race.
CREATE UNIQUE INDEX contracts_by_address ON contracts (address);
