//! Post: several transfers that take effect together or not at all (a marketplace
//! sale: buyer to merchant and buyer to platform; an FX trade through two pools).
//! Each leg is a [`Transfer`], valid on its own; legs apply in order, each seeing
//! the balances the legs before it left, so a leg may spend what an earlier one
//! brought in. A declined leg declines the whole post, with that leg's reason and
//! its index (`leg`); the book undoes the legs before it.

use super::transfer::{Moved, Transfer};
use super::messages::entry_message;
use super::operation::{Named, Operation, Reversal};
use super::parse::Violations;
use crate::ledger::book::{Book, RowCounts};
use crate::ledger::decline::Refusal;
use crate::ledger::fingerprint::Fields;
use crate::ledger::model::{Effect, EntryKind};
use crate::ledger::values::Description;
use crate::ledger::{FieldViolation, IdempotencyKey, Metadata, Needs};
use crate::proto::pb;

/// The most legs one post holds.
pub(super) const MAX_LEGS: usize = 256;

/// Between 1 and [`MAX_LEGS`] legs, checked when the request is parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Post {
    /// Each with its own description as sent (empty: the post's applies).
    pub legs: Vec<Transfer>,
    pub description: Description,
    /// On every entry of every leg.
    pub metadata: Metadata,
}

impl Post {
    /// What leg `leg`'s entries are described by.
    fn description_of<'a>(&'a self, leg: &'a Transfer) -> &'a Description {
        if leg.description.as_str().is_empty() {
            &self.description
        } else {
            &leg.description
        }
    }
}

impl Operation for Post {
    type Request = pb::PostRequest;
    type Reply = pb::PostReply;
    type Output = Vec<Moved>;

    const EFFECTS: &'static [Effect] = &[
        Effect::Entry(EntryKind::TransferOut),
        Effect::Entry(EntryKind::TransferIn),
    ];
    const PER_LEG: bool = true;
    const REVERSAL: Reversal = Reversal::Allowed;

    fn parse(r: pb::PostRequest) -> Result<(IdempotencyKey, Self), Vec<FieldViolation>> {
        let mut check = Violations::default();
        let key = check.key(r.idempotency_key);
        let description = check.field(Description::parse("description", r.description));
        if r.legs.is_empty() || r.legs.len() > MAX_LEGS {
            check.push(FieldViolation::new(
                "legs",
                format!("must hold 1 to {MAX_LEGS} legs, not {}", r.legs.len()),
            ));
        }
        let mut legs = Vec::with_capacity(r.legs.len().min(MAX_LEGS));
        for (i, leg) in r.legs.into_iter().enumerate().take(MAX_LEGS) {
            let mut leg_check = Violations::default();
            let fields = (
                leg.from_account_id,
                leg.to_account_id,
                leg.amount,
                leg.currency.as_str(),
                leg.description,
            );
            legs.extend(Transfer::check(&mut leg_check, fields));
            for violation in leg_check.into_violations() {
                check.push(violation.within("legs", i));
            }
        }
        let metadata = check.metadata(r.metadata);
        match (key, description, metadata) {
            (Some(key), Some(description), Some(metadata)) if check.is_empty() => Ok((
                key,
                Self {
                    legs,
                    description,
                    metadata,
                },
            )),
            _ => Err(check.into_violations()),
        }
    }

    fn fingerprint(&self, fields: &mut Fields) {
        fields.u64(self.legs.len() as u64);
        for leg in &self.legs {
            Operation::fingerprint(leg, fields);
        }
        fields.str(self.description.as_str());
        self.metadata.fingerprint(fields);
    }

    fn needs(&self) -> Needs {
        Needs {
            accounts: self.legs.iter().flat_map(|leg| [leg.from, leg.to]).collect(),
            creates: RowCounts {
                entries: 2 * self.legs.len(),
                ..RowCounts::default()
            },
            ..Needs::default()
        }
    }

    fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    fn decide(&self, book: &mut Book) -> Result<Vec<Moved>, Refusal> {
        let mut moved = Vec::with_capacity(self.legs.len());
        for (i, leg) in self.legs.iter().enumerate() {
            let index = u16::try_from(i)
                .map_err(|_| Refusal::Internal("a post with more legs than parsing allows".into()))?;
            let applied = leg
                .apply(book, index, self.description_of(leg))
                .map_err(|refusal| refusal.in_leg(index))?;
            moved.push(applied);
        }
        Ok(moved)
    }

    /// The entries, without the post's metadata: the caller sent it, and on
    /// each of 512 entries 50 long pairs would make a reply of megabytes (reads
    /// show it on every entry).
    fn reply(moved: &Vec<Moved>) -> pb::PostReply {
        let shown = |entry: &crate::ledger::Entry| pb::Entry {
            metadata: std::collections::BTreeMap::new(),
            ..entry_message(entry)
        };
        pb::PostReply {
            entries: moved
                .iter()
                .flat_map(|m| [shown(&m.debit), shown(&m.credit)])
                .collect(),
        }
    }

    fn named(reply: pb::PostReply) -> Result<Named, String> {
        if reply.entries.is_empty() {
            return Err(super::operation::lacks_a_field());
        }
        Ok(Named {
            entries: reply.entries,
            hold: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::{account, amount, book, description, id, key, usd};

    fn leg(from: u64, to: u64, n: i64) -> Transfer {
        Transfer {
            from: id(from),
            to: id(to),
            amount: amount(n),
            currency: usd(),
            description: description(),
            metadata: Metadata::NONE,
        }
    }

    fn post(legs: Vec<Transfer>) -> Post {
        Post {
            legs,
            description: Description::parse("d", "sale".into()).unwrap(),
            metadata: Metadata::NONE,
        }
    }

    #[test]
    fn legs_chain_and_each_writes_a_debit_then_a_credit() {
        let accounts = vec![account(1, 100, 0), account(2, 0, 0), account(3, 0, 0)];
        let mut book = book(accounts, vec![], vec![]);
        book.start_call(key("p"));
        // Account 2 spends what leg 0 brought in.
        let moved = post(vec![leg(1, 2, 100), leg(2, 3, 60)]).decide(&mut book).unwrap();
        let reply = Post::reply(&moved);
        let balances: Vec<_> = reply.entries.iter().map(|e| (e.account_id, e.balance_after, e.leg)).collect();
        assert_eq!(balances, [(1, 0, 0), (2, 100, 0), (2, 40, 1), (3, 60, 1)]);
        assert!(reply.entries.iter().all(|e| e.description == "sale"));
        book.finish_call(true);
        let places: Vec<_> = book.into_changes().new_entries.iter().map(|e| e.leg).collect();
        assert_eq!(places, [0, 1, 2, 3]);
    }

    #[test]
    fn a_declined_leg_names_itself_and_leaves_the_book_untouched() {
        let accounts = vec![account(1, 100, 0), account(2, 0, 0), account(3, 0, 0)];
        let mut book = book(accounts, vec![], vec![]);
        book.start_call(key("p"));
        let refused = post(vec![leg(1, 2, 60), leg(1, 3, 60)]).decide(&mut book);
        let Err(Refusal::Declined(decline)) = refused else {
            panic!("expected leg 1 declined, got {refused:?}");
        };
        assert_eq!(decline.reason(), "INSUFFICIENT_FUNDS");
        assert_eq!(decline.detail("leg"), Some("1"));
        book.finish_call(false);
        let changes = book.into_changes();
        assert!(changes.accounts.is_empty() && changes.new_entries.is_empty());
    }

    #[test]
    fn invalid_legs_are_named_by_index_and_counts_are_bounded() {
        let request = |legs: Vec<pb::Leg>| pb::PostRequest {
            idempotency_key: "p".into(),
            legs,
            description: String::new(),
            ..Default::default()
        };
        let good = pb::Leg {
            from_account_id: 1,
            to_account_id: 2,
            amount: 5,
            currency: "USD".into(),
            description: String::new(),
        };
        let bad = pb::Leg {
            to_account_id: 1,
            amount: 0,
            ..good.clone()
        };
        let Err(violations) = Post::parse(request(vec![good.clone(), bad])) else {
            panic!("expected violations");
        };
        let fields: Vec<_> = violations.iter().map(|v| v.field.as_ref()).collect();
        assert_eq!(fields, ["legs[1].amount", "legs[1].to_account_id"]);
        assert!(Post::parse(request(vec![])).is_err());
        assert!(Post::parse(request(vec![good.clone(); MAX_LEGS])).is_ok());
        let Err(violations) = Post::parse(request(vec![good; MAX_LEGS + 1])) else {
            panic!("expected violations");
        };
        assert_eq!(violations[0].field, "legs");
    }

    #[test]
    fn every_leg_and_the_description_are_in_the_fingerprint() {
        use crate::ops::Keyed;
        let base = post(vec![leg(1, 2, 5), leg(1, 3, 1)]);
        let mut other_leg = base.clone();
        other_leg.legs[1].amount = amount(2);
        let mut other_description = base.clone();
        other_description.description = Description::default();
        let mut fewer = base.clone();
        fewer.legs.pop();
        for other in [other_leg, other_description, fewer] {
            assert_ne!(Keyed::fingerprint(&base), Keyed::fingerprint(&other));
        }
    }
}
