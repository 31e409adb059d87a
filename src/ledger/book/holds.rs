//! Holds: placed against what is available, captured or voided once, and
//! released by the first transaction that locks their account after they
//! expired.

use super::calls::{Book, Undo, take};
use super::rows::ResolvedHold;
use crate::ledger::decline::{Decline, Refusal};
use crate::ledger::model::{Hold, HoldState};
use crate::ledger::values::{AccountId, Amount, Description, HoldId, Ttl};

impl Book {
    /// Releases the holds still stored as held whose time has run out: they
    /// already reserved nothing (`Hold::state_at`), and now they leave the stored
    /// sum of the account's holds and are stored as expired, so no later
    /// transaction locks or counts them again. Whatever the calls decide, the
    /// transaction writes this.
    pub(super) fn release_expired(&mut self) {
        let now = self.now;
        for hold in self.holds.values_mut() {
            if hold.state != HoldState::Held || hold.reserves_at(now) {
                continue;
            }
            let Some(row) = self
                .accounts
                .get_mut(&hold.account_id)
                .filter(|row| row.held_total >= hold.amount.get())
            else {
                continue;
            };
            row.held_total -= hold.amount.get();
            hold.state = HoldState::Expired;
            self.expired.push(hold.clone());
        }
    }

    /// Reserves `amount` of the account until `ttl` from now.
    pub fn place_hold(&mut self, hold: NewHold) -> Result<Hold, Refusal> {
        let call = self.current()?;
        let caller = self.caller()?;
        let before = self
            .accounts
            .get(&hold.account_id)
            .ok_or_else(|| Decline::account_not_found(hold.account_id))?
            .clone();
        // Held money counts against the floor: what is available once this
        // hold reserves its amount may not go below it, and neither sum may
        // overflow.
        let account = &before.account;
        let overflow = || Decline::balance_overflow(account.id, account.balance, hold.amount);
        let held_after = account
            .held
            .checked_add(hold.amount.get())
            .ok_or_else(overflow)?;
        let held_total = before
            .held_total
            .checked_add(hold.amount.get())
            .ok_or_else(overflow)?;
        let available_after = account
            .balance
            .checked_sub(held_after)
            .ok_or_else(overflow)?;
        if !account.limits.allows_available(available_after) {
            return Err(Decline::insufficient_funds(
                account.id,
                account.balance,
                account.held,
                hold.amount,
                account.limits.floor().unwrap_or_default(),
            )
            .into());
        }
        let id = take(&mut self.ids.holds, "hold")?;
        let expires_at = self.now
            + chrono::Duration::from_std(hold.ttl.get())
                .map_err(|e| Refusal::Internal(format!("a hold's ttl: {e}")))?;
        let placed = Hold {
            id,
            account_id: hold.account_id,
            amount: hold.amount,
            currency: before.account.currency,
            state: HoldState::Held,
            captured_amount: 0,
            description: hold.description,
            idempotency_key: caller.key.key,
            client: caller.key.namespace,
            metadata: caller.metadata,
            created_at: self.now,
            expires_at,
        };
        let mut after = before.clone();
        after.account.held = held_after;
        after.held_total = held_total;
        self.holds.insert(id, placed.clone());
        self.new_holds.push((call, placed.clone()));
        self.replace_account(after, before);
        self.log(Undo::NewHold);
        Ok(placed)
    }

    /// Ends a held hold as captured (of `captured`) or voided, releasing its
    /// reservation. The caller checked it is held ([`Book::held_hold`]).
    pub fn resolve_hold(
        &mut self,
        id: HoldId,
        state: HoldState,
        captured: i64,
    ) -> Result<Hold, Refusal> {
        let call = self.current()?;
        let before = self.held_hold(id)?.clone();
        let account_before = self
            .accounts
            .get(&before.account_id)
            .ok_or_else(|| Decline::account_not_found(before.account_id))?
            .clone();
        let mut account_after = account_before.clone();
        account_after.account.held -= before.amount.get();
        account_after.held_total -= before.amount.get();
        let mut after = before.clone();
        after.state = state;
        after.captured_amount = captured;
        self.holds.insert(id, after.clone());
        self.log(Undo::Hold(id, before));
        self.replace_account(account_after, account_before);
        self.resolved.push(ResolvedHold {
            hold: after.clone(),
            call,
        });
        self.log(Undo::ResolvedHold);
        Ok(after)
    }
}

/// What [`Book::place_hold`] reserves.
#[derive(Debug, Clone)]
pub struct NewHold {
    pub account_id: AccountId,
    pub amount: Amount,
    pub description: Description,
    pub ttl: Ttl,
}
