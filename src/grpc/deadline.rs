//! The caller's deadline, from the `grpc-timeout` request header, and what a call
//! answers when it passes.
//!
//! tonic itself answers CANCELLED the instant a `grpc-timeout` expires, and the
//! caller's own timer fires then too, so the service aims its own deadline a little
//! earlier and answers DEADLINE_EXCEEDED, the code the contract promises, first.

use std::time::Duration;

use tokio::time::Instant;

use crate::call::{Abandoned, Call};
use crate::error::{Error, Recorded};

/// How much earlier than the caller's deadline the service gives up, to answer
/// before the caller's (and tonic's) own timer fires: a twentieth of the timeout,
/// within these bounds. The request may have queued before its handler ran.
const MIN_ANSWER_MARGIN: Duration = Duration::from_millis(10);
const MAX_ANSWER_MARGIN: Duration = Duration::from_millis(250);

/// How long before the caller's deadline a COMMIT still in flight stops being
/// waited for: the answer (its outcome, or "not known") must reach the caller
/// before its own timer, and tonic's, fire.
const LAST_ANSWER: Duration = Duration::from_millis(5);

/// gRPC allows at most 8 digits of timeout value.
const MAX_DIGITS: usize = 8;

/// The call a request belongs to: the one its place was taken for when it
/// arrived ([`super::weigh`]), or else one whose deadline counts from now.
pub(super) fn call_for<T>(request: &tonic::Request<T>) -> Call {
    if let Some(call) = request.extensions().get::<Call>() {
        return call.clone();
    }
    call_at_arrival(request.metadata().as_ref())
}

/// A call whose deadline counts from now, by its `grpc-timeout` header.
pub(super) fn call_at_arrival(headers: &http::HeaderMap) -> Call {
    let timeout = headers
        .get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_grpc_timeout);
    let now = Instant::now();
    Call::with_caller_deadline(
        timeout.map(|t| now + t.saturating_sub(answer_margin(t))),
        timeout.map(|t| now + t.saturating_sub(LAST_ANSWER)),
    )
}

fn answer_margin(timeout: Duration) -> Duration {
    (timeout / 20).clamp(MIN_ANSWER_MARGIN, MAX_ANSWER_MARGIN)
}

/// Parses `TimeoutValue TimeoutUnit` as the gRPC HTTP/2 protocol defines it.
fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    let split = value.len().checked_sub(1)?;
    let (digits, unit) = (value.get(..split)?, value.get(split..)?);
    if digits.is_empty() || digits.len() > MAX_DIGITS {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Waits for the call's work, or answers DEADLINE_EXCEEDED when the deadline comes
/// first: saying nothing was recorded when no COMMIT can have taken effect, and
/// that the outcome is not known when one was sent and its answer lost (SPEC 3.6).
/// A COMMIT in flight is waited for until the caller's own deadline. If this
/// future is dropped (the caller went away), the call is abandoned, so the work
/// rolls back instead of committing.
pub(super) async fn answer<T>(
    call: &Call,
    work: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    struct AbandonOnDrop<'a>(&'a Call);
    impl Drop for AbandonOnDrop<'_> {
        fn drop(&mut self) {
            self.0.abandon();
        }
    }
    let _guard = AbandonOnDrop(call);
    let mut work = std::pin::pin!(work);
    tokio::select! {
        done = &mut work => done,
        () = call.expired() => match call.abandon() {
            Abandoned::Nothing => Err(Error::DeadlineExceeded { recorded: Recorded::Nothing }),
            Abandoned::Unknown => Err(Error::DeadlineExceeded { recorded: Recorded::Unknown }),
            Abandoned::CommitInFlight => {
                let until = call.caller_deadline().unwrap_or_else(Instant::now);
                tokio::time::timeout_at(until, work).await.unwrap_or(Err(
                    Error::DeadlineExceeded { recorded: Recorded::Unknown },
                ))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_unit() {
        assert_eq!(parse_grpc_timeout("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_grpc_timeout("3M"), Some(Duration::from_secs(180)));
        assert_eq!(parse_grpc_timeout("1S"), Some(Duration::from_secs(1)));
        assert_eq!(parse_grpc_timeout("250m"), Some(Duration::from_millis(250)));
        assert_eq!(
            parse_grpc_timeout("99999999u"),
            Some(Duration::from_micros(99_999_999))
        );
        assert_eq!(parse_grpc_timeout("7n"), Some(Duration::from_nanos(7)));
    }

    /// The service gives up a margin before the caller's deadline, but a COMMIT
    /// in flight is waited for until just before it.
    #[tokio::test(start_paused = true)]
    async fn a_commit_in_flight_is_waited_for_past_the_answer_margin() {
        let mut request = tonic::Request::new(());
        request.set_timeout(Duration::from_secs(1));
        let call = call_for(&request);
        let (deadline, caller) = (call.deadline().unwrap(), call.caller_deadline().unwrap());
        let now = Instant::now();
        assert_eq!(deadline, now + Duration::from_millis(950));
        assert_eq!(caller, now + Duration::from_millis(995));
    }

    #[test]
    fn rejects_malformed_values() {
        for bad in ["", "S", "10", "123456789S", "1x", "-1S", "1.5S", "é"] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad:?}");
        }
    }

    /// A call whose COMMIT is in flight from the start, and work that has it
    /// answered after `done`.
    fn committing(done: Duration) -> (Call, impl Future<Output = Result<&'static str, Error>>) {
        let now = Instant::now();
        let call = Call::with_caller_deadline(
            Some(now + Duration::from_millis(50)),
            Some(now + Duration::from_millis(100)),
        );
        call.settled_nothing();
        assert!(call.begin_commit().is_ok());
        (call, async move {
            tokio::time::sleep(done).await;
            Ok("committed")
        })
    }

    /// A COMMIT still in flight when the service's deadline passes is waited for
    /// until the caller's own deadline: answered with its outcome when it comes
    /// back in time, else as not known.
    #[tokio::test(start_paused = true)]
    async fn a_commit_in_flight_at_the_deadline_is_waited_for() {
        let (call, work) = committing(Duration::from_millis(80));
        let done = answer(&call, work).await;
        assert!(matches!(done, Ok("committed")), "{done:?}");

        let (call, work) = committing(Duration::from_millis(150));
        let late = answer(&call, work).await;
        assert!(
            matches!(
                late,
                Err(Error::DeadlineExceeded {
                    recorded: Recorded::Unknown
                })
            ),
            "{late:?}"
        );
    }
}
