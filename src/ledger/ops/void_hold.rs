//! VoidHold: releases a held hold without taking anything.

use super::{Needs, Operation};
use crate::ledger::book::Book;
use crate::ledger::decline::Refusal;
use crate::ledger::fingerprint::Fields;
use crate::ledger::model::{HoldState, Method};
use crate::ledger::outcome::Reply;
use crate::ledger::values::HoldId;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoidHold {
    pub hold_id: HoldId,
}

impl Operation for VoidHold {
    fn method(&self) -> Method {
        Method::VoidHold
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

    fn decide(&self, book: &mut Book) -> Result<Reply, Refusal> {
        book.held_hold(self.hold_id)?;
        book.resolve_hold(self.hold_id, HoldState::Voided, 0)
            .map(Reply::VoidHold)
    }
}
