//! The embedded ledger on PostgreSQL. A block's rows go in with one statement per table: each
//! column travels as one array parameter and `UNNEST` turns the arrays back into rows, so a block
//! of hundreds of transactions costs a handful of round trips instead of one per row.

use crate::{PostgresTx, codec};
use async_trait::async_trait;
use tokenops_store::rows::LEDGER_BLOCK_COLUMNS;
use tokenops_store::{
    LedgerBalance, LedgerBlock, LedgerBlockChanges, LedgerHold, LedgerNonce, LedgerStore, LedgerToken,
    LedgerTransaction, StoreError, StoreResult,
};
use tokenops_store::{encode, rows};

impl PostgresTx {
    async fn insert_block(&mut self, block: &LedgerBlock) -> StoreResult<()> {
        self.execute(
            sqlx::query(
                "INSERT INTO ledger_blocks (number, hash, parent_hash, timestamp, transaction_count, produced_at)
             VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(encode::int64(block.number)?)
            .bind(&block.hash)
            .bind(&block.parent_hash)
            .bind(encode::int64(block.timestamp)?)
            .bind(
                i32::try_from(block.transaction_count)
                    .map_err(|_| StoreError::Backend("too many transactions".into()))?,
            )
            .bind(block.produced_at.as_micros()),
        )
        .await?;
        Ok(())
    }

    async fn insert_transactions(&mut self, transactions: &[LedgerTransaction]) -> StoreResult<()> {
        if transactions.is_empty() {
            return Ok(());
        }
        let n = transactions.len();
        let (mut hash, mut block, mut position, mut sender, mut nonce, mut to) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        let (mut raw, mut success, mut reason, mut data, mut contract) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for t in transactions {
            hash.push(t.hash.as_str());
            block.push(encode::int64(t.block_number)?);
            position.push(i32::try_from(t.index).map_err(|_| StoreError::Backend("position out of range".into()))?);
            sender.push(t.sender.as_str());
            nonce.push(encode::int64(t.nonce)?);
            to.push(t.to.as_deref());
            raw.push(t.raw.as_slice());
            success.push(t.success);
            reason.push(t.revert_reason.as_deref());
            data.push(t.revert_data.as_deref());
            contract.push(t.contract_address.as_deref());
        }
        self.execute(
            sqlx::query(
                "INSERT INTO ledger_transactions (hash, block_number, position, sender, nonce, recipient, raw, success,
                                              revert_reason, revert_data, contract_address)
             SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::int[], $4::text[], $5::bigint[], $6::text[],
                                  $7::bytea[], $8::boolean[], $9::text[], $10::bytea[], $11::text[])",
            )
            .bind(hash)
            .bind(block)
            .bind(position)
            .bind(sender)
            .bind(nonce)
            .bind(to)
            .bind(raw)
            .bind(success)
            .bind(reason)
            .bind(data)
            .bind(contract),
        )
        .await?;
        Ok(())
    }
}

#[async_trait]
impl LedgerStore for PostgresTx {
    async fn chain_id(&mut self) -> StoreResult<Option<u64>> {
        let id: Option<i64> =
            self.scalar_optional(sqlx::query_scalar("SELECT chain_id FROM ledger_chain WHERE id = 1")).await?;
        id.map(|id| rows::unsigned(id, "chain id")).transpose()
    }

    async fn init_chain(&mut self, chain_id: u64, genesis: &LedgerBlock) -> StoreResult<()> {
        self.execute(
            sqlx::query("INSERT INTO ledger_chain (id, chain_id) VALUES (1, $1)").bind(encode::int64(chain_id)?),
        )
        .await?;
        self.insert_block(genesis).await
    }

    async fn head(&mut self) -> StoreResult<Option<LedgerBlock>> {
        let sql = format!("SELECT {LEDGER_BLOCK_COLUMNS} FROM ledger_blocks ORDER BY number DESC LIMIT 1");
        self.fetch_optional(sqlx::query(sqlx::AssertSqlSafe(sql)), codec::decoded).await
    }

    async fn block(&mut self, number: u64) -> StoreResult<Option<LedgerBlock>> {
        let sql = format!("SELECT {LEDGER_BLOCK_COLUMNS} FROM ledger_blocks WHERE number = $1");
        self.fetch_optional(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(encode::int64(number)?), codec::decoded).await
    }

    async fn append_block(&mut self, changes: LedgerBlockChanges<'_>) -> StoreResult<()> {
        self.insert_block(changes.block).await?;
        self.insert_transactions(changes.transactions).await?;

        for t in changes.tokens {
            self.execute(sqlx::query(
                "INSERT INTO ledger_tokens (address, name, symbol, decimals, issuer, total_supply, deploy_transaction,
                                            block_number)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                 ON CONFLICT (address) DO UPDATE SET total_supply = EXCLUDED.total_supply",
            )
            .bind(&t.address)
            .bind(&t.name)
            .bind(&t.symbol)
            .bind(i16::from(t.decimals))
            .bind(&t.issuer)
            .bind(&t.total_supply)
            .bind(&t.deploy_transaction)
            .bind(encode::int64(t.block_number)?)).await?;
        }

        if !changes.balances.is_empty() {
            let token: Vec<&str> = changes.balances.iter().map(|b| b.token.as_str()).collect();
            let wallet: Vec<&str> = changes.balances.iter().map(|b| b.wallet.as_str()).collect();
            let total: Vec<&str> = changes.balances.iter().map(|b| b.total.as_str()).collect();
            let held: Vec<&str> = changes.balances.iter().map(|b| b.held.as_str()).collect();
            self.execute(
                sqlx::query(
                    "INSERT INTO ledger_balances (token, wallet, total, held)
                 SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[])
                 ON CONFLICT (token, wallet) DO UPDATE SET total = EXCLUDED.total, held = EXCLUDED.held",
                )
                .bind(token)
                .bind(wallet)
                .bind(total)
                .bind(held),
            )
            .await?;
        }

        if !changes.holds.is_empty() {
            let h = changes.holds;
            let token: Vec<&str> = h.iter().map(|h| h.token.as_str()).collect();
            let id: Vec<&str> = h.iter().map(|h| h.id.as_str()).collect();
            let owner: Vec<&str> = h.iter().map(|h| h.owner.as_str()).collect();
            let payee: Vec<Option<&str>> = h.iter().map(|h| h.payee.as_deref()).collect();
            let amount: Vec<&str> = h.iter().map(|h| h.amount.as_str()).collect();
            let expires_at: Vec<String> = h.iter().map(|h| h.expires_at.to_string()).collect();
            let status: Vec<&str> = h.iter().map(|h| h.status.as_str()).collect();
            self.execute(sqlx::query(
                "INSERT INTO ledger_holds (token, id, owner, payee, amount, expires_at, status)
                 SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[])
                 ON CONFLICT (token, id) DO UPDATE SET status = EXCLUDED.status",
            )
            .bind(token)
            .bind(id)
            .bind(owner)
            .bind(payee)
            .bind(amount)
            .bind(expires_at)
            .bind(status)).await?;
        }

        if !changes.nonces.is_empty() {
            let address: Vec<&str> = changes.nonces.iter().map(|n| n.address.as_str()).collect();
            let nonce = changes.nonces.iter().map(|n| encode::int64(n.nonce)).collect::<StoreResult<Vec<i64>>>()?;
            self.execute(
                sqlx::query(
                    "INSERT INTO ledger_nonces (address, nonce)
                 SELECT * FROM UNNEST($1::text[], $2::bigint[])
                 ON CONFLICT (address) DO UPDATE SET nonce = EXCLUDED.nonce",
                )
                .bind(address)
                .bind(nonce),
            )
            .await?;
        }
        Ok(())
    }

    async fn transaction(&mut self, hash: &str) -> StoreResult<Option<LedgerTransaction>> {
        self.fetch_optional(sqlx::query(
            "SELECT hash, block_number, position, sender, nonce, recipient, raw, success, revert_reason, revert_data,
                    contract_address
             FROM ledger_transactions WHERE hash = $1",
        )
        .bind(hash), codec::decoded).await
    }

    async fn token(&mut self, address: &str) -> StoreResult<Option<LedgerToken>> {
        self.fetch_optional(
            sqlx::query(
                "SELECT address, name, symbol, decimals, issuer, total_supply, deploy_transaction, block_number
             FROM ledger_tokens WHERE address = $1",
            )
            .bind(address),
            codec::decoded,
        )
        .await
    }

    async fn balances(&mut self, keys: &[(String, String)]) -> StoreResult<Vec<LedgerBalance>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let token: Vec<&str> = keys.iter().map(|(t, _)| t.as_str()).collect();
        let wallet: Vec<&str> = keys.iter().map(|(_, w)| w.as_str()).collect();
        self.fetch_all(
            sqlx::query(
                "SELECT b.token, b.wallet, b.total, b.held
             FROM UNNEST($1::text[], $2::text[]) AS k (token, wallet)
             JOIN ledger_balances AS b ON b.token = k.token AND b.wallet = k.wallet",
            )
            .bind(token)
            .bind(wallet),
            |row| {
                Ok(LedgerBalance {
                    token: codec::get(row, "token")?,
                    wallet: codec::get(row, "wallet")?,
                    total: codec::get(row, "total")?,
                    held: codec::get(row, "held")?,
                })
            },
        )
        .await
    }

    async fn holds(&mut self, keys: &[(String, String)]) -> StoreResult<Vec<LedgerHold>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let token: Vec<&str> = keys.iter().map(|(t, _)| t.as_str()).collect();
        let id: Vec<&str> = keys.iter().map(|(_, i)| i.as_str()).collect();
        self.fetch_all(
            sqlx::query(
                "SELECT h.token, h.id, h.owner, h.payee, h.amount, h.expires_at, h.status
             FROM UNNEST($1::text[], $2::text[]) AS k (token, id)
             JOIN ledger_holds AS h ON h.token = k.token AND h.id = k.id",
            )
            .bind(token)
            .bind(id),
            codec::decoded,
        )
        .await
    }

    async fn nonces(&mut self, addresses: &[String]) -> StoreResult<Vec<LedgerNonce>> {
        if addresses.is_empty() {
            return Ok(Vec::new());
        }
        self.fetch_all(
            sqlx::query("SELECT n.address, n.nonce FROM ledger_nonces AS n WHERE n.address = ANY($1::text[])")
                .bind(addresses),
            |row| {
                Ok(LedgerNonce {
                    address: codec::get(row, "address")?,
                    nonce: rows::unsigned(codec::get(row, "nonce")?, "nonce")?,
                })
            },
        )
        .await
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
        // Rows go in sorted, so two nodes taking overlapping sets lock them in one order.
        let mut sorted = wallets.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        self.fetch_all(
            sqlx::query(
                "INSERT INTO signing_leases AS l (wallet, holder, expires_at_ms, epoch)
                 SELECT w, $2, CAST(extract(epoch FROM clock_timestamp()) * 1000 AS BIGINT) + $3, 1
                 FROM UNNEST($1::text[]) AS w ORDER BY w
                 ON CONFLICT (wallet) DO UPDATE
                 SET holder = EXCLUDED.holder, expires_at_ms = EXCLUDED.expires_at_ms,
                     epoch = l.epoch + CASE WHEN l.holder = EXCLUDED.holder THEN 0 ELSE 1 END
                 WHERE l.holder = EXCLUDED.holder
                    OR l.expires_at_ms < CAST(extract(epoch FROM clock_timestamp()) * 1000 AS BIGINT)
                 RETURNING l.wallet, l.epoch",
            )
            .bind(&sorted)
            .bind(node)
            .bind(encode::int64(lease_ms)?),
            |row| Ok((codec::get(row, "wallet")?, rows::unsigned(codec::get(row, "epoch")?, "lease epoch")?)),
        )
        .await
    }
}
