//! Page tokens of the paged reads (AIP-158): opaque to clients, and accepted only
//! when this deployment issued them for the same read: ListEntries' and
//! ListHolds' for the same account, a search's or an account listing's for the
//! same query.
//!
//! A token carries the account and the cursor of the last item of the page it
//! follows: for ListEntries the entry's place in its account's journal (entries
//! are numbered in the order they were applied, so a page after entry N is every
//! entry numbered above N, however many were appended since); for ListHolds the
//! hold's placement instant and id. It is signed with an HMAC-SHA256 under a key
//! every instance reads from the database (`ledger_secrets`, made by the
//! migrations), fed a tag of its read: tokens work on any instance, and a token
//! that was altered, issued for another account or by another read, is refused.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{KeyInit as _, Mac as _};

use crate::error::Error;
use crate::ledger::AccountId;

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

const VERSION: u8 = 1;
/// A token of a query's pages: its scope is a digest of the query.
const QUERY_VERSION: u8 = 2;
const MAC_LEN: usize = 16;
/// The version byte and the account, before the cursor.
const HEAD_LEN: usize = 1 + 8;

/// A paged read, whose tokens are its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// ListEntries: the cursor is the last entry's place in the journal.
    Entries,
    /// ListHolds: the cursor is the last hold's `created_at` (microseconds since
    /// the epoch) and its id.
    Holds,
    /// SearchEntries and ListAccounts: bound to a digest of the query, the
    /// cursor a sequence or an account id ([`PageTokens::issue_query`]).
    Query,
}

impl Listing {
    /// The tag its tokens' HMAC is fed first. ListEntries' is the one its tokens
    /// had before ListHolds existed, so those still read.
    fn domain(self) -> &'static [u8] {
        match self {
            Self::Entries => b"ledger.v1/list-entries-page-token/1",
            Self::Holds => b"ledger.v1/list-holds-page-token/1",
            Self::Query => b"ledger.v1/query-page-token/1",
        }
    }
}

/// Issues and reads page tokens under one key.
#[derive(Clone)]
pub struct PageTokens {
    /// Keyed, and fed ListEntries' tag; cloned for each token.
    entries: HmacSha256,
    /// Keyed, and fed ListHolds' tag.
    holds: HmacSha256,
    /// Keyed, and fed the queries' tag.
    queries: HmacSha256,
}

impl std::fmt::Debug for PageTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PageTokens(..)")
    }
}

impl PageTokens {
    pub fn new(key: &[u8]) -> Result<Self, hmac::digest::InvalidLength> {
        let keyed = |listing: Listing| -> Result<HmacSha256, hmac::digest::InvalidLength> {
            let mut mac = HmacSha256::new_from_slice(key)?;
            mac.update(listing.domain());
            Ok(mac)
        };
        Ok(Self {
            entries: keyed(Listing::Entries)?,
            holds: keyed(Listing::Holds)?,
            queries: keyed(Listing::Query)?,
        })
    }

    /// The token of the page of `listing` after `cursor` of `account`.
    pub fn issue<const N: usize>(
        &self,
        listing: Listing,
        account: AccountId,
        cursor: [u64; N],
    ) -> String {
        let mut token = Vec::with_capacity(HEAD_LEN + 8 * N + MAC_LEN);
        token.push(VERSION);
        token.extend_from_slice(&account.get().to_be_bytes());
        for field in cursor {
            token.extend_from_slice(&field.to_be_bytes());
        }
        let mac = self.mac(listing, &token);
        token.extend_from_slice(&mac);
        URL_SAFE_NO_PAD.encode(token)
    }

    /// The cursor a page of `listing` starts after: `None` for an empty token
    /// (the first page).
    pub fn read<const N: usize>(
        &self,
        listing: Listing,
        account: AccountId,
        token: &str,
    ) -> Result<Option<[u64; N]>, Error> {
        if token.is_empty() {
            return Ok(None);
        }
        let bytes = URL_SAFE_NO_PAD
            .decode(token)
            .map_err(|_| Error::InvalidPageToken)?;
        let (body, mac) = bytes
            .split_at_checked(HEAD_LEN + 8 * N)
            .ok_or(Error::InvalidPageToken)?;
        if mac.len() != MAC_LEN || self.verify(listing, body, mac).is_err() {
            return Err(Error::InvalidPageToken);
        }
        let field = |at: usize| -> Result<u64, Error> {
            let raw: [u8; 8] = body
                .get(at..at + 8)
                .and_then(|b| b.try_into().ok())
                .ok_or(Error::InvalidPageToken)?;
            Ok(u64::from_be_bytes(raw))
        };
        if body.first() != Some(&VERSION) || field(1)? != account.get() {
            return Err(Error::InvalidPageToken);
        }
        let mut cursor = [0; N];
        for (n, value) in cursor.iter_mut().enumerate() {
            *value = field(HEAD_LEN + 8 * n)?;
        }
        Ok(Some(cursor))
    }

    /// The token of the page after `after` (a sequence, an account id) of the
    /// query `scope` (its kind and its parameters, in a fixed encoding).
    pub fn issue_query(&self, scope: &[u8], after: u64) -> String {
        let mut token = Vec::with_capacity(1 + 16 + 8 + MAC_LEN);
        token.push(QUERY_VERSION);
        token.extend_from_slice(&digest(scope));
        token.extend_from_slice(&after.to_be_bytes());
        let mac = self.mac(Listing::Query, &token);
        token.extend_from_slice(&mac);
        URL_SAFE_NO_PAD.encode(token)
    }

    /// Where a page of the query `scope` starts: 0 for an empty token; a token
    /// of another query, or of ListEntries, is refused.
    pub fn read_query(&self, scope: &[u8], token: &str) -> Result<u64, Error> {
        if token.is_empty() {
            return Ok(0);
        }
        let bytes = URL_SAFE_NO_PAD
            .decode(token)
            .map_err(|_| Error::InvalidPageToken)?;
        let (body, mac) = bytes
            .split_at_checked(1 + 16 + 8)
            .ok_or(Error::InvalidPageToken)?;
        if mac.len() != MAC_LEN || self.verify(Listing::Query, body, mac).is_err() {
            return Err(Error::InvalidPageToken);
        }
        let (head, after) = body.split_at(1 + 16);
        if head.first() != Some(&QUERY_VERSION) || head.get(1..) != Some(&digest(scope)[..]) {
            return Err(Error::InvalidPageToken);
        }
        let after: [u8; 8] = after.try_into().map_err(|_| Error::InvalidPageToken)?;
        Ok(u64::from_be_bytes(after))
    }

    fn hmac(&self, listing: Listing, body: &[u8]) -> HmacSha256 {
        let mut mac = match listing {
            Listing::Entries => self.entries.clone(),
            Listing::Holds => self.holds.clone(),
            Listing::Query => self.queries.clone(),
        };
        mac.update(body);
        mac
    }

    fn mac(&self, listing: Listing, body: &[u8]) -> Vec<u8> {
        let full = self.hmac(listing, body).finalize().into_bytes();
        full.get(..MAC_LEN).map(<[u8]>::to_vec).unwrap_or_default()
    }

    fn verify(
        &self,
        listing: Listing,
        body: &[u8],
        mac: &[u8],
    ) -> Result<(), hmac::digest::MacError> {
        self.hmac(listing, body).verify_truncated_left(mac)
    }
}

/// A query's scope as a token carries it: 16 bytes of its SHA-256.
fn digest(scope: &[u8]) -> [u8; 16] {
    use sha2::Digest as _;
    let full = sha2::Sha256::digest(scope);
    let mut short = [0; 16];
    short.copy_from_slice(full.get(..16).unwrap_or(&[0; 16]));
    short
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account(n: u64) -> AccountId {
        AccountId::parse("a", n).unwrap()
    }

    #[test]
    fn a_token_reads_back_only_for_its_account_and_key() {
        let pages = PageTokens::new(b"secret").unwrap();
        let token = pages.issue(Listing::Entries, account(7), [42]);
        assert_eq!(
            pages.read(Listing::Entries, account(7), &token).unwrap(),
            Some([42])
        );
        assert!(
            pages
                .read::<1>(Listing::Entries, account(8), &token)
                .is_err(),
            "another account"
        );
        assert!(
            PageTokens::new(b"other")
                .unwrap()
                .read::<1>(Listing::Entries, account(7), &token)
                .is_err()
        );
        assert_eq!(
            pages.read::<1>(Listing::Entries, account(7), "").unwrap(),
            None
        );
    }

    /// A token of one read is refused by the other, whatever its length.
    #[test]
    fn tokens_of_entries_and_of_holds_are_not_interchangeable() {
        let pages = PageTokens::new(b"secret").unwrap();
        let holds = pages.issue(Listing::Holds, account(7), [1_700_000_000_000_000, 9]);
        assert_eq!(
            pages.read(Listing::Holds, account(7), &holds).unwrap(),
            Some([1_700_000_000_000_000, 9])
        );
        assert!(
            pages
                .read::<2>(Listing::Entries, account(7), &holds)
                .is_err()
        );
        assert!(
            pages
                .read::<1>(Listing::Entries, account(7), &holds)
                .is_err()
        );
        let entries = pages.issue(Listing::Entries, account(7), [42]);
        assert!(
            pages
                .read::<1>(Listing::Holds, account(7), &entries)
                .is_err()
        );
        assert!(
            pages
                .read::<2>(Listing::Holds, account(7), &entries)
                .is_err()
        );
        let same_shape = pages.issue(Listing::Entries, account(7), [42, 9]);
        assert!(
            pages
                .read::<2>(Listing::Holds, account(7), &same_shape)
                .is_err()
        );
    }

    #[test]
    fn a_query_token_reads_back_only_for_its_query() {
        let pages = PageTokens::new(b"secret").unwrap();
        let token = pages.issue_query(b"search a=1", 42);
        assert_eq!(pages.read_query(b"search a=1", &token).unwrap(), 42);
        assert!(pages.read_query(b"search a=2", &token).is_err());
        let read = pages.read::<1>(Listing::Entries, account(7), &token);
        assert!(read.is_err(), "not a ListEntries token");
        let list = pages.issue(Listing::Entries, account(7), [3]);
        assert!(pages.read_query(b"search a=1", &list).is_err());
        assert_eq!(pages.read_query(b"x", "").unwrap(), 0);
    }

    #[test]
    fn altered_and_garbage_tokens_are_refused() {
        let pages = PageTokens::new(b"secret").unwrap();
        let token = pages.issue(Listing::Entries, account(7), [42]);
        let mut altered = URL_SAFE_NO_PAD.decode(&token).unwrap();
        altered[16] ^= 1;
        let altered = URL_SAFE_NO_PAD.encode(altered);
        for bad in [altered.as_str(), "garbage", "!!!", &token[..10], "AAAA"] {
            assert!(
                matches!(
                    pages.read::<1>(Listing::Entries, account(7), bad),
                    Err(Error::InvalidPageToken)
                ),
                "{bad}"
            );
        }
    }
}
