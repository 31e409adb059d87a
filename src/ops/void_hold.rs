//! VoidHold: releases a held hold without taking anything.

use super::messages::hold_message;
use super::operation::{Named, Operation, Reversal};
use super::parse::Violations;
use crate::ledger::book::Book;
use crate::ledger::decline::Refusal;
use crate::ledger::fingerprint::Fields;
use crate::ledger::model::{Effect, Hold, HoldState};
use crate::ledger::values::HoldId;
use crate::ledger::{FieldViolation, IdempotencyKey, Needs};
use crate::proto::pb;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoidHold {
    pub hold_id: HoldId,
}

impl Operation for VoidHold {
    type Request = pb::VoidHoldRequest;
    type Reply = pb::VoidHoldReply;
    type Output = Hold;

    const EFFECTS: &'static [Effect] = &[Effect::ResolvedHold(HoldState::Voided)];
    const REVERSAL: Reversal = Reversal::Refused("a hold's void");

    fn parse(r: pb::VoidHoldRequest) -> Result<(IdempotencyKey, Self), Vec<FieldViolation>> {
        let mut check = Violations::default();
        let key = check.key(r.idempotency_key);
        let hold_id = check.field(HoldId::parse("hold_id", r.hold_id));
        let (Some(key), Some(hold_id)) = (key, hold_id) else {
            return Err(check.into_violations());
        };
        Ok((key, Self { hold_id }))
    }

    fn fingerprint(&self, fields: &mut Fields) {
        fields.u64(self.hold_id.get());
    }

    fn needs(&self) -> Needs {
        Needs {
            holds: vec![self.hold_id],
            ..Needs::default()
        }
    }

    fn decide(&self, book: &mut Book) -> Result<Hold, Refusal> {
        book.held_hold(self.hold_id)?;
        book.resolve_hold(self.hold_id, HoldState::Voided, 0)
    }

    fn reply(hold: &Hold) -> pb::VoidHoldReply {
        pb::VoidHoldReply {
            hold: Some(hold_message(hold, hold.state)),
        }
    }

    fn named(reply: pb::VoidHoldReply) -> Result<Named, String> {
        Named::hold(reply.hold)
    }
}
