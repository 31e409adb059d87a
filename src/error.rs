//! The one error type of a call, classified by what the caller can do about it.
//! It is mapped to a `tonic::Status` in exactly one place, `grpc::status`.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::ledger::FieldViolation;
use crate::ops::Method;

/// What the service knows of what committed under a failed call's key (SPEC 3.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// Nothing: no COMMIT of this call can have taken effect.
    Nothing,
    /// Not known: a COMMIT was sent and its answer lost. A retry with the same key
    /// settles it (it replays, or does the work).
    Unknown,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request is malformed; nothing was recorded.
    #[error("invalid request")]
    InvalidRequest(Vec<FieldViolation>),

    /// A page token this service did not issue for this request.
    #[error("invalid page token")]
    InvalidPageToken,

    /// The caller may not call this method.
    #[error("{0:?} is not granted to this client")]
    PermissionDenied(&'static str),

    /// The account does not exist (for reads; keyed calls store this as a decline).
    #[error("account {0} not found")]
    AccountNotFound(u64),

    /// The entry does not exist (for reads).
    #[error("entry {0} not found")]
    EntryNotFound(u64),

    /// The hold does not exist (for reads).
    #[error("hold {0} not found")]
    HoldNotFound(u64),

    /// The subscription does not exist in the caller's namespace (for reads).
    #[error("subscription {0} not found")]
    SubscriptionNotFound(u64),

    /// Nothing had committed under the key when asked (LookupKey).
    #[error("no operation under this key")]
    KeyNotFound,

    /// The key was first used for a different request.
    #[error("idempotency key reused for a different request")]
    KeyReused,

    /// The key's row was purged after its operation took effect; the operation is
    /// never run again.
    #[error("idempotency key expired")]
    KeyExpired {
        method: Option<Method>,
        first_used_at: DateTime<Utc>,
    },

    /// Another call with the same key held its row past the lock-wait bound.
    #[error("a call with the same idempotency key is still in progress")]
    KeyInProgress { retry_after: Duration },

    /// Another transaction held the account's row past the lock-wait bound.
    #[error("the account is busy")]
    AccountBusy { retry_after: Duration },

    /// Deadlocks or certification conflicts outlasted the internal retries.
    #[error("transaction conflict persisted after {attempts} attempts")]
    Conflict { attempts: u32, recorded: Recorded },

    /// The database could not be reached or did not answer, or no pooled
    /// connection was free in time.
    #[error("database unavailable: {reason}")]
    Unavailable { reason: String, recorded: Recorded },

    /// A read that must wait for the change stream's numbers (a search, a balance
    /// now) found no instance assigning them.
    #[error("the change stream is not assigning sequences")]
    StreamBehind,

    /// A balance was asked for a point the ledger has not reached: a sequence not
    /// yet assigned, or a time after the answer's own instant.
    #[error("the point asked for is not reached yet")]
    PointNotReached,

    /// The server is shutting down: a stream it would otherwise keep open ends
    /// (WatchEntries), to be resumed on another instance.
    #[error("the server is shutting down")]
    ShuttingDown,

    /// The server is at its limit of concurrent calls, or of `what` (such as
    /// WatchEntries streams).
    #[error("too many concurrent {what}")]
    Overloaded { limit: usize, what: &'static str },

    /// The caller's deadline passed.
    #[error("deadline exceeded")]
    DeadlineExceeded { recorded: Recorded },

    /// The caller went away.
    #[error("cancelled by the caller")]
    Cancelled,

    /// A bug or a broken invariant. The detail goes to the log, never to the caller.
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        Self::Internal(detail.to_string())
    }

    /// A stored row that breaks a domain rule: only a bug or a manual edit does that.
    pub fn internal_row(violation: &FieldViolation) -> Self {
        Self::Internal(format!(
            "stored {} breaks an invariant: {}",
            violation.field, violation.description
        ))
    }

    pub fn unavailable(reason: impl Into<String>) -> Self {
        Self::Unavailable {
            reason: reason.into(),
            recorded: Recorded::Nothing,
        }
    }

    /// A short, stable label for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Self::InvalidRequest(_) => "invalid_request",
            Self::InvalidPageToken => "invalid_page_token",
            Self::PermissionDenied(_) => "method_not_allowed",
            Self::AccountNotFound(_) => "account_not_found",
            Self::EntryNotFound(_) => "entry_not_found",
            Self::HoldNotFound(_) => "hold_not_found",
            Self::SubscriptionNotFound(_) => "subscription_not_found",
            Self::KeyNotFound => "key_not_found",
            Self::KeyReused => "idempotency_key_reused",
            Self::KeyExpired { .. } => "idempotency_key_expired",
            Self::KeyInProgress { .. } => "idempotency_key_in_progress",
            Self::AccountBusy { .. } => "account_busy",
            Self::Conflict { .. } => "transaction_conflict",
            Self::Unavailable { .. } => "database_unavailable",
            Self::ShuttingDown => "shutting_down",
            Self::PointNotReached => "point_not_reached",
            Self::StreamBehind => "stream_behind",
            Self::Overloaded { .. } => "overloaded",
            Self::DeadlineExceeded { .. } => "deadline_exceeded",
            Self::Cancelled => "cancelled",
            Self::Internal(_) => "internal",
        }
    }
}
