//! Which failures a retry may fix, and how long to wait before it.

use std::sync::Arc;
use std::time::Duration;

use tonic::{Code, Status};
use tonic_types::StatusExt as _;

use crate::error::Reason;

/// What one failed attempt means for the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A final answer: never retried.
    Final,
    /// Retry the same bytes; `failover`: on the next endpoint.
    Retry { failover: bool },
}

/// SPEC 3.6: `UNAVAILABLE`, `ABORTED`, `DEADLINE_EXCEEDED`, `CANCELLED` and
/// `RESOURCE_EXHAUSTED` / `TOO_MANY_CALLS` claim nothing and may be retried with
/// the same key; so may any failure made on this side (a status that carries
/// its cause): a failed connection, or an attempt that timed out before any
/// response ([`no_response`], or tonic's `CANCELLED` at a `grpc-timeout`).
///
/// The next attempt goes to the next endpoint when the failure was the
/// endpoint's: made on this side, `UNAVAILABLE`, `TOO_MANY_CALLS` (that
/// instance is full, another may not be), or a `CANCELLED` the server sent: a
/// gRPC server's own `grpc-timeout` answers that when its handler has not
/// answered by the deadline (tonic's does, at the moment this side's own wait
/// ends, so either may come first). A `DEADLINE_EXCEEDED` the server sent
/// stays: the endpoint is alive and answering, the call was slow there.
pub(crate) fn verdict(status: &Status) -> Verdict {
    let made_here = std::error::Error::source(status).is_some();
    match status.code() {
        Code::Unavailable | Code::Cancelled => Verdict::Retry { failover: true },
        _ if made_here => Verdict::Retry { failover: true },
        Code::ResourceExhausted if too_many_calls(status) => Verdict::Retry { failover: true },
        Code::Aborted | Code::DeadlineExceeded => Verdict::Retry { failover: false },
        _ => Verdict::Final,
    }
}

/// Whether a `RESOURCE_EXHAUSTED` is the instance refusing the call at its
/// door (SPEC 3.6), the one that claims nothing: `MESSAGE_TOO_LARGE` shares
/// the code and is final.
fn too_many_calls(status: &Status) -> bool {
    status
        .get_details_error_info()
        .is_some_and(|info| Reason::parse(&info.reason) == Reason::TooManyCalls)
}

/// Nothing came back from the endpoint within an attempt's time: not even
/// response headers. The cause of the status [`no_response`] makes, which marks
/// it as made on this side.
#[derive(Debug, thiserror::Error)]
#[error("no response within {0:?}")]
pub(crate) struct NoResponse(Duration);

/// `DEADLINE_EXCEEDED` for an attempt (or a stream's opening) that got no
/// response within `timeout`: the endpoint's failure, as a failed connection is,
/// so the next attempt goes elsewhere. An endpoint whose HTTP/2 connection is
/// alive (it answers pings) but whose calls are never answered ends here.
pub(crate) fn no_response(what: &str, timeout: Duration) -> Status {
    let mut status = Status::deadline_exceeded(format!("{what}: no response within {timeout:?}"));
    status.set_source(Arc::new(NoResponse(timeout)));
    status
}

/// Jittered exponential backoff.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// The first wait's upper bound.
    pub initial: Duration,
    /// No wait is longer (except where the server's `RetryInfo` asks for more).
    pub max: Duration,
    /// Each wait's bound is this many times the last one's.
    pub multiplier: f32,
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
        use backon::BackoffBuilder as _;
        // backon adds to each step a jitter below the step itself: steps of half
        // the bound make waits between half the bound and the bound.
        let jittered = backon::ExponentialBuilder::new()
            .with_min_delay(self.initial / 2)
            .with_max_delay(self.max / 2)
            .with_factor(self.multiplier)
            .with_jitter()
            .without_max_times()
            .build()
            .nth(usize::try_from(retry.min(30)).unwrap_or(30))
            .unwrap_or(self.max);
        let asked = status
            .get_details_retry_info()
            .and_then(|info| info.retry_delay)
            .unwrap_or_default();
        jittered.max(asked)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

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

    fn exhausted(reason: &str) -> Status {
        Status::with_error_details(
            Code::ResourceExhausted,
            "",
            ErrorDetails::with_error_info(reason, "ledger.v1", HashMap::new()),
        )
    }

    #[test]
    fn only_too_many_calls_of_the_exhausted_is_retried_and_elsewhere() {
        assert_eq!(
            verdict(&exhausted("TOO_MANY_CALLS")),
            Verdict::Retry { failover: true }
        );
        assert_eq!(verdict(&exhausted("MESSAGE_TOO_LARGE")), Verdict::Final);
        assert_eq!(
            verdict(&Status::resource_exhausted("no reason")),
            Verdict::Final
        );
    }

    #[test]
    fn a_timeout_with_no_response_fails_over_and_the_servers_deadline_does_not() {
        assert_eq!(
            verdict(&no_response("an attempt", Duration::from_secs(3))),
            Verdict::Retry { failover: true }
        );
        let at_grpc_timeout = Status::from_error(Box::new(tonic::TimeoutExpired(())));
        assert_eq!(at_grpc_timeout.code(), Code::Cancelled);
        assert_eq!(
            verdict(&at_grpc_timeout),
            Verdict::Retry { failover: true },
            "tonic's own wait for the response headers"
        );
        assert_eq!(
            verdict(&Status::cancelled("Timeout expired")),
            Verdict::Retry { failover: true },
            "a server's own grpc-timeout, sent when its handler has not answered"
        );
        assert_eq!(
            verdict(&Status::deadline_exceeded("the deadline passed")),
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
