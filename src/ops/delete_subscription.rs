//! DeleteSubscription: ends a subscription's deliveries for good; the row is
//! kept, DELETED, so its id and cursor can still be read.

use super::operation::{Named, Operation, Reversal};
use super::subscription::{StateChange, subscription_message};
use crate::ledger::book::Book;
use crate::ledger::decline::Refusal;
use crate::ledger::fingerprint::Fields;
use crate::ledger::{Effect, FieldViolation, IdempotencyKey, Needs, SubscriptionRow, SubscriptionState};
use crate::proto::pb;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteSubscription(pub StateChange);

impl Operation for DeleteSubscription {
    type Request = pb::SubscriptionRequest;
    type Reply = pb::Subscription;
    type Output = SubscriptionRow;

    const EFFECTS: &'static [Effect] = &[];
    const REVERSAL: Reversal = Reversal::Refused("a subscription's change");

    fn parse(r: pb::SubscriptionRequest) -> Result<(IdempotencyKey, Self), Vec<FieldViolation>> {
        StateChange::parse(r).map(|(key, change)| (key, Self(change)))
    }

    fn fingerprint(&self, fields: &mut Fields) {
        self.0.fingerprint(fields);
    }

    fn needs(&self) -> Needs {
        self.0.needs()
    }

    fn decide(&self, book: &mut Book) -> Result<SubscriptionRow, Refusal> {
        self.0.decide(book, SubscriptionState::Deleted)
    }

    fn reply(row: &SubscriptionRow) -> pb::Subscription {
        subscription_message(row)
    }

    fn named(_: pb::Subscription) -> Result<Named, String> {
        Ok(Named::default())
    }
}
