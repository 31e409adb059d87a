//! Parses protobuf requests into validated domain commands, reporting every invalid
//! field at once. Nothing here touches the database (SPEC 3.2 step 1).

use crate::error::Error;
use crate::ledger::{
    AccountId, Amount, Command, Currency, Description, EntryKind, FieldViolation, IdempotencyKey,
    Posting,
};
use crate::proto::pb;

pub(super) fn open_account(
    request: pb::OpenAccountRequest,
) -> Result<(IdempotencyKey, Command), Error> {
    let mut check = Violations::default();
    let key = check.field(IdempotencyKey::parse(
        "idempotency_key",
        request.idempotency_key,
    ));
    let currency = check.field(Currency::parse("currency", &request.currency));
    match (key, currency) {
        (Some(key), Some(currency)) => Ok((key, Command::OpenAccount { currency })),
        _ => Err(check.into_error()),
    }
}

/// The fields Credit and Charge share.
pub(super) struct PostingRequest {
    pub(super) idempotency_key: String,
    pub(super) account_id: u64,
    pub(super) amount: i64,
    pub(super) currency: String,
    pub(super) description: String,
}

impl From<pb::CreditRequest> for PostingRequest {
    fn from(r: pb::CreditRequest) -> Self {
        Self {
            idempotency_key: r.idempotency_key,
            account_id: r.account_id,
            amount: r.amount,
            currency: r.currency,
            description: r.description,
        }
    }
}

impl From<pb::ChargeRequest> for PostingRequest {
    fn from(r: pb::ChargeRequest) -> Self {
        Self {
            idempotency_key: r.idempotency_key,
            account_id: r.account_id,
            amount: r.amount,
            currency: r.currency,
            description: r.description,
        }
    }
}

pub(super) fn posting(
    kind: EntryKind,
    request: PostingRequest,
) -> Result<(IdempotencyKey, Command), Error> {
    let mut check = Violations::default();
    let key = check.field(IdempotencyKey::parse(
        "idempotency_key",
        request.idempotency_key,
    ));
    let account_id = check.field(AccountId::parse("account_id", request.account_id));
    let amount = check.field(Amount::parse("amount", request.amount));
    let currency = check.field(Currency::parse("currency", &request.currency));
    let description = check.field(Description::parse("description", request.description));
    match (key, account_id, amount, currency, description) {
        (Some(key), Some(account_id), Some(amount), Some(currency), Some(description)) => Ok((
            key,
            Command::Post {
                kind,
                posting: Posting {
                    account_id,
                    amount,
                    currency,
                    description,
                },
            },
        )),
        _ => Err(check.into_error()),
    }
}

pub(super) fn account_id(request: pb::GetAccountRequest) -> Result<AccountId, Error> {
    AccountId::parse("account_id", request.account_id).map_err(|v| Error::InvalidRequest(vec![v]))
}

#[derive(Default)]
struct Violations(Vec<FieldViolation>);

impl Violations {
    fn field<T>(&mut self, parsed: Result<T, FieldViolation>) -> Option<T> {
        parsed.map_err(|v| self.0.push(v)).ok()
    }

    fn into_error(self) -> Error {
        Error::InvalidRequest(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_invalid_field_is_reported() {
        let request = PostingRequest {
            idempotency_key: String::new(),
            account_id: 0,
            amount: -1,
            currency: "usd".into(),
            description: "x".repeat(501),
        };
        let Err(Error::InvalidRequest(violations)) = posting(EntryKind::Charge, request) else {
            panic!("expected InvalidRequest");
        };
        let fields: Vec<_> = violations.iter().map(|v| v.field).collect();
        assert_eq!(
            fields,
            [
                "idempotency_key",
                "account_id",
                "amount",
                "currency",
                "description"
            ]
        );
    }
}
