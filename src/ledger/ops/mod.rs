//! One module per keyed operation: its validated request, the request fields its
//! idempotency key is bound to, the rows it reads, and its decision. Nothing here
//! knows about the wire or the database: the executor (`db::keyed`) locks what an
//! operation [`needs`](Operation::needs), runs its
//! [`decide`](Operation::decide) against the locked rows, and writes what changed.
//!
//! Adding an operation: a module here with a type implementing [`Operation`], a
//! variant of [`Command`] (and of [`Method`] and [`Reply`]), its messages in the
//! proto, and its request parsing and reply encoding in `grpc`.

mod capture_hold;
mod charge;
mod credit;
mod open_account;
mod place_hold;
mod refund;
mod transfer;
mod void_hold;

pub use capture_hold::CaptureHold;
pub use charge::Charge;
pub use credit::Credit;
pub use open_account::OpenAccount;
pub use place_hold::PlaceHold;
pub use refund::Refund;
pub use transfer::Transfer;
pub use void_hold::VoidHold;

use super::book::{Book, RowCounts};
use super::decline::Refusal;
use super::fingerprint::Fields;
use super::model::Method;
use super::outcome::Reply;
use super::values::{AccountId, Amount, Currency, Description, EntryId, HoldId};

/// A keyed operation.
pub trait Operation: std::fmt::Debug + Send + Sync {
    fn method(&self) -> Method;

    /// Feeds the request's fields other than the key to the fingerprint, in a
    /// fixed order (stored fingerprints outlive releases: never reorder).
    fn fingerprint(&self, fields: &mut Fields);

    /// The rows the decision reads; the executor locks them first.
    fn needs(&self) -> Needs;

    /// The outcome, decided against the locked rows. Every change goes through the
    /// book, which undoes a refused call's changes.
    fn decide(&self, book: &mut Book) -> Result<Reply, Refusal>;
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
}

/// A validated keyed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    OpenAccount(OpenAccount),
    Credit(Credit),
    Charge(Charge),
    Transfer(Transfer),
    Refund(Refund),
    PlaceHold(PlaceHold),
    CaptureHold(CaptureHold),
    VoidHold(VoidHold),
}

impl Command {
    pub fn operation(&self) -> &dyn Operation {
        match self {
            Self::OpenAccount(op) => op,
            Self::Credit(op) => op,
            Self::Charge(op) => op,
            Self::Transfer(op) => op,
            Self::Refund(op) => op,
            Self::PlaceHold(op) => op,
            Self::CaptureHold(op) => op,
            Self::VoidHold(op) => op,
        }
    }

    pub fn method(&self) -> Method {
        self.operation().method()
    }
}

/// The fields of a request that moves an amount on one account (Credit, Charge).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountAmount {
    pub account_id: AccountId,
    pub amount: Amount,
    pub currency: Currency,
    pub description: Description,
}

impl AccountAmount {
    fn fingerprint(&self, fields: &mut Fields) {
        fields.u64(self.account_id.get());
        fields.i64(self.amount.get());
        fields.str(self.currency.as_str());
        fields.str(self.description.as_str());
    }
}

#[cfg(test)]
pub(crate) mod testing {
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
        }
    }

    pub(crate) fn book(
        accounts: Vec<AccountRow>,
        entries: Vec<EntryRow>,
        holds: Vec<Hold>,
    ) -> Book {
        Book::new(now(), accounts, entries, holds, ids())
    }

    pub(crate) fn description() -> Description {
        Description::default()
    }
}
