//! Refund: returns money taken by a Charge or a Capture to the same account. The
//! refunds of one entry never add up to more than its amount.

use super::messages::entry_message;
use super::operation::{Named, Operation, Reversal};
use super::parse::Violations;
use crate::ledger::book::{Book, EntryRow, Posting, RowCounts};
use crate::ledger::decline::{Decline, Refusal};
use crate::ledger::fingerprint::Fields;
use crate::ledger::model::{Effect, Entry, EntryKind};
use crate::ledger::values::{Amount, Description, EntryId};
use crate::ledger::{FieldViolation, IdempotencyKey, Metadata, Needs};
use crate::proto::pb;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refund {
    pub entry_id: EntryId,
    pub amount: Amount,
    pub description: Description,
    pub metadata: Metadata,
}

impl Operation for Refund {
    type Request = pb::RefundRequest;
    type Reply = pb::RefundReply;
    type Output = Entry;

    const EFFECTS: &'static [Effect] = &[Effect::Entry(EntryKind::Refund)];
    const REVERSAL: Reversal = Reversal::Refused("a refund");

    fn parse(r: pb::RefundRequest) -> Result<(IdempotencyKey, Self), Vec<FieldViolation>> {
        let mut check = Violations::default();
        let key = check.key(r.idempotency_key);
        let entry_id = check.field(EntryId::parse("entry_id", r.entry_id));
        let amount = check.field(Amount::parse("amount", r.amount));
        let description = check.field(Description::parse("description", r.description));
        let metadata = check.metadata(r.metadata);
        let (Some(key), Some(entry_id), Some(amount), Some(description), Some(metadata)) =
            (key, entry_id, amount, description, metadata)
        else {
            return Err(check.into_violations());
        };
        let refund = Self {
            entry_id,
            amount,
            description,
            metadata,
        };
        Ok((key, refund))
    }

    fn fingerprint(&self, fields: &mut Fields) {
        fields.u64(self.entry_id.get());
        fields.i64(self.amount.get());
        fields.str(self.description.as_str());
        self.metadata.fingerprint(fields);
    }

    fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    fn needs(&self) -> Needs {
        Needs {
            entries: vec![self.entry_id],
            creates: RowCounts {
                entries: 1,
                ..RowCounts::default()
            },
            ..Needs::default()
        }
    }

    fn decide(&self, book: &mut Book) -> Result<Entry, Refusal> {
        let refunded = book.entry(self.entry_id)?;
        if !refunded.kind.refundable() || refunded.reverses.is_some() {
            return Err(not_refundable(refunded).into());
        }
        if self.amount.get() > refunded.refundable() {
            return Err(exceeds_charge(refunded, self.amount).into());
        }
        let account_id = refunded.account_id;
        book.add_refunded(self.entry_id, self.amount)?;
        let posting = Posting {
            refunded_entry: Some(self.entry_id),
            ..Posting::new(
                account_id,
                EntryKind::Refund,
                self.amount,
                self.description.clone(),
            )
        };
        book.enter(posting)
    }

    fn reply(entry: &Entry) -> pb::RefundReply {
        pb::RefundReply {
            entry: Some(entry_message(entry)),
        }
    }

    fn named(reply: pb::RefundReply) -> Result<Named, String> {
        Ok(Named::entries([reply.entry]))
    }
}

/// A refund of an entry that is not a charge or a capture, or of a reversal's.
fn not_refundable(entry: &EntryRow) -> Decline {
    let message = if entry.reverses.is_some() {
        format!("entry {} reverses another; a reversal is never refundable", entry.id)
    } else {
        format!(
            "entry {} is a {:?} entry; only charges and captures are refundable",
            entry.id, entry.kind
        )
    };
    Decline::precondition(
        "NOT_REFUNDABLE",
        message,
        vec![("entry_id", entry.id.to_string())],
    )
}

/// A refund of more than is left to refund of its entry.
fn exceeds_charge(entry: &EntryRow, amount: Amount) -> Decline {
    let refundable = entry.refundable();
    Decline::precondition(
        "REFUND_EXCEEDS_CHARGE",
        format!(
            "entry {} has {refundable} left to refund, less than the {amount} requested",
            entry.id
        ),
        vec![
            ("entry_id", entry.id.to_string()),
            ("refundable", refundable.to_string()),
            ("amount", amount.to_string()),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::{account, amount, book, description, id, key, usd};

    fn charged(kind: EntryKind, n: i64, refunded: i64) -> EntryRow {
        EntryRow {
            id: EntryId::parse("e", 7).unwrap(),
            account_id: id(1),
            kind,
            amount: amount(n),
            currency: usd(),
            refunded,
            reverses: None,
        }
    }

    fn refund(n: i64) -> Refund {
        Refund {
            entry_id: EntryId::parse("e", 7).unwrap(),
            amount: amount(n),
            description: description(),
            metadata: Metadata::NONE,
        }
    }

    #[test]
    fn refunds_never_add_up_to_more_than_the_charge() {
        let mut book = book(
            vec![account(1, 0, 0)],
            vec![charged(EntryKind::Charge, 100, 0)],
            vec![],
        );
        for (n, expected_ok) in [
            (30, true),
            (30, true),
            (30, true),
            (30, false),
            (10, true),
            (1, false),
        ] {
            book.start_call(key(&format!("r{n}")));
            let result = refund(n).decide(&mut book);
            assert_eq!(result.is_ok(), expected_ok, "{result:?}");
            if let Err(Refusal::Declined(decline)) = &result {
                assert_eq!(decline.reason(), "REFUND_EXCEEDS_CHARGE");
                let refundable: i64 = decline.detail("refundable").unwrap().parse().unwrap();
                assert!(refundable < n);
            }
            book.finish_call(result.is_ok());
        }
        let changes = book.into_changes();
        assert_eq!(changes.refunded_entries[0].refunded, 100);
        assert_eq!(changes.accounts[0].row.account.balance, 100);
    }

    #[test]
    fn only_charges_and_captures_are_refundable() {
        let mut book = book(
            vec![account(1, 0, 0)],
            vec![charged(EntryKind::Credit, 100, 0)],
            vec![],
        );
        book.start_call(key("r"));
        let Err(Refusal::Declined(decline)) = refund(1).decide(&mut book) else {
            panic!("a credit refunded");
        };
        assert_eq!(decline.reason(), "NOT_REFUNDABLE");
        assert!(decline.message().contains("Credit"), "{}", decline.message());
    }
}
