//! The fields of a request that moves an amount on one account (Credit,
//! Charge), shared by both.

use super::parse::Violations;
use crate::ledger::book::Posting;
use crate::ledger::{
    Book, Entry, EntryKind, FieldViolation, IdempotencyKey, Metadata, Needs, Refusal,
    fingerprint::Fields,
};

/// The fields of a request that moves an amount on one account (Credit, Charge).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountAmount {
    pub account_id: crate::ledger::AccountId,
    pub amount: crate::ledger::Amount,
    pub currency: crate::ledger::Currency,
    pub description: crate::ledger::Description,
    pub metadata: Metadata,
}

impl AccountAmount {
    pub(super) fn parse(
        key: String,
        account_id: u64,
        amount: i64,
        currency: &str,
        description: String,
        metadata: std::collections::BTreeMap<String, String>,
    ) -> Result<(IdempotencyKey, Self), Vec<FieldViolation>> {
        use crate::ledger::{AccountId, Amount, Currency, Description};
        let mut check = Violations::default();
        let key = check.key(key);
        let account_id = check.field(AccountId::parse("account_id", account_id));
        let amount = check.field(Amount::parse("amount", amount));
        let currency = check.field(Currency::parse("currency", currency));
        let description = check.field(Description::parse("description", description));
        let metadata = check.metadata(metadata);
        let (
            Some(key),
            Some(account_id),
            Some(amount),
            Some(currency),
            Some(description),
            Some(metadata),
        ) = (key, account_id, amount, currency, description, metadata)
        else {
            return Err(check.into_violations());
        };
        let fields = Self {
            account_id,
            amount,
            currency,
            description,
            metadata,
        };
        Ok((key, fields))
    }

    /// Its account, and the one entry it writes.
    pub(super) fn needs(&self) -> Needs {
        Needs {
            accounts: vec![self.account_id],
            creates: crate::ledger::book::RowCounts {
                entries: 1,
                ..Default::default()
            },
            ..Needs::default()
        }
    }

    pub(super) fn fingerprint(&self, fields: &mut Fields) {
        fields.u64(self.account_id.get());
        fields.i64(self.amount.get());
        fields.str(self.currency.as_str());
        fields.str(self.description.as_str());
        self.metadata.fingerprint(fields);
    }

    /// The one entry of `kind` on its account, in the account's currency and
    /// within its limits.
    pub(super) fn enter(&self, book: &mut Book, kind: EntryKind) -> Result<Entry, Refusal> {
        book.account_in(self.account_id, self.currency)?;
        let posting = Posting::new(self.account_id, kind, self.amount, self.description.clone());
        book.enter(posting)
    }
}
