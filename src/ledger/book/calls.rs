//! The book: the locked rows, the calls decided against them in turn, each
//! call's changes logged so a refused call leaves the book as it found it, and
//! the look-ups every decision makes.

use std::collections::{BTreeMap, VecDeque};

use chrono::{DateTime, Utc};

use super::rows::{
    AccountRow, ChangedAccount, Changes, EntryRow, NewEntry, NewIds, NewReversal, Original,
    ResolvedHold,
};
use crate::ledger::decline::{Decline, Refusal};
use crate::ledger::metadata::Metadata;
use crate::ledger::model::{Account, Hold, HoldState};
use crate::ledger::subscription::SubscriptionRow;
use crate::ledger::values::{
    AccountId, Currency, EntryId, HoldId, IdempotencyKey, Namespace, ScopedKey, SubscriptionId,
};

#[derive(Debug)]
pub(super) enum Undo {
    Account(AccountId, AccountRow),
    Entry(EntryId, EntryRow),
    Hold(HoldId, Hold),
    NewAccount,
    NewEntry,
    NewHold,
    ResolvedHold,
    Reversal,
    Subscription(SubscriptionId, SubscriptionRow),
    NewSubscription,
}

#[derive(Debug)]
pub struct Book {
    pub(super) now: DateTime<Utc>,
    pub(super) accounts: BTreeMap<AccountId, AccountRow>,
    pub(super) entries: BTreeMap<EntryId, EntryRow>,
    /// The rows as locked, to tell what changed.
    pub(super) locked_accounts: BTreeMap<AccountId, AccountRow>,
    pub(super) locked_entries: BTreeMap<EntryId, EntryRow>,
    pub(super) holds: BTreeMap<HoldId, Hold>,
    pub(super) ids: NewIds,
    pub(super) new_accounts: Vec<(usize, Account)>,
    pub(super) new_entries: Vec<NewEntry>,
    pub(super) new_holds: Vec<(usize, Hold)>,
    pub(super) resolved: Vec<ResolvedHold>,
    /// Expired holds released when the rows were locked.
    pub(super) expired: Vec<Hold>,
    pub(super) originals: BTreeMap<ScopedKey, Original>,
    pub(super) reversals: Vec<NewReversal>,
    pub(super) subscriptions: BTreeMap<SubscriptionId, SubscriptionRow>,
    pub(super) locked_subscriptions: BTreeMap<SubscriptionId, SubscriptionRow>,
    /// New subscriptions, each with the call that created it.
    pub(super) new_subscriptions: Vec<(usize, SubscriptionId)>,
    /// The highest sequence the change stream had assigned, when a call needs it.
    pub(super) stream_head: Option<u64>,
    /// The call being decided, and the undo log of its changes.
    pub(super) call: Option<Call>,
    pub(super) calls: usize,
}

#[derive(Debug)]
pub(super) struct Call {
    pub(super) index: usize,
    pub(super) caller: Caller,
    pub(super) undo: Vec<Undo>,
}

/// Who makes a call, as what it writes shows: its key (in its client's
/// namespace) and its metadata.
#[derive(Debug, Clone)]
pub struct Caller {
    pub key: ScopedKey,
    pub metadata: Metadata,
}

impl From<IdempotencyKey> for Caller {
    /// An anonymous call without metadata.
    fn from(key: IdempotencyKey) -> Self {
        Self {
            key: ScopedKey {
                namespace: Namespace::anonymous(),
                key,
            },
            metadata: Metadata::NONE,
        }
    }
}

impl Book {
    /// A book over locked rows, at the database's `now`.
    pub fn new(
        now: DateTime<Utc>,
        accounts: impl IntoIterator<Item = AccountRow>,
        entries: impl IntoIterator<Item = EntryRow>,
        holds: impl IntoIterator<Item = Hold>,
        ids: NewIds,
    ) -> Self {
        let accounts: BTreeMap<_, _> = accounts
            .into_iter()
            .map(|row| (row.account.id, row))
            .collect();
        let entries: BTreeMap<_, _> = entries.into_iter().map(|e| (e.id, e)).collect();
        let mut book = Self {
            now,
            locked_accounts: accounts.clone(),
            locked_entries: entries.clone(),
            accounts,
            entries,
            holds: holds.into_iter().map(|h| (h.id, h)).collect(),
            ids,
            new_accounts: Vec::new(),
            new_entries: Vec::new(),
            new_holds: Vec::new(),
            resolved: Vec::new(),
            expired: Vec::new(),
            originals: BTreeMap::new(),
            reversals: Vec::new(),
            subscriptions: BTreeMap::new(),
            locked_subscriptions: BTreeMap::new(),
            new_subscriptions: Vec::new(),
            stream_head: None,
            call: None,
            calls: 0,
        };
        book.release_expired();
        book
    }

    /// The database's clock when the rows were locked.
    pub fn now(&self) -> DateTime<Utc> {
        self.now
    }

    /// Starts deciding the next call, made by `caller`; returns its index.
    pub fn start_call(&mut self, caller: impl Into<Caller>) -> usize {
        let index = self.calls;
        self.calls += 1;
        self.call = Some(Call {
            index,
            caller: caller.into(),
            undo: Vec::new(),
        });
        index
    }

    /// Ends the current call: keeps its changes if it succeeded, else undoes them.
    pub fn finish_call(&mut self, succeeded: bool) {
        let Some(call) = self.call.take() else {
            return;
        };
        if succeeded {
            return;
        }
        for undo in call.undo.into_iter().rev() {
            match undo {
                Undo::Account(id, row) => {
                    self.accounts.insert(id, row);
                }
                Undo::Entry(id, row) => {
                    self.entries.insert(id, row);
                }
                Undo::Hold(id, hold) => {
                    self.holds.insert(id, hold);
                }
                Undo::NewAccount => {
                    if let Some((_, account)) = self.new_accounts.pop() {
                        self.accounts.remove(&account.id);
                        self.ids.accounts.push_front(account.id);
                    }
                }
                Undo::NewEntry => {
                    if let Some(new) = self.new_entries.pop() {
                        self.ids.entries.push_front(new.entry.id);
                    }
                }
                Undo::NewHold => {
                    if let Some((_, hold)) = self.new_holds.pop() {
                        self.holds.remove(&hold.id);
                        self.ids.holds.push_front(hold.id);
                    }
                }
                Undo::ResolvedHold => {
                    self.resolved.pop();
                }
                Undo::Subscription(id, row) => {
                    self.subscriptions.insert(id, row);
                }
                Undo::NewSubscription => {
                    if let Some((_, id)) = self.new_subscriptions.pop() {
                        self.subscriptions.remove(&id);
                        self.ids.subscriptions.push_front(id);
                    }
                }
                Undo::Reversal => {
                    if let Some(reversal) = self.reversals.pop()
                        && let Some(original) = self.originals.get_mut(&reversal.original)
                    {
                        original.reversed_by = None;
                    }
                }
            }
        }
    }

    pub fn account(&self, id: AccountId) -> Result<&Account, Decline> {
        self.accounts
            .get(&id)
            .map(|row| &row.account)
            .ok_or_else(|| Decline::account_not_found(id))
    }

    /// The account, if it holds `currency`.
    pub fn account_in(&self, id: AccountId, currency: Currency) -> Result<&Account, Decline> {
        let account = self.account(id)?;
        if account.currency != currency {
            return Err(Decline::currency_mismatch(id, account.currency, currency));
        }
        Ok(account)
    }

    pub fn entry(&self, id: EntryId) -> Result<&EntryRow, Decline> {
        self.entries
            .get(&id)
            .ok_or_else(|| Decline::entry_not_found(id))
    }

    pub fn hold(&self, id: HoldId) -> Result<&Hold, Decline> {
        self.holds
            .get(&id)
            .ok_or_else(|| Decline::hold_not_found(id))
    }

    /// A hold that can be captured or voided now: held, and not expired.
    pub fn held_hold(&self, id: HoldId) -> Result<&Hold, Decline> {
        let hold = self.hold(id)?;
        match hold.state_at(self.now) {
            HoldState::Held => Ok(hold),
            HoldState::Expired => Err(Decline::hold_expired(id, hold.expires_at)),
            state => Err(Decline::hold_not_held(id, state)),
        }
    }

    /// What the decisions changed.
    pub fn into_changes(self) -> Changes {
        let accounts = self
            .locked_accounts
            .iter()
            .filter_map(|(id, locked)| {
                let row = self.accounts.get(id)?;
                (row != locked).then(|| ChangedAccount {
                    row: row.clone(),
                    count_before: locked.entry_count,
                    limits_before: locked.account.limits,
                })
            })
            .collect();
        let refunded_entries = self
            .locked_entries
            .iter()
            .filter_map(|(id, locked)| {
                let row = self.entries.get(id)?;
                (row != locked).then(|| row.clone())
            })
            .collect();
        let new_accounts = self
            .new_accounts
            .iter()
            .filter_map(|(call, a)| Some((*call, self.accounts.get(&a.id)?.clone())))
            .collect();
        let subscriptions = self
            .locked_subscriptions
            .iter()
            .filter_map(|(id, locked)| {
                let row = self.subscriptions.get(id)?;
                (row != locked).then(|| row.clone())
            })
            .collect();
        let new_subscriptions = self
            .new_subscriptions
            .iter()
            .filter_map(|(call, id)| Some((*call, self.subscriptions.get(id)?.clone())))
            .collect();
        Changes {
            now: self.now,
            new_subscriptions,
            subscriptions,
            new_accounts,
            accounts,
            new_entries: self.new_entries,
            refunded_entries,
            new_holds: self.new_holds,
            resolved_holds: self.resolved,
            expired_holds: self.expired,
            reversals: self.reversals,
            unused: self.ids,
        }
    }

    pub(super) fn current(&self) -> Result<usize, Refusal> {
        self.call
            .as_ref()
            .map(|c| c.index)
            .ok_or_else(|| Refusal::Internal("a change outside any call".into()))
    }

    /// Who makes the current call.
    pub(super) fn caller(&self) -> Result<Caller, Refusal> {
        self.call
            .as_ref()
            .map(|c| c.caller.clone())
            .ok_or_else(|| Refusal::Internal("a change outside any call".into()))
    }

    pub(super) fn replace_account(&mut self, after: AccountRow, before: AccountRow) {
        let id = after.account.id;
        self.accounts.insert(id, after);
        self.log(Undo::Account(id, before));
    }

    pub(super) fn log(&mut self, undo: Undo) {
        if let Some(call) = &mut self.call {
            call.undo.push(undo);
        }
    }
}

pub(super) fn take<T>(ids: &mut VecDeque<T>, what: &str) -> Result<T, Refusal> {
    ids.pop_front()
        .ok_or_else(|| Refusal::Internal(format!("no {what} id was reserved for this call")))
}
