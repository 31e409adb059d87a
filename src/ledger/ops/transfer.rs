//! Transfer: moves money from one account to another in the same currency, as a
//! debit entry on the source and a credit entry on the destination, committed
//! together. The sum of all balances does not change.

use super::{Needs, Operation};
use crate::ledger::book::{Book, Posting, RowCounts};
use crate::ledger::decline::Refusal;
use crate::ledger::fingerprint::Fields;
use crate::ledger::model::{EntryKind, Method};
use crate::ledger::outcome::Reply;
use crate::ledger::values::{AccountId, Amount, Currency, Description};

/// `from != to`, checked when the request is parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transfer {
    pub from: AccountId,
    pub to: AccountId,
    pub amount: Amount,
    pub currency: Currency,
    pub description: Description,
}

impl Operation for Transfer {
    fn method(&self) -> Method {
        Method::Transfer
    }

    fn fingerprint(&self, fields: &mut Fields) {
        fields.u64(self.from.get());
        fields.u64(self.to.get());
        fields.i64(self.amount.get());
        fields.str(self.currency.as_str());
        fields.str(self.description.as_str());
    }

    fn needs(&self) -> Needs {
        Needs {
            accounts: vec![self.from, self.to],
            creates: RowCounts {
                entries: 2,
                ..RowCounts::default()
            },
            ..Needs::default()
        }
    }

    fn decide(&self, book: &mut Book) -> Result<Reply, Refusal> {
        book.account_in(self.from, self.currency)?;
        book.account_in(self.to, self.currency)?;
        book.require_available(self.from, self.amount)?;
        let leg = |account, kind, counterparty| Posting {
            counterparty: Some(counterparty),
            ..Posting::new(account, kind, self.amount, self.description.clone())
        };
        let debit = book.post(leg(self.from, EntryKind::TransferOut, self.to))?;
        let credit = book.post(leg(self.to, EntryKind::TransferIn, self.from))?;
        Ok(Reply::Transfer { debit, credit })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::decline::Decline;
    use crate::ledger::ops::testing::{account, amount, book, description, id, key, usd};

    fn transfer(from: u64, to: u64, n: i64) -> Transfer {
        Transfer {
            from: id(from),
            to: id(to),
            amount: amount(n),
            currency: usd(),
            description: description(),
        }
    }

    #[test]
    fn moves_money_and_names_the_counterparty() {
        let mut book = book(vec![account(1, 100, 0), account(2, 5, 0)], vec![], vec![]);
        book.start_call(key("t"));
        let Ok(Reply::Transfer { debit, credit }) = transfer(1, 2, 40).decide(&mut book) else {
            panic!("transfer");
        };
        assert_eq!((debit.balance_after, credit.balance_after), (60, 45));
        assert_eq!(
            (debit.counterparty, credit.counterparty),
            (Some(id(2)), Some(id(1)))
        );
        assert_eq!(
            (debit.kind, credit.kind),
            (EntryKind::TransferOut, EntryKind::TransferIn)
        );
    }

    #[test]
    fn an_overflowing_destination_undoes_the_debit() {
        let mut book = book(
            vec![account(1, 100, 0), account(2, i64::MAX, 0)],
            vec![],
            vec![],
        );
        book.start_call(key("t"));
        assert!(matches!(
            transfer(1, 2, 1).decide(&mut book),
            Err(Refusal::Declined(Decline::BalanceOverflow { .. }))
        ));
        book.finish_call(false);
        let changes = book.into_changes();
        assert!(changes.accounts.is_empty() && changes.new_entries.is_empty());
    }

    #[test]
    fn the_missing_account_is_named() {
        let mut book = book(vec![account(2, 100, 0)], vec![], vec![]);
        book.start_call(key("t"));
        assert!(matches!(
            transfer(1, 2, 1).decide(&mut book),
            Err(Refusal::Declined(Decline::AccountNotFound { account_id })) if account_id == id(1)
        ));
    }
}
