//! Block production for the embedded ledger: the chain's genesis, the producer task, executing
//! the waiting transactions into a block and storing it, and resyncing after an unknown commit.

use super::execute::{Action, Balance, BlockState, Hold, HoldStatus, Keys, TokenState};
use super::{EmbeddedConfig, Head, Inner, corrupt, evm_seconds, lock, parse, parse_amount, temporary, text};
use crate::contract;
use crate::port::{LedgerError, TokenSpec};
use alloy::primitives::{Address, B256, keccak256};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokenops_store::{
    LedgerBalance, LedgerBlock, LedgerBlockChanges, LedgerHold, LedgerHoldStatus, LedgerNonce, LedgerToken,
    LedgerTransaction, Store, StoreError,
};
use tokio::sync::Notify;

pub(super) async fn load_or_init_chain(store: &dyn Store, config: &EmbeddedConfig) -> Result<Head, LedgerError> {
    let mut tx = store.write().await.map_err(temporary)?;
    let ledger = tx.ledger();
    match ledger.chain_id().await.map_err(temporary)? {
        Some(chain_id) if chain_id != config.chain_id => {
            return Err(LedgerError::final_(format!(
                "the store holds the embedded chain {chain_id}, not the configured {}",
                config.chain_id
            )));
        }
        Some(_) => {}
        None => {
            let genesis = LedgerBlock {
                number: 0,
                hash: text(keccak256(format!("tokenops embedded ledger {}", config.chain_id))),
                parent_hash: text(B256::ZERO),
                timestamp: evm_seconds(config.clock.as_ref()),
                transaction_count: 0,
                produced_at: config.clock.now(),
            };
            ledger.init_chain(config.chain_id, &genesis).await.map_err(temporary)?;
            tracing::info!(chain_id = config.chain_id, "created the embedded ledger's chain");
        }
    }
    let head = tx.ledger().head().await.map_err(temporary)?.ok_or_else(|| corrupt("chain", "no genesis block"))?;
    tx.commit().await.map_err(temporary)?;
    Ok(Head { number: head.number, hash: parse("block hash", &head.hash)?, timestamp: head.timestamp })
}

/// The block producer: wakes every interval (or when woken), produces blocks while transactions
/// wait, and ends when the ledger is dropped or closed.
pub(super) async fn produce_blocks(ledger: Weak<Inner>, wake: Arc<Notify>, interval: Duration) {
    loop {
        let _ = tokio::time::timeout(interval, wake.notified()).await;
        let Some(inner) = ledger.upgrade() else { return };
        if inner.stopped.load(Ordering::SeqCst) {
            return;
        }
        loop {
            match inner.produce_block().await {
                // A full block: more may be waiting.
                Ok(count) if count >= inner.config.max_block_transactions => continue,
                Ok(_) => break,
                Err(error) => {
                    tracing::warn!(%error, "the embedded ledger could not produce a block; retrying");
                    break;
                }
            }
        }
    }
}

impl Inner {
    /// Executes the waiting transactions into a block and stores it.
    pub(super) async fn produce_block(&self) -> Result<usize, LedgerError> {
        let _producing = self.producing.lock().await;
        self.check_running()?;
        if self.resync.load(Ordering::SeqCst) {
            self.resync_with_store().await?;
        }
        let batch = lock(&self.mempool).executable(self.config.max_block_transactions);
        if batch.is_empty() {
            return Ok(0);
        }
        let parent = lock(&self.head).clone();
        let number = parent.number + 1;
        let timestamp = evm_seconds(self.config.clock.as_ref()).max(parent.timestamp);

        let mut keys = Keys::default();
        for transaction in &batch {
            keys.add(transaction.sender, &transaction.action);
        }
        let mut tx = self.store.write().await.map_err(temporary)?;
        let mut state = BlockState::new(number, timestamp);
        load_state(tx.ledger(), &mut keys, &mut state).await?;

        let mut transactions = Vec::with_capacity(batch.len());
        let mut nonces: HashMap<Address, u64> = HashMap::new();
        for (index, pending) in batch.iter().enumerate() {
            let result = state.apply(pending.sender, pending.hash, &pending.action);
            let (success, revert_reason, revert_data) = match result {
                Ok(()) => (true, None, None),
                Err(data) => (false, Some(contract::revert_reason(&data)), Some(data.to_vec())),
            };
            let contract_address = match &pending.action {
                Action::Deploy { address, .. } if success => Some(text(*address)),
                _ => None,
            };
            nonces.insert(pending.sender, pending.nonce + 1);
            transactions.push(LedgerTransaction {
                hash: text(pending.hash),
                block_number: number,
                index: u32::try_from(index).map_err(|_| LedgerError::final_("block too large"))?,
                sender: text(pending.sender),
                nonce: pending.nonce,
                to: pending.to.map(text),
                raw: pending.raw.to_vec(),
                success,
                revert_reason,
                revert_data,
                contract_address,
            });
        }
        if state.untracked_access {
            tracing::error!(
                block = number,
                "the embedded ledger executed a block over unloaded state; block discarded"
            );
            return Err(LedgerError::temporary("internal error: block state incomplete"));
        }

        let mut hasher_input = Vec::with_capacity(72 + 32 * batch.len());
        hasher_input.extend_from_slice(&number.to_be_bytes());
        hasher_input.extend_from_slice(parent.hash.as_slice());
        hasher_input.extend_from_slice(&timestamp.to_be_bytes());
        for pending in &batch {
            hasher_input.extend_from_slice(pending.hash.as_slice());
        }
        let hash = keccak256(&hasher_input);
        let block = LedgerBlock {
            number,
            hash: text(hash),
            parent_hash: text(parent.hash),
            timestamp,
            transaction_count: u32::try_from(batch.len()).map_err(|_| LedgerError::final_("block too large"))?,
            produced_at: self.config.clock.now(),
        };
        let (tokens, balances, holds) = changed_rows(&state);
        let nonces: Vec<LedgerNonce> =
            nonces.into_iter().map(|(address, nonce)| LedgerNonce { address: text(address), nonce }).collect();
        let written = tx
            .ledger()
            .append_block(LedgerBlockChanges {
                block: &block,
                transactions: &transactions,
                tokens: &tokens,
                balances: &balances,
                holds: &holds,
                nonces: &nonces,
            })
            .await;
        match written {
            Ok(()) => {}
            Err(StoreError::Conflict(message)) => {
                // Another producer wrote this block number: this one's view is stale.
                tracing::error!(block = number, message, "another embedded ledger writes to this store; stopping");
                self.stopped.store(true, Ordering::SeqCst);
                return Err(LedgerError::temporary("another embedded ledger produces blocks on this store"));
            }
            Err(error) => return Err(temporary(error)),
        }
        if let Err(error) = tx.commit().await {
            self.resync.store(true, Ordering::SeqCst);
            return Err(temporary(error));
        }

        lock(&self.mempool).included(&batch);
        *lock(&self.head) = Head { number, hash, timestamp };
        self.head_number.send_replace(number);
        Ok(batch.len())
    }

    /// Reads the head and the waiting senders' committed nonces from the store again, after a
    /// block's commit whose outcome is unknown.
    async fn resync_with_store(&self) -> Result<(), LedgerError> {
        let senders = lock(&self.mempool).senders();
        let mut tx = self.store.read().await.map_err(temporary)?;
        let head = tx.ledger().head().await.map_err(temporary)?.ok_or_else(|| corrupt("chain", "no head"))?;
        let addresses: Vec<String> = senders.iter().map(|s| text(*s)).collect();
        let nonces = tx.ledger().nonces(&addresses).await.map_err(temporary)?;
        drop(tx);
        let committed: Vec<(Address, u64)> = nonces
            .iter()
            .map(|n| Ok((parse::<Address>("address", &n.address)?, n.nonce)))
            .collect::<Result<_, LedgerError>>()?;
        let head = Head { number: head.number, hash: parse("block hash", &head.hash)?, timestamp: head.timestamp };
        if head.number != lock(&self.head).number {
            tracing::warn!(
                block = head.number,
                "a block whose commit seemed to fail had landed; the ledger carries on from it"
            );
        }
        lock(&self.mempool).resync(committed);
        self.head_number.send_replace(head.number);
        *lock(&self.head) = head;
        self.resync.store(false, Ordering::SeqCst);
        Ok(())
    }
}

/// Loads the rows the block's transactions touch into `state`.
async fn load_state(
    ledger: &mut dyn tokenops_store::LedgerStore,
    keys: &mut Keys,
    state: &mut BlockState,
) -> Result<(), LedgerError> {
    for token in &keys.tokens {
        if let Some(row) = ledger.token(&text(*token)).await.map_err(temporary)? {
            state.tokens.insert(
                *token,
                TokenState {
                    spec: TokenSpec { name: row.name, symbol: row.symbol, decimals: row.decimals },
                    issuer: parse("issuer", &row.issuer)?,
                    total_supply: parse_amount(&row.total_supply)?,
                    deploy_transaction: parse("transaction hash", &row.deploy_transaction)?,
                    block_number: row.block_number,
                },
            );
        }
    }
    let hold_keys: Vec<(String, String)> = keys.holds.iter().map(|(t, id)| (text(*t), text(*id))).collect();
    for row in ledger.holds(&hold_keys).await.map_err(temporary)? {
        let token: Address = parse("token", &row.token)?;
        let hold = Hold {
            owner: parse("owner", &row.owner)?,
            payee: row.payee.as_deref().map(|p| parse("payee", p)).transpose()?.unwrap_or(Address::ZERO),
            amount: parse_amount(&row.amount)?,
            expires_at: row.expires_at,
            status: match row.status {
                LedgerHoldStatus::Active => HoldStatus::Active,
                LedgerHoldStatus::Executed => HoldStatus::Executed,
                LedgerHoldStatus::Cancelled => HoldStatus::Cancelled,
            },
        };
        keys.add_hold_parties(token, &hold);
        state.holds.insert((token, parse("hold id", &row.id)?), hold);
    }
    let balance_keys: Vec<(String, String)> = keys.balances.iter().map(|(t, w)| (text(*t), text(*w))).collect();
    let mut stored: HashMap<(Address, Address), Balance> = HashMap::with_capacity(balance_keys.len());
    for row in ledger.balances(&balance_keys).await.map_err(temporary)? {
        stored.insert(
            (parse("token", &row.token)?, parse("wallet", &row.wallet)?),
            Balance { total: parse_amount(&row.total)?, held: parse_amount(&row.held)? },
        );
    }
    for key in &keys.balances {
        state.track_balance(*key, stored.remove(key));
    }
    Ok(())
}

/// The rows a block changed, in the store's spelling.
fn changed_rows(state: &BlockState) -> (Vec<LedgerToken>, Vec<LedgerBalance>, Vec<LedgerHold>) {
    let tokens = state
        .changed_tokens
        .iter()
        .filter_map(|address| {
            let token = state.tokens.get(address)?;
            Some(LedgerToken {
                address: text(*address),
                name: token.spec.name.clone(),
                symbol: token.spec.symbol.clone(),
                decimals: token.spec.decimals,
                issuer: text(token.issuer),
                total_supply: token.total_supply.to_string(),
                deploy_transaction: text(token.deploy_transaction),
                block_number: token.block_number,
            })
        })
        .collect();
    let balances = state
        .changed_balances
        .iter()
        .filter_map(|key| {
            let balance = state.balances.get(key)?;
            Some(LedgerBalance {
                token: text(key.0),
                wallet: text(key.1),
                total: balance.total.to_string(),
                held: balance.held.to_string(),
            })
        })
        .collect();
    let holds = state
        .changed_holds
        .iter()
        .filter_map(|key| {
            let hold = state.holds.get(key)?;
            Some(LedgerHold {
                token: text(key.0),
                id: text(key.1),
                owner: text(hold.owner),
                payee: (!hold.payee.is_zero()).then(|| text(hold.payee)),
                amount: hold.amount.to_string(),
                expires_at: hold.expires_at,
                status: match hold.status {
                    HoldStatus::Active => LedgerHoldStatus::Active,
                    HoldStatus::Executed => LedgerHoldStatus::Executed,
                    HoldStatus::Cancelled => LedgerHoldStatus::Cancelled,
                },
            })
        })
        .collect();
    (tokens, balances, holds)
}
