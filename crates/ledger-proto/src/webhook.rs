//! The signature of the ledger's webhook deliveries (SPEC 3.15), shared by the
//! service that signs them and by the receivers that check them, so both read
//! one definition of the scheme.
//!
//! A delivery is a POST of a JSON body with two headers:
//!
//! - [`DELIVERY_ID_HEADER`]: `<subscription_id>:<first sequence>-<last sequence>`;
//! - [`SIGNATURE_HEADER`]: `t=<unix seconds>,v1=<hex HMAC-SHA256>`, the HMAC of
//!   the decimal timestamp, a `.`, then the raw body bytes, keyed with the UTF-8
//!   bytes of the subscription's secret.
//!
//! As in Stripe's scheme, a receiver refuses a signature that does not match
//! ([`SignatureError::Mismatch`]), and one whose `t` is further than its
//! tolerance from the receiver's clock, in either direction
//! ([`SignatureError::Stale`]): a recorded delivery sent again later is a
//! replay. The header may carry several `v1` values (one per secret while a
//! secret is rotated): one that matches is enough. Keys other than `t` and `v1`
//! are ignored, so later schemes can be added beside `v1`. Signatures are
//! compared in constant time.
//!
//! Plain Rust and RustCrypto only: nothing here needs tokio or tonic.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{KeyInit as _, Mac as _};

/// The header that carries the signature: `t=<unix seconds>,v1=<hex>`.
pub const SIGNATURE_HEADER: &str = "Ledger-Signature";

/// The header that names a delivery:
/// `<subscription_id>:<first sequence>-<last sequence>`.
pub const DELIVERY_ID_HEADER: &str = "Ledger-Delivery-Id";

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// The length of an HMAC-SHA256 in bytes.
const MAC_LEN: usize = 32;

/// Why a delivery's signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// The header is not `t=<unix seconds>,v1=<hex>[,v1=<hex>…]`.
    #[error("malformed Ledger-Signature header: {0}")]
    Malformed(String),
    /// No `v1` is the body's signature under the secret: another secret, or a
    /// changed body or timestamp.
    #[error(
        "signature mismatch: no v1 of the Ledger-Signature header signs this body under the secret"
    )]
    Mismatch,
    /// The signature is authentic, but its timestamp is further from this
    /// clock than the tolerance: a replay, or a clock far off.
    #[error(
        "stale signature: signed {age_seconds} s before this clock's now (negative: ahead of it), beyond the tolerance"
    )]
    Stale {
        /// This clock's now less the signature's `t`, in seconds: negative
        /// when `t` lies in the future.
        age_seconds: i64,
    },
}

/// The full [`SIGNATURE_HEADER`] value for `body` signed at `unix_seconds`
/// under `secret`: `t=<unix_seconds>,v1=<hex HMAC-SHA256 of "t.body">`.
pub fn sign(secret: &str, unix_seconds: i64, body: &[u8]) -> String {
    let mac = keyed(secret, unix_seconds, body).finalize().into_bytes();
    format!("t={unix_seconds},v1={}", hex::encode(mac))
}

/// Checks a delivery's [`SIGNATURE_HEADER`] value against its raw `body` and
/// the subscription's `secret`, at the system clock's now: `Ok` when a `v1`
/// matches and `t` lies within `tolerance` of now, either way.
pub fn verify_signature(
    secret: &str,
    header: &str,
    body: &[u8],
    tolerance: Duration,
) -> Result<(), SignatureError> {
    verify_signature_at(secret, header, body, tolerance, unix_now())
}

/// [`verify_signature`] at a given now, `now_unix_seconds`. The signature is
/// checked before the timestamp, so [`SignatureError::Stale`] only ever
/// describes an authentic delivery.
pub fn verify_signature_at(
    secret: &str,
    header: &str,
    body: &[u8],
    tolerance: Duration,
    now_unix_seconds: i64,
) -> Result<(), SignatureError> {
    let parsed = parse(header)?;
    let mac = keyed(secret, parsed.t, body);
    // `verify_slice` consumes its MAC: one keyed copy per candidate.
    if !parsed
        .v1
        .iter()
        .any(|candidate| mac.clone().verify_slice(candidate).is_ok())
    {
        return Err(SignatureError::Mismatch);
    }
    let age_seconds = now_unix_seconds.saturating_sub(parsed.t);
    if age_seconds.unsigned_abs() > tolerance.as_secs() {
        return Err(SignatureError::Stale { age_seconds });
    }
    Ok(())
}

/// The HMAC-SHA256 under `secret`, fed the signed message `"<t>.<body>"`.
fn keyed(secret: &str, unix_seconds: i64, body: &[u8]) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(secret.as_bytes())
        .unwrap_or_else(|e| unreachable!("HMAC takes a key of any length: {e}"));
    mac.update(unix_seconds.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// A [`SIGNATURE_HEADER`] value, read.
#[derive(Debug)]
struct Parsed {
    /// The signing time, unix seconds.
    t: i64,
    /// Every `v1` signature, decoded from hex.
    v1: Vec<[u8; MAC_LEN]>,
}

/// Reads `t=<decimal>,v1=<hex>[,…]`: comma-separated `key=value` parts
/// (whitespace around a part ignored), exactly one `t`, at least one `v1` of
/// 64 hex digits; other keys are ignored.
fn parse(header: &str) -> Result<Parsed, SignatureError> {
    let malformed = |why: String| Err(SignatureError::Malformed(why));
    let mut t = None;
    let mut v1 = Vec::new();
    for part in header.split(',').map(str::trim) {
        let Some((key, value)) = part.split_once('=') else {
            return malformed(format!("part {part:?} is not key=value"));
        };
        match key {
            "t" => {
                if t.is_some() {
                    return malformed("more than one t".into());
                }
                // Digits only: `i64::from_str` would also take a sign.
                if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                    return malformed(format!("t {value:?} is not a decimal number"));
                }
                let Ok(seconds) = value.parse::<i64>() else {
                    return malformed(format!("t {value:?} is out of range"));
                };
                t = Some(seconds);
            }
            "v1" => {
                let mut mac = [0_u8; MAC_LEN];
                if hex::decode_to_slice(value, &mut mac).is_err() {
                    return malformed(format!("v1 {value:?} is not {} hex digits", 2 * MAC_LEN));
                }
                v1.push(mac);
            }
            _ => {}
        }
    }
    let Some(t) = t else {
        return malformed("no t".into());
    };
    if v1.is_empty() {
        return malformed("no v1".into());
    }
    Ok(Parsed { t, v1 })
}

/// The system clock's now in unix seconds; negative before 1970.
fn unix_now() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(since) => i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_secs()).map_or(i64::MIN, |s| -s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_test";
    const BODY: &[u8] = br#"{"entries":[]}"#;
    const T: i64 = 1_700_000_000;
    const TOLERANCE: Duration = Duration::from_secs(300);

    fn check(header: &str, body: &[u8], now: i64) -> Result<(), SignatureError> {
        verify_signature_at(SECRET, header, body, TOLERANCE, now)
    }

    fn malformed(header: &str) -> String {
        match check(header, BODY, T) {
            Err(SignatureError::Malformed(why)) => why,
            other => panic!("{header:?}: {other:?}, not Malformed"),
        }
    }

    /// HMAC-SHA256 of `1700000000.{"entries":[]}` under `whsec_test`, computed
    /// apart from this crate: Python's `hmac.new(b"whsec_test",
    /// b'1700000000.{"entries":[]}', hashlib.sha256).hexdigest()`.
    #[test]
    fn signs_the_known_vector() {
        assert_eq!(
            sign(SECRET, T, BODY),
            "t=1700000000,v1=0393e59650c2ea140b5d083981d04de69f397366f816959a20d0b6b4e6b7333b"
        );
    }

    #[test]
    fn a_signed_body_verifies() {
        let header = sign(SECRET, T, BODY);
        assert_eq!(check(&header, BODY, T), Ok(()));
        // Within the tolerance on either side, its edges included.
        assert_eq!(check(&header, BODY, T + 300), Ok(()));
        assert_eq!(check(&header, BODY, T - 300), Ok(()));
    }

    #[test]
    fn verifies_at_the_system_clock() {
        let header = sign(SECRET, unix_now(), BODY);
        assert_eq!(verify_signature(SECRET, &header, BODY, TOLERANCE), Ok(()));
        let old = sign(SECRET, unix_now() - 3600, BODY);
        assert!(matches!(
            verify_signature(SECRET, &old, BODY, TOLERANCE),
            Err(SignatureError::Stale { age_seconds }) if age_seconds >= 3600
        ));
    }

    #[test]
    fn a_changed_body_is_a_mismatch() {
        let header = sign(SECRET, T, BODY);
        assert_eq!(
            check(&header, br#"{"entries":[{}]}"#, T),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(check(&header, b"", T), Err(SignatureError::Mismatch));
    }

    #[test]
    fn another_secret_is_a_mismatch() {
        let header = sign("whsec_other", T, BODY);
        assert_eq!(check(&header, BODY, T), Err(SignatureError::Mismatch));
    }

    #[test]
    fn a_changed_timestamp_is_a_mismatch() {
        let header = sign(SECRET, T, BODY).replace("t=1700000000", "t=1700000001");
        assert_eq!(check(&header, BODY, T), Err(SignatureError::Mismatch));
    }

    #[test]
    fn an_old_timestamp_is_stale() {
        let header = sign(SECRET, T, BODY);
        assert_eq!(
            check(&header, BODY, T + 301),
            Err(SignatureError::Stale { age_seconds: 301 })
        );
    }

    #[test]
    fn a_future_timestamp_is_stale() {
        let header = sign(SECRET, T, BODY);
        assert_eq!(
            check(&header, BODY, T - 301),
            Err(SignatureError::Stale { age_seconds: -301 })
        );
    }

    #[test]
    fn a_mismatch_is_reported_before_staleness() {
        let header = sign("whsec_other", T, BODY);
        assert_eq!(
            check(&header, BODY, T + 3600),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn any_matching_v1_is_enough() {
        let good = sign(SECRET, T, BODY);
        let (_, good_v1) = good.split_once(",v1=").unwrap();
        let other = sign("whsec_old", T, BODY);
        let (_, other_v1) = other.split_once(",v1=").unwrap();
        let rotated = format!("t={T},v1={other_v1},v1={good_v1}");
        assert_eq!(check(&rotated, BODY, T), Ok(()));
        let neither = format!("t={T},v1={other_v1},v1={other_v1}");
        assert_eq!(check(&neither, BODY, T), Err(SignatureError::Mismatch));
    }

    #[test]
    fn unknown_keys_and_order_and_spaces_are_accepted() {
        let header = sign(SECRET, T, BODY);
        let (t, v1) = header.split_once(',').unwrap();
        assert_eq!(check(&format!("{v1}, v0=abc, {t}"), BODY, T), Ok(()));
    }

    #[test]
    fn a_header_without_t_is_malformed() {
        let header = sign(SECRET, T, BODY);
        let (_, v1) = header.split_once(',').unwrap();
        assert_eq!(malformed(v1), "no t");
    }

    #[test]
    fn a_header_without_v1_is_malformed() {
        assert_eq!(malformed("t=1700000000"), "no v1");
        assert_eq!(malformed("t=1700000000,v0=00"), "no v1");
    }

    #[test]
    fn a_v1_that_is_not_hex_is_malformed() {
        let not_hex = format!("t={T},v1={}", "zz".repeat(32));
        assert!(malformed(&not_hex).contains("hex"));
        let short = format!("t={T},v1=abcd");
        assert!(malformed(&short).contains("hex"));
        let empty = format!("t={T},v1=");
        assert!(malformed(&empty).contains("hex"));
    }

    #[test]
    fn other_malformations() {
        let v1 = "00".repeat(32);
        assert!(malformed("").contains("key=value"));
        assert!(malformed(&format!("t=1,t=2,v1={v1}")).contains("more than one t"));
        assert!(malformed(&format!("t=abc,v1={v1}")).contains("decimal"));
        assert!(malformed(&format!("t=-5,v1={v1}")).contains("decimal"));
        assert!(malformed(&format!("t=+5,v1={v1}")).contains("decimal"));
        assert!(malformed(&format!("t=,v1={v1}")).contains("decimal"));
        assert!(malformed(&format!("t=99999999999999999999,v1={v1}")).contains("range"));
    }

    #[test]
    fn errors_read_clearly() {
        assert_eq!(
            SignatureError::Malformed("no t".into()).to_string(),
            "malformed Ledger-Signature header: no t"
        );
        assert!(SignatureError::Mismatch.to_string().contains("mismatch"));
        assert!(
            SignatureError::Stale { age_seconds: 301 }
                .to_string()
                .contains("301 s")
        );
    }
}
