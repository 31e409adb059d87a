//! A book over accounts and rows made up for a test.

use chrono::{DateTime, TimeZone as _, Utc};

use crate::ledger::book::{AccountRow, Book, EntryRow, NewIds};
use crate::ledger::model::{Account, Hold};
use crate::ledger::values::{
    AccountId, Amount, Currency, Description, EntryId, HoldId, IdempotencyKey,
};

pub(crate) fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0)
        .single()
        .unwrap_or_default()
}

pub(crate) fn account(id: u64, balance: i64, held: i64) -> AccountRow {
    AccountRow {
        account: Account {
            id: AccountId::parse("a", id).unwrap(),
            currency: usd(),
            balance,
            held,
            limits: crate::ledger::Limits::default(),
            metadata: crate::ledger::Metadata::NONE,
            created_at: now(),
        },
        entry_count: 0,
        held_total: held,
    }
}

pub(crate) fn usd() -> Currency {
    Currency::parse("c", "USD").unwrap()
}

pub(crate) fn amount(n: i64) -> Amount {
    Amount::parse("a", n).unwrap()
}

pub(crate) fn id(n: u64) -> AccountId {
    AccountId::parse("a", n).unwrap()
}

pub(crate) fn key(k: &str) -> IdempotencyKey {
    IdempotencyKey::parse("k", k.into()).unwrap()
}

pub(crate) fn ids() -> NewIds {
    NewIds {
        accounts: (900..910)
            .map(|n| AccountId::parse("a", n).unwrap())
            .collect(),
        entries: (100..110)
            .map(|n| EntryId::parse("e", n).unwrap())
            .collect(),
        holds: (500..510).map(|n| HoldId::parse("h", n).unwrap()).collect(),
        subscriptions: (700..710)
            .map(|n| crate::ledger::SubscriptionId::parse("s", n).unwrap())
            .collect(),
    }
}

pub(crate) fn book(accounts: Vec<AccountRow>, entries: Vec<EntryRow>, holds: Vec<Hold>) -> Book {
    Book::new(now(), accounts, entries, holds, ids())
}

pub(crate) fn description() -> Description {
    Description::default()
}

/// The decline of a decision that must be declined.
pub(crate) fn declined<T: std::fmt::Debug>(
    decided: Result<T, crate::ledger::Refusal>,
) -> crate::ledger::Decline {
    match decided {
        Err(crate::ledger::Refusal::Declined(decline)) => decline,
        other => panic!("expected a decline, got {other:?}"),
    }
}
