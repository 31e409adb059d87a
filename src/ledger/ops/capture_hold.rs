//! CaptureHold: takes up to the held amount from the hold's account as one CAPTURE
//! entry, and releases the rest. A hold is captured or voided at most once, and
//! never after it expires.

use super::{Needs, Operation};
use crate::ledger::book::{Book, Posting, RowCounts};
use crate::ledger::decline::{Decline, Refusal};
use crate::ledger::fingerprint::Fields;
use crate::ledger::model::{EntryKind, HoldState, Method};
use crate::ledger::outcome::Reply;
use crate::ledger::values::{Amount, Description, HoldId};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureHold {
    pub hold_id: HoldId,
    pub amount: Amount,
    pub description: Description,
}

impl Operation for CaptureHold {
    fn method(&self) -> Method {
        Method::CaptureHold
    }

    fn fingerprint(&self, fields: &mut Fields) {
        fields.u64(self.hold_id.get());
        fields.i64(self.amount.get());
        fields.str(self.description.as_str());
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

    fn decide(&self, book: &mut Book) -> Result<Reply, Refusal> {
        let to_capture = book.held_hold(self.hold_id)?;
        if self.amount.get() > to_capture.amount.get() {
            return Err(Decline::CaptureExceedsHold {
                hold_id: self.hold_id,
                held: to_capture.amount,
                amount: self.amount,
            }
            .into());
        }
        let account_id = to_capture.account_id;
        let hold = book.resolve_hold(self.hold_id, HoldState::Captured, self.amount.get())?;
        let posting = Posting {
            hold: Some(self.hold_id),
            ..Posting::new(
                account_id,
                EntryKind::Capture,
                self.amount,
                self.description.clone(),
            )
        };
        let entry = book.post(posting)?;
        Ok(Reply::CaptureHold { hold, entry })
    }
}
