//! ListEntries' page tokens (AIP-158): opaque to clients, and accepted only when
//! this deployment issued them for the same account.
//!
//! A token carries the account and the number of the last entry of the page it
//! follows (entries are numbered in the order they were applied to their account,
//! so a page after entry N is every entry numbered above N, however many were
//! appended since), and an HMAC-SHA256 of both under a key every instance reads
//! from the database (`ledger_secrets`, made by the migrations): tokens work on any
//! instance, and a token that was altered, or issued for another account, is
//! refused.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{KeyInit as _, Mac as _};

use crate::error::Error;
use crate::ledger::AccountId;

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

const VERSION: u8 = 1;
const MAC_LEN: usize = 16;
const DOMAIN: &[u8] = b"ledger.v1/list-entries-page-token/1";

/// Issues and reads page tokens under one key.
#[derive(Clone)]
pub struct PageTokens {
    /// Keyed, and fed the domain tag; cloned for each token.
    mac: HmacSha256,
}

impl std::fmt::Debug for PageTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PageTokens(..)")
    }
}

impl PageTokens {
    pub fn new(key: &[u8]) -> Result<Self, hmac::digest::InvalidLength> {
        let mut mac = HmacSha256::new_from_slice(key)?;
        mac.update(DOMAIN);
        Ok(Self { mac })
    }

    /// The token of the page after entry `after` of `account`.
    pub fn issue(&self, account: AccountId, after: u64) -> String {
        let mut token = Vec::with_capacity(1 + 16 + MAC_LEN);
        token.push(VERSION);
        token.extend_from_slice(&account.get().to_be_bytes());
        token.extend_from_slice(&after.to_be_bytes());
        let mac = self.mac(&token);
        token.extend_from_slice(&mac);
        URL_SAFE_NO_PAD.encode(token)
    }

    /// The entry a page starts after: 0 for an empty token (the first page).
    pub fn read(&self, account: AccountId, token: &str) -> Result<u64, Error> {
        if token.is_empty() {
            return Ok(0);
        }
        let bytes = URL_SAFE_NO_PAD
            .decode(token)
            .map_err(|_| Error::InvalidPageToken)?;
        let (body, mac) = bytes
            .split_at_checked(1 + 16)
            .ok_or(Error::InvalidPageToken)?;
        if mac.len() != MAC_LEN || self.verify(body, mac).is_err() {
            return Err(Error::InvalidPageToken);
        }
        let field = |range: std::ops::Range<usize>| -> Result<u64, Error> {
            let raw: [u8; 8] = body
                .get(range)
                .and_then(|b| b.try_into().ok())
                .ok_or(Error::InvalidPageToken)?;
            Ok(u64::from_be_bytes(raw))
        };
        if body.first() != Some(&VERSION) || field(1..9)? != account.get() {
            return Err(Error::InvalidPageToken);
        }
        field(9..17)
    }

    fn hmac(&self, body: &[u8]) -> HmacSha256 {
        let mut mac = self.mac.clone();
        mac.update(body);
        mac
    }

    fn mac(&self, body: &[u8]) -> Vec<u8> {
        let full = self.hmac(body).finalize().into_bytes();
        full.get(..MAC_LEN).map(<[u8]>::to_vec).unwrap_or_default()
    }

    fn verify(&self, body: &[u8], mac: &[u8]) -> Result<(), hmac::digest::MacError> {
        self.hmac(body).verify_truncated_left(mac)
    }
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
        let token = pages.issue(account(7), 42);
        assert_eq!(pages.read(account(7), &token).unwrap(), 42);
        assert!(pages.read(account(8), &token).is_err(), "another account");
        assert!(
            PageTokens::new(b"other")
                .unwrap()
                .read(account(7), &token)
                .is_err()
        );
        assert_eq!(pages.read(account(7), "").unwrap(), 0);
    }

    #[test]
    fn altered_and_garbage_tokens_are_refused() {
        let pages = PageTokens::new(b"secret").unwrap();
        let token = pages.issue(account(7), 42);
        let mut altered = URL_SAFE_NO_PAD.decode(&token).unwrap();
        altered[16] ^= 1;
        let altered = URL_SAFE_NO_PAD.encode(altered);
        for bad in [altered.as_str(), "garbage", "!!!", &token[..10], "AAAA"] {
            assert!(
                matches!(pages.read(account(7), bad), Err(Error::InvalidPageToken)),
                "{bad}"
            );
        }
    }
}
