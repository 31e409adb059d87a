//! The balance rules, as pure functions of an account's locked state.

use super::model::{Decline, EntryKind, Posting};
use super::values::{AccountId, Currency};

/// An account row as read under its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Locked {
    pub id: AccountId,
    pub currency: Currency,
    pub balance: i64,
}

/// The balance after applying `posting`, or why it cannot be applied. Accounts never
/// go below zero and never overflow.
pub fn apply(account: Locked, kind: EntryKind, posting: &Posting) -> Result<i64, Decline> {
    if account.currency != posting.currency {
        return Err(Decline::CurrencyMismatch {
            account_id: account.id,
            account_currency: account.currency,
            requested: posting.currency,
        });
    }
    let amount = posting.amount;
    match kind {
        EntryKind::Credit => {
            account
                .balance
                .checked_add(amount.get())
                .ok_or(Decline::BalanceOverflow {
                    account_id: account.id,
                    balance: account.balance,
                    amount,
                })
        }
        EntryKind::Charge => match account.balance.checked_sub(amount.get()) {
            Some(after) if after >= 0 => Ok(after),
            _ => Err(Decline::InsufficientFunds {
                account_id: account.id,
                balance: account.balance,
                amount,
            }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::values::{Amount, Description};

    fn account(balance: i64) -> Locked {
        Locked {
            id: AccountId::parse("a", 1).unwrap(),
            currency: Currency::parse("c", "USD").unwrap(),
            balance,
        }
    }

    fn posting(amount: i64, currency: &str) -> Posting {
        Posting {
            account_id: AccountId::parse("a", 1).unwrap(),
            amount: Amount::parse("a", amount).unwrap(),
            currency: Currency::parse("c", currency).unwrap(),
            description: Description::default(),
        }
    }

    #[test]
    fn charges_down_to_exactly_zero_but_not_below() {
        assert_eq!(
            apply(account(100), EntryKind::Charge, &posting(100, "USD")),
            Ok(0)
        );
        assert!(matches!(
            apply(account(100), EntryKind::Charge, &posting(101, "USD")),
            Err(Decline::InsufficientFunds { balance: 100, .. })
        ));
    }

    #[test]
    fn credits_refuse_to_overflow() {
        assert_eq!(
            apply(account(i64::MAX - 1), EntryKind::Credit, &posting(1, "USD")),
            Ok(i64::MAX)
        );
        assert!(matches!(
            apply(account(i64::MAX), EntryKind::Credit, &posting(1, "USD")),
            Err(Decline::BalanceOverflow { .. })
        ));
    }

    #[test]
    fn currency_must_match_before_anything_else() {
        assert!(matches!(
            apply(account(0), EntryKind::Charge, &posting(5, "EUR")),
            Err(Decline::CurrencyMismatch { .. })
        ));
    }
}
