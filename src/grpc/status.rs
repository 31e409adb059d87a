//! The one mapping from errors and declines to `google.rpc.Status` (SPEC 4). Every
//! status carries an `ErrorInfo { reason, domain: "ledger.v1" }`; retryable ones a
//! `RetryInfo`; invalid requests a `BadRequest` naming each field.

use std::collections::HashMap;
use std::time::Duration;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, FieldViolation, StatusExt as _};

use chrono::{DateTime, Utc};

use crate::error::{Error, Recorded};
use crate::ledger::Decline;

/// The `ErrorInfo` domain of every status the service returns.
pub const DOMAIN: &str = "ledger.v1";

/// Response metadata marking an answer replayed from an earlier attempt.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// The suggested wait before retrying a call that found its database unreachable.
const UNAVAILABLE_RETRY: Duration = Duration::from_secs(1);
/// The suggested wait before retrying after conflicts outlasted internal retries.
const CONFLICT_RETRY: Duration = Duration::from_millis(100);
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
pub(super) fn report(error: &Error) -> Status {
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

#[expect(
    clippy::too_many_lines,
    reason = "the one mapping of errors, an arm each, is meant to be read whole"
)]
pub(super) fn from_error(error: &Error) -> Status {
    match error {
        Error::InvalidRequest(violations) => invalid_request(violations),
        Error::InvalidPageToken => {
            let mut details = info("INVALID_PAGE_TOKEN", []);
            details.set_bad_request(vec![FieldViolation::new(
                "page_token",
                "not a token this service issued for this account",
            )]);
            Status::with_error_details(
                Code::InvalidArgument,
                "invalid request: page_token was not issued by this service for this account",
                details,
            )
        }
        Error::PermissionDenied(method) => with_info(
            Code::PermissionDenied,
            format!("this client is not granted {method}"),
            "METHOD_NOT_ALLOWED",
            [("method", (*method).to_owned())],
        ),
        Error::AccountNotFound(id) => with_info(
            Code::NotFound,
            format!("account {id} does not exist"),
            "ACCOUNT_NOT_FOUND",
            [("account_id", id.to_string())],
        ),
        Error::EntryNotFound(id) => not_found_entry(*id),
        Error::HoldNotFound(id) => not_found_hold(*id),
        Error::KeyNotFound => with_info(
            Code::NotFound,
            "nothing has taken effect under this idempotency key",
            "KEY_NOT_FOUND",
            [],
        ),
        Error::KeyReused => with_info(
            Code::FailedPrecondition,
            "this idempotency key was already used for a different request; use a new key \
             for a new request",
            "IDEMPOTENCY_KEY_REUSED",
            [],
        ),
        Error::KeyExpired {
            method,
            first_used_at,
        } => {
            let mut metadata = vec![("first_used_at", rfc3339(*first_used_at))];
            metadata.extend(method.map(|m| ("method", m.name().to_owned())));
            with_info_vec(
                Code::FailedPrecondition,
                format!(
                    "this idempotency key took effect at {} and its record has since been \
                     purged; it is never executed again: use a new key for a new request",
                    rfc3339(*first_used_at)
                ),
                "IDEMPOTENCY_KEY_EXPIRED",
                metadata,
            )
        }
        Error::KeyInProgress { retry_after } => retryable(
            Code::Aborted,
            "a call with the same idempotency key is still in progress; retry with the same key",
            "IDEMPOTENCY_KEY_IN_PROGRESS",
            *retry_after,
        ),
        Error::AccountBusy { retry_after } => retryable(
            Code::Aborted,
            "the account is locked by other transactions; nothing was recorded; retry with \
             the same key",
            "ACCOUNT_BUSY",
            *retry_after,
        ),
        Error::Conflict { recorded, .. } => retryable(
            Code::Aborted,
            &format!(
                "the transaction kept conflicting with concurrent ones; {}",
                promise(*recorded)
            ),
            "TRANSACTION_CONFLICT",
            CONFLICT_RETRY,
        ),
        Error::Unavailable { recorded, .. } => retryable(
            Code::Unavailable,
            &format!("the database is unavailable; {}", promise(*recorded)),
            "DATABASE_UNAVAILABLE",
            UNAVAILABLE_RETRY,
        ),
        Error::Overloaded { limit } => {
            let mut details = info("TOO_MANY_CALLS", [("limit", limit.to_string())]);
            details.set_retry_info(Some(OVERLOAD_RETRY));
            Status::with_error_details(
                Code::ResourceExhausted,
                format!(
                    "the server is at its limit of {limit} concurrent calls; nothing was \
                     recorded; retry later"
                ),
                details,
            )
        }
        Error::DeadlineExceeded { recorded } => with_info(
            Code::DeadlineExceeded,
            format!("the deadline passed; {}", promise(*recorded)),
            "DEADLINE_EXCEEDED",
            [],
        ),
        Error::Cancelled => with_info(
            Code::Cancelled,
            "the call was cancelled; retry with the same key",
            "CANCELLED",
            [],
        ),
        Error::Internal(_) => with_info(Code::Internal, "internal error", "INTERNAL", []),
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

fn not_found_entry(id: u64) -> Status {
    with_info(
        Code::NotFound,
        format!("entry {id} does not exist"),
        "ENTRY_NOT_FOUND",
        [("entry_id", id.to_string())],
    )
}

fn not_found_hold(id: u64) -> Status {
    with_info(
        Code::NotFound,
        format!("hold {id} does not exist"),
        "HOLD_NOT_FOUND",
        [("hold_id", id.to_string())],
    )
}

fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// The status of a decline, as stored under its key and replayed.
#[expect(
    clippy::too_many_lines,
    reason = "the one mapping of declines, an arm each, is meant to be read whole"
)]
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
            held,
            amount,
        } => with_info(
            Code::FailedPrecondition,
            format!(
                "account {account_id} has {available} available, less than the {amount} requested",
                available = balance - held,
                amount = amount.get()
            ),
            "INSUFFICIENT_FUNDS",
            [
                ("account_id", account_id.to_string()),
                ("balance", balance.to_string()),
                ("held", held.to_string()),
                ("available", (balance - held).to_string()),
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
        Decline::EntryNotFound { entry_id } => not_found_entry(entry_id.get()),
        Decline::NotRefundable { entry_id, kind } => with_info(
            Code::FailedPrecondition,
            format!(
                "entry {entry_id} is a {kind:?} entry; only charges and captures are refundable"
            ),
            "NOT_REFUNDABLE",
            [("entry_id", entry_id.to_string())],
        ),
        Decline::RefundExceedsCharge {
            entry_id,
            refundable,
            amount,
        } => with_info(
            Code::FailedPrecondition,
            format!(
                "entry {entry_id} has {refundable} left to refund, less than the {} requested",
                amount.get()
            ),
            "REFUND_EXCEEDS_CHARGE",
            [
                ("entry_id", entry_id.to_string()),
                ("refundable", refundable.to_string()),
                ("amount", amount.get().to_string()),
            ],
        ),
        Decline::HoldNotFound { hold_id } => not_found_hold(hold_id.get()),
        Decline::HoldNotHeld { hold_id, state } => with_info(
            Code::FailedPrecondition,
            format!("hold {hold_id} is no longer held: {}", state.name()),
            "HOLD_NOT_HELD",
            [
                ("hold_id", hold_id.to_string()),
                ("state", state.name().to_owned()),
            ],
        ),
        Decline::HoldExpired {
            hold_id,
            expires_at,
        } => with_info(
            Code::FailedPrecondition,
            format!("hold {hold_id} expired at {}", rfc3339(*expires_at)),
            "HOLD_EXPIRED",
            [
                ("hold_id", hold_id.to_string()),
                ("expires_at", rfc3339(*expires_at)),
            ],
        ),
        Decline::CaptureExceedsHold {
            hold_id,
            held,
            amount,
        } => with_info(
            Code::FailedPrecondition,
            format!(
                "hold {hold_id} holds {}, less than the {} to capture",
                held.get(),
                amount.get()
            ),
            "CAPTURE_EXCEEDS_HOLD",
            [
                ("hold_id", hold_id.to_string()),
                ("held", held.get().to_string()),
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

fn with_info_vec(
    code: Code,
    message: impl Into<String>,
    reason: &str,
    metadata: Vec<(&str, String)>,
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
            Error::PermissionDenied("Charge"),
            Error::EntryNotFound(1),
            Error::HoldNotFound(1),
            Error::KeyNotFound,
            Error::KeyExpired {
                method: None,
                first_used_at: Utc::now(),
            },
            Error::Overloaded { limit: 1 },
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
            Error::Conflict {
                attempts: 3,
                recorded: Recorded::Nothing,
            },
            Error::unavailable("x"),
            Error::Overloaded { limit: 1 },
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
