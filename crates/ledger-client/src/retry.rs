//! Which failures a retry may fix, and how long to wait before it.

use std::time::Duration;

use tonic::{Code, Status};
use tonic_types::StatusExt as _;

/// What one failed attempt means for the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A final answer: never retried.
    Final,
    /// Retry the same bytes; `failover`: on the next endpoint.
    Retry { failover: bool },
}

/// SPEC 3.6: `UNAVAILABLE`, `ABORTED`, `DEADLINE_EXCEEDED` and `CANCELLED` claim
/// nothing and may be retried with the same key; so may any failure of the
/// connection (a status made on this side, which carries its cause). A
/// connection failure or `UNAVAILABLE` moves the next attempt to the next
/// endpoint.
pub(crate) fn verdict(status: &Status) -> Verdict {
    let transport = std::error::Error::source(status).is_some();
    match status.code() {
        Code::Unavailable => Verdict::Retry { failover: true },
        _ if transport => Verdict::Retry { failover: true },
        Code::Aborted | Code::DeadlineExceeded | Code::Cancelled => {
            Verdict::Retry { failover: false }
        }
        _ => Verdict::Final,
    }
}

/// Jittered exponential backoff.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// The first wait's upper bound.
    pub initial: Duration,
    /// No wait is longer (except where the server's `RetryInfo` asks for more).
    pub max: Duration,
    /// Each wait's bound is this many times the last one's.
    pub multiplier: f64,
}

impl Default for Backoff {
    /// 50 ms, doubling, at most 2 s: a lock-wait conflict clears in tens of
    /// milliseconds, a failover in a second or two.
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(50),
            max: Duration::from_secs(2),
            multiplier: 2.0,
        }
    }
}

impl Backoff {
    /// The wait before retry number `retry` (0 for the first): uniform between
    /// half the bound and the bound, so callers that failed together spread out;
    /// never shorter than the `RetryInfo` delay the server sent.
    pub(crate) fn wait(&self, retry: u32, status: &Status) -> Duration {
        let exponent = i32::try_from(retry.min(30)).unwrap_or(30);
        let bound = self
            .initial
            .mul_f64(self.multiplier.powi(exponent))
            .min(self.max);
        let jittered = bound.mul_f64(rand::random_range(0.5..=1.0));
        let asked = status
            .get_details_retry_info()
            .and_then(|info| info.retry_delay)
            .unwrap_or_default();
        jittered.max(asked)
    }
}

#[cfg(test)]
mod tests {
    use tonic_types::{ErrorDetails, StatusExt as _};

    use super::*;

    #[test]
    fn only_the_codes_that_claim_nothing_are_retried() {
        for code in [
            Code::Unavailable,
            Code::Aborted,
            Code::DeadlineExceeded,
            Code::Cancelled,
        ] {
            assert_ne!(verdict(&Status::new(code, "")), Verdict::Final, "{code:?}");
        }
        for code in [
            Code::InvalidArgument,
            Code::FailedPrecondition,
            Code::NotFound,
            Code::PermissionDenied,
            Code::Unauthenticated,
            Code::Internal,
            Code::Unknown,
        ] {
            assert_eq!(verdict(&Status::new(code, "")), Verdict::Final, "{code:?}");
        }
        assert_eq!(
            verdict(&Status::unavailable("")),
            Verdict::Retry { failover: true }
        );
        assert_eq!(
            verdict(&Status::aborted("")),
            Verdict::Retry { failover: false }
        );
    }

    #[test]
    fn a_failed_connection_is_retried_elsewhere_whatever_its_code() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        let status = Status::from_error(Box::new(io));
        assert_eq!(verdict(&status), Verdict::Retry { failover: true });
    }

    #[test]
    fn waits_grow_within_their_bounds_and_honour_retry_info() {
        let backoff = Backoff::default();
        let plain = Status::aborted("busy");
        for retry in 0..10 {
            let bound = backoff
                .initial
                .mul_f64(2_f64.powi(i32::try_from(retry).unwrap()))
                .min(backoff.max);
            let wait = backoff.wait(retry, &plain);
            assert!(wait >= bound / 2 && wait <= bound, "{retry}: {wait:?}");
        }
        let asked = Status::with_error_details(
            Code::Aborted,
            "busy",
            ErrorDetails::with_retry_info(Some(Duration::from_secs(5))),
        );
        assert!(backoff.wait(0, &asked) >= Duration::from_secs(5));
    }
}
