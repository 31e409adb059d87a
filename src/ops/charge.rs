//! Charge: takes money from an account, never more than it has available (its
//! balance less its active holds).

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
pub struct Charge(pub AccountAmount);

impl Operation for Charge {
    type Request = pb::ChargeRequest;
    type Reply = pb::ChargeReply;
    type Output = Entry;

    const EFFECTS: &'static [Effect] = &[Effect::Entry(EntryKind::Charge)];
    const REVERSAL: Reversal = Reversal::Refused("a charge");

    fn parse(r: pb::ChargeRequest) -> Result<(IdempotencyKey, Self), Vec<FieldViolation>> {
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
        self.0.enter(book, EntryKind::Charge)
    }

    fn reply(entry: &Entry) -> pb::ChargeReply {
        pb::ChargeReply {
            entry: Some(entry_message(entry)),
        }
    }

    fn named(reply: pb::ChargeReply) -> Result<Named, String> {
        Ok(Named::entries([reply.entry]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::declined;
    use crate::ops::testing::{account, amount, book, description, id, key, usd};
    use crate::ledger::values::Currency;

    fn charge(n: i64, currency: Currency) -> Charge {
        Charge(AccountAmount {
            account_id: id(1),
            amount: amount(n),
            currency,
            description: description(),
            metadata: crate::ledger::Metadata::NONE,
        })
    }

    fn decide(balance: i64, held: i64, n: i64, currency: Currency) -> Result<Entry, Refusal> {
        let mut book = book(vec![account(1, balance, held)], vec![], vec![]);
        book.start_call(key("k"));
        charge(n, currency).decide(&mut book)
    }

    #[test]
    fn charges_down_to_exactly_zero_but_not_below() {
        assert!(matches!(decide(100, 0, 100, usd()), Ok(e) if e.balance_after == 0));
        let decline = declined(decide(100, 0, 101, usd()));
        assert_eq!(decline.reason(), "INSUFFICIENT_FUNDS");
        assert_eq!(decline.detail("balance"), Some("100"));
    }

    #[test]
    fn held_money_is_not_available() {
        assert!(decide(100, 70, 30, usd()).is_ok());
        let decline = declined(decide(100, 70, 40, usd()));
        assert_eq!(decline.reason(), "INSUFFICIENT_FUNDS");
        assert_eq!(decline.detail("held"), Some("70"));
    }

    #[test]
    fn currency_must_match_before_anything_else() {
        let eur = Currency::parse("c", "EUR").unwrap();
        assert_eq!(declined(decide(0, 0, 5, eur)).reason(), "CURRENCY_MISMATCH");
    }

    #[test]
    fn a_refused_call_leaves_the_book_as_it_was() {
        let mut book = book(vec![account(1, 100, 0)], vec![], vec![]);
        book.start_call(key("a"));
        assert!(charge(60, usd()).decide(&mut book).is_ok());
        book.finish_call(true);
        book.start_call(key("b"));
        assert!(charge(60, usd()).decide(&mut book).is_err());
        book.finish_call(false);
        book.start_call(key("c"));
        assert!(
            matches!(charge(40, usd()).decide(&mut book), Ok(e) if e.balance_after == 0)
        );
        book.finish_call(true);
        let changes = book.into_changes();
        assert_eq!(changes.new_entries.len(), 2);
        assert_eq!(
            changes
                .new_entries
                .iter()
                .map(|e| e.seq)
                .collect::<Vec<_>>(),
            [1, 2]
        );
        assert_eq!(changes.accounts.len(), 1);
        assert_eq!(
            changes.unused.entries.len(),
            8,
            "the refused call's id went back"
        );
    }

    #[test]
    fn every_invalid_field_is_reported() {
        let request = pb::ChargeRequest {
            idempotency_key: String::new(),
            account_id: 0,
            amount: -1,
            currency: "usd".into(),
            description: "x".repeat(501),
            ..Default::default()
        };
        let Err(violations) = Charge::parse(request) else {
            panic!("expected violations");
        };
        let fields: Vec<_> = violations.iter().map(|v| v.field.as_ref()).collect();
        assert_eq!(
            fields,
            [
                "idempotency_key",
                "account_id",
                "amount",
                "currency",
                "description"
            ]
        );
    }
}
