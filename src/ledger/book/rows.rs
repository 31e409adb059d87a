//! The rows a transaction loads, what a call needs, and what the decisions
//! changed, for the executor to write.

use std::collections::VecDeque;

use chrono::{DateTime, Utc};

use crate::ledger::limits::Limits;
use crate::ledger::model::{Account, Entry, EntryKind, Hold};
use crate::ledger::subscription::SubscriptionRow;
use crate::ledger::values::{
    AccountId, Amount, Currency, EntryId, HoldId, IdempotencyKey, ScopedKey, SubscriptionId,
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
    pub subscriptions: VecDeque<SubscriptionId>,
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
    /// Subscriptions named by the request: their rows are locked.
    pub subscriptions: Vec<SubscriptionId>,
    /// It reads the highest sequence the change stream has assigned (a
    /// subscription that starts from now).
    pub stream_head: bool,
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
    pub subscriptions: usize,
}

impl RowCounts {
    #[must_use]
    pub fn plus(self, other: Self) -> Self {
        Self {
            accounts: self.accounts + other.accounts,
            entries: self.entries + other.entries,
            holds: self.holds + other.holds,
            subscriptions: self.subscriptions + other.subscriptions,
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
    /// New subscriptions, each with the call that created it.
    pub new_subscriptions: Vec<(usize, SubscriptionRow)>,
    /// Subscriptions whose state a call changed.
    pub subscriptions: Vec<SubscriptionRow>,
    /// Ids reserved but not used.
    pub unused: NewIds,
}
