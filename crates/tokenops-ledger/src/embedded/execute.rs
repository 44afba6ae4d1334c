//! The token contract's semantics, executed in memory over one block's state: the same checks in
//! the same order as `contracts/src/TokenopsToken.sol` (with OpenZeppelin's ERC-20 underneath),
//! the same custom errors with the same arguments, the same expiry rule against the block's
//! timestamp. A reverted call changes nothing: every check runs before the first write.
//!
//! The state holds the rows of everything the block's transactions can touch, loaded from the
//! store before execution (see `BlockState::track_*`); the producer writes the changed rows back
//! with the block.

use crate::contract::{ContractCall, TokenopsToken as C, panic_data, revert_data};
use crate::port::TokenSpec;
use alloy::primitives::{Address, B256, Bytes, TxHash, U256};
use std::collections::{HashMap, HashSet};

/// `HoldStatus` of the contract; the ABI carries it as a `uint8`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldStatus {
    Active = 1,
    Executed = 2,
    Cancelled = 3,
}

#[derive(Debug, Clone)]
pub struct TokenState {
    pub spec: TokenSpec,
    pub issuer: Address,
    pub total_supply: U256,
    pub deploy_transaction: TxHash,
    pub block_number: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Balance {
    /// `balanceOf`: held funds included.
    pub total: U256,
    pub held: U256,
}

impl Balance {
    /// `availableBalanceOf`. `held <= total` always holds, so this never underflows.
    pub fn available(&self) -> U256 {
        self.total.saturating_sub(self.held)
    }

    /// The contract's `InsufficientAvailableBalance` revert unless `needed` is available to
    /// `account`, whose balance this is.
    fn cover(&self, account: Address, needed: U256) -> Result<(), Bytes> {
        let available = self.available();
        if needed > available {
            return Err(revert_data(C::InsufficientAvailableBalance { account, available, needed }));
        }
        Ok(())
    }
}

#[derive(Debug, Clone)]
pub struct Hold {
    pub owner: Address,
    /// `Address::ZERO`: no payee (executing pays the owner).
    pub payee: Address,
    pub amount: U256,
    /// 0: never expires.
    pub expires_at: u64,
    pub status: HoldStatus,
}

/// What a transaction does, decoded at admission.
#[derive(Debug, Clone)]
pub enum Action {
    /// A call of the token contract at `token`.
    Call { token: Address, call: ContractCall },
    /// A deployment of the token contract; `address` is the sender's CREATE address.
    Deploy { spec: TokenSpec, issuer: Address, address: Address },
}

/// The rows one block reads and writes.
#[derive(Debug, Default)]
pub struct BlockState {
    pub timestamp: u64,
    pub block_number: u64,
    pub tokens: HashMap<Address, TokenState>,
    pub balances: HashMap<(Address, Address), Balance>,
    pub holds: HashMap<(Address, B256), Hold>,
    pub changed_tokens: HashSet<Address>,
    pub changed_balances: HashSet<(Address, Address)>,
    pub changed_holds: HashSet<(Address, B256)>,
    /// Balance keys loaded (or known to have no row) before execution.
    tracked_balances: HashSet<(Address, Address)>,
    /// Set when execution reached a balance that was not loaded: a bug in key collection. The
    /// producer then discards the block rather than write a balance computed from zero.
    pub untracked_access: bool,
}

/// The balance keys and hold keys a block's actions need loaded.
#[derive(Debug, Default)]
pub struct Keys {
    pub tokens: HashSet<Address>,
    pub balances: HashSet<(Address, Address)>,
    pub holds: HashSet<(Address, B256)>,
}

impl Keys {
    /// Collects what `action` by `sender` reads, apart from what a stored hold adds (its owner
    /// and payee: see [`Keys::add_hold_parties`]).
    pub fn add(&mut self, sender: Address, action: &Action) {
        let Action::Call { token, call } = action else { return };
        let token = *token;
        self.tokens.insert(token);
        match call {
            ContractCall::mint(c) => {
                self.balances.insert((token, c.to));
            }
            ContractCall::burn(c) => {
                self.balances.insert((token, c.from));
            }
            ContractCall::transfer(c) => {
                self.balances.insert((token, sender));
                self.balances.insert((token, c.to));
            }
            ContractCall::hold(c) => {
                self.balances.insert((token, sender));
                self.balances.insert((token, c.payee));
                self.holds.insert((token, c.id));
            }
            ContractCall::executeHold(c) => {
                self.holds.insert((token, c.id));
            }
            ContractCall::cancelHold(c) => {
                self.holds.insert((token, c.id));
            }
            _ => {}
        }
    }

    /// A stored hold's owner and payee balances (an execute moves funds between them).
    pub fn add_hold_parties(&mut self, token: Address, hold: &Hold) {
        self.balances.insert((token, hold.owner));
        self.balances.insert((token, hold.payee));
    }
}

impl BlockState {
    pub fn new(block_number: u64, timestamp: u64) -> Self {
        Self { block_number, timestamp, ..Default::default() }
    }

    /// Marks `key` as loaded (with its stored row, or none: zero).
    pub fn track_balance(&mut self, key: (Address, Address), stored: Option<Balance>) {
        self.tracked_balances.insert(key);
        if let Some(balance) = stored {
            self.balances.insert(key, balance);
        }
    }

    fn balance(&mut self, token: Address, wallet: Address) -> Balance {
        let key = (token, wallet);
        if !self.tracked_balances.contains(&key) {
            self.untracked_access = true;
        }
        self.balances.get(&key).copied().unwrap_or_default()
    }

    fn set_balance(&mut self, token: Address, wallet: Address, balance: Balance) {
        self.balances.insert((token, wallet), balance);
        self.changed_balances.insert((token, wallet));
    }

    /// Applies one transaction's action; `Err` is the revert data (nothing changed).
    pub fn apply(&mut self, sender: Address, transaction: TxHash, action: &Action) -> Result<(), Bytes> {
        match action {
            Action::Deploy { spec, issuer, address } => {
                // The constructor: `InvalidIssuer(address(0))`.
                if issuer.is_zero() {
                    return Err(revert_data(C::InvalidIssuer { issuer: *issuer }));
                }
                self.tokens.insert(
                    *address,
                    TokenState {
                        spec: spec.clone(),
                        issuer: *issuer,
                        total_supply: U256::ZERO,
                        deploy_transaction: transaction,
                        block_number: self.block_number,
                    },
                );
                self.changed_tokens.insert(*address);
                Ok(())
            }
            Action::Call { token, call } => self.call(sender, *token, call),
        }
    }

    fn call(&mut self, sender: Address, token: Address, call: &ContractCall) -> Result<(), Bytes> {
        let Some(state) = self.tokens.get(&token) else {
            // Admission only accepts calls of deployed tokens; a call of an address without code
            // succeeds on an EVM and does nothing, and so does this.
            return Ok(());
        };
        let (issuer, total_supply) = (state.issuer, state.total_supply);
        match call {
            ContractCall::mint(c) => {
                if sender != issuer {
                    return Err(revert_data(C::Unauthorized { caller: sender }));
                }
                if c.to.is_zero() {
                    return Err(revert_data(C::ERC20InvalidReceiver { receiver: Address::ZERO }));
                }
                // `totalSupply += value` is checked arithmetic in OpenZeppelin: Panic(0x11).
                let Some(supply) = total_supply.checked_add(c.amount) else {
                    return Err(panic_data(0x11));
                };
                let mut balance = self.balance(token, c.to);
                // Bounded by the supply, as OpenZeppelin's unchecked addition relies on.
                balance.total = balance.total.saturating_add(c.amount);
                self.set_supply(token, supply);
                self.set_balance(token, c.to, balance);
                Ok(())
            }
            ContractCall::burn(c) => {
                if sender != issuer {
                    return Err(revert_data(C::Unauthorized { caller: sender }));
                }
                if c.from.is_zero() {
                    return Err(revert_data(C::ERC20InvalidSender { sender: Address::ZERO }));
                }
                let mut balance = self.balance(token, c.from);
                balance.cover(c.from, c.amount)?;
                balance.total -= c.amount;
                let supply = total_supply.saturating_sub(c.amount);
                self.set_supply(token, supply);
                self.set_balance(token, c.from, balance);
                Ok(())
            }
            ContractCall::transfer(c) => self.transfer(token, sender, c.to, c.value),
            ContractCall::hold(c) => {
                if c.amount.is_zero() {
                    return Err(revert_data(C::ZeroAmount {}));
                }
                if self.holds.contains_key(&(token, c.id)) {
                    return Err(revert_data(C::HoldExists { id: c.id }));
                }
                if c.expiresAt != 0 && c.expiresAt <= self.timestamp {
                    return Err(revert_data(C::HoldExpired { id: c.id, expiresAt: c.expiresAt }));
                }
                let mut balance = self.balance(token, sender);
                balance.cover(sender, c.amount)?;
                balance.held += c.amount;
                self.set_balance(token, sender, balance);
                self.holds.insert(
                    (token, c.id),
                    Hold {
                        owner: sender,
                        payee: c.payee,
                        amount: c.amount,
                        expires_at: c.expiresAt,
                        status: HoldStatus::Active,
                    },
                );
                self.changed_holds.insert((token, c.id));
                Ok(())
            }
            ContractCall::executeHold(c) => {
                let hold = self.active_hold(token, c.id)?;
                if sender != hold.owner && sender != issuer {
                    return Err(revert_data(C::Unauthorized { caller: sender }));
                }
                if self.is_expired(hold.expires_at) {
                    return Err(revert_data(C::HoldExpired { id: c.id, expiresAt: hold.expires_at }));
                }
                let recipient = if hold.payee.is_zero() { hold.owner } else { hold.payee };
                // Release the funds, then (for a payee) transfer them like any other transfer.
                let mut owner = self.balance(token, hold.owner);
                owner.held = owner.held.saturating_sub(hold.amount);
                if recipient != hold.owner {
                    // Unreachable while held <= total; kept so a broken invariant reverts.
                    owner.cover(hold.owner, hold.amount)?;
                    owner.total -= hold.amount;
                    let mut payee = self.balance(token, recipient);
                    payee.total = payee.total.saturating_add(hold.amount);
                    self.set_balance(token, recipient, payee);
                }
                self.set_balance(token, hold.owner, owner);
                self.set_hold_status(token, c.id, HoldStatus::Executed);
                Ok(())
            }
            ContractCall::cancelHold(c) => {
                let hold = self.active_hold(token, c.id)?;
                if sender != hold.owner && sender != issuer && !self.is_expired(hold.expires_at) {
                    return Err(revert_data(C::Unauthorized { caller: sender }));
                }
                let mut owner = self.balance(token, hold.owner);
                owner.held = owner.held.saturating_sub(hold.amount);
                self.set_balance(token, hold.owner, owner);
                self.set_hold_status(token, c.id, HoldStatus::Cancelled);
                Ok(())
            }
            // Admission accepts no other call (approve, transferFrom, views).
            _ => Err(Bytes::new()),
        }
    }

    /// OpenZeppelin's `_transfer` with the contract's `_update` override.
    fn transfer(&mut self, token: Address, from: Address, to: Address, value: U256) -> Result<(), Bytes> {
        if to.is_zero() {
            return Err(revert_data(C::ERC20InvalidReceiver { receiver: Address::ZERO }));
        }
        let mut sender = self.balance(token, from);
        sender.cover(from, value)?;
        sender.total -= value;
        self.set_balance(token, from, sender);
        let mut recipient = self.balance(token, to);
        recipient.total = recipient.total.saturating_add(value);
        self.set_balance(token, to, recipient);
        Ok(())
    }

    /// `_activeHold`: `UnknownHold`, then `HoldNotActive(id, status)`.
    fn active_hold(&self, token: Address, id: B256) -> Result<Hold, Bytes> {
        match self.holds.get(&(token, id)) {
            None => Err(revert_data(C::UnknownHold { id })),
            Some(hold) if hold.status != HoldStatus::Active => {
                Err(revert_data(C::HoldNotActive { id, status: hold.status as u8 }))
            }
            Some(hold) => Ok(hold.clone()),
        }
    }

    /// `_isExpired`: from `expiresAt` on, inclusive; zero never expires.
    fn is_expired(&self, expires_at: u64) -> bool {
        expires_at != 0 && self.timestamp >= expires_at
    }

    fn set_supply(&mut self, token: Address, supply: U256) {
        if let Some(state) = self.tokens.get_mut(&token) {
            state.total_supply = supply;
            self.changed_tokens.insert(token);
        }
    }

    fn set_hold_status(&mut self, token: Address, id: B256, status: HoldStatus) {
        if let Some(hold) = self.holds.get_mut(&(token, id)) {
            hold.status = status;
            self.changed_holds.insert((token, id));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::revert_reason;

    const TOKEN: Address = Address::repeat_byte(0x70);
    const ISSUER: Address = Address::repeat_byte(0x11);
    const ALICE: Address = Address::repeat_byte(0xa1);
    const BOB: Address = Address::repeat_byte(0xb0);

    fn state() -> BlockState {
        let mut state = BlockState::new(1, 1_000);
        state.tokens.insert(
            TOKEN,
            TokenState {
                spec: TokenSpec { name: "Euro".into(), symbol: "EUR".into(), decimals: 2 },
                issuer: ISSUER,
                total_supply: U256::ZERO,
                deploy_transaction: TxHash::ZERO,
                block_number: 0,
            },
        );
        for wallet in [ISSUER, ALICE, BOB, Address::ZERO] {
            state.track_balance((TOKEN, wallet), None);
        }
        state
    }

    fn run(state: &mut BlockState, sender: Address, call: ContractCall) -> Result<(), String> {
        state.apply(sender, TxHash::ZERO, &Action::Call { token: TOKEN, call }).map_err(|data| revert_reason(&data))
    }

    fn mint(to: Address, amount: u64) -> ContractCall {
        ContractCall::mint(C::mintCall { to, amount: U256::from(amount) })
    }

    fn hold(id: u8, payee: Address, amount: u64, expires_at: u64) -> ContractCall {
        ContractCall::hold(C::holdCall {
            id: B256::repeat_byte(id),
            payee,
            amount: U256::from(amount),
            expiresAt: expires_at,
        })
    }

    #[test]
    fn checks_run_in_the_contracts_order() {
        let mut s = state();
        assert_eq!(run(&mut s, ALICE, mint(ALICE, 5)), Err("Unauthorized".into()));
        assert_eq!(run(&mut s, ISSUER, mint(Address::ZERO, 5)), Err("ERC20InvalidReceiver".into()));
        run(&mut s, ISSUER, mint(ALICE, 100)).expect("mint");
        // hold: ZeroAmount, HoldExists, HoldExpired, InsufficientAvailableBalance.
        assert_eq!(run(&mut s, ALICE, hold(1, BOB, 0, 999)), Err("ZeroAmount".into()));
        assert_eq!(run(&mut s, ALICE, hold(1, BOB, 500, 1_000)), Err("HoldExpired".into()));
        assert_eq!(run(&mut s, ALICE, hold(1, BOB, 500, 0)), Err("InsufficientAvailableBalance".into()));
        run(&mut s, ALICE, hold(1, BOB, 60, 2_000)).expect("hold");
        assert_eq!(run(&mut s, ALICE, hold(1, BOB, 0, 0)), Err("ZeroAmount".into()));
        assert_eq!(run(&mut s, ALICE, hold(1, BOB, 1, 0)), Err("HoldExists".into()));
        let balance = s.balances[&(TOKEN, ALICE)];
        assert_eq!(
            (balance.total, balance.held, balance.available()),
            (U256::from(100), U256::from(60), U256::from(40))
        );
        // Held funds cannot be transferred.
        let transfer = ContractCall::transfer(C::transferCall { to: BOB, value: U256::from(41) });
        assert_eq!(run(&mut s, ALICE, transfer), Err("InsufficientAvailableBalance".into()));
        // executeHold: Unauthorized for the payee, then pays the payee.
        let execute = ContractCall::executeHold(C::executeHoldCall { id: B256::repeat_byte(1) });
        assert_eq!(run(&mut s, BOB, execute.clone()), Err("Unauthorized".into()));
        run(&mut s, ALICE, execute.clone()).expect("execute");
        assert_eq!(run(&mut s, ALICE, execute), Err("HoldNotActive".into()));
        assert_eq!(s.balances[&(TOKEN, BOB)].total, U256::from(60));
        assert_eq!(s.balances[&(TOKEN, ALICE)], Balance { total: U256::from(40), held: U256::ZERO });
    }

    #[test]
    fn expiry_blocks_execution_and_opens_cancellation_to_anyone() {
        let mut s = state();
        run(&mut s, ISSUER, mint(ALICE, 10)).expect("mint");
        run(&mut s, ALICE, hold(2, Address::ZERO, 10, 1_500)).expect("hold");
        let cancel = ContractCall::cancelHold(C::cancelHoldCall { id: B256::repeat_byte(2) });
        assert_eq!(run(&mut s, BOB, cancel.clone()), Err("Unauthorized".into()));
        s.timestamp = 1_500;
        let execute = ContractCall::executeHold(C::executeHoldCall { id: B256::repeat_byte(2) });
        assert_eq!(run(&mut s, ALICE, execute), Err("HoldExpired".into()));
        run(&mut s, BOB, cancel.clone()).expect("anyone cancels an expired hold");
        assert_eq!(run(&mut s, ALICE, cancel), Err("HoldNotActive".into()));
        let unknown = ContractCall::cancelHold(C::cancelHoldCall { id: B256::repeat_byte(3) });
        assert_eq!(run(&mut s, ALICE, unknown), Err("UnknownHold".into()));
        assert_eq!(s.balances[&(TOKEN, ALICE)], Balance { total: U256::from(10), held: U256::ZERO });
    }

    #[test]
    fn mint_overflow_panics_like_checked_arithmetic() {
        let mut s = state();
        run(&mut s, ISSUER, ContractCall::mint(C::mintCall { to: ALICE, amount: U256::MAX })).expect("mint max");
        assert_eq!(run(&mut s, ISSUER, mint(BOB, 1)), Err("Panic".into()));
        let burn = ContractCall::burn(C::burnCall { from: ALICE, amount: U256::MAX });
        run(&mut s, ISSUER, burn).expect("burn all");
        assert_eq!(s.tokens[&TOKEN].total_supply, U256::ZERO);
        assert!(!s.untracked_access);
    }

    #[test]
    fn an_untracked_balance_is_flagged() {
        let mut s = state();
        run(&mut s, ISSUER, mint(Address::repeat_byte(0x99), 1)).expect("mint");
        assert!(s.untracked_access);
    }
}
