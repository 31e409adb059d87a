//! Business refusals decided inside the transaction. A decline is final for its
//! key: it is stored and replayed like a success, and it changes nothing else.
//!
//! A decline is what the caller is told: its reason (SPEC 4), its message and
//! the metadata naming the values involved, stated together by the function
//! that makes it. The declines of the rules every operation shares (accounts,
//! currencies, limits, holds and entries that must exist) are made here, by
//! the [`Book`](super::Book); one that a single operation can meet is made in
//! that operation's module (`ops`), beside the decision that meets it.

use chrono::{DateTime, Utc};

use super::model::HoldState;
use super::values::{AccountId, Amount, Currency, EntryId, HoldId, SubscriptionId};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decline {
    reason: &'static str,
    /// It names a row that does not exist (`NOT_FOUND`); otherwise it is an
    /// unmet precondition (`FAILED_PRECONDITION`).
    not_found: bool,
    message: String,
    metadata: Vec<(&'static str, String)>,
}

impl Decline {
    /// An unmet precondition (`FAILED_PRECONDITION`) of `reason`.
    pub fn precondition(
        reason: &'static str,
        message: String,
        metadata: Vec<(&'static str, String)>,
    ) -> Self {
        Self {
            reason,
            not_found: false,
            message,
            metadata,
        }
    }

    /// A row that does not exist (`NOT_FOUND`) of `reason`.
    pub fn not_found(
        reason: &'static str,
        message: String,
        metadata: Vec<(&'static str, String)>,
    ) -> Self {
        Self {
            reason,
            not_found: true,
            message,
            metadata,
        }
    }

    /// This decline, met by leg `leg` of a post (or of a reversal), which
    /// declines the whole call: its message names the leg, and so does its
    /// metadata (`leg`).
    #[must_use]
    pub fn in_leg(mut self, leg: u16) -> Self {
        self.message = format!("leg {leg}: {}", self.message);
        self.metadata.push(("leg", leg.to_string()));
        self
    }

    pub fn is_not_found(&self) -> bool {
        self.not_found
    }

    /// The `ErrorInfo` reason (SPEC 4).
    pub fn reason(&self) -> &'static str {
        self.reason
    }

    /// What the caller is told.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The `ErrorInfo` metadata: the ids and amounts the decline is about.
    pub fn metadata(&self) -> &[(&'static str, String)] {
        &self.metadata
    }

    /// The value of one of its metadata's names.
    pub fn detail(&self, name: &str) -> Option<&str> {
        self.metadata
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, value)| value.as_str())
    }

    pub fn account_not_found(account_id: AccountId) -> Self {
        Self::not_found(
            "ACCOUNT_NOT_FOUND",
            format!("account {account_id} does not exist"),
            vec![("account_id", account_id.to_string())],
        )
    }

    pub fn currency_mismatch(
        account_id: AccountId,
        account_currency: Currency,
        requested: Currency,
    ) -> Self {
        Self::precondition(
            "CURRENCY_MISMATCH",
            format!("account {account_id} holds {account_currency}, not {requested}"),
            vec![
                ("account_id", account_id.to_string()),
                ("account_currency", account_currency.to_string()),
                ("requested_currency", requested.to_string()),
            ],
        )
    }

    /// A debit that would take what the account has available (its balance less
    /// its active holds) below its floor, `min_balance`.
    pub fn insufficient_funds(
        account_id: AccountId,
        balance: i64,
        held: i64,
        amount: Amount,
        min_balance: i64,
    ) -> Self {
        let available = balance.saturating_sub(held);
        let message = if min_balance == 0 {
            format!(
                "account {account_id} has {available} available, less than the {amount} requested"
            )
        } else {
            format!(
                "account {account_id} has {available} available and a floor of {min_balance}: \
                 {} may be taken, less than the {amount} requested",
                i128::from(available) - i128::from(min_balance)
            )
        };
        Self::precondition(
            "INSUFFICIENT_FUNDS",
            message,
            vec![
                ("account_id", account_id.to_string()),
                ("balance", balance.to_string()),
                ("held", held.to_string()),
                ("available", available.to_string()),
                ("amount", amount.to_string()),
                ("min_balance", min_balance.to_string()),
            ],
        )
    }

    /// A move that would take the balance, the held amount or what is available
    /// past what an `i64` holds, in either direction.
    pub fn balance_overflow(account_id: AccountId, balance: i64, amount: Amount) -> Self {
        Self::precondition(
            "BALANCE_OVERFLOW",
            format!(
                "moving {amount} on account {account_id}, whose balance is {balance}, would \
                 overflow what an amount can hold"
            ),
            vec![
                ("account_id", account_id.to_string()),
                ("balance", balance.to_string()),
                ("amount", amount.to_string()),
            ],
        )
    }

    /// A credit that would take the balance above the account's ceiling.
    pub fn balance_limit_exceeded(
        account_id: AccountId,
        balance: i64,
        amount: Amount,
        max_balance: i64,
    ) -> Self {
        Self::precondition(
            "BALANCE_LIMIT_EXCEEDED",
            format!(
                "crediting {amount} to account {account_id} would take its balance of \
                 {balance} above its ceiling of {max_balance}"
            ),
            vec![
                ("account_id", account_id.to_string()),
                ("balance", balance.to_string()),
                ("amount", amount.to_string()),
                ("max_balance", max_balance.to_string()),
            ],
        )
    }

    pub fn entry_not_found(entry_id: EntryId) -> Self {
        Self::not_found(
            "ENTRY_NOT_FOUND",
            format!("entry {entry_id} does not exist"),
            vec![("entry_id", entry_id.to_string())],
        )
    }

    pub fn subscription_not_found(id: SubscriptionId) -> Self {
        Self::not_found(
            "SUBSCRIPTION_NOT_FOUND",
            format!("subscription {id} does not exist"),
            vec![("subscription_id", id.to_string())],
        )
    }

    /// A deleted subscription asked to deliver again.
    pub fn subscription_deleted(id: SubscriptionId) -> Self {
        Self::precondition(
            "SUBSCRIPTION_DELETED",
            format!("subscription {id} was deleted and cannot be resumed or paused"),
            vec![("subscription_id", id.to_string())],
        )
    }

    pub fn hold_not_found(hold_id: HoldId) -> Self {
        Self::not_found(
            "HOLD_NOT_FOUND",
            format!("hold {hold_id} does not exist"),
            vec![("hold_id", hold_id.to_string())],
        )
    }

    /// A hold captured or voided already.
    pub fn hold_not_held(hold_id: HoldId, state: HoldState) -> Self {
        Self::precondition(
            "HOLD_NOT_HELD",
            format!("hold {hold_id} is no longer held: {}", state.name()),
            vec![
                ("hold_id", hold_id.to_string()),
                ("state", state.name().to_owned()),
            ],
        )
    }

    pub fn hold_expired(hold_id: HoldId, expires_at: DateTime<Utc>) -> Self {
        Self::precondition(
            "HOLD_EXPIRED",
            format!("hold {hold_id} expired at {}", rfc3339(expires_at)),
            vec![
                ("hold_id", hold_id.to_string()),
                ("expires_at", rfc3339(expires_at)),
            ],
        )
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

impl Refusal {
    /// A leg's refusal as its post's: a decline names the leg (`Decline::in_leg`).
    #[must_use]
    pub fn in_leg(self, leg: u16) -> Self {
        match self {
            Self::Declined(decline) => Self::Declined(decline.in_leg(leg)),
            internal @ Self::Internal(_) => internal,
        }
    }
}

impl From<Decline> for Refusal {
    fn from(decline: Decline) -> Self {
        Self::Declined(decline)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leg_s_decline_names_the_leg_after_its_own_details() {
        let account = AccountId::parse("account_id", 7).unwrap();
        let amount = |n| Amount::parse("amount", n).unwrap();
        let decline = Decline::insufficient_funds(account, 100, 80, amount(40), -10).in_leg(2);
        assert_eq!(decline.reason(), "INSUFFICIENT_FUNDS");
        assert!(!decline.is_not_found());
        assert_eq!(
            decline.message(),
            "leg 2: account 7 has 20 available and a floor of -10: 30 may be taken, \
             less than the 40 requested"
        );
        assert_eq!(decline.detail("available"), Some("20"));
        assert_eq!(decline.metadata().last(), Some(&("leg", "2".to_owned())));
        assert!(Decline::account_not_found(account).is_not_found());
    }
}
