//! The one mapping from errors and declines to `google.rpc.Status` (SPEC 4). Every
//! status carries an `ErrorInfo { reason, domain: "ledger.v1" }`; retryable ones a
//! `RetryInfo`; invalid requests a `BadRequest` naming each field.

use std::collections::HashMap;
use std::time::Duration;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, FieldViolation, StatusExt as _};

use crate::error::Error;
use crate::ledger::Decline;

/// The `ErrorInfo` domain of every status the service returns.
pub const DOMAIN: &str = "ledger.v1";

/// Response metadata marking an answer replayed from an earlier attempt.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// The suggested wait before retrying a call that found its database unreachable.
const UNAVAILABLE_RETRY: Duration = Duration::from_secs(1);
/// The suggested wait before retrying after conflicts outlasted internal retries.
const CONFLICT_RETRY: Duration = Duration::from_millis(100);

/// Refuses a call that did not authenticate; nothing else ran.
pub fn unauthenticated(why: &str) -> Status {
    with_info(
        Code::Unauthenticated,
        format!("{why}: send `authorization: Bearer <token>`"),
        "UNAUTHENTICATED",
        [],
    )
}

/// Logs an error once, at the level its class deserves, and maps it. Internal
/// detail stays in the log.
pub(super) fn report(error: &Error) -> Status {
    match error {
        Error::Internal(detail) => tracing::error!(%detail, "internal error"),
        Error::Unavailable { reason } => tracing::warn!(%reason, "database unavailable"),
        Error::Conflict { attempts } => tracing::warn!(attempts, "conflicts outlasted retries"),
        other => tracing::debug!(error = %other, "call failed"),
    }
    from_error(error)
}

pub(super) fn from_error(error: &Error) -> Status {
    match error {
        Error::InvalidRequest(violations) => invalid_request(violations),
        Error::AccountNotFound(id) => with_info(
            Code::NotFound,
            format!("account {id} does not exist"),
            "ACCOUNT_NOT_FOUND",
            [("account_id", id.to_string())],
        ),
        Error::KeyReused => with_info(
            Code::FailedPrecondition,
            "this idempotency key was already used for a different request; use a new key \
             for a new request",
            "IDEMPOTENCY_KEY_REUSED",
            [],
        ),
        Error::KeyInProgress { retry_after } => retryable(
            Code::Aborted,
            "a call with the same idempotency key is still in progress; retry with the same key",
            "IDEMPOTENCY_KEY_IN_PROGRESS",
            *retry_after,
        ),
        Error::AccountBusy { retry_after } => retryable(
            Code::Aborted,
            "the account is locked by other transactions; retry with the same key",
            "ACCOUNT_BUSY",
            *retry_after,
        ),
        Error::Conflict { .. } => retryable(
            Code::Aborted,
            "the transaction kept conflicting with concurrent ones; retry with the same key",
            "TRANSACTION_CONFLICT",
            CONFLICT_RETRY,
        ),
        Error::Unavailable { .. } => retryable(
            Code::Unavailable,
            "the database is unavailable; nothing was recorded; retry with the same key",
            "DATABASE_UNAVAILABLE",
            UNAVAILABLE_RETRY,
        ),
        Error::DeadlineExceeded => with_info(
            Code::DeadlineExceeded,
            "the deadline passed; the transaction was rolled back and nothing was recorded",
            "DEADLINE_EXCEEDED",
            [],
        ),
        Error::Cancelled => with_info(
            Code::Cancelled,
            "the call was cancelled; nothing was recorded",
            "CANCELLED",
            [],
        ),
        Error::Internal(_) => with_info(Code::Internal, "internal error", "INTERNAL", []),
    }
}

/// The status of a decline, as stored under its key and replayed.
pub(super) fn from_decline(decline: &Decline) -> Status {
    match decline {
        Decline::AccountNotFound { account_id } => {
            from_error(&Error::AccountNotFound(account_id.get()))
        }
        Decline::CurrencyMismatch {
            account_id,
            account_currency,
            requested,
        } => with_info(
            Code::FailedPrecondition,
            format!("account {account_id} holds {account_currency}, not {requested}"),
            "CURRENCY_MISMATCH",
            [
                ("account_id", account_id.to_string()),
                ("account_currency", account_currency.to_string()),
                ("requested_currency", requested.to_string()),
            ],
        ),
        Decline::InsufficientFunds {
            account_id,
            balance,
            amount,
        } => with_info(
            Code::FailedPrecondition,
            format!(
                "account {account_id} has {balance}, less than the {} charged",
                amount.get()
            ),
            "INSUFFICIENT_FUNDS",
            [
                ("account_id", account_id.to_string()),
                ("balance", balance.to_string()),
                ("amount", amount.get().to_string()),
            ],
        ),
        Decline::BalanceOverflow {
            account_id,
            balance,
            amount,
        } => with_info(
            Code::FailedPrecondition,
            format!(
                "crediting {} to account {account_id} would overflow its balance of {balance}",
                amount.get()
            ),
            "BALANCE_OVERFLOW",
            [
                ("account_id", account_id.to_string()),
                ("balance", balance.to_string()),
                ("amount", amount.get().to_string()),
            ],
        ),
    }
}

fn invalid_request(violations: &[crate::ledger::FieldViolation]) -> Status {
    let summary = violations
        .iter()
        .map(|v| format!("{} {}", v.field, v.description))
        .collect::<Vec<_>>()
        .join("; ");
    let mut details = info("INVALID_REQUEST", []);
    details.set_bad_request(
        violations
            .iter()
            .map(|v| FieldViolation::new(v.field, v.description.clone()))
            .collect::<Vec<_>>(),
    );
    Status::with_error_details(
        Code::InvalidArgument,
        format!("invalid request: {summary}"),
        details,
    )
}

fn retryable(code: Code, message: &str, reason: &str, after: Duration) -> Status {
    let mut details = info(reason, []);
    details.set_retry_info(Some(after));
    Status::with_error_details(code, message, details)
}

pub(super) fn with_info<const N: usize>(
    code: Code,
    message: impl Into<String>,
    reason: &str,
    metadata: [(&str, String); N],
) -> Status {
    Status::with_error_details(code, message, info(reason, metadata))
}

fn info<const N: usize>(reason: &str, metadata: [(&str, String); N]) -> ErrorDetails {
    let metadata: HashMap<String, String> = metadata
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    ErrorDetails::with_error_info(reason, DOMAIN, metadata)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_carries_error_info_in_the_ledger_domain() {
        let errors = [
            Error::InvalidRequest(vec![]),
            Error::AccountNotFound(1),
            Error::KeyReused,
            Error::KeyInProgress {
                retry_after: Duration::from_secs(1),
            },
            Error::AccountBusy {
                retry_after: Duration::from_secs(1),
            },
            Error::Conflict { attempts: 3 },
            Error::Unavailable { reason: "x".into() },
            Error::DeadlineExceeded,
            Error::Cancelled,
            Error::Internal("secret detail".into()),
        ];
        for error in &errors {
            let status = from_error(error);
            let info = status.get_details_error_info().expect("ErrorInfo");
            assert_eq!(info.domain, DOMAIN, "{error:?}");
            assert!(!info.reason.is_empty());
            assert!(!status.message().contains("secret"), "{error:?}");
        }
    }

    #[test]
    fn retryable_errors_say_when_to_retry() {
        for error in [
            Error::KeyInProgress {
                retry_after: Duration::from_secs(2),
            },
            Error::Conflict { attempts: 3 },
            Error::Unavailable { reason: "x".into() },
        ] {
            assert!(
                from_error(&error).get_details_retry_info().is_some(),
                "{error:?}"
            );
        }
    }
}
