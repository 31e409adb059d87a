//! Business refusals decided inside the transaction. A decline is final for its
//! key: it is stored and replayed like a success, and it changes nothing else.

use chrono::{DateTime, Utc};

use super::model::{EntryKind, HoldState};
use super::values::{AccountId, Amount, Currency, EntryId, HoldId, IdempotencyKey};

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
    /// A debit that would take what the account has available (its balance
    /// less its active holds) below its floor.
    InsufficientFunds {
        account_id: AccountId,
        balance: i64,
        held: i64,
        amount: Amount,
        /// The floor in force.
        min_balance: i64,
    },
    /// A move that would take the balance, the held amount or what is available
    /// past what an `i64` holds, in either direction.
    BalanceOverflow {
        account_id: AccountId,
        balance: i64,
        amount: Amount,
    },
    /// A credit that would take the balance above the account's ceiling.
    BalanceLimitExceeded {
        account_id: AccountId,
        balance: i64,
        amount: Amount,
        max_balance: i64,
    },
    EntryNotFound {
        entry_id: EntryId,
    },
    NotRefundable {
        entry_id: EntryId,
        kind: EntryKind,
        /// It is a reversal's entry (a credit's reversal is a CHARGE).
        reversal: bool,
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
    /// A reversal of an operation another key has reversed.
    AlreadyReversed {
        reversal_key: IdempotencyKey,
    },
    /// A reversal of an operation that is not a Transfer, a Post or a Credit that
    /// took effect.
    NotReversible {
        /// What it is, as the caller is told.
        what: &'static str,
    },
    /// A reversal of a key under which nothing had committed.
    KeyNotFound,
    /// A leg of a post (or of a reversal) was declined, so the whole call is.
    InLeg {
        leg: u16,
        decline: Box<Decline>,
    },
}

impl Decline {
    /// Whether the decline names a row that does not exist (`NOT_FOUND`); the
    /// others are unmet preconditions (`FAILED_PRECONDITION`).
    pub fn is_not_found(&self) -> bool {
        match self {
            Self::InLeg { decline, .. } => decline.is_not_found(),
            other => matches!(
                other,
                Self::AccountNotFound { .. }
                    | Self::EntryNotFound { .. }
                    | Self::HoldNotFound { .. }
                    | Self::KeyNotFound
            ),
        }
    }

    /// The `ErrorInfo` reason (SPEC 4).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::AccountNotFound { .. } => "ACCOUNT_NOT_FOUND",
            Self::CurrencyMismatch { .. } => "CURRENCY_MISMATCH",
            Self::InsufficientFunds { .. } => "INSUFFICIENT_FUNDS",
            Self::BalanceOverflow { .. } => "BALANCE_OVERFLOW",
            Self::BalanceLimitExceeded { .. } => "BALANCE_LIMIT_EXCEEDED",
            Self::EntryNotFound { .. } => "ENTRY_NOT_FOUND",
            Self::NotRefundable { .. } => "NOT_REFUNDABLE",
            Self::RefundExceedsCharge { .. } => "REFUND_EXCEEDS_CHARGE",
            Self::HoldNotFound { .. } => "HOLD_NOT_FOUND",
            Self::HoldNotHeld { .. } => "HOLD_NOT_HELD",
            Self::HoldExpired { .. } => "HOLD_EXPIRED",
            Self::CaptureExceedsHold { .. } => "CAPTURE_EXCEEDS_HOLD",
            Self::AlreadyReversed { .. } => "ALREADY_REVERSED",
            Self::NotReversible { .. } => "NOT_REVERSIBLE",
            Self::KeyNotFound => "KEY_NOT_FOUND",
            Self::InLeg { decline, .. } => decline.reason(),
        }
    }

    /// What the caller is told.
    pub fn message(&self) -> String {
        match self {
            Self::AccountNotFound { account_id } => format!("account {account_id} does not exist"),
            Self::CurrencyMismatch {
                account_id,
                account_currency,
                requested,
            } => format!("account {account_id} holds {account_currency}, not {requested}"),
            Self::InsufficientFunds {
                account_id,
                balance,
                held,
                amount,
                min_balance,
            } => {
                let available = balance.saturating_sub(*held);
                if *min_balance == 0 {
                    format!(
                        "account {account_id} has {available} available, less than the {amount} requested"
                    )
                } else {
                    format!(
                        "account {account_id} has {available} available and a floor of \
                         {min_balance}: {} may be taken, less than the {amount} requested",
                        i128::from(available) - i128::from(*min_balance)
                    )
                }
            }
            Self::BalanceOverflow {
                account_id,
                balance,
                amount,
            } => format!(
                "moving {amount} on account {account_id}, whose balance is {balance}, would \
                 overflow what an amount can hold"
            ),
            Self::BalanceLimitExceeded {
                account_id,
                balance,
                amount,
                max_balance,
            } => format!(
                "crediting {amount} to account {account_id} would take its balance of \
                 {balance} above its ceiling of {max_balance}"
            ),
            Self::EntryNotFound { entry_id } => format!("entry {entry_id} does not exist"),
            Self::NotRefundable {
                entry_id,
                reversal: true,
                ..
            } => format!("entry {entry_id} reverses another; a reversal is never refundable"),
            Self::NotRefundable { entry_id, kind, .. } => format!(
                "entry {entry_id} is a {kind:?} entry; only charges and captures are refundable"
            ),
            Self::RefundExceedsCharge {
                entry_id,
                refundable,
                amount,
            } => format!(
                "entry {entry_id} has {refundable} left to refund, less than the {amount} requested"
            ),
            Self::HoldNotFound { hold_id } => format!("hold {hold_id} does not exist"),
            Self::HoldNotHeld { hold_id, state } => {
                format!("hold {hold_id} is no longer held: {}", state.name())
            }
            Self::HoldExpired {
                hold_id,
                expires_at,
            } => format!("hold {hold_id} expired at {}", rfc3339(*expires_at)),
            Self::CaptureExceedsHold {
                hold_id,
                held,
                amount,
            } => format!("hold {hold_id} holds {held}, less than the {amount} to capture"),
            Self::AlreadyReversed { .. } => {
                "the operation was already reversed, under reversal_key".into()
            }
            Self::NotReversible { what } => format!(
                "{what} cannot be reversed; only a Transfer, a Post or a Credit that took effect"
            ),
            Self::KeyNotFound => "nothing has taken effect under original_key".into(),
            Self::InLeg { leg, decline } => format!("leg {leg}: {}", decline.message()),
        }
    }

    /// The `ErrorInfo` metadata: the ids and amounts the decline is about.
    pub fn metadata(&self) -> Vec<(&'static str, String)> {
        match self {
            Self::AccountNotFound { account_id } => vec![("account_id", account_id.to_string())],
            Self::CurrencyMismatch {
                account_id,
                account_currency,
                requested,
            } => vec![
                ("account_id", account_id.to_string()),
                ("account_currency", account_currency.to_string()),
                ("requested_currency", requested.to_string()),
            ],
            Self::InsufficientFunds {
                account_id,
                balance,
                held,
                amount,
                min_balance,
            } => vec![
                ("account_id", account_id.to_string()),
                ("balance", balance.to_string()),
                ("held", held.to_string()),
                ("available", balance.saturating_sub(*held).to_string()),
                ("amount", amount.to_string()),
                ("min_balance", min_balance.to_string()),
            ],
            Self::BalanceOverflow {
                account_id,
                balance,
                amount,
            } => vec![
                ("account_id", account_id.to_string()),
                ("balance", balance.to_string()),
                ("amount", amount.to_string()),
            ],
            Self::BalanceLimitExceeded {
                account_id,
                balance,
                amount,
                max_balance,
            } => vec![
                ("account_id", account_id.to_string()),
                ("balance", balance.to_string()),
                ("amount", amount.to_string()),
                ("max_balance", max_balance.to_string()),
            ],
            Self::EntryNotFound { entry_id } | Self::NotRefundable { entry_id, .. } => {
                vec![("entry_id", entry_id.to_string())]
            }
            Self::RefundExceedsCharge {
                entry_id,
                refundable,
                amount,
            } => vec![
                ("entry_id", entry_id.to_string()),
                ("refundable", refundable.to_string()),
                ("amount", amount.to_string()),
            ],
            Self::HoldNotFound { hold_id } => vec![("hold_id", hold_id.to_string())],
            Self::HoldNotHeld { hold_id, state } => vec![
                ("hold_id", hold_id.to_string()),
                ("state", state.name().to_owned()),
            ],
            Self::HoldExpired {
                hold_id,
                expires_at,
            } => vec![
                ("hold_id", hold_id.to_string()),
                ("expires_at", rfc3339(*expires_at)),
            ],
            Self::CaptureExceedsHold {
                hold_id,
                held,
                amount,
            } => vec![
                ("hold_id", hold_id.to_string()),
                ("held", held.to_string()),
                ("amount", amount.to_string()),
            ],
            Self::AlreadyReversed { reversal_key } => {
                vec![("reversal_key", reversal_key.as_str().to_owned())]
            }
            Self::NotReversible { .. } | Self::KeyNotFound => Vec::new(),
            Self::InLeg { leg, decline } => {
                let mut metadata = decline.metadata();
                metadata.push(("leg", leg.to_string()));
                metadata
            }
        }
    }
}

/// An instant as the wire's texts spell it (RFC 3339, microseconds, UTC).
pub fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
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
