//! Parses the read RPCs' requests into validated domain values, reporting every
//! invalid field at once. A keyed operation parses its own request (`ops`).
//! Nothing here touches the database (SPEC 3.2 step 1).

use crate::error::Error;
use crate::ledger::{AccountId, EntryId, FieldViolation, HoldId, IdempotencyKey};
use crate::ops::{self, Violations};
use crate::proto::pb;

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

/// WatchEntries' account (`None`: every account) and the sequence it follows.
pub(super) fn watch_entries(r: &pb::WatchEntriesRequest) -> (Option<AccountId>, u64) {
    let account = AccountId::parse("account_id", r.account_id).ok();
    (account, r.after_sequence)
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
            check.push(FieldViolation::new("page_size", "must not be negative"));
            None
        }
    };
    let (Some(account), Some(size)) = (account, size) else {
        return Err(Error::InvalidRequest(check.into_violations()));
    };
    Ok((account, size))
}

fn single<T>(parsed: Result<T, FieldViolation>) -> Result<T, Error> {
    ops::single(parsed).map_err(Error::InvalidRequest)
}

#[cfg(test)]
mod tests {
    use super::*;

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
