//! The `Ledger` port over the embedded chain: deploying and adopting tokens, signing, sending,
//! nonces and receipts, each delegated to the chain's `Inner`.

use super::{DEPLOY_GAS_LIMIT, EmbeddedLedger, GAS_LIMIT, corrupt, parse_amount, temporary, text};
use crate::contract;
use crate::port::{
    Balances, Ledger, LedgerCall, LedgerError, Outcome, ReceiptStatus, SignedTransaction, TokenInfo, TokenSpec, TxHash,
};
use crate::transaction::{self, Fees, UnsignedTransaction};
use alloy::primitives::{Address, U256};
use async_trait::async_trait;
use std::time::Duration;
use tokenops_custody::Custody;

#[async_trait]
impl Ledger for EmbeddedLedger {
    fn issuer(&self) -> Address {
        self.inner.issuer
    }

    async fn deploy_token(&self, spec: &TokenSpec) -> Result<Address, LedgerError> {
        let inner = &self.inner;
        let input = contract::deployment_input(spec, inner.issuer);
        let signed = inner.sign(None, input, inner.issuer, DEPLOY_GAS_LIMIT, inner.issuer_custody.as_ref()).await?;
        if let Err(e) = inner.send(&signed.raw).await {
            // Refused bytes are not in the mempool, and nothing records them to send again.
            inner.nonces.give_back(signed.sender, signed.nonce).await;
            return Err(e);
        }
        let (_, outcome) = inner.wait_for_inclusion(signed.hash).await?;
        match outcome {
            Outcome::Success => {
                let address = inner.issuer.create(signed.nonce);
                tracing::info!(%address, symbol = spec.symbol, "deployed a token on the embedded ledger");
                Ok(address)
            }
            Outcome::Reverted { reason, .. } => Err(LedgerError::final_(format!("the deployment reverted: {reason}"))),
        }
    }

    async fn latest_block(&self) -> Result<u64, LedgerError> {
        // A ledger that stopped (another producer on its store) answers nothing any more.
        self.inner.check_running()?;
        if !self.inner.reader {
            return Ok(self.head_number());
        }
        // A reader's head is the producer's, as far as it has committed.
        let mut tx = self.inner.store.read().await.map_err(temporary)?;
        let head = tx.ledger().head().await.map_err(temporary)?.ok_or_else(|| corrupt("chain", "no head"))?;
        Ok(head.number)
    }

    async fn adopt_token(&self, address: Address) -> Result<TokenInfo, LedgerError> {
        self.inner.check_running()?;
        self.inner.require_token(address).await
    }

    async fn register_wallet(&self, _wallet: Address) -> Result<(), LedgerError> {
        // Every address exists and nothing costs gas: nothing to prepare.
        self.inner.check_running()
    }

    async fn sign(
        &self,
        token: Address,
        call: &LedgerCall,
        custody: &dyn Custody,
    ) -> Result<SignedTransaction, LedgerError> {
        self.inner.require_token(token).await?;
        let sender = call.sender(self.inner.issuer);
        self.inner.sign(Some(token), contract::calldata(call), sender, GAS_LIMIT, custody).await
    }

    async fn send(&self, transaction: &SignedTransaction) -> Result<TxHash, LedgerError> {
        // An error here always means the bytes were not admitted, and the slot stays as it is:
        // their nonce is theirs, since the pipeline sends recorded bytes again until they land.
        self.inner.send(&transaction.raw).await
    }

    async fn abandon(&self, transaction: &SignedTransaction) {
        self.inner.nonces.give_back(transaction.sender, transaction.nonce).await;
    }

    async fn next_nonce(&self, sender: Address) -> Result<u64, LedgerError> {
        self.inner.check_running()?;
        self.inner.pending_nonce(sender).await
    }

    async fn fill_nonce_gap(
        &self,
        token: Address,
        sender: Address,
        nonce: u64,
        custody: &dyn Custody,
        grace: Duration,
    ) -> Result<Option<TxHash>, LedgerError> {
        let inner = &self.inner;
        inner.check_producer()?;
        inner.require_token(token).await?;
        let Some(claim) = inner.nonces.claim_gap(sender, nonce, grace).await else { return Ok(None) };
        // Under the slot's lock: still the gap, not filled meanwhile.
        if inner.pending_nonce(sender).await? != nonce {
            return Ok(None);
        }
        let unsigned = UnsignedTransaction {
            chain_id: inner.config.chain_id,
            nonce,
            to: Some(token),
            input: contract::calldata(&LedgerCall::Transfer { from: sender, to: sender, amount: U256::ZERO }),
            gas_limit: GAS_LIMIT,
            fees: Fees::Eip1559 { max_fee_per_gas: 0, max_priority_fee_per_gas: 0 },
        };
        let signed = transaction::sign(unsigned, sender, custody).await?;
        // Sent under the slot's lock: a signature of the wallet that read the ledger's count
        // before the filler is in the pool would take the same nonce.
        let sent = inner.send(&signed.raw).await;
        claim.filled();
        sent.map(Some)
    }

    async fn receipt(&self, hash: TxHash) -> Result<ReceiptStatus, LedgerError> {
        self.inner.receipt(hash).await
    }

    async fn receipts(&self, hashes: &[TxHash]) -> Result<Vec<ReceiptStatus>, LedgerError> {
        self.inner.receipts(hashes).await
    }

    async fn balances(&self, token: Address, wallet: Address) -> Result<Balances, LedgerError> {
        self.inner.check_running()?;
        let mut tx = self.inner.store.read().await.map_err(temporary)?;
        let ledger = tx.ledger();
        if ledger.token(&text(token)).await.map_err(temporary)?.is_none() {
            return Err(LedgerError::final_(format!("no token contract at {token}")));
        }
        let head = ledger.head().await.map_err(temporary)?.ok_or_else(|| corrupt("chain", "no head"))?;
        let rows = ledger.balances(&[(text(token), text(wallet))]).await.map_err(temporary)?;
        drop(tx);
        let (total, held) = match rows.first() {
            Some(row) => (parse_amount(&row.total)?, parse_amount(&row.held)?),
            None => (U256::ZERO, U256::ZERO),
        };
        Ok(Balances { total, available: total.saturating_sub(held), held, block_number: head.number })
    }
}
