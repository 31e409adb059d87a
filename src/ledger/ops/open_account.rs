//! OpenAccount: a new account with a zero balance in one currency.

use super::{Needs, Operation};
use crate::ledger::book::{Book, RowCounts};
use crate::ledger::decline::Refusal;
use crate::ledger::fingerprint::Fields;
use crate::ledger::model::Method;
use crate::ledger::outcome::Reply;
use crate::ledger::values::Currency;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenAccount {
    pub currency: Currency,
}

impl Operation for OpenAccount {
    fn method(&self) -> Method {
        Method::OpenAccount
    }

    fn fingerprint(&self, fields: &mut Fields) {
        fields.str(self.currency.as_str());
    }

    fn needs(&self) -> Needs {
        Needs {
            creates: RowCounts {
                accounts: 1,
                ..RowCounts::default()
            },
            ..Needs::default()
        }
    }

    fn decide(&self, book: &mut Book) -> Result<Reply, Refusal> {
        book.open_account(self.currency).map(Reply::OpenAccount)
    }
}
