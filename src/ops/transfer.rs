//! Transfer: moves money from one account to another in the same currency, as a
//! debit entry on the source and a credit entry on the destination, committed
//! together. The sum of all balances does not change.

use super::messages::entry_message;
use super::operation::{Named, Operation, Reversal};
use super::parse::Violations;
use crate::ledger::book::{Book, Posting, RowCounts};
use crate::ledger::decline::Refusal;
use crate::ledger::fingerprint::Fields;
use crate::ledger::model::{Effect, Entry, EntryKind};
use crate::ledger::values::{AccountId, Amount, Currency, Description};
use crate::ledger::{FieldViolation, IdempotencyKey, Metadata, Needs};
use crate::proto::pb;

/// `from != to`, checked when the request is parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transfer {
    pub from: AccountId,
    pub to: AccountId,
    pub amount: Amount,
    pub currency: Currency,
    pub description: Description,
    /// None on a post's leg: the post carries it.
    pub metadata: Metadata,
}

/// A transfer's two entries: the debit, then the credit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    pub debit: Entry,
    pub credit: Entry,
}

/// A transfer's fields as they arrive: from, to, amount, currency, description.
pub(super) type Fields5<'a> = (u64, u64, i64, &'a str, String);

impl Transfer {
    /// The transfer, if every field is valid and the accounts differ; else
    /// `None`, with each violation recorded.
    pub(super) fn check(check: &mut Violations, fields: Fields5<'_>) -> Option<Self> {
        let (from, to, amount, currency, description) = fields;
        let from = check.field(AccountId::parse("from_account_id", from));
        let to = check.field(AccountId::parse("to_account_id", to));
        let amount = check.field(Amount::parse("amount", amount));
        let currency = check.field(Currency::parse("currency", currency));
        let description = check.field(Description::parse("description", description));
        if from.is_some() && from == to {
            check.push(FieldViolation::new(
                "to_account_id",
                "must differ from from_account_id",
            ));
            return None;
        }
        Some(Self {
            from: from?,
            to: to?,
            amount: amount?,
            currency: currency?,
            description: description?,
            metadata: Metadata::NONE,
        })
    }

    /// Moves the money as leg `leg` of its call: the debit, then the credit, both
    /// described by `description`.
    pub(super) fn apply(
        &self,
        book: &mut Book,
        leg: u16,
        description: &Description,
    ) -> Result<Moved, Refusal> {
        book.account_in(self.from, self.currency)?;
        book.account_in(self.to, self.currency)?;
        let posting = |account, kind, counterparty| Posting {
            counterparty: Some(counterparty),
            leg,
            ..Posting::new(account, kind, self.amount, description.clone())
        };
        let debit = book.enter(posting(self.from, EntryKind::TransferOut, self.to))?;
        let credit = book.enter(posting(self.to, EntryKind::TransferIn, self.from))?;
        Ok(Moved { debit, credit })
    }
}

impl Operation for Transfer {
    type Request = pb::TransferRequest;
    type Reply = pb::TransferReply;
    type Output = Moved;

    const EFFECTS: &'static [Effect] = &[
        Effect::Entry(EntryKind::TransferOut),
        Effect::Entry(EntryKind::TransferIn),
    ];
    const REVERSAL: Reversal = Reversal::Allowed;

    fn parse(r: pb::TransferRequest) -> Result<(IdempotencyKey, Self), Vec<FieldViolation>> {
        let mut check = Violations::default();
        let key = check.key(r.idempotency_key);
        let fields = (
            r.from_account_id,
            r.to_account_id,
            r.amount,
            r.currency.as_str(),
            r.description,
        );
        let transfer = Self::check(&mut check, fields);
        let metadata = check.metadata(r.metadata);
        match (key, transfer, metadata) {
            (Some(key), Some(transfer), Some(metadata)) if check.is_empty() => {
                Ok((key, Self { metadata, ..transfer }))
            }
            _ => Err(check.into_violations()),
        }
    }

    fn fingerprint(&self, fields: &mut Fields) {
        fields.u64(self.from.get());
        fields.u64(self.to.get());
        fields.i64(self.amount.get());
        fields.str(self.currency.as_str());
        fields.str(self.description.as_str());
        self.metadata.fingerprint(fields);
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

    fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    fn decide(&self, book: &mut Book) -> Result<Moved, Refusal> {
        self.apply(book, 0, &self.description)
    }

    fn reply(moved: &Moved) -> pb::TransferReply {
        pb::TransferReply {
            debit: Some(entry_message(&moved.debit)),
            credit: Some(entry_message(&moved.credit)),
        }
    }

    fn named(reply: pb::TransferReply) -> Result<Named, String> {
        Ok(Named::entries([reply.debit, reply.credit]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::declined;
    use crate::ops::testing::{account, amount, book, description, id, key, usd};

    fn transfer(from: u64, to: u64, n: i64) -> Transfer {
        Transfer {
            from: id(from),
            to: id(to),
            amount: amount(n),
            currency: usd(),
            description: description(),
            metadata: Metadata::NONE,
        }
    }

    #[test]
    fn moves_money_and_names_the_counterparty() {
        let mut book = book(vec![account(1, 100, 0), account(2, 5, 0)], vec![], vec![]);
        book.start_call(key("t"));
        let Ok(Moved { debit, credit }) = transfer(1, 2, 40).decide(&mut book) else {
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
        let decline = declined(transfer(1, 2, 1).decide(&mut book));
        assert_eq!(decline.reason(), "BALANCE_OVERFLOW");
        book.finish_call(false);
        let changes = book.into_changes();
        assert!(changes.accounts.is_empty() && changes.new_entries.is_empty());
    }

    #[test]
    fn the_missing_account_is_named() {
        let mut book = book(vec![account(2, 100, 0)], vec![], vec![]);
        book.start_call(key("t"));
        let decline = declined(transfer(1, 2, 1).decide(&mut book));
        assert_eq!(decline.reason(), "ACCOUNT_NOT_FOUND");
        assert_eq!(decline.detail("account_id"), Some("1"));
    }

    #[test]
    fn a_transfer_to_its_own_source_is_invalid() {
        let request = pb::TransferRequest {
            idempotency_key: "t".into(),
            from_account_id: 3,
            to_account_id: 3,
            amount: 1,
            currency: "USD".into(),
            description: String::new(),
            ..Default::default()
        };
        let Err(violations) = Transfer::parse(request) else {
            panic!("expected violations");
        };
        assert_eq!(violations[0].field, "to_account_id");
    }
}
