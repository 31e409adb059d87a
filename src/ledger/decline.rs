//! Business refusals decided inside the transaction. A decline is final for its
//! key: it is stored and replayed like a success, and it changes nothing else.

use chrono::{DateTime, Utc};

use super::model::{EntryKind, HoldState};
use super::values::{AccountId, Amount, Currency, EntryId, HoldId};

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
    /// A debit over what the account has available (its balance less its active
    /// holds).
    InsufficientFunds {
        account_id: AccountId,
        balance: i64,
        held: i64,
        amount: Amount,
    },
    BalanceOverflow {
        account_id: AccountId,
        balance: i64,
        amount: Amount,
    },
    EntryNotFound {
        entry_id: EntryId,
    },
    NotRefundable {
        entry_id: EntryId,
        kind: EntryKind,
    },
    RefundExceedsCharge {
        entry_id: EntryId,
        refundable: i64,
        amount: Amount,
    },
    HoldNotFound {
        hold_id: HoldId,
    },
    HoldNotHeld {
        hold_id: HoldId,
        state: HoldState,
    },
    HoldExpired {
        hold_id: HoldId,
        expires_at: DateTime<Utc>,
    },
    CaptureExceedsHold {
        hold_id: HoldId,
        held: Amount,
        amount: Amount,
    },
}

/// Why a decision produced no outcome: a decline (stored under the key), or a bug
/// in the decision itself (nothing stored; an internal error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    Declined(Decline),
    Internal(String),
}

impl From<Decline> for Refusal {
    fn from(decline: Decline) -> Self {
        Self::Declined(decline)
    }
}
