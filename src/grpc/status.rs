//! The one mapping from errors and declines to `google.rpc.Status` (SPEC 4). Every
//! status carries an `ErrorInfo { reason, domain: "ledger.v1" }`; retryable ones a
//! `RetryInfo`; invalid requests a `BadRequest` naming each field.

use std::collections::HashMap;
use std::time::Duration;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, FieldViolation, StatusExt as _};

use crate::error::{Error, Recorded};
use crate::ledger::Decline;
use crate::ledger::decline::rfc3339;

pub use crate::proto::ERROR_DOMAIN as DOMAIN;

/// Response metadata marking an answer replayed from an earlier attempt.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// The suggested wait before retrying a call that found its database unreachable.
const UNAVAILABLE_RETRY: Duration = Duration::from_secs(1);
/// The suggested wait before retrying after conflicts outlasted internal retries.
const CONFLICT_RETRY: Duration = Duration::from_millis(100);
/// The most field violations one answer lists: a status travels in HTTP/2
/// headers (its message and its encoded details), which a client refuses past
/// its header-size limit (16 KiB by default), and a post of 256 invalid legs would
/// list 256.
const MAX_VIOLATIONS: usize = 16;

/// The suggested wait before retrying a call refused for the server's load.
const OVERLOAD_RETRY: Duration = Duration::from_millis(200);

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
pub fn report(error: &Error) -> Status {
    match error {
        Error::Internal(detail) => tracing::error!(%detail, "internal error"),
        Error::Unavailable { reason, recorded } => {
            tracing::warn!(%reason, ?recorded, "database unavailable");
        }
        Error::Conflict { attempts, .. } => {
            tracing::warn!(attempts, "conflicts outlasted retries");
        }
        other => tracing::debug!(error = %other, "call failed"),
    }
    from_error(error)
}

/// The status of an error. Its reason and what it promises are in the message;
/// its details say which field, which row, and when to retry.
pub(super) fn from_error(error: &Error) -> Status {
    let mut details = info(reason(error), metadata(error));
    match error {
        Error::InvalidRequest(violations) => details.set_bad_request(field_violations(violations)),
        Error::InvalidPageToken => details.set_bad_request(vec![FieldViolation::new(
            "page_token",
            "not a token this service issued for this account",
        )]),
        _ => &mut details,
    };
    if let Some(after) = retry_after(error) {
        details.set_retry_info(Some(after));
    }
    Status::with_error_details(code(error), message(error), details)
}

/// The status of a decline, as stored under its key and replayed.
pub(super) fn from_decline(decline: &Decline) -> Status {
    let code = if decline.is_not_found() {
        Code::NotFound
    } else {
        Code::FailedPrecondition
    };
    Status::with_error_details(
        code,
        decline.message(),
        info(decline.reason(), decline.metadata().iter().cloned()),
    )
}

fn code(error: &Error) -> Code {
    match error {
        Error::InvalidRequest(_) | Error::InvalidPageToken => Code::InvalidArgument,
        Error::PermissionDenied(_) => Code::PermissionDenied,
        Error::AccountNotFound(_)
        | Error::EntryNotFound(_)
        | Error::HoldNotFound(_)
        | Error::SubscriptionNotFound(_)
        | Error::KeyNotFound => Code::NotFound,
        Error::KeyReused | Error::KeyExpired { .. } => Code::FailedPrecondition,
        Error::KeyInProgress { .. } | Error::AccountBusy { .. } | Error::Conflict { .. } => {
            Code::Aborted
        }
        Error::Unavailable { .. } | Error::ShuttingDown | Error::StreamBehind => Code::Unavailable,
        Error::Overloaded { .. } => Code::ResourceExhausted,
        Error::PointNotReached => Code::OutOfRange,
        Error::DeadlineExceeded { .. } => Code::DeadlineExceeded,
        Error::Cancelled => Code::Cancelled,
        Error::Internal(_) => Code::Internal,
    }
}

/// The `ErrorInfo` reason (SPEC 4).
fn reason(error: &Error) -> &'static str {
    match error {
        Error::InvalidRequest(_) => "INVALID_REQUEST",
        Error::InvalidPageToken => "INVALID_PAGE_TOKEN",
        Error::PermissionDenied(_) => "METHOD_NOT_ALLOWED",
        Error::AccountNotFound(_) => "ACCOUNT_NOT_FOUND",
        Error::EntryNotFound(_) => "ENTRY_NOT_FOUND",
        Error::HoldNotFound(_) => "HOLD_NOT_FOUND",
        Error::SubscriptionNotFound(_) => "SUBSCRIPTION_NOT_FOUND",
        Error::KeyNotFound => "KEY_NOT_FOUND",
        Error::KeyReused => "IDEMPOTENCY_KEY_REUSED",
        Error::KeyExpired { .. } => "IDEMPOTENCY_KEY_EXPIRED",
        Error::KeyInProgress { .. } => "IDEMPOTENCY_KEY_IN_PROGRESS",
        Error::AccountBusy { .. } => "ACCOUNT_BUSY",
        Error::Conflict { .. } => "TRANSACTION_CONFLICT",
        Error::Unavailable { .. } => "DATABASE_UNAVAILABLE",
        Error::ShuttingDown => "SHUTTING_DOWN",
        Error::StreamBehind => "STREAM_BEHIND",
        Error::PointNotReached => "POINT_NOT_REACHED",
        Error::Overloaded { .. } => "TOO_MANY_CALLS",
        Error::DeadlineExceeded { .. } => "DEADLINE_EXCEEDED",
        Error::Cancelled => "CANCELLED",
        Error::Internal(_) => "INTERNAL",
    }
}

fn message(error: &Error) -> String {
    match error {
        Error::InvalidRequest(violations) => {
            let mut summary: Vec<String> = violations
                .iter()
                .take(MAX_VIOLATIONS)
                .map(|v| format!("{} {}", v.field, v.description))
                .collect();
            if violations.len() > MAX_VIOLATIONS {
                summary.push(format!("and {} more", violations.len() - MAX_VIOLATIONS));
            }
            format!("invalid request: {}", summary.join("; "))
        }
        Error::InvalidPageToken => {
            "invalid request: page_token was not issued by this service for this account".into()
        }
        Error::PermissionDenied(method) => format!("this client is not granted {method}"),
        Error::AccountNotFound(id) => format!("account {id} does not exist"),
        Error::EntryNotFound(id) => format!("entry {id} does not exist"),
        Error::HoldNotFound(id) => format!("hold {id} does not exist"),
        Error::SubscriptionNotFound(id) => format!("subscription {id} does not exist"),
        Error::KeyNotFound => "nothing has taken effect under this idempotency key".into(),
        Error::KeyReused => "this idempotency key was already used for a different request; \
                             use a new key for a new request"
            .into(),
        Error::KeyExpired { first_used_at, .. } => format!(
            "this idempotency key took effect at {} and its record has since been purged; it \
             is never executed again: use a new key for a new request",
            rfc3339(*first_used_at)
        ),
        Error::KeyInProgress { .. } => "a call with the same idempotency key is still in \
                                        progress; retry with the same key"
            .into(),
        Error::AccountBusy { .. } => "the account is locked by other transactions; nothing was \
                                      recorded; retry with the same key"
            .into(),
        Error::Conflict { recorded, .. } => format!(
            "the transaction kept conflicting with concurrent ones; {}",
            promise(*recorded)
        ),
        Error::Unavailable { recorded, .. } => {
            format!("the database is unavailable; {}", promise(*recorded))
        }
        Error::ShuttingDown => "the server is shutting down; resume on another instance after \
                                the last sequence received"
            .into(),
        Error::StreamBehind => "no instance is assigning the change stream's sequences, which \
                                this read waits for; retry later"
            .into(),
        Error::PointNotReached => "the ledger has not reached this point yet: its sequence is \
                                   not assigned, or its time is still to come"
            .into(),
        Error::Overloaded { limit, what } => format!(
            "the server is at its limit of {limit} concurrent {what}; nothing was recorded; \
             retry later"
        ),
        Error::DeadlineExceeded { recorded } => {
            format!("the deadline passed; {}", promise(*recorded))
        }
        Error::Cancelled => "the call was cancelled; retry with the same key".into(),
        Error::Internal(_) => "internal error".into(),
    }
}

fn metadata(error: &Error) -> Vec<(&'static str, String)> {
    match error {
        Error::PermissionDenied(method) => vec![("method", (*method).to_owned())],
        Error::AccountNotFound(id) => vec![("account_id", id.to_string())],
        Error::EntryNotFound(id) => vec![("entry_id", id.to_string())],
        Error::HoldNotFound(id) => vec![("hold_id", id.to_string())],
        Error::SubscriptionNotFound(id) => vec![("subscription_id", id.to_string())],
        Error::KeyExpired {
            method,
            first_used_at,
        } => {
            let mut metadata = vec![("first_used_at", rfc3339(*first_used_at))];
            metadata.extend(method.map(|m| ("method", m.name().to_owned())));
            metadata
        }
        Error::Overloaded { limit, .. } => vec![("limit", limit.to_string())],
        _ => Vec::new(),
    }
}

fn retry_after(error: &Error) -> Option<Duration> {
    match error {
        Error::KeyInProgress { retry_after } | Error::AccountBusy { retry_after } => {
            Some(*retry_after)
        }
        Error::Conflict { .. } => Some(CONFLICT_RETRY),
        Error::Unavailable { .. } | Error::ShuttingDown | Error::StreamBehind => {
            Some(UNAVAILABLE_RETRY)
        }
        Error::Overloaded { .. } => Some(OVERLOAD_RETRY),
        _ => None,
    }
}

/// What a retryable answer may say about what was recorded (SPEC 3.6).
fn promise(recorded: Recorded) -> &'static str {
    match recorded {
        Recorded::Nothing => "nothing was recorded; retry with the same key",
        Recorded::Unknown => {
            "whether the operation took effect is not known; retry with the same key, which \
             replays its outcome if it did and performs it if not"
        }
    }
}

fn field_violations(violations: &[crate::ledger::FieldViolation]) -> Vec<FieldViolation> {
    violations
        .iter()
        .take(MAX_VIOLATIONS)
        .map(|v| FieldViolation::new(v.field.clone(), v.description.clone()))
        .collect()
}

pub(super) fn with_info<const N: usize>(
    code: Code,
    message: impl Into<String>,
    reason: &str,
    metadata: [(&str, String); N],
) -> Status {
    Status::with_error_details(code, message, info(reason, metadata))
}

fn info<'a>(reason: &str, metadata: impl IntoIterator<Item = (&'a str, String)>) -> ErrorDetails {
    let metadata: HashMap<String, String> = metadata
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    ErrorDetails::with_error_info(reason, DOMAIN, metadata)
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

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
            Error::Conflict {
                attempts: 3,
                recorded: Recorded::Nothing,
            },
            Error::unavailable("x"),
            Error::DeadlineExceeded {
                recorded: Recorded::Unknown,
            },
            Error::Cancelled,
            Error::InvalidPageToken,
            Error::PermissionDenied(crate::ops::Method::Charge.name()),
            Error::EntryNotFound(1),
            Error::HoldNotFound(1),
            Error::KeyNotFound,
            Error::KeyExpired {
                method: None,
                first_used_at: Utc::now(),
            },
            Error::Overloaded {
                limit: 1,
                what: "calls",
            },
            Error::ShuttingDown,
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

    /// A post of 256 invalid legs is answered with the first violations, small
    /// enough for any client's headers, and says how many it left out.
    #[test]
    fn an_answer_lists_a_bounded_number_of_violations() {
        let violations = (0..256)
            .map(|i| {
                crate::ledger::FieldViolation::new(
                    "to_account_id",
                    "must differ from from_account_id",
                )
                .within("legs", i)
            })
            .collect();
        let status = from_error(&Error::InvalidRequest(violations));
        let listed = status.get_details_bad_request().expect("BadRequest");
        assert_eq!(listed.field_violations.len(), MAX_VIOLATIONS);
        assert!(
            status.message().ends_with("and 240 more"),
            "{}",
            status.message()
        );
        assert!(status.details().len() + status.message().len() < 4096);
    }

    #[test]
    fn retryable_errors_say_when_to_retry() {
        for error in [
            Error::KeyInProgress {
                retry_after: Duration::from_secs(2),
            },
            Error::Conflict {
                attempts: 3,
                recorded: Recorded::Nothing,
            },
            Error::unavailable("x"),
            Error::Overloaded {
                limit: 1,
                what: "calls",
            },
        ] {
            assert!(
                from_error(&error).get_details_retry_info().is_some(),
                "{error:?}"
            );
        }
    }
}

#[cfg(test)]
mod promises {
    use super::*;

    /// SPEC 3.6: only where the service knows it may an answer say that nothing
    /// was recorded.
    #[test]
    fn an_unknown_outcome_is_never_called_nothing_recorded() {
        for error in [
            Error::Unavailable {
                reason: "x".into(),
                recorded: Recorded::Unknown,
            },
            Error::Conflict {
                attempts: 3,
                recorded: Recorded::Unknown,
            },
            Error::DeadlineExceeded {
                recorded: Recorded::Unknown,
            },
        ] {
            let status = from_error(&error);
            assert!(
                !status.message().contains("nothing"),
                "{error:?}: {}",
                status.message()
            );
            assert!(status.message().contains("not known"), "{error:?}");
        }
    }
}
