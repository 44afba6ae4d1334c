-- Token contracts (one per asset per organisation) and accounts (one wallet each, once
-- provisioned). The same tables, columns and indexes as the SQLite migration, in PostgreSQL
-- types: timestamps are BIGINT microseconds since the Unix epoch (UTC); identifiers are uuid; a
-- contract's decimals (a u8) is SMALLINT; an account's generation (a u32) is BIGINT so that
-- every u32 fits. Assets are their upper-case ISO 4217 code (the store upper-cases the ASCII
-- letters it is given, and of every code it looks up, so lookups ignore case); addresses are 0x
-- and 40 lower-case hex digits.
--
-- Lists sort by created_at then id today. The texts a list filters on, and may come to sort by
-- (codes, references, names and statuses), are COLLATE "C": code point order, the order of
-- SQLite's BINARY collation, so that both stores list alike whatever the server's locale.

-- address is set once deployed or adopted; adopt_address is the existing token to adopt, as
-- requested; failure_reason is why deployment failed (FAILED only).
CREATE TABLE contracts (
    id              uuid      NOT NULL PRIMARY KEY,
    tenant_id       uuid      NOT NULL,
    asset_id        text      COLLATE "C" NOT NULL,
    name            text      COLLATE "C" NOT NULL,
    symbol          text      COLLATE "C" NOT NULL,
    decimals        smallint  NOT NULL CHECK (decimals BETWEEN 0 AND 255),
    status          text      COLLATE "C" NOT NULL CHECK (status IN ('PENDING', 'ACTIVE', 'INACTIVE', 'FAILED')),
    address         text,
    adopt_address   text,
    failure_reason  text,
    created_at      bigint    NOT NULL,
    updated_at      bigint    NOT NULL,
    UNIQUE (tenant_id, asset_id)
);
CREATE INDEX contracts_by_tenant_created ON contracts (tenant_id, created_at, id);
CREATE INDEX contracts_by_tenant_status ON contracts (tenant_id, status, created_at, id);

-- wallet_address is recorded as soon as custody creates the wallet (while still PENDING);
-- generation counts the registrations of the reference (a u32).
CREATE TABLE accounts (
    id              uuid    NOT NULL PRIMARY KEY,
    tenant_id       uuid    NOT NULL,
    account_ref     text    COLLATE "C" NOT NULL,
    customer_ref    text    COLLATE "C" NOT NULL,
    asset_id        text    COLLATE "C" NOT NULL,
    status          text    COLLATE "C" NOT NULL CHECK (status IN ('PENDING', 'ACTIVE', 'INACTIVE', 'FAILED')),
    wallet_address  text,
    failure_reason  text,
    generation      bigint  NOT NULL CHECK (generation BETWEEN 0 AND 4294967295),
    provisioned_at  bigint,
    created_at      bigint  NOT NULL,
    updated_at      bigint  NOT NULL,
    UNIQUE (tenant_id, account_ref)
);
-- Lists (oldest first, then id), unfiltered and by each filter; the customer's accounts in a
-- status (the customer cascades) use the first columns of accounts_by_tenant_customer_status.
CREATE INDEX accounts_by_tenant_created ON accounts (tenant_id, created_at, id);
CREATE INDEX accounts_by_tenant_customer_status ON accounts (tenant_id, customer_ref, status, created_at, id);
CREATE INDEX accounts_by_tenant_status ON accounts (tenant_id, status, created_at, id);
CREATE INDEX accounts_by_tenant_asset ON accounts (tenant_id, asset_id, created_at, id);

-- A token serves one contract of one organisation (the address is NULL while PENDING or FAILED):
-- adopting a token another contract uses is refused here, whatever the race.
CREATE UNIQUE INDEX contracts_by_address ON contracts (address);
