-- Which worker node signs for each wallet on an EVM ledger (`tokenops-ledger`'s `leases`): a
-- node hands out a wallet's nonces only while it holds the wallet's lease, so two nodes never
-- give one nonce to two transactions. Expiry is in milliseconds of SQLite's clock;
-- `epoch` goes up each time a lease changes hands.
CREATE TABLE signing_leases (
    wallet TEXT NOT NULL PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    epoch INTEGER NOT NULL
) STRICT;
