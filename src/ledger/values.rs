//! Validated request values. Each type can only hold what the contract allows, so
//! code past the boundary never re-checks a field.

use std::borrow::Cow;
use std::fmt::{self, Write as _};
use std::num::NonZeroU64;

/// One invalid request field, reported to the caller as a `BadRequest` field violation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldViolation {
    /// The field's name; a repeated message's field is named with its index, as
    /// `legs[2].amount`.
    pub field: Cow<'static, str>,
    pub description: String,
}

impl FieldViolation {
    pub fn new(field: impl Into<Cow<'static, str>>, description: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            description: description.into(),
        }
    }

    /// The violation as one of element `index` of the repeated field `list`.
    #[must_use]
    pub fn within(self, list: &str, index: usize) -> Self {
        Self {
            field: format!("{list}[{index}].{}", self.field).into(),
            ..self
        }
    }
}

/// Declares an id newtype: ids start at 1, so 0 is never valid.
macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(NonZeroU64);

        impl $name {
            pub fn parse(field: &'static str, raw: u64) -> Result<Self, FieldViolation> {
                NonZeroU64::new(raw)
                    .map(Self)
                    .ok_or_else(|| FieldViolation::new(field, concat!("must be a positive ", $what)))
            }

            pub fn new(raw: NonZeroU64) -> Self {
                Self(raw)
            }

            pub fn get(self) -> u64 {
                self.0.get()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

id_type!(
    /// An account's id.
    AccountId,
    "account id"
);
id_type!(
    /// A journal entry's id.
    EntryId,
    "entry id"
);
id_type!(
    /// A hold's id.
    HoldId,
    "hold id"
);
id_type!(
    /// A subscription's id (SPEC 3.15).
    SubscriptionId,
    "subscription id"
);

/// A positive amount of money in minor units (cents). Never a float.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Amount(i64);

/// The number of minor units.
impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl Amount {
    pub fn parse(field: &'static str, raw: i64) -> Result<Self, FieldViolation> {
        if raw > 0 {
            Ok(Self(raw))
        } else {
            Err(FieldViolation::new(
                field,
                "must be a positive number of minor units",
            ))
        }
    }

    pub fn get(self) -> i64 {
        self.0
    }
}

/// A currency code in ISO 4217 shape: three upper-case ASCII letters.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Currency([u8; 3]);

impl Currency {
    pub fn parse(field: &'static str, raw: &str) -> Result<Self, FieldViolation> {
        match raw.as_bytes() {
            &[a, b, c] if [a, b, c].iter().all(u8::is_ascii_uppercase) => Ok(Self([a, b, c])),
            _ => Err(FieldViolation::new(
                field,
                "must be three upper-case ASCII letters (ISO 4217), e.g. USD",
            )),
        }
    }

    pub fn as_str(&self) -> &str {
        // Only ever built from three ASCII upper-case letters.
        std::str::from_utf8(&self.0).unwrap_or("???")
    }
}

impl fmt::Debug for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A free-text note stored on a journal entry; empty when not given.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Description(String);

impl Description {
    /// Counted in Unicode scalar values, as the contract states.
    pub const MAX_CHARS: usize = 500;

    pub fn parse(field: &'static str, raw: String) -> Result<Self, FieldViolation> {
        if raw.chars().count() <= Self::MAX_CHARS {
            Ok(Self(raw))
        } else {
            Err(FieldViolation::new(
                field,
                format!("must be at most {} characters", Self::MAX_CHARS),
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// How long a hold reserves its money: from one second to thirty days.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ttl(std::time::Duration);

impl Ttl {
    pub const MIN: std::time::Duration = std::time::Duration::from_secs(1);
    pub const MAX: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);

    /// From a protobuf `Duration`'s seconds and nanos; a missing one is 0.
    pub fn parse(field: &'static str, seconds: i64, nanos: i32) -> Result<Self, FieldViolation> {
        let out_of_range = || FieldViolation::new(field, "must be from 1s to 30 days (2592000s)");
        let seconds = u64::try_from(seconds).map_err(|_| out_of_range())?;
        let nanos = u32::try_from(nanos).map_err(|_| out_of_range())?;
        if nanos >= 1_000_000_000 {
            return Err(out_of_range());
        }
        let ttl = std::time::Duration::new(seconds, nanos);
        if (Self::MIN..=Self::MAX).contains(&ttl) {
            Ok(Self(ttl))
        } else {
            Err(out_of_range())
        }
    }

    pub fn get(self) -> std::time::Duration {
        self.0
    }
}

/// A client-chosen idempotency key: 1 to 255 visible ASCII characters, compared
/// byte for byte (so `req-42` and `REQ-42` are different keys).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub const MAX_LEN: usize = 255;

    pub fn parse(field: &'static str, raw: String) -> Result<Self, FieldViolation> {
        let visible = raw.bytes().all(|b| (0x21..=0x7e).contains(&b));
        if !raw.is_empty() && raw.len() <= Self::MAX_LEN && visible {
            Ok(Self(raw))
        } else {
            Err(FieldViolation::new(
                field,
                "must be 1 to 255 visible ASCII characters (0x21 to 0x7E), no spaces",
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A short, stable tag for logs: keys can carry customer data, so a log line
    /// never holds one in full.
    pub fn redacted(&self) -> String {
        use sha2::Digest as _;
        let digest = sha2::Sha256::digest(self.0.as_bytes());
        digest.iter().take(6).fold(String::new(), |mut tag, b| {
            let _ = write!(tag, "{b:02x}");
            tag
        })
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdempotencyKey({})", self.redacted())
    }
}

/// The namespace keys live in: one per authenticated client, and a single empty
/// one when the service runs without authentication.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Namespace(String);

impl Namespace {
    /// Client ids are stored in a `VARBINARY(64)` column.
    pub const MAX_LEN: usize = 64;

    pub fn anonymous() -> Self {
        Self::default()
    }

    pub fn client(id: &str) -> Option<Self> {
        (id.len() <= Self::MAX_LEN).then(|| Self(id.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// An idempotency key within its namespace: the primary key of a key row.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScopedKey {
    pub namespace: Namespace,
    pub key: IdempotencyKey,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_visible_ascii_up_to_255_bytes() {
        assert!(IdempotencyKey::parse("k", "req-42".into()).is_ok());
        assert!(IdempotencyKey::parse("k", "x".repeat(255)).is_ok());
        assert!(IdempotencyKey::parse("k", "~!".into()).is_ok());
        for bad in ["", "a b", "tab\there", "caf\u{e9}", "nul\0"] {
            assert!(IdempotencyKey::parse("k", bad.into()).is_err(), "{bad:?}");
        }
        assert!(IdempotencyKey::parse("k", "x".repeat(256)).is_err());
    }

    #[test]
    fn currencies_are_three_upper_case_letters() {
        assert_eq!(
            Currency::parse("c", "USD").map(|c| c.to_string()),
            Ok("USD".into())
        );
        for bad in ["usd", "US", "", "USDX", "U5D", "ÜSD"] {
            assert!(Currency::parse("c", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn amounts_are_positive() {
        assert!(Amount::parse("a", 1).is_ok());
        assert!(Amount::parse("a", i64::MAX).is_ok());
        assert!(Amount::parse("a", 0).is_err());
        assert!(Amount::parse("a", -5).is_err());
        assert!(Amount::parse("a", i64::MIN).is_err());
    }

    #[test]
    fn descriptions_count_characters_not_bytes() {
        assert!(Description::parse("d", "é".repeat(500)).is_ok());
        assert!(Description::parse("d", "é".repeat(501)).is_err());
        assert!(Description::parse("d", String::new()).is_ok());
    }

    #[test]
    fn account_zero_is_invalid() {
        assert!(AccountId::parse("a", 0).is_err());
        assert_eq!(AccountId::parse("a", 7).map(AccountId::get), Ok(7));
    }

    #[test]
    fn redacted_keys_do_not_contain_the_key() {
        let key = IdempotencyKey::parse("k", "secret-order-1234".into()).unwrap();
        let tag = key.redacted();
        assert_eq!(tag.len(), 12);
        assert!(!tag.contains("secret"));
        assert!(!format!("{key:?}").contains("secret"));
    }
}
