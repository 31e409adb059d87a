//! The rows a transaction holds locked, as its decisions see them, and what the
//! decisions change.
//!
//! The executor locks every row the calls of a transaction name, loads them into a
//! [`Book`], and lets each call's operation decide against it in turn: a call sees
//! the changes of the calls decided before it in the same transaction. A call that
//! is refused leaves the book as it found it ([`Book::finish_call`]). What is left
//! at the end ([`Book::into_changes`]) is what the transaction writes.
//!
//! New rows take their ids from [`NewIds`], reserved by the executor before the
//! decisions, so a reply can name them before anything is written.

use std::collections::{BTreeMap, VecDeque};

use chrono::{DateTime, Utc};

use super::decline::{Decline, Refusal};
use super::limits::Limits;
use super::metadata::Metadata;
use super::model::{Account, Entry, EntryKind, Hold, HoldState};
use super::values::{
    AccountId, Amount, Currency, Description, EntryId, HoldId, IdempotencyKey, Namespace,
    ScopedKey, Ttl,
};

/// An account row as locked: the account (with its active holds in `held`), and
/// the stored counters the transaction maintains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountRow {
    pub account: Account,
    /// Entries the account has; the next one is numbered `entry_count + 1`.
    pub entry_count: u64,
    /// The stored sum of its holds in state HELD, expired or not.
    pub held_total: i64,
}

/// A journal entry as locked for a refund.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryRow {
    pub id: EntryId,
    pub account_id: AccountId,
    pub kind: EntryKind,
    pub amount: Amount,
    pub currency: Currency,
    /// What its refunds have returned so far.
    pub refunded: i64,
    /// A reversal entry's original, which makes it never refundable.
    pub reverses: Option<EntryId>,
}

impl EntryRow {
    /// What may still be refunded.
    pub fn refundable(&self) -> i64 {
        self.amount.get() - self.refunded
    }
}

/// Ids for the rows the decisions will create.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct NewIds {
    pub accounts: VecDeque<AccountId>,
    pub entries: VecDeque<EntryId>,
    pub holds: VecDeque<HoldId>,
}

/// What an operation reads and creates.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Needs {
    /// Accounts named by the request.
    pub accounts: Vec<AccountId>,
    /// Entries named by the request; their accounts are locked too.
    pub entries: Vec<EntryId>,
    /// Holds named by the request; their accounts are locked too.
    pub holds: Vec<HoldId>,
    /// The rows it may create, whose ids are reserved before it decides.
    pub creates: RowCounts,
    /// Its reply shows the accounts it names as GetAccount does, metadata
    /// included (SetLimits): their metadata is read with them.
    pub describes_accounts: bool,
    /// Operations named by the key they committed under, in the caller's
    /// namespace (a reversal's original): their key rows are locked with the
    /// call's own key, their entries' accounts with the others, and an id is
    /// reserved for each entry they wrote.
    pub originals: Vec<IdempotencyKey>,
}

/// An operation named by its key, as the transaction found it once its key row
/// was locked (waiting out a call still in flight under it) and its entries'
/// accounts were.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Original {
    pub key: ScopedKey,
    pub record: Record,
    /// The entries written under its key, in the order it wrote them.
    pub entries: Vec<Entry>,
    /// The key of the reversal that reversed it, if one has.
    pub reversed_by: Option<IdempotencyKey>,
}

/// What an operation's key row says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// A committed outcome: the stored code of its method, and whether it
    /// succeeded.
    Committed { method: u8, succeeded: bool },
    /// The row is this transaction's own, uncommitted: nothing had committed
    /// under the key.
    Claimed,
    /// No row: the key was never used, or retention purged its row; `effects`
    /// is whether anything (an entry, a hold, an account) carries the key.
    Absent { effects: bool },
}

/// An operation a call of this transaction reversed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewReversal {
    pub original: ScopedKey,
    /// The call (in decision order) that reversed it.
    pub call: usize,
}

/// How many rows of each kind a call may create.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RowCounts {
    pub accounts: usize,
    pub entries: usize,
    pub holds: usize,
}

impl RowCounts {
    #[must_use]
    pub fn plus(self, other: Self) -> Self {
        Self {
            accounts: self.accounts + other.accounts,
            entries: self.entries + other.entries,
            holds: self.holds + other.holds,
        }
    }
}

/// A new journal entry and where it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEntry {
    pub entry: Entry,
    /// Its place in its account's journal.
    pub seq: u64,
    /// The call (in decision order) that created it.
    pub call: usize,
    /// Its place among its call's entries: a transfer's debit is 0, its credit 1;
    /// a post's leg i writes 2i and 2i + 1. Unique per key.
    pub leg: u16,
}

/// An account a transaction changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangedAccount {
    pub row: AccountRow,
    /// Its entry count when locked (a multi-primary batch's guard).
    pub count_before: u64,
    /// Its limits when locked: written again only if they changed.
    pub limits_before: Limits,
}

/// A hold resolved by a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedHold {
    pub hold: Hold,
    pub call: usize,
}

/// What the decisions changed, for the executor to write.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Changes {
    /// The database's clock the decisions were made at.
    pub now: DateTime<Utc>,
    /// New accounts, as the decisions left them.
    pub new_accounts: Vec<(usize, AccountRow)>,
    /// Changed accounts, with what they were when locked.
    pub accounts: Vec<ChangedAccount>,
    pub new_entries: Vec<NewEntry>,
    pub refunded_entries: Vec<EntryRow>,
    pub new_holds: Vec<(usize, Hold)>,
    pub resolved_holds: Vec<ResolvedHold>,
    /// Holds found still held after they expired, released by this transaction.
    pub expired_holds: Vec<Hold>,
    pub reversals: Vec<NewReversal>,
    /// Ids reserved but not used.
    pub unused: NewIds,
}

#[derive(Debug)]
enum Undo {
    Account(AccountId, AccountRow),
    Entry(EntryId, EntryRow),
    Hold(HoldId, Hold),
    NewAccount,
    NewEntry,
    NewHold,
    ResolvedHold,
    Reversal,
}

#[derive(Debug)]
pub struct Book {
    now: DateTime<Utc>,
    accounts: BTreeMap<AccountId, AccountRow>,
    entries: BTreeMap<EntryId, EntryRow>,
    /// The rows as locked, to tell what changed.
    locked_accounts: BTreeMap<AccountId, AccountRow>,
    locked_entries: BTreeMap<EntryId, EntryRow>,
    holds: BTreeMap<HoldId, Hold>,
    ids: NewIds,
    new_accounts: Vec<(usize, Account)>,
    new_entries: Vec<NewEntry>,
    new_holds: Vec<(usize, Hold)>,
    resolved: Vec<ResolvedHold>,
    /// Expired holds released when the rows were locked.
    expired: Vec<Hold>,
    originals: BTreeMap<ScopedKey, Original>,
    reversals: Vec<NewReversal>,
    /// The call being decided, and the undo log of its changes.
    call: Option<Call>,
    calls: usize,
}

#[derive(Debug)]
struct Call {
    index: usize,
    caller: Caller,
    undo: Vec<Undo>,
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
            call: None,
            calls: 0,
        };
        book.release_expired();
        book
    }

    /// Releases the holds still stored as held whose time has run out: they
    /// already reserved nothing (`Hold::state_at`), and now they leave the stored
    /// sum of the account's holds and are stored as expired, so no later
    /// transaction locks or counts them again. Whatever the calls decide, the
    /// transaction writes this.
    fn release_expired(&mut self) {
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

    /// The book with the operations the calls name by key.
    #[must_use]
    pub fn with_originals(mut self, originals: impl IntoIterator<Item = Original>) -> Self {
        self.originals = originals.into_iter().map(|o| (o.key.clone(), o)).collect();
        self
    }

    /// The operation the current call names by `key`, in its caller's
    /// namespace, as the decisions before it left it.
    pub fn original(&self, key: &IdempotencyKey) -> Result<&Original, Refusal> {
        let scoped = ScopedKey {
            namespace: self.caller()?.key.namespace,
            key: key.clone(),
        };
        self.originals
            .get(&scoped)
            .ok_or_else(|| Refusal::Internal("an operation named by key was not loaded".into()))
    }

    /// Records that the current call reverses the operation under `key`: the
    /// calls decided after it see it reversed, and the transaction writes the
    /// row whose primary key lets no other transaction reverse it again.
    pub fn reverse(&mut self, key: &IdempotencyKey) -> Result<(), Refusal> {
        let call = self.current()?;
        let caller = self.caller()?.key;
        let scoped = ScopedKey {
            namespace: caller.namespace,
            key: key.clone(),
        };
        let original = self
            .originals
            .get_mut(&scoped)
            .ok_or_else(|| Refusal::Internal("an operation named by key was not loaded".into()))?;
        if original.reversed_by.is_some() {
            return Err(Refusal::Internal("an operation reversed twice".into()));
        }
        original.reversed_by = Some(caller.key);
        self.reversals.push(NewReversal {
            original: scoped,
            call,
        });
        self.log(Undo::Reversal);
        Ok(())
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
            .ok_or(Decline::AccountNotFound { account_id: id })
    }

    /// The account, if it holds `currency`.
    pub fn account_in(&self, id: AccountId, currency: Currency) -> Result<&Account, Decline> {
        let account = self.account(id)?;
        if account.currency != currency {
            return Err(Decline::CurrencyMismatch {
                account_id: id,
                account_currency: account.currency,
                requested: currency,
            });
        }
        Ok(account)
    }

    pub fn entry(&self, id: EntryId) -> Result<&EntryRow, Decline> {
        self.entries
            .get(&id)
            .ok_or(Decline::EntryNotFound { entry_id: id })
    }

    pub fn hold(&self, id: HoldId) -> Result<&Hold, Decline> {
        self.holds
            .get(&id)
            .ok_or(Decline::HoldNotFound { hold_id: id })
    }

    /// A hold that can be captured or voided now: held, and not expired.
    pub fn held_hold(&self, id: HoldId) -> Result<&Hold, Decline> {
        let hold = self.hold(id)?;
        match hold.state_at(self.now) {
            HoldState::Held => Ok(hold),
            HoldState::Expired => Err(Decline::HoldExpired {
                hold_id: id,
                expires_at: hold.expires_at,
            }),
            state => Err(Decline::HoldNotHeld { hold_id: id, state }),
        }
    }

    /// Opens an account with a zero balance, and its opening limits.
    pub fn open_account(&mut self, currency: Currency, limits: Limits) -> Result<Account, Refusal> {
        let call = self.current()?;
        let metadata = self.caller()?.metadata;
        let id = take(&mut self.ids.accounts, "account")?;
        let account = Account {
            id,
            currency,
            balance: 0,
            held: 0,
            limits,
            metadata,
            created_at: self.now,
        };
        self.accounts.insert(
            id,
            AccountRow {
                account: account.clone(),
                entry_count: 0,
                held_total: 0,
            },
        );
        self.new_accounts.push((call, account.clone()));
        self.log(Undo::NewAccount);
        Ok(account)
    }

    /// Appends an entry to its account's journal and moves the balance, within
    /// the account's limits in force (SPEC 3.9): a debit may not leave what is
    /// available below the floor (unless the posting ignores it), a credit may not
    /// take the balance above the ceiling, and no sum may overflow, in either
    /// direction.
    pub fn post(&mut self, posting: Posting) -> Result<Entry, Refusal> {
        let account = self.account(posting.account_id)?;
        let amount = posting.amount.get();
        let overflow = || Decline::BalanceOverflow {
            account_id: account.id,
            balance: account.balance,
            amount: posting.amount,
        };
        let balance_after = if posting.kind.takes() {
            account.balance.checked_sub(amount)
        } else {
            account.balance.checked_add(amount)
        }
        .ok_or_else(overflow)?;
        let available_after = balance_after
            .checked_sub(account.held)
            .ok_or_else(overflow)?;
        let limits = account.limits;
        if posting.kind.takes() {
            if !posting.ignores_floor && !limits.allows_available(available_after) {
                return Err(Decline::InsufficientFunds {
                    account_id: account.id,
                    balance: account.balance,
                    held: account.held,
                    amount: posting.amount,
                    min_balance: limits.floor().unwrap_or_default(),
                }
                .into());
            }
        } else if let Some(ceiling) = limits
            .ceiling()
            .filter(|_| !limits.allows_balance(balance_after))
        {
            return Err(Decline::BalanceLimitExceeded {
                account_id: account.id,
                balance: account.balance,
                amount: posting.amount,
                max_balance: ceiling,
            }
            .into());
        }
        self.append(Line {
            account_id: posting.account_id,
            kind: posting.kind,
            amount,
            balance_after,
            limits,
            description: posting.description,
            counterparty: posting.counterparty,
            refunded_entry: posting.refunded_entry,
            hold: posting.hold,
            leg: posting.leg,
            reverses: posting.reverses,
        })
    }

    /// Replaces the account's limits, moving no money, and records the change as
    /// a LIMITS entry (amount 0, the balance as it is, the new limits on it).
    pub fn set_limits(&mut self, id: AccountId, limits: Limits) -> Result<Entry, Refusal> {
        let balance = self.account(id)?.balance;
        self.append(Line {
            account_id: id,
            kind: EntryKind::Limits,
            amount: 0,
            balance_after: balance,
            limits,
            description: Description::default(),
            counterparty: None,
            refunded_entry: None,
            hold: None,
            leg: 0,
            reverses: None,
        })
    }

    /// Appends `line` to its account's journal, leaving the account at its
    /// balance and limits: the one place the journal grows.
    fn append(&mut self, line: Line) -> Result<Entry, Refusal> {
        let call = self.current()?;
        let caller = self.caller()?;
        let before = self
            .accounts
            .get(&line.account_id)
            .ok_or(Decline::AccountNotFound {
                account_id: line.account_id,
            })?
            .clone();
        let id = take(&mut self.ids.entries, "entry")?;
        let mut after = before.clone();
        after.account.balance = line.balance_after;
        after.account.limits = line.limits;
        after.entry_count += 1;
        let entry = Entry {
            id,
            account_id: line.account_id,
            kind: line.kind,
            amount: line.amount,
            currency: before.account.currency,
            balance_after: line.balance_after,
            idempotency_key: caller.key.key,
            client: caller.key.namespace,
            metadata: caller.metadata,
            description: line.description,
            created_at: self.now,
            counterparty: line.counterparty,
            refunded_entry: line.refunded_entry,
            hold: line.hold,
            leg: line.leg,
            limits: (line.kind == EntryKind::Limits).then_some(line.limits),
            reverses: line.reverses,
            sequence: None,
        };
        let place = self.new_entries.iter().filter(|e| e.call == call).count();
        let place = u16::try_from(place).map_err(|_| {
            Refusal::Internal("a call wrote more entries than a place holds".into())
        })?;
        self.new_entries.push(NewEntry {
            entry: entry.clone(),
            seq: after.entry_count,
            call,
            leg: place,
        });
        self.replace_account(after, before);
        self.log(Undo::NewEntry);
        Ok(entry)
    }

    /// Records `amount` refunded from the entry.
    pub fn add_refunded(&mut self, id: EntryId, amount: Amount) -> Result<(), Refusal> {
        self.current()?;
        let before = self.entry(id)?.clone();
        let mut after = before.clone();
        after.refunded += amount.get();
        self.entries.insert(id, after);
        self.log(Undo::Entry(id, before));
        Ok(())
    }

    /// Reserves `amount` of the account until `ttl` from now.
    pub fn place_hold(&mut self, hold: NewHold) -> Result<Hold, Refusal> {
        let call = self.current()?;
        let caller = self.caller()?;
        let before = self
            .accounts
            .get(&hold.account_id)
            .ok_or(Decline::AccountNotFound {
                account_id: hold.account_id,
            })?
            .clone();
        // Held money counts against the floor: what is available once this
        // hold reserves its amount may not go below it, and neither sum may
        // overflow.
        let account = &before.account;
        let overflow = || Decline::BalanceOverflow {
            account_id: account.id,
            balance: account.balance,
            amount: hold.amount,
        };
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
            return Err(Decline::InsufficientFunds {
                account_id: account.id,
                balance: account.balance,
                held: account.held,
                amount: hold.amount,
                min_balance: account.limits.floor().unwrap_or_default(),
            }
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
            .ok_or(Decline::AccountNotFound {
                account_id: before.account_id,
            })?
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
        Changes {
            now: self.now,
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

    fn current(&self) -> Result<usize, Refusal> {
        self.call
            .as_ref()
            .map(|c| c.index)
            .ok_or_else(|| Refusal::Internal("a change outside any call".into()))
    }

    /// Who makes the current call.
    fn caller(&self) -> Result<Caller, Refusal> {
        self.call
            .as_ref()
            .map(|c| c.caller.clone())
            .ok_or_else(|| Refusal::Internal("a change outside any call".into()))
    }

    fn replace_account(&mut self, after: AccountRow, before: AccountRow) {
        let id = after.account.id;
        self.accounts.insert(id, after);
        self.log(Undo::Account(id, before));
    }

    fn log(&mut self, undo: Undo) {
        if let Some(call) = &mut self.call {
            call.undo.push(undo);
        }
    }
}

/// What [`Book::post`] appends.
#[derive(Debug, Clone)]
pub struct Posting {
    pub account_id: AccountId,
    pub kind: EntryKind,
    pub amount: Amount,
    pub description: Description,
    pub counterparty: Option<AccountId>,
    pub refunded_entry: Option<EntryId>,
    pub hold: Option<HoldId>,
    /// Posts and reversals: the leg it belongs to.
    pub leg: u16,
    /// Reversals: the original entry it mirrors.
    pub reverses: Option<EntryId>,
    /// A debit the floor does not apply to: a capture takes what its hold
    /// already reserved, and a forced reversal may overdraw to undo a mistake.
    /// The ceiling and overflow apply to every posting.
    pub ignores_floor: bool,
}

/// An entry as [`Book::append`] writes it: a posting decided, or a change of
/// limits.
#[derive(Debug)]
struct Line {
    account_id: AccountId,
    kind: EntryKind,
    amount: i64,
    balance_after: i64,
    /// The account's limits once it is applied.
    limits: Limits,
    description: Description,
    counterparty: Option<AccountId>,
    refunded_entry: Option<EntryId>,
    hold: Option<HoldId>,
    leg: u16,
    reverses: Option<EntryId>,
}

impl Posting {
    pub fn new(
        account_id: AccountId,
        kind: EntryKind,
        amount: Amount,
        description: Description,
    ) -> Self {
        Self {
            account_id,
            kind,
            amount,
            description,
            counterparty: None,
            refunded_entry: None,
            hold: None,
            leg: 0,
            reverses: None,
            ignores_floor: false,
        }
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

fn take<T>(ids: &mut VecDeque<T>, what: &str) -> Result<T, Refusal> {
    ids.pop_front()
        .ok_or_else(|| Refusal::Internal(format!("no {what} id was reserved for this call")))
}
