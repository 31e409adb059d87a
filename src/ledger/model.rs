//! The ledger's nouns: accounts, journal entries, the commands that change them and
//! the declines that refuse them.

use chrono::{DateTime, Utc};

use super::values::{AccountId, Amount, Currency, Description, IdempotencyKey};

/// The keyed RPCs. The discriminant is stored with each key row, so a key used for
/// one method can never replay as another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Method {
    OpenAccount = 1,
    Credit = 2,
    Charge = 3,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Self::OpenAccount => "OpenAccount",
            Self::Credit => "Credit",
            Self::Charge => "Charge",
        }
    }

    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn from_code(code: u8) -> Option<Self> {
        [Self::OpenAccount, Self::Credit, Self::Charge]
            .into_iter()
            .find(|m| m.code() == code)
    }
}

/// The direction of a journal entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum EntryKind {
    Charge = 1,
    Credit = 2,
}

impl EntryKind {
    pub fn method(self) -> Method {
        match self {
            Self::Charge => Method::Charge,
            Self::Credit => Method::Credit,
        }
    }

    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn from_code(code: u8) -> Option<Self> {
        [Self::Charge, Self::Credit]
            .into_iter()
            .find(|k| k.code() == code)
    }
}

/// What a Credit or a Charge asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Posting {
    pub account_id: AccountId,
    pub amount: Amount,
    pub currency: Currency,
    pub description: Description,
}

/// A validated keyed request: the semantic fields a key is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    OpenAccount { currency: Currency },
    Post { kind: EntryKind, posting: Posting },
}

impl Command {
    pub fn method(&self) -> Method {
        match self {
            Self::OpenAccount { .. } => Method::OpenAccount,
            Self::Post { kind, .. } => kind.method(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub id: AccountId,
    pub currency: Currency,
    pub balance: i64,
    pub created_at: DateTime<Utc>,
}

/// One row of the append-only journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub id: u64,
    pub account_id: AccountId,
    pub kind: EntryKind,
    pub amount: Amount,
    pub currency: Currency,
    pub balance_after: i64,
    pub idempotency_key: IdempotencyKey,
    pub description: Description,
    pub created_at: DateTime<Utc>,
}

/// A business refusal decided inside the transaction. Declines are final for their
/// key: they are stored and replayed like successes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decline {
    AccountNotFound {
        account_id: AccountId,
    },
    CurrencyMismatch {
        account_id: AccountId,
        account_currency: Currency,
        requested: Currency,
    },
    InsufficientFunds {
        account_id: AccountId,
        balance: i64,
        amount: Amount,
    },
    BalanceOverflow {
        account_id: AccountId,
        balance: i64,
        amount: Amount,
    },
}
