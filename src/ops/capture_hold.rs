//! CaptureHold: takes up to the held amount from the hold's account as one CAPTURE
//! entry, and releases the rest. A hold is captured or voided at most once, and
//! never after it expires.

use super::messages::{entry_message, hold_message};
use super::operation::{Named, Operation, Reversal};
use super::parse::Violations;
use crate::ledger::book::{Book, Posting, RowCounts};
use crate::ledger::decline::{Decline, Refusal};
use crate::ledger::fingerprint::Fields;
use crate::ledger::model::{Effect, Entry, EntryKind, Hold, HoldState};
use crate::ledger::values::{Amount, Description, HoldId};
use crate::ledger::{FieldViolation, IdempotencyKey, Metadata, Needs};
use crate::proto::pb;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureHold {
    pub hold_id: HoldId,
    pub amount: Amount,
    pub description: Description,
    pub metadata: Metadata,
}

/// A capture's resolved hold and its entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    pub hold: Hold,
    pub entry: Entry,
}

impl Operation for CaptureHold {
    type Request = pb::CaptureHoldRequest;
    type Reply = pb::CaptureHoldReply;
    type Output = Captured;

    const EFFECTS: &'static [Effect] = &[
        Effect::ResolvedHold(HoldState::Captured),
        Effect::Entry(EntryKind::Capture),
    ];
    const REVERSAL: Reversal = Reversal::Refused("a capture");

    fn parse(r: pb::CaptureHoldRequest) -> Result<(IdempotencyKey, Self), Vec<FieldViolation>> {
        let mut check = Violations::default();
        let key = check.key(r.idempotency_key);
        let hold_id = check.field(HoldId::parse("hold_id", r.hold_id));
        let amount = check.field(Amount::parse("amount", r.amount));
        let description = check.field(Description::parse("description", r.description));
        let metadata = check.metadata(r.metadata);
        let (Some(key), Some(hold_id), Some(amount), Some(description), Some(metadata)) =
            (key, hold_id, amount, description, metadata)
        else {
            return Err(check.into_violations());
        };
        let capture = Self {
            hold_id,
            amount,
            description,
            metadata,
        };
        Ok((key, capture))
    }

    fn fingerprint(&self, fields: &mut Fields) {
        fields.u64(self.hold_id.get());
        fields.i64(self.amount.get());
        fields.str(self.description.as_str());
        self.metadata.fingerprint(fields);
    }

    fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    fn needs(&self) -> Needs {
        Needs {
            holds: vec![self.hold_id],
            creates: RowCounts {
                entries: 1,
                ..RowCounts::default()
            },
            ..Needs::default()
        }
    }

    fn decide(&self, book: &mut Book) -> Result<Captured, Refusal> {
        let to_capture = book.held_hold(self.hold_id)?;
        if self.amount.get() > to_capture.amount.get() {
            return Err(exceeds_hold(self.hold_id, to_capture.amount, self.amount).into());
        }
        let account_id = to_capture.account_id;
        let hold = book.resolve_hold(self.hold_id, HoldState::Captured, self.amount.get())?;
        // The hold reserved what it takes: a capture is never declined for the
        // floor, however the limits moved since.
        let posting = Posting {
            hold: Some(self.hold_id),
            ignores_floor: true,
            ..Posting::new(
                account_id,
                EntryKind::Capture,
                self.amount,
                self.description.clone(),
            )
        };
        let entry = book.enter(posting)?;
        Ok(Captured { hold, entry })
    }

    fn reply(captured: &Captured) -> pb::CaptureHoldReply {
        pb::CaptureHoldReply {
            hold: Some(hold_message(&captured.hold, captured.hold.state)),
            entry: Some(entry_message(&captured.entry)),
        }
    }

    fn named(reply: pb::CaptureHoldReply) -> Result<Named, String> {
        Ok(Named {
            hold: Named::hold(reply.hold)?.hold,
            ..Named::entries([reply.entry])
        })
    }
}

/// A capture of more than its hold holds.
fn exceeds_hold(hold_id: HoldId, held: Amount, amount: Amount) -> Decline {
    Decline::precondition(
        "CAPTURE_EXCEEDS_HOLD",
        format!("hold {hold_id} holds {held}, less than the {amount} to capture"),
        vec![
            ("hold_id", hold_id.to_string()),
            ("held", held.to_string()),
            ("amount", amount.to_string()),
        ],
    )
}
