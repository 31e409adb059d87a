//! Parses protobuf requests into validated domain values, one function per RPC,
//! reporting every invalid field at once. Nothing here touches the database (SPEC
//! 3.2 step 1).

use crate::error::Error;
use crate::ledger::ops::{
    AccountAmount, CaptureHold, Charge, Credit, OpenAccount, PlaceHold, Refund, Transfer, VoidHold,
};
use crate::ledger::{
    AccountId, Amount, Command, Currency, Description, EntryId, FieldViolation, HoldId,
    IdempotencyKey, Ttl,
};
use crate::proto::pb;

/// A keyed request: its key and its operation.
pub(super) type Keyed = (IdempotencyKey, Command);

pub(super) fn open_account(r: pb::OpenAccountRequest) -> Result<Keyed, Error> {
    let mut check = Violations::default();
    let key = check.key(r.idempotency_key);
    let currency = check.field(Currency::parse("currency", &r.currency));
    let (Some(key), Some(currency)) = (key, currency) else {
        return Err(check.into_error());
    };
    Ok((key, Command::OpenAccount(OpenAccount { currency })))
}

pub(super) fn credit(r: pb::CreditRequest) -> Result<Keyed, Error> {
    account_amount(
        r.idempotency_key,
        r.account_id,
        r.amount,
        &r.currency,
        r.description,
    )
    .map(|(key, fields)| (key, Command::Credit(Credit(fields))))
}

pub(super) fn charge(r: pb::ChargeRequest) -> Result<Keyed, Error> {
    account_amount(
        r.idempotency_key,
        r.account_id,
        r.amount,
        &r.currency,
        r.description,
    )
    .map(|(key, fields)| (key, Command::Charge(Charge(fields))))
}

fn account_amount(
    key: String,
    account_id: u64,
    amount: i64,
    currency: &str,
    description: String,
) -> Result<(IdempotencyKey, AccountAmount), Error> {
    let mut check = Violations::default();
    let key = check.key(key);
    let account_id = check.field(AccountId::parse("account_id", account_id));
    let amount = check.field(Amount::parse("amount", amount));
    let currency = check.field(Currency::parse("currency", currency));
    let description = check.field(Description::parse("description", description));
    let (Some(key), Some(account_id), Some(amount), Some(currency), Some(description)) =
        (key, account_id, amount, currency, description)
    else {
        return Err(check.into_error());
    };
    let fields = AccountAmount {
        account_id,
        amount,
        currency,
        description,
    };
    Ok((key, fields))
}

pub(super) fn transfer(r: pb::TransferRequest) -> Result<Keyed, Error> {
    let mut check = Violations::default();
    let key = check.key(r.idempotency_key);
    let from = check.field(AccountId::parse("from_account_id", r.from_account_id));
    let to = check.field(AccountId::parse("to_account_id", r.to_account_id));
    let amount = check.field(Amount::parse("amount", r.amount));
    let currency = check.field(Currency::parse("currency", &r.currency));
    let description = check.field(Description::parse("description", r.description));
    if from.is_some() && from == to {
        check.0.push(FieldViolation::new(
            "to_account_id",
            "must differ from from_account_id",
        ));
    }
    let (Some(key), Some(from), Some(to), Some(amount), Some(currency), Some(description)) =
        (key, from, to, amount, currency, description)
    else {
        return Err(check.into_error());
    };
    if !check.0.is_empty() {
        return Err(check.into_error());
    }
    let transfer = Transfer {
        from,
        to,
        amount,
        currency,
        description,
    };
    Ok((key, Command::Transfer(transfer)))
}

pub(super) fn refund(r: pb::RefundRequest) -> Result<Keyed, Error> {
    let mut check = Violations::default();
    let key = check.key(r.idempotency_key);
    let entry_id = check.field(EntryId::parse("entry_id", r.entry_id));
    let amount = check.field(Amount::parse("amount", r.amount));
    let description = check.field(Description::parse("description", r.description));
    let (Some(key), Some(entry_id), Some(amount), Some(description)) =
        (key, entry_id, amount, description)
    else {
        return Err(check.into_error());
    };
    let refund = Refund {
        entry_id,
        amount,
        description,
    };
    Ok((key, Command::Refund(refund)))
}

pub(super) fn place_hold(r: pb::PlaceHoldRequest) -> Result<Keyed, Error> {
    let mut check = Violations::default();
    let key = check.key(r.idempotency_key);
    let account_id = check.field(AccountId::parse("account_id", r.account_id));
    let amount = check.field(Amount::parse("amount", r.amount));
    let currency = check.field(Currency::parse("currency", &r.currency));
    let description = check.field(Description::parse("description", r.description));
    let ttl = r.ttl.unwrap_or_default();
    let ttl = check.field(Ttl::parse("ttl", ttl.seconds, ttl.nanos));
    let (Some(key), Some(account_id), Some(amount), Some(currency), Some(description), Some(ttl)) =
        (key, account_id, amount, currency, description, ttl)
    else {
        return Err(check.into_error());
    };
    let hold = PlaceHold {
        account_id,
        amount,
        currency,
        description,
        ttl,
    };
    Ok((key, Command::PlaceHold(hold)))
}

pub(super) fn capture_hold(r: pb::CaptureHoldRequest) -> Result<Keyed, Error> {
    let mut check = Violations::default();
    let key = check.key(r.idempotency_key);
    let hold_id = check.field(HoldId::parse("hold_id", r.hold_id));
    let amount = check.field(Amount::parse("amount", r.amount));
    let description = check.field(Description::parse("description", r.description));
    let (Some(key), Some(hold_id), Some(amount), Some(description)) =
        (key, hold_id, amount, description)
    else {
        return Err(check.into_error());
    };
    let capture = CaptureHold {
        hold_id,
        amount,
        description,
    };
    Ok((key, Command::CaptureHold(capture)))
}

pub(super) fn void_hold(r: pb::VoidHoldRequest) -> Result<Keyed, Error> {
    let mut check = Violations::default();
    let key = check.key(r.idempotency_key);
    let hold_id = check.field(HoldId::parse("hold_id", r.hold_id));
    let (Some(key), Some(hold_id)) = (key, hold_id) else {
        return Err(check.into_error());
    };
    Ok((key, Command::VoidHold(VoidHold { hold_id })))
}

pub(super) fn account_id(r: pb::GetAccountRequest) -> Result<AccountId, Error> {
    single(AccountId::parse("account_id", r.account_id))
}

pub(super) fn entry_id(r: pb::GetEntryRequest) -> Result<EntryId, Error> {
    single(EntryId::parse("entry_id", r.entry_id))
}

pub(super) fn hold_id(r: pb::GetHoldRequest) -> Result<HoldId, Error> {
    single(HoldId::parse("hold_id", r.hold_id))
}

pub(super) fn lookup_key(r: pb::LookupKeyRequest) -> Result<IdempotencyKey, Error> {
    single(IdempotencyKey::parse("idempotency_key", r.idempotency_key))
}

/// Entries per page when the request asks for 0, and the most a page holds.
pub(super) const DEFAULT_PAGE_SIZE: u32 = 100;
pub(super) const MAX_PAGE_SIZE: u32 = 1000;

/// ListEntries' account and page size (the token is read by `pages`).
pub(super) fn list_entries(r: &pb::ListEntriesRequest) -> Result<(AccountId, u32), Error> {
    let mut check = Violations::default();
    let account = check.field(AccountId::parse("account_id", r.account_id));
    let size = match u32::try_from(r.page_size) {
        Ok(0) => Some(DEFAULT_PAGE_SIZE),
        Ok(size) => Some(size.min(MAX_PAGE_SIZE)),
        Err(_) => {
            check
                .0
                .push(FieldViolation::new("page_size", "must not be negative"));
            None
        }
    };
    let (Some(account), Some(size)) = (account, size) else {
        return Err(check.into_error());
    };
    Ok((account, size))
}

fn single<T>(parsed: Result<T, FieldViolation>) -> Result<T, Error> {
    parsed.map_err(|v| Error::InvalidRequest(vec![v]))
}

#[derive(Default)]
struct Violations(Vec<FieldViolation>);

impl Violations {
    fn field<T>(&mut self, parsed: Result<T, FieldViolation>) -> Option<T> {
        parsed.map_err(|v| self.0.push(v)).ok()
    }

    fn key(&mut self, raw: String) -> Option<IdempotencyKey> {
        self.field(IdempotencyKey::parse("idempotency_key", raw))
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
        let request = pb::ChargeRequest {
            idempotency_key: String::new(),
            account_id: 0,
            amount: -1,
            currency: "usd".into(),
            description: "x".repeat(501),
        };
        let Err(Error::InvalidRequest(violations)) = charge(request) else {
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

    #[test]
    fn a_transfer_to_its_own_source_is_invalid() {
        let request = pb::TransferRequest {
            idempotency_key: "t".into(),
            from_account_id: 3,
            to_account_id: 3,
            amount: 1,
            currency: "USD".into(),
            description: String::new(),
        };
        let Err(Error::InvalidRequest(violations)) = transfer(request) else {
            panic!("expected InvalidRequest");
        };
        assert_eq!(violations[0].field, "to_account_id");
    }

    #[test]
    fn a_hold_lasts_from_one_second_to_thirty_days() {
        let hold = |seconds, nanos| pb::PlaceHoldRequest {
            idempotency_key: "h".into(),
            account_id: 1,
            amount: 1,
            currency: "USD".into(),
            description: String::new(),
            ttl: Some(prost_types::Duration { seconds, nanos }),
        };
        assert!(place_hold(hold(1, 0)).is_ok());
        assert!(place_hold(hold(30 * 24 * 3600, 0)).is_ok());
        for (seconds, nanos) in [
            (0, 0),
            (0, 999_999_999),
            (30 * 24 * 3600, 1),
            (-1, 0),
            (5, -1),
        ] {
            assert!(
                place_hold(hold(seconds, nanos)).is_err(),
                "{seconds}s {nanos}ns"
            );
        }
        let missing = pb::PlaceHoldRequest {
            ttl: None,
            ..hold(1, 0)
        };
        assert!(place_hold(missing).is_err());
    }

    #[test]
    fn page_sizes_default_cap_and_refuse_negatives() {
        let list = |page_size| pb::ListEntriesRequest {
            account_id: 1,
            page_size,
            page_token: String::new(),
        };
        assert_eq!(list_entries(&list(0)).unwrap().1, 100);
        assert_eq!(list_entries(&list(17)).unwrap().1, 17);
        assert_eq!(list_entries(&list(5000)).unwrap().1, 1000);
        assert!(list_entries(&list(-1)).is_err());
    }
}
