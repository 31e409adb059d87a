//! The journal: accounts opened, and entries appended to their accounts'
//! journals within the limits in force (SPEC 3.9), the one place the journal
//! grows.

use super::calls::{Book, Undo, take};
use super::rows::{AccountRow, NewEntry};
use crate::ledger::decline::{Decline, Refusal};
use crate::ledger::limits::Limits;
use crate::ledger::model::{Account, Entry, EntryKind};
use crate::ledger::values::{AccountId, Amount, Currency, Description, EntryId, HoldId};

impl Book {
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
    pub fn enter(&mut self, posting: Posting) -> Result<Entry, Refusal> {
        let account = self.account(posting.account_id)?;
        let amount = posting.amount.get();
        let overflow = || Decline::balance_overflow(account.id, account.balance, posting.amount);
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
                return Err(Decline::insufficient_funds(
                    account.id,
                    account.balance,
                    account.held,
                    posting.amount,
                    limits.floor().unwrap_or_default(),
                )
                .into());
            }
        } else if let Some(ceiling) = limits
            .ceiling()
            .filter(|_| !limits.allows_balance(balance_after))
        {
            return Err(Decline::balance_limit_exceeded(
                account.id,
                account.balance,
                posting.amount,
                ceiling,
            )
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
            .ok_or_else(|| Decline::account_not_found(line.account_id))?
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
}

/// What [`Book::enter`] appends.
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
