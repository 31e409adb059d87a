//! PlaceHold: reserves part of an account's available money until it is captured,
//! voided, or its time runs out. `expires_at` is fixed by the database's clock.

use super::messages::hold_message;
use super::operation::{Named, Operation, Reversal};
use super::parse::Violations;
use crate::ledger::book::{Book, NewHold, RowCounts};
use crate::ledger::decline::Refusal;
use crate::ledger::fingerprint::Fields;
use crate::ledger::model::{Effect, Hold};
use crate::ledger::values::{AccountId, Amount, Currency, Description, Ttl};
use crate::ledger::{FieldViolation, IdempotencyKey, Metadata, Needs};
use crate::proto::pb;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlaceHold {
    pub account_id: AccountId,
    pub amount: Amount,
    pub currency: Currency,
    pub description: Description,
    pub ttl: Ttl,
    pub metadata: Metadata,
}

impl Operation for PlaceHold {
    type Request = pb::PlaceHoldRequest;
    type Reply = pb::PlaceHoldReply;
    type Output = Hold;

    const EFFECTS: &'static [Effect] = &[Effect::PlacedHold];
    const REVERSAL: Reversal = Reversal::Refused("a hold's placement");

    fn parse(r: pb::PlaceHoldRequest) -> Result<(IdempotencyKey, Self), Vec<FieldViolation>> {
        let mut check = Violations::default();
        let key = check.key(r.idempotency_key);
        let account_id = check.field(AccountId::parse("account_id", r.account_id));
        let amount = check.field(Amount::parse("amount", r.amount));
        let currency = check.field(Currency::parse("currency", &r.currency));
        let description = check.field(Description::parse("description", r.description));
        let ttl = r.ttl.unwrap_or_default();
        let ttl = check.field(Ttl::parse("ttl", ttl.seconds, ttl.nanos));
        let metadata = check.metadata(r.metadata);
        let (
            Some(key),
            Some(account_id),
            Some(amount),
            Some(currency),
            Some(description),
            Some(ttl),
            Some(metadata),
        ) = (key, account_id, amount, currency, description, ttl, metadata)
        else {
            return Err(check.into_violations());
        };
        let hold = Self {
            account_id,
            amount,
            currency,
            description,
            ttl,
            metadata,
        };
        Ok((key, hold))
    }

    fn fingerprint(&self, fields: &mut Fields) {
        fields.u64(self.account_id.get());
        fields.i64(self.amount.get());
        fields.str(self.currency.as_str());
        fields.str(self.description.as_str());
        fields.u64(self.ttl.get().as_secs());
        fields.u64(u64::from(self.ttl.get().subsec_nanos()));
        self.metadata.fingerprint(fields);
    }

    fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    fn needs(&self) -> Needs {
        Needs {
            accounts: vec![self.account_id],
            creates: RowCounts {
                holds: 1,
                ..RowCounts::default()
            },
            ..Needs::default()
        }
    }

    fn decide(&self, book: &mut Book) -> Result<Hold, Refusal> {
        book.account_in(self.account_id, self.currency)?;
        let hold = NewHold {
            account_id: self.account_id,
            amount: self.amount,
            description: self.description.clone(),
            ttl: self.ttl,
        };
        book.place_hold(hold)
    }

    fn reply(hold: &Hold) -> pb::PlaceHoldReply {
        pb::PlaceHoldReply {
            hold: Some(hold_message(hold, hold.state)),
        }
    }

    fn named(reply: pb::PlaceHoldReply) -> Result<Named, String> {
        Named::hold(reply.hold)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_lasts_from_one_second_to_thirty_days() {
        let hold = |seconds, nanos| pb::PlaceHoldRequest {
            idempotency_key: "h".into(),
            account_id: 1,
            amount: 1,
            currency: "USD".into(),
            description: String::new(),
            ttl: Some(prost_types::Duration { seconds, nanos }),
            ..Default::default()
        };
        assert!(PlaceHold::parse(hold(1, 0)).is_ok());
        assert!(PlaceHold::parse(hold(30 * 24 * 3600, 0)).is_ok());
        for (seconds, nanos) in [
            (0, 0),
            (0, 999_999_999),
            (30 * 24 * 3600, 1),
            (-1, 0),
            (5, -1),
        ] {
            assert!(
                PlaceHold::parse(hold(seconds, nanos)).is_err(),
                "{seconds}s {nanos}ns"
            );
        }
        let missing = pb::PlaceHoldRequest {
            ttl: None,
            ..hold(1, 0)
        };
        assert!(PlaceHold::parse(missing).is_err());
    }
}
