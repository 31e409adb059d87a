//! What a call ends with when it does not succeed: a decline (a final answer,
//! typed by SPEC 4's reasons), or an unknown outcome to settle by retrying with
//! the same key.

use std::collections::BTreeMap;
use std::fmt;

use tonic::{Code, Status};
use tonic_types::StatusExt as _;

/// The response metadata that marks a replayed answer.
pub(crate) const REPLAYED: &str = "idempotent-replayed";

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A final answer from the ledger: never retried; for a keyed call stored
    /// under the key (or the key is still free, for `INVALID_ARGUMENT`).
    #[error("{0}")]
    Declined(Box<Decline>),
    /// The budget ended before an answer, and settling it (`LookupKey`, then
    /// the request once more where the key has a record) got no final answer:
    /// the operation may or may not have taken effect. Retrying with this key
    /// (the same request) settles it, exactly once.
    #[error("the outcome is unknown: retry with the idempotency key {key}")]
    Unknown {
        /// The call's idempotency key.
        key: String,
    },
    /// A read's budget ended without an answer; nothing to settle.
    #[error("no answer within the budget: {code:?}: {message}")]
    Unavailable {
        /// The last attempt's code.
        code: Code,
        /// The last attempt's message.
        message: String,
    },
    /// The all-accounts change stream skipped a sequence: the server broke
    /// SPEC 3.8's promise of no hole. A [`Watcher`](crate::Watcher) stops here
    /// rather than let its caller miss an entry.
    #[error("the change stream jumped from sequence {after} to {got}: a hole")]
    Gap {
        /// The last sequence yielded.
        after: u64,
        /// The sequence that came next.
        got: u64,
    },
    /// The client's settings are not usable (an endpoint, a certificate, a
    /// token), or a call by method is not one (its path, its key).
    #[error("invalid client settings: {0}")]
    Config(String),
}

/// A reason of SPEC 4, as the `ErrorInfo` of a status names it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reason {
    InvalidRequest,
    InvalidPageToken,
    IdempotencyKeyReused,
    IdempotencyKeyInProgress,
    IdempotencyKeyExpired,
    AccountBusy,
    TransactionConflict,
    DatabaseUnavailable,
    DeadlineExceeded,
    TooManyCalls,
    MessageTooLarge,
    InsufficientFunds,
    AccountNotFound,
    CurrencyMismatch,
    BalanceOverflow,
    EntryNotFound,
    HoldNotFound,
    KeyNotFound,
    NotRefundable,
    RefundExceedsCharge,
    HoldNotHeld,
    HoldExpired,
    CaptureExceedsHold,
    Unauthenticated,
    MethodNotAllowed,
    /// A reason this client does not know (a newer server), or none.
    Other(String),
}

macro_rules! reasons {
    ($($variant:ident = $text:literal,)*) => {
        impl Reason {
            /// The reason as the wire spells it, e.g. `INSUFFICIENT_FUNDS`.
            pub fn as_str(&self) -> &str {
                match self {
                    $(Self::$variant => $text,)*
                    Self::Other(other) => other,
                }
            }

            /// The reason of an `ErrorInfo`'s `reason` field.
            ///
            /// ```
            /// use ledger_client::Reason;
            /// assert_eq!(Reason::parse("INSUFFICIENT_FUNDS"), Reason::InsufficientFunds);
            /// assert_eq!(Reason::parse("NEW_ONE"), Reason::Other("NEW_ONE".into()));
            /// ```
            pub fn parse(text: &str) -> Self {
                match text {
                    $($text => Self::$variant,)*
                    other => Self::Other(other.to_owned()),
                }
            }
        }
    };
}

reasons! {
    InvalidRequest = "INVALID_REQUEST",
    InvalidPageToken = "INVALID_PAGE_TOKEN",
    IdempotencyKeyReused = "IDEMPOTENCY_KEY_REUSED",
    IdempotencyKeyInProgress = "IDEMPOTENCY_KEY_IN_PROGRESS",
    IdempotencyKeyExpired = "IDEMPOTENCY_KEY_EXPIRED",
    AccountBusy = "ACCOUNT_BUSY",
    TransactionConflict = "TRANSACTION_CONFLICT",
    DatabaseUnavailable = "DATABASE_UNAVAILABLE",
    DeadlineExceeded = "DEADLINE_EXCEEDED",
    TooManyCalls = "TOO_MANY_CALLS",
    MessageTooLarge = "MESSAGE_TOO_LARGE",
    InsufficientFunds = "INSUFFICIENT_FUNDS",
    AccountNotFound = "ACCOUNT_NOT_FOUND",
    CurrencyMismatch = "CURRENCY_MISMATCH",
    BalanceOverflow = "BALANCE_OVERFLOW",
    EntryNotFound = "ENTRY_NOT_FOUND",
    HoldNotFound = "HOLD_NOT_FOUND",
    KeyNotFound = "KEY_NOT_FOUND",
    NotRefundable = "NOT_REFUNDABLE",
    RefundExceedsCharge = "REFUND_EXCEEDS_CHARGE",
    HoldNotHeld = "HOLD_NOT_HELD",
    HoldExpired = "HOLD_EXPIRED",
    CaptureExceedsHold = "CAPTURE_EXCEEDS_HOLD",
    Unauthenticated = "UNAUTHENTICATED",
    MethodNotAllowed = "METHOD_NOT_ALLOWED",
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `BadRequest` field violation: which field of the request, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The field's path, e.g. `amount` or `legs[1].currency`.
    pub field: String,
    pub description: String,
}

/// A final answer that is not a success, with its details parsed.
#[derive(Debug, Clone)]
pub struct Decline {
    pub code: Code,
    pub reason: Reason,
    pub message: String,
    /// The `ErrorInfo` metadata, e.g. `account_id`, `leg`, `refundable`.
    pub metadata: BTreeMap<String, String>,
    /// The `BadRequest` field violations of an `INVALID_ARGUMENT`.
    pub violations: Vec<Violation>,
    /// Whether this is the stored answer of an earlier attempt (a replay, or
    /// a `KeyRecord`'s, [`Decline::from_stored`]).
    pub replayed: bool,
    /// The call's idempotency key, for a keyed call.
    pub key: Option<String>,
}

impl Decline {
    /// Parses a status's rich details.
    pub fn from_status(status: &Status, key: Option<String>) -> Self {
        let details = status.get_error_details();
        let (reason, metadata) = details.error_info().map_or_else(
            || (Reason::Other(String::new()), BTreeMap::new()),
            |info| {
                let metadata = info.metadata.iter().map(|(k, v)| (k.clone(), v.clone()));
                (Reason::parse(&info.reason), metadata.collect())
            },
        );
        let violations = details
            .bad_request()
            .map(|bad| {
                bad.field_violations
                    .iter()
                    .map(|v| Violation {
                        field: v.field.clone(),
                        description: v.description.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Self {
            code: status.code(),
            reason,
            message: status.message().to_owned(),
            metadata,
            violations,
            replayed: replayed(status.metadata()),
            key,
        }
    }

    /// A decline stored under a key, as `LookupKey` returns it (a
    /// `KeyRecord`'s `error`); `replayed`, since it is the stored answer.
    pub fn from_stored(stored: &tonic_types::pb::Status, key: Option<String>) -> Self {
        let status = Status::with_details(
            Code::from_i32(stored.code),
            stored.message.clone(),
            bytes::Bytes::from(prost::Message::encode_to_vec(stored)),
        );
        Self {
            replayed: true,
            ..Self::from_status(&status, key)
        }
    }

    /// `IDEMPOTENCY_KEY_REUSED` for a key whose record is of another method:
    /// one key is one operation across methods (SPEC 3.1), so the record alone
    /// settles it. Made here, not stored: not `replayed`.
    pub(crate) fn used_for(method: String, key: String) -> Self {
        Self {
            code: Code::FailedPrecondition,
            reason: Reason::IdempotencyKeyReused,
            message: format!("the key was used for {method}; use a new key for a new request"),
            metadata: BTreeMap::from([("method".to_owned(), method)]),
            violations: Vec::new(),
            replayed: false,
            key: Some(key),
        }
    }

    /// The account a decline names (`INSUFFICIENT_FUNDS`, `ACCOUNT_NOT_FOUND`).
    pub fn account_id(&self) -> Option<u64> {
        self.metadata.get("account_id")?.parse().ok()
    }

    /// The index of the `Post` leg declined.
    pub fn leg(&self) -> Option<u32> {
        self.metadata.get("leg")?.parse().ok()
    }

    /// What is left to refund (`REFUND_EXCEEDS_CHARGE`).
    pub fn refundable(&self) -> Option<i64> {
        self.metadata.get("refundable")?.parse().ok()
    }

    /// The hold's state name (`HOLD_NOT_HELD`), e.g. `HOLD_STATE_CAPTURED`.
    pub fn hold_state(&self) -> Option<&str> {
        self.metadata.get("state").map(String::as_str)
    }

    /// When a purged key was first used (`IDEMPOTENCY_KEY_EXPIRED`), RFC 3339.
    pub fn first_used_at(&self) -> Option<&str> {
        self.metadata.get("first_used_at").map(String::as_str)
    }
}

impl fmt::Display for Decline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} {}: {}", self.code, self.reason, self.message)?;
        for (name, value) in &self.metadata {
            write!(f, "; {name}={value}")?;
        }
        for violation in &self.violations {
            write!(f, "; {}: {}", violation.field, violation.description)?;
        }
        Ok(())
    }
}

/// Whether metadata (headers of a success, or a status's) marks a replay.
pub(crate) fn replayed(metadata: &tonic::metadata::MetadataMap) -> bool {
    metadata
        .get(REPLAYED)
        .is_some_and(|value| value.as_bytes() == b"true")
}
