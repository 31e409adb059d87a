//! PlaceHold: reserves part of an account's available money until it is captured,
//! voided, or its time runs out. `expires_at` is fixed by the database's clock.

use super::{Needs, Operation};
use crate::ledger::book::{Book, NewHold, RowCounts};
use crate::ledger::decline::Refusal;
use crate::ledger::fingerprint::Fields;
use crate::ledger::model::Method;
use crate::ledger::outcome::Reply;
use crate::ledger::values::{AccountId, Amount, Currency, Description, Ttl};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlaceHold {
    pub account_id: AccountId,
    pub amount: Amount,
    pub currency: Currency,
    pub description: Description,
    pub ttl: Ttl,
}

impl Operation for PlaceHold {
    fn method(&self) -> Method {
        Method::PlaceHold
    }

    fn fingerprint(&self, fields: &mut Fields) {
        fields.u64(self.account_id.get());
        fields.i64(self.amount.get());
        fields.str(self.currency.as_str());
        fields.str(self.description.as_str());
        fields.u64(self.ttl.get().as_secs());
        fields.u64(u64::from(self.ttl.get().subsec_nanos()));
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

    fn decide(&self, book: &mut Book) -> Result<Reply, Refusal> {
        book.account_in(self.account_id, self.currency)?;
        book.require_available(self.account_id, self.amount)?;
        let hold = NewHold {
            account_id: self.account_id,
            amount: self.amount,
            description: self.description.clone(),
            ttl: self.ttl,
        };
        book.place_hold(hold).map(Reply::PlaceHold)
    }
}
