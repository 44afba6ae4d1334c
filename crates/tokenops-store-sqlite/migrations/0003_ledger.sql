-- Custody keys and the embedded ledger. Addresses, hashes and hold ids are 0x-prefixed lower-case
-- hex text; amounts are the decimal text of a uint256 (the ledger computes with checked 256-bit
-- arithmetic, never with floats or bounded integer columns); uint64 EVM values that may exceed a
-- signed 64-bit column (a hold's expiresAt) are decimal text too; block times are EVM seconds,
-- row stamps INTEGER microseconds.

-- One wallet key per row, sealed before it reaches the store (tokenops-secrets' Sealer: AES-256-GCM
-- under the master key, the purpose and the address as associated data).
CREATE TABLE custody_keys (
    address      TEXT    NOT NULL PRIMARY KEY CHECK (length(address) = 42),
    label        TEXT    NOT NULL,
    sealed_key   TEXT    NOT NULL,
    status       TEXT    NOT NULL CHECK (status IN ('ACTIVE', 'DISABLED')),
    created_at   INTEGER NOT NULL,
    disabled_at  INTEGER
) STRICT;

-- The embedded ledger's chain id (one row).
CREATE TABLE ledger_chain (
    id        INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    chain_id  INTEGER NOT NULL
) STRICT;

-- Blocks; the primary key fences a second producer out.
CREATE TABLE ledger_blocks (
    number             INTEGER NOT NULL PRIMARY KEY,
    hash               TEXT    NOT NULL UNIQUE,
    parent_hash        TEXT    NOT NULL,
    timestamp          INTEGER NOT NULL,
    transaction_count  INTEGER NOT NULL,
    produced_at        INTEGER NOT NULL
) STRICT;

-- Included transactions with their receipts. (sender, nonce) is unique as on any EVM chain.
CREATE TABLE ledger_transactions (
    hash              TEXT    NOT NULL PRIMARY KEY,
    block_number      INTEGER NOT NULL REFERENCES ledger_blocks (number),
    position          INTEGER NOT NULL,
    sender            TEXT    NOT NULL,
    nonce             INTEGER NOT NULL,
    recipient         TEXT,
    raw               BLOB    NOT NULL,
    success           INTEGER NOT NULL CHECK (success IN (0, 1)),
    revert_reason     TEXT,
    revert_data       BLOB,
    contract_address  TEXT,
    UNIQUE (sender, nonce)
) STRICT;

CREATE TABLE ledger_tokens (
    address             TEXT    NOT NULL PRIMARY KEY,
    name                TEXT    NOT NULL,
    symbol              TEXT    NOT NULL,
    decimals            INTEGER NOT NULL CHECK (decimals BETWEEN 0 AND 255),
    issuer              TEXT    NOT NULL,
    total_supply        TEXT    NOT NULL,
    deploy_transaction  TEXT    NOT NULL,
    block_number        INTEGER NOT NULL
) STRICT;

-- total includes held; available = total - held.
CREATE TABLE ledger_balances (
    token   TEXT NOT NULL,
    wallet  TEXT NOT NULL,
    total   TEXT NOT NULL,
    held    TEXT NOT NULL,
    PRIMARY KEY (token, wallet)
) STRICT, WITHOUT ROWID;

CREATE TABLE ledger_holds (
    token       TEXT NOT NULL,
    id          TEXT NOT NULL,
    owner       TEXT NOT NULL,
    payee       TEXT,
    amount      TEXT NOT NULL,
    expires_at  TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('ACTIVE', 'EXECUTED', 'CANCELLED')),
    PRIMARY KEY (token, id)
) STRICT, WITHOUT ROWID;

-- The next nonce of every account that sent a transaction.
CREATE TABLE ledger_nonces (
    address  TEXT    NOT NULL PRIMARY KEY,
    nonce    INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
