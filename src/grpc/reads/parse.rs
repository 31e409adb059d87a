//! What the read RPCs' requests share: page sizes, queries by metadata, a
//! single field. Each read parses its own request in its module, into validated
//! domain values, reporting every invalid field at once; nothing touches the
//! database before (SPEC 3.2 step 1).

use crate::error::Error;
use crate::ledger::{AccountId, FieldViolation, Metadata};
use crate::ops::{self, Violations};

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

/// A query's pairs: valid metadata, `least` to [`MAX_FILTER_PAIRS`] of them.
pub(super) fn filter(
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
pub(super) fn size_of_page(check: &mut Violations, raw: i32) -> Option<u32> {
    match u32::try_from(raw) {
        Ok(0) => Some(DEFAULT_PAGE_SIZE),
        Ok(size) => Some(size.min(MAX_PAGE_SIZE)),
        Err(_) => {
            check.push(FieldViolation::new("page_size", "must not be negative"));
            None
        }
    }
}

pub(super) fn single<T>(parsed: Result<T, FieldViolation>) -> Result<T, Error> {
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
