//! Credit: adds money to an account in its currency.

use super::account_amount::AccountAmount;
use super::messages::entry_message;
use super::operation::{Named, Operation, Reversal};
use crate::ledger::book::Book;
use crate::ledger::decline::Refusal;
use crate::ledger::fingerprint::Fields;
use crate::ledger::model::{Effect, Entry, EntryKind};
use crate::ledger::{FieldViolation, IdempotencyKey, Needs};
use crate::proto::pb;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credit(pub AccountAmount);

impl Operation for Credit {
    type Request = pb::CreditRequest;
    type Reply = pb::CreditReply;
    type Output = Entry;

    const EFFECTS: &'static [Effect] = &[Effect::Entry(EntryKind::Credit)];
    const REVERSAL: Reversal = Reversal::Allowed;

    fn parse(r: pb::CreditRequest) -> Result<(IdempotencyKey, Self), Vec<FieldViolation>> {
        let (key, fields) = AccountAmount::parse(
            r.idempotency_key,
            r.account_id,
            r.amount,
            &r.currency,
            r.description,
            r.metadata,
        )?;
        Ok((key, Self(fields)))
    }

    fn fingerprint(&self, fields: &mut Fields) {
        self.0.fingerprint(fields);
    }

    fn needs(&self) -> Needs {
        self.0.needs()
    }

    fn metadata(&self) -> &crate::ledger::Metadata {
        &self.0.metadata
    }

    fn decide(&self, book: &mut Book) -> Result<Entry, Refusal> {
        self.0.enter(book, EntryKind::Credit)
    }

    fn reply(entry: &Entry) -> pb::CreditReply {
        pb::CreditReply {
            entry: Some(entry_message(entry)),
        }
    }

    fn named(reply: pb::CreditReply) -> Result<Named, String> {
        Ok(Named::entries([reply.entry]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::declined;
    use crate::ops::testing::{account, amount, book, description, id, key, usd};

    fn credit(n: i64) -> Credit {
        Credit(AccountAmount {
            account_id: id(1),
            amount: amount(n),
            currency: usd(),
            description: description(),
            metadata: crate::ledger::Metadata::NONE,
        })
    }

    #[test]
    fn credits_refuse_to_overflow() {
        let mut book = book(vec![account(1, i64::MAX - 1, 0)], vec![], vec![]);
        book.start_call(key("k1"));
        assert!(
            matches!(credit(1).decide(&mut book), Ok(e) if e.balance_after == i64::MAX)
        );
        book.finish_call(true);
        book.start_call(key("k2"));
        let decline = declined(credit(1).decide(&mut book));
        assert_eq!(decline.reason(), "BALANCE_OVERFLOW");
    }
}
