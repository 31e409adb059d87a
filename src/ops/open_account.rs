//! OpenAccount: a new account with a zero balance in one currency, and its
//! limits (by default a floor at zero and no ceiling; SPEC 3.9), which it keeps
//! as its opening limits until its first change.

use super::messages::account_message;
use super::operation::{Named, Operation, Reversal, lacks_a_field};
use super::parse::Violations;
use crate::ledger::book::{Book, RowCounts};
use crate::ledger::decline::Refusal;
use crate::ledger::fingerprint::Fields;
use crate::ledger::model::{Account, Effect};
use crate::ledger::values::Currency;
use crate::ledger::{FieldViolation, IdempotencyKey, Limits, Metadata, Needs};
use crate::proto::pb;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenAccount {
    pub currency: Currency,
    pub limits: Limits,
    pub metadata: Metadata,
}

impl Operation for OpenAccount {
    type Request = pb::OpenAccountRequest;
    type Reply = pb::OpenAccountReply;
    type Output = Account;

    const EFFECTS: &'static [Effect] = &[Effect::OpenedAccount];
    const REVERSAL: Reversal = Reversal::Refused("an OpenAccount");

    fn parse(r: pb::OpenAccountRequest) -> Result<(IdempotencyKey, Self), Vec<FieldViolation>> {
        let mut check = Violations::default();
        let key = check.key(r.idempotency_key);
        let currency = check.field(Currency::parse("currency", &r.currency));
        let limits = check.limits(r.limits.unwrap_or_default());
        let metadata = check.metadata(r.metadata);
        let (Some(key), Some(currency), Some(limits), Some(metadata)) =
            (key, currency, limits, metadata)
        else {
            return Err(check.into_violations());
        };
        let open = Self {
            currency,
            limits,
            metadata,
        };
        Ok((key, open))
    }

    fn fingerprint(&self, fields: &mut Fields) {
        fields.str(self.currency.as_str());
        self.limits.fingerprint_unless_default(fields);
        self.metadata.fingerprint(fields);
    }

    fn metadata(&self) -> &Metadata {
        &self.metadata
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

    fn decide(&self, book: &mut Book) -> Result<Account, Refusal> {
        book.open_account(self.currency, self.limits)
    }

    fn reply(account: &Account) -> pb::OpenAccountReply {
        pb::OpenAccountReply {
            account: Some(account_message(account)),
        }
    }

    fn named(reply: pb::OpenAccountReply) -> Result<Named, String> {
        let account = reply.account.ok_or_else(lacks_a_field)?;
        if account.account_id == 0 {
            return Err("the stored reply opens account 0".into());
        }
        Ok(Named::default())
    }
}
