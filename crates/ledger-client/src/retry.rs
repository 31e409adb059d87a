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
