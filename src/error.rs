//! The one error type of a call, classified by what the caller can do about it.
//! It is mapped to a `tonic::Status` in exactly one place, `grpc::status`.

use std::time::Duration;

use crate::ledger::FieldViolation;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request is malformed; nothing was recorded.
    #[error("invalid request")]
    InvalidRequest(Vec<FieldViolation>),

    /// The account does not exist (for reads; keyed calls store this as a decline).
    #[error("account {0} not found")]
    AccountNotFound(u64),

    /// The key was first used for a different request.
    #[error("idempotency key reused for a different request")]
    KeyReused,

    /// Another call with the same key held its row past the lock-wait bound.
    #[error("a call with the same idempotency key is still in progress")]
    KeyInProgress { retry_after: Duration },

    /// Another transaction held the account's row past the lock-wait bound.
    #[error("the account is busy")]
    AccountBusy { retry_after: Duration },

    /// Deadlocks or certification conflicts outlasted the internal retries.
    #[error("transaction conflict persisted after {attempts} attempts")]
    Conflict { attempts: u32 },

    /// The database could not be reached, or no pooled connection was free in time.
    #[error("database unavailable: {reason}")]
    Unavailable { reason: String },

    /// The caller's deadline passed; the transaction was rolled back.
    #[error("deadline exceeded")]
    DeadlineExceeded,

    /// The caller went away; the transaction was rolled back.
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

    /// A short, stable label for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Self::InvalidRequest(_) => "invalid_request",
            Self::AccountNotFound(_) => "account_not_found",
            Self::KeyReused => "idempotency_key_reused",
            Self::KeyInProgress { .. } => "idempotency_key_in_progress",
            Self::AccountBusy { .. } => "account_busy",
            Self::Conflict { .. } => "transaction_conflict",
            Self::Unavailable { .. } => "database_unavailable",
            Self::DeadlineExceeded => "deadline_exceeded",
            Self::Cancelled => "cancelled",
            Self::Internal(_) => "internal",
        }
    }
}
