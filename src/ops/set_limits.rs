//! SetLimits: replaces an account's limits, all of them at once (SPEC 3.9), and
//! records the change as one LIMITS entry in its journal, so the journal and the
//! change stream carry each change in order with the money it governs.
//!
//! A change moves no money: an account already outside its new limits stays
//! there, and only the calls that would take it further out are declined. It is
//! decided under the account's lock like any debit, so a debit racing it is
//! wholly before or wholly after it; in a batch, the members decided after it
//! see the new limits.

use super::messages::{account_message, entry_message};
use super::operation::{Named, Operation, Reversal};
use super::parse::Violations;
use crate::ledger::book::{Book, RowCounts};
use crate::ledger::decline::Refusal;
use crate::ledger::fingerprint::Fields;
use crate::ledger::model::{Account, Effect, Entry, EntryKind};
use crate::ledger::values::AccountId;
use crate::ledger::{FieldViolation, IdempotencyKey, Limits, Needs};
use crate::proto::pb;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetLimits {
    pub account_id: AccountId,
    pub limits: Limits,
}

/// The account with its new limits, and the entry that records them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitsSet {
    pub account: Account,
    pub entry: Entry,
}

impl Operation for SetLimits {
    type Request = pb::SetLimitsRequest;
    type Reply = pb::SetLimitsReply;
    type Output = LimitsSet;

    const EFFECTS: &'static [Effect] = &[Effect::Entry(EntryKind::Limits)];
    const REVERSAL: Reversal = Reversal::Refused("a SetLimits");

    fn parse(r: pb::SetLimitsRequest) -> Result<(IdempotencyKey, Self), Vec<FieldViolation>> {
        let mut check = Violations::default();
        let key = check.key(r.idempotency_key);
        let account_id = check.field(AccountId::parse("account_id", r.account_id));
        // Absent is not the defaults: a caller that meant to lift every limit
        // and sent none must not get a floor at zero by accident.
        let limits = if let Some(limits) = r.limits {
            check.limits(limits)
        } else {
            check.push(FieldViolation::new(
                "limits",
                "is required ({} is the default: a floor at zero and no ceiling)",
            ));
            None
        };
        let (Some(key), Some(account_id), Some(limits)) = (key, account_id, limits) else {
            return Err(check.into_violations());
        };
        Ok((key, Self { account_id, limits }))
    }

    fn fingerprint(&self, fields: &mut Fields) {
        fields.u64(self.account_id.get());
        self.limits.fingerprint(fields);
    }

    fn needs(&self) -> Needs {
        Needs {
            accounts: vec![self.account_id],
            creates: RowCounts {
                entries: 1,
                ..RowCounts::default()
            },
            describes_accounts: true,
            ..Needs::default()
        }
    }

    fn decide(&self, book: &mut Book) -> Result<LimitsSet, Refusal> {
        let entry = book.set_limits(self.account_id, self.limits)?;
        let account = book.account(self.account_id)?.clone();
        Ok(LimitsSet { account, entry })
    }

    fn reply(set: &LimitsSet) -> pb::SetLimitsReply {
        pb::SetLimitsReply {
            account: Some(account_message(&set.account)),
            entry: Some(entry_message(&set.entry)),
        }
    }

    fn named(reply: pb::SetLimitsReply) -> Result<Named, String> {
        if reply.account.is_none() {
            return Err(super::operation::lacks_a_field());
        }
        Ok(Named::entries([reply.entry]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::declined;
    use crate::ops::testing::{account, amount, book, description, id, key, usd};
    use crate::ops::account_amount::AccountAmount;
    use crate::ops::{Charge, Credit};

    fn limits(floor: Option<i64>, ceiling: Option<i64>) -> Limits {
        Limits::new(floor, ceiling).unwrap()
    }

    fn debit(n: i64) -> Charge {
        Charge(AccountAmount {
            account_id: id(1),
            amount: amount(n),
            currency: usd(),
            description: description(),
            metadata: crate::ledger::Metadata::NONE,
        })
    }

    #[test]
    fn a_change_writes_one_limits_entry_and_moves_no_money() {
        let mut book = book(vec![account(1, 40, 0)], vec![], vec![]);
        book.start_call(key("l"));
        let set = SetLimits {
            account_id: id(1),
            limits: limits(Some(-100), Some(500)),
        }
        .decide(&mut book)
        .unwrap();
        assert_eq!(set.entry.kind, EntryKind::Limits);
        assert_eq!((set.entry.amount, set.entry.balance_after), (0, 40));
        assert_eq!(set.entry.limits, Some(limits(Some(-100), Some(500))));
        assert_eq!(set.account.limits, limits(Some(-100), Some(500)));
        assert_eq!(set.account.balance, 40);
    }

    #[test]
    fn the_members_decided_after_a_change_see_it_and_those_before_do_not() {
        let mut book = book(vec![account(1, 100, 0)], vec![], vec![]);
        let mut decide = |key_name: &str, op: &dyn crate::ops::Keyed| {
            book.start_call(key(key_name));
            let decided = op.decide(&mut book);
            book.finish_call(decided.is_ok());
            decided
        };
        assert!(decide("a", &debit(100)).is_ok(), "down to the floor at 0");
        let lower = SetLimits {
            account_id: id(1),
            limits: limits(Some(-50), None),
        };
        assert!(decide("b", &lower).is_ok());
        assert!(decide("c", &debit(50)).is_ok(), "down to the new floor");
        let decline = declined(decide("d", &debit(1)));
        assert_eq!(decline.reason(), "INSUFFICIENT_FUNDS");
        assert_eq!(decline.detail("min_balance"), Some("-50"));
    }

    #[test]
    fn an_account_outside_its_new_limits_stays_there_and_only_goes_back() {
        let mut book = book(vec![account(1, 100, 0)], vec![], vec![]);
        book.start_call(key("m"));
        let above = SetLimits {
            account_id: id(1),
            limits: limits(Some(0), Some(50)),
        };
        assert_eq!(above.decide(&mut book).unwrap().account.balance, 100);
        book.finish_call(true);
        let credit = Credit(AccountAmount {
            account_id: id(1),
            amount: amount(1),
            currency: usd(),
            description: description(),
            metadata: crate::ledger::Metadata::NONE,
        });
        book.start_call(key("n"));
        let decline = declined(credit.decide(&mut book));
        assert_eq!(decline.reason(), "BALANCE_LIMIT_EXCEEDED");
        assert_eq!(decline.detail("max_balance"), Some("50"));
        assert_eq!(decline.detail("balance"), Some("100"));
        book.finish_call(false);
        book.start_call(key("o"));
        assert_eq!(debit(30).decide(&mut book).unwrap().balance_after, 70);
    }

    #[test]
    fn limits_are_required_and_checked() {
        let request = |limits| pb::SetLimitsRequest {
            idempotency_key: "k".into(),
            account_id: 1,
            limits,
        };
        let fields = |r| match SetLimits::parse(r) {
            Err(v) => v.into_iter().map(|v| v.field.into_owned()).collect::<Vec<_>>(),
            Ok(_) => vec![],
        };
        assert_eq!(fields(request(None)), ["limits"]);
        let above = pb::AccountLimits {
            min_balance: 5,
            no_min_balance: false,
            max_balance: Some(4),
        };
        assert_eq!(fields(request(Some(above))), ["limits.max_balance"]);
        let empty = SetLimits::parse(request(Some(pb::AccountLimits::default()))).unwrap();
        assert_eq!(empty.1.limits, Limits::default());
    }
}
