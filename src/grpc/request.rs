//! Parses the read RPCs' requests into validated domain values, reporting every
//! invalid field at once. A keyed operation parses its own request (`ops`).
//! Nothing here touches the database (SPEC 3.2 step 1).

use crate::error::Error;
use crate::ledger::{
    AccountId, BalancePoint, EntryId, FieldViolation, HoldId, IdempotencyKey, Metadata,
};
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

/// A paged read's account and page size (ListEntries, ListHolds; the token is
/// read by `pages`).
pub(super) fn page(account_id: u64, page_size: i32) -> Result<(AccountId, u32), Error> {
    let mut check = Violations::default();
    let account = check.field(AccountId::parse("account_id", account_id));
    let size = size_of_page(&mut check, page_size);
    let (Some(account), Some(size)) = (account, size) else {
        return Err(Error::InvalidRequest(check.into_violations()));
    };
    Ok((account, size))
}

/// The most pairs a search or an account listing filters by.
pub(super) const MAX_FILTER_PAIRS: usize = 4;

/// A query by metadata: its pairs, its account (searches), its page size.
#[derive(Debug)]
pub(super) struct ByMetadata {
    pub(super) pairs: Metadata,
    pub(super) account: Option<AccountId>,
    pub(super) size: u32,
}

impl ByMetadata {
    /// What a page token of this query is bound to: its kind and every
    /// parameter but the page, length-prefixed.
    pub(super) fn scope(&self, kind: &str) -> Vec<u8> {
        let mut scope = Vec::new();
        let mut field = |bytes: &[u8]| {
            scope.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_be_bytes());
            scope.extend_from_slice(bytes);
        };
        field(kind.as_bytes());
        field(&self.account.map_or(0, AccountId::get).to_be_bytes());
        for (key, value) in self.pairs.pairs() {
            field(key.as_bytes());
            field(value.as_bytes());
        }
        scope
    }
}

/// SearchEntries: 1 to 4 pairs, an account or 0 (every account), a page size.
pub(super) fn search_entries(r: pb::SearchEntriesRequest) -> Result<ByMetadata, Error> {
    let mut check = Violations::default();
    let account = match r.account_id {
        0 => Some(None),
        id => check.field(AccountId::parse("account_id", id)).map(Some),
    };
    let pairs = filter(&mut check, r.metadata, 1);
    let size = size_of_page(&mut check, r.page_size);
    match (pairs, account, size) {
        (Some(pairs), Some(account), Some(size)) => Ok(ByMetadata {
            pairs,
            account,
            size,
        }),
        _ => Err(Error::InvalidRequest(check.into_violations())),
    }
}

/// GetBalance: an account, and at most one point: a sequence (0: not given) or
/// a time, floored to the microsecond; neither is now.
pub(super) fn get_balance(r: &pb::GetBalanceRequest) -> Result<(AccountId, BalancePoint), Error> {
    let mut check = Violations::default();
    let account = check.field(AccountId::parse("account_id", r.account_id));
    let point = match (r.as_of_sequence, r.as_of_time) {
        (0, None) => Some(BalancePoint::Now),
        (n, None) => Some(BalancePoint::Sequence(n)),
        (0, Some(t)) => {
            let at = u32::try_from(t.nanos)
                .ok()
                .and_then(|nanos| chrono::DateTime::from_timestamp(t.seconds, nanos))
                .filter(|_| t.nanos < 1_000_000_000);
            if let Some(at) = at {
                let micro = chrono::TimeDelta::microseconds(1);
                let floored = chrono::DurationRound::duration_trunc(at, micro).unwrap_or(at);
                Some(BalancePoint::Time(floored))
            } else {
                check.push(FieldViolation::new(
                    "as_of_time",
                    "must be a valid timestamp (nanos 0 to 999,999,999)",
                ));
                None
            }
        }
        (_, Some(_)) => {
            check.push(FieldViolation::new(
                "as_of_time",
                "give as_of_sequence or as_of_time, not both",
            ));
            None
        }
    };
    match (account, point) {
        (Some(account), Some(point)) => Ok((account, point)),
        _ => Err(Error::InvalidRequest(check.into_violations())),
    }
}

/// ListAccounts: 0 to 4 pairs, a page size.
pub(super) fn list_accounts(r: pb::ListAccountsRequest) -> Result<ByMetadata, Error> {
    let mut check = Violations::default();
    let pairs = filter(&mut check, r.metadata, 0);
    let size = size_of_page(&mut check, r.page_size);
    match (pairs, size) {
        (Some(pairs), Some(size)) => Ok(ByMetadata {
            pairs,
            account: None,
            size,
        }),
        _ => Err(Error::InvalidRequest(check.into_violations())),
    }
}

/// A query's pairs: valid metadata, `least` to [`MAX_FILTER_PAIRS`] of them.
fn filter(
    check: &mut Violations,
    raw: std::collections::BTreeMap<String, String>,
    least: usize,
) -> Option<Metadata> {
    let count = raw.len();
    let pairs = check.metadata(raw)?;
    if (least..=MAX_FILTER_PAIRS).contains(&count) {
        Some(pairs)
    } else {
        check.push(FieldViolation::new(
            "metadata",
            format!("must hold {least} to {MAX_FILTER_PAIRS} pairs to match, not {count}"),
        ));
        None
    }
}

/// A page size: 0 means the default, above the most means the most.
fn size_of_page(check: &mut Violations, raw: i32) -> Option<u32> {
    match u32::try_from(raw) {
        Ok(0) => Some(DEFAULT_PAGE_SIZE),
        Ok(size) => Some(size.min(MAX_PAGE_SIZE)),
        Err(_) => {
            check.push(FieldViolation::new("page_size", "must not be negative"));
            None
        }
    }
}

fn single<T>(parsed: Result<T, FieldViolation>) -> Result<T, Error> {
    ops::single(parsed).map_err(Error::InvalidRequest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_sizes_default_cap_and_refuse_negatives() {
        assert_eq!(page(1, 0).unwrap().1, 100);
        assert_eq!(page(1, 17).unwrap().1, 17);
        assert_eq!(page(1, 5000).unwrap().1, 1000);
        assert!(page(1, -1).is_err());
        assert!(page(0, 1).is_err());
    }
}
