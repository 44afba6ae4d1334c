//! The embedded ledger on SQLite. A block's rows go in with one statement per table: the rows
//! travel as one JSON array bound to a fixed statement (`json_each`), so a block of hundreds of
//! transactions costs a handful of statements instead of one per row, and every statement text
//! stays constant (prepared once, cached by the driver).

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::{Row, params};
use serde_json::{Value, json};
use tokenops_store::rows::LEDGER_BLOCK_COLUMNS;
use tokenops_store::{
    LedgerBalance, LedgerBlock, LedgerBlockChanges, LedgerHold, LedgerNonce, LedgerStore, LedgerToken,
    LedgerTransaction, StoreResult,
};
use tokenops_store::{encode, rows};

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    text
}

impl SqliteTx {
    fn insert_block(&self, block: &LedgerBlock) -> StoreResult<()> {
        self.execute(
            "INSERT INTO ledger_blocks (number, hash, parent_hash, timestamp, transaction_count, produced_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                encode::int64(block.number)?,
                &block.hash,
                &block.parent_hash,
                encode::int64(block.timestamp)?,
                i64::from(block.transaction_count),
                block.produced_at.as_micros(),
            ],
        )?;
        Ok(())
    }

    /// Runs `sql` with the rows bound as one JSON array (`?1`), unless there are none.
    fn execute_rows(&self, sql: &'static str, rows: Vec<Value>) -> StoreResult<()> {
        if rows.is_empty() {
            return Ok(());
        }
        self.execute(sql, params![Value::Array(rows).to_string()])?;
        Ok(())
    }

    /// The rows of `sql` with the keys bound as one JSON array (`?1`), each decoded.
    fn fetch_rows<T>(
        &self,
        sql: &'static str,
        keys: Value,
        decode: impl FnMut(&Row<'_>) -> StoreResult<T>,
    ) -> StoreResult<Vec<T>> {
        self.fetch_all(sql, params![keys.to_string()], decode)
    }
}

#[async_trait]
impl LedgerStore for SqliteTx {
    async fn chain_id(&mut self) -> StoreResult<Option<u64>> {
        let id: Option<i64> = self.scalar_optional("SELECT chain_id FROM ledger_chain WHERE id = 1", [])?;
        id.map(|id| rows::unsigned(id, "chain id")).transpose()
    }

    async fn init_chain(&mut self, chain_id: u64, genesis: &LedgerBlock) -> StoreResult<()> {
        self.require_write("initialising the ledger")?;
        self.execute("INSERT INTO ledger_chain (id, chain_id) VALUES (1, ?1)", params![encode::int64(chain_id)?])?;
        self.insert_block(genesis)
    }

    async fn head(&mut self) -> StoreResult<Option<LedgerBlock>> {
        let sql = format!("SELECT {LEDGER_BLOCK_COLUMNS} FROM ledger_blocks ORDER BY number DESC LIMIT 1");
        self.fetch_optional(&sql, [], codec::decoded)
    }

    async fn block(&mut self, number: u64) -> StoreResult<Option<LedgerBlock>> {
        let sql = format!("SELECT {LEDGER_BLOCK_COLUMNS} FROM ledger_blocks WHERE number = ?1");
        self.fetch_optional(&sql, params![encode::int64(number)?], codec::decoded)
    }

    async fn append_block(&mut self, changes: LedgerBlockChanges<'_>) -> StoreResult<()> {
        self.require_write("appending a block")?;
        self.insert_block(changes.block)?;

        let mut rows = Vec::with_capacity(changes.transactions.len());
        for t in changes.transactions {
            rows.push(json!([
                t.hash,
                encode::int64(t.block_number)?,
                t.index,
                t.sender,
                encode::int64(t.nonce)?,
                t.to,
                hex(&t.raw),
                i64::from(t.success),
                t.revert_reason,
                t.revert_data.as_deref().map(hex),
                t.contract_address,
            ]));
        }
        self.execute_rows(
            "INSERT INTO ledger_transactions (hash, block_number, position, sender, nonce, recipient, raw, success,
                                              revert_reason, revert_data, contract_address)
             SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4, value ->> 5, unhex(value ->> 6),
                    value ->> 7, value ->> 8, unhex(value ->> 9), value ->> 10
             FROM json_each(?1)",
            rows,
        )?;

        let mut rows = Vec::with_capacity(changes.tokens.len());
        for t in changes.tokens {
            rows.push(json!([
                t.address,
                t.name,
                t.symbol,
                t.decimals,
                t.issuer,
                t.total_supply,
                t.deploy_transaction,
                encode::int64(t.block_number)?,
            ]));
        }
        // `WHERE true` settles SQLite's parsing ambiguity between a join's ON and ON CONFLICT.
        self.execute_rows(
            "INSERT INTO ledger_tokens (address, name, symbol, decimals, issuer, total_supply, deploy_transaction,
                                        block_number)
             SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4, value ->> 5, value ->> 6,
                    value ->> 7
             FROM json_each(?1) WHERE true
             ON CONFLICT (address) DO UPDATE SET total_supply = excluded.total_supply",
            rows,
        )?;

        let rows = changes.balances.iter().map(|b| json!([b.token, b.wallet, b.total, b.held])).collect();
        self.execute_rows(
            "INSERT INTO ledger_balances (token, wallet, total, held)
             SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3 FROM json_each(?1) WHERE true
             ON CONFLICT (token, wallet) DO UPDATE SET total = excluded.total, held = excluded.held",
            rows,
        )?;

        let rows = changes
            .holds
            .iter()
            .map(|h| json!([h.token, h.id, h.owner, h.payee, h.amount, h.expires_at.to_string(), h.status.as_str()]))
            .collect();
        self.execute_rows(
            "INSERT INTO ledger_holds (token, id, owner, payee, amount, expires_at, status)
             SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4, value ->> 5, value ->> 6
             FROM json_each(?1) WHERE true
             ON CONFLICT (token, id) DO UPDATE SET status = excluded.status",
            rows,
        )?;

        let mut rows = Vec::with_capacity(changes.nonces.len());
        for n in changes.nonces {
            rows.push(json!([n.address, encode::int64(n.nonce)?]));
        }
        self.execute_rows(
            "INSERT INTO ledger_nonces (address, nonce)
             SELECT value ->> 0, value ->> 1 FROM json_each(?1) WHERE true
             ON CONFLICT (address) DO UPDATE SET nonce = excluded.nonce",
            rows,
        )
    }

    async fn transaction(&mut self, hash: &str) -> StoreResult<Option<LedgerTransaction>> {
        self.fetch_optional(
            "SELECT hash, block_number, position, sender, nonce, recipient, raw, success, revert_reason, revert_data,
                    contract_address
             FROM ledger_transactions WHERE hash = ?1",
            params![hash],
            codec::decoded,
        )
    }

    async fn token(&mut self, address: &str) -> StoreResult<Option<LedgerToken>> {
        self.fetch_optional(
            "SELECT address, name, symbol, decimals, issuer, total_supply, deploy_transaction, block_number
             FROM ledger_tokens WHERE address = ?1",
            params![address],
            codec::decoded,
        )
    }

    async fn balances(&mut self, keys: &[(String, String)]) -> StoreResult<Vec<LedgerBalance>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let keys = keys.iter().map(|(token, wallet)| json!([token, wallet])).collect();
        self.fetch_rows(
            "SELECT b.token, b.wallet, b.total, b.held
             FROM json_each(?1) AS k
             JOIN ledger_balances AS b ON b.token = k.value ->> 0 AND b.wallet = k.value ->> 1",
            Value::Array(keys),
            |row| {
                Ok(LedgerBalance {
                    token: codec::get(row, "token")?,
                    wallet: codec::get(row, "wallet")?,
                    total: codec::get(row, "total")?,
                    held: codec::get(row, "held")?,
                })
            },
        )
    }

    async fn holds(&mut self, keys: &[(String, String)]) -> StoreResult<Vec<LedgerHold>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let keys = keys.iter().map(|(token, id)| json!([token, id])).collect();
        self.fetch_rows(
            "SELECT h.token, h.id, h.owner, h.payee, h.amount, h.expires_at, h.status
             FROM json_each(?1) AS k
             JOIN ledger_holds AS h ON h.token = k.value ->> 0 AND h.id = k.value ->> 1",
            Value::Array(keys),
            codec::decoded,
        )
    }

    async fn nonces(&mut self, addresses: &[String]) -> StoreResult<Vec<LedgerNonce>> {
        if addresses.is_empty() {
            return Ok(Vec::new());
        }
        self.fetch_rows(
            "SELECT n.address, n.nonce FROM json_each(?1) AS k JOIN ledger_nonces AS n ON n.address = k.value",
            json!(addresses),
            |row| {
                Ok(LedgerNonce {
                    address: codec::get(row, "address")?,
                    nonce: rows::unsigned(codec::get(row, "nonce")?, "nonce")?,
                })
            },
        )
    }

    async fn take_signing_leases(
        &mut self,
        node: &str,
        wallets: &[String],
        lease_ms: u64,
    ) -> StoreResult<Vec<(String, u64)>> {
        if wallets.is_empty() {
            return Ok(Vec::new());
        }
        // `WHERE true`: SQLite's parser needs it between a SELECT and an upsert's ON CONFLICT.
        self.fetch_all(
            "INSERT INTO signing_leases (wallet, holder, expires_at_ms, epoch)
             SELECT DISTINCT k.value, ?2, CAST(unixepoch('subsec') * 1000 AS INTEGER) + ?3, 1
             FROM json_each(?1) AS k WHERE true
             ON CONFLICT (wallet) DO UPDATE
             SET holder = excluded.holder, expires_at_ms = excluded.expires_at_ms,
                 epoch = signing_leases.epoch + (signing_leases.holder <> excluded.holder)
             WHERE signing_leases.holder = excluded.holder
                OR signing_leases.expires_at_ms < CAST(unixepoch('subsec') * 1000 AS INTEGER)
             RETURNING wallet, epoch",
            params![json!(wallets).to_string(), node, encode::int64(lease_ms)?],
            |row| Ok((codec::get(row, "wallet")?, rows::unsigned(codec::get(row, "epoch")?, "lease epoch")?)),
        )
    }
}
