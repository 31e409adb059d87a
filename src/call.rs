//! A call's lifetime as its database work sees it: the caller's deadline, and
//! whether the caller still waits for the answer.
//!
//! The database work of a call runs in its own task (so a disconnecting client never
//! leaves a half-finished transaction on a pooled connection), while the RPC handler
//! waits for it. The two agree on what the answer may promise through one atomic
//! state (SPEC 3.6):
//!
//! - `Running`: no COMMIT of this call can have taken effect. The handler may give
//!   up (`Running -> Abandoned`); the task may then no longer commit. It says that
//!   nothing was recorded only if this call's own probe found the key free
//!   (`claimed`): before that, an earlier call under the key (the one this call
//!   retries) may have committed, and the answer says the outcome is not known.
//! - `Committing`: a COMMIT is in flight. The handler waits for it (up to the
//!   caller's own deadline).
//! - `Uncertain`: a COMMIT was sent and its answer lost. The task settles it through
//!   the probe: the key's row says whether it committed (a replay) or not (back to
//!   `Running`, and the work is done again). A handler that gives up now
//!   (`Uncertain -> AbandonedUncertain`) says the outcome is not known.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Recorded};

const RUNNING: u8 = 0;
const COMMITTING: u8 = 1;
const UNCERTAIN: u8 = 2;
const ABANDONED: u8 = 3;
const ABANDONED_UNCERTAIN: u8 = 4;

/// What giving up on a call may tell the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abandoned {
    /// Nothing was recorded, and now nothing will be.
    Nothing,
    /// A COMMIT was sent and its answer lost: the outcome is not known.
    Unknown,
    /// A COMMIT is in flight: wait for its answer.
    CommitInFlight,
}

#[derive(Debug, Clone)]
pub struct Call {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// When the service stops waiting; `None` when the caller sent no deadline.
    deadline: Option<Instant>,
    /// When the caller itself stops waiting (a little after `deadline`).
    caller_deadline: Option<Instant>,
    state: AtomicU8,
    /// This call's probe found the key free: no call under the key had committed,
    /// so what this call did not commit, nobody did.
    claimed: AtomicBool,
    /// Fired when the call is abandoned, to wake anything waiting on the caller.
    abandoned: CancellationToken,
    /// The call's place under the server's limit of concurrent calls, held for as
    /// long as any part of the call lives: a handler that gave up leaves its work
    /// queued for a writer, which counts until it is dropped.
    place: OnceLock<Box<dyn std::any::Any + Send + Sync>>,
}

impl Call {
    pub fn new(deadline: Option<Instant>) -> Self {
        Self::with_caller_deadline(deadline, deadline)
    }

    /// A call the service gives up on at `deadline`, whose caller waits until
    /// `caller_deadline`.
    pub fn with_caller_deadline(
        deadline: Option<Instant>,
        caller_deadline: Option<Instant>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                deadline,
                caller_deadline,
                state: AtomicU8::new(RUNNING),
                claimed: AtomicBool::new(false),
                abandoned: CancellationToken::new(),
                place: OnceLock::new(),
            }),
        }
    }

    /// Keeps `place` (what the call was admitted with: permits to give back)
    /// until the call's handler, its work and its reply have all ended.
    pub fn hold_place(&self, place: impl std::any::Any + Send + Sync) {
        // A call is admitted once; a second place would go back at once.
        let _ = self.inner.place.set(Box::new(place));
    }

    /// Whether the call was admitted (holds a place).
    pub fn has_place(&self) -> bool {
        self.inner.place.get().is_some()
    }

    /// A call without a deadline, for work that is not driven by a caller.
    pub fn unbounded() -> Self {
        Self::new(None)
    }

    pub fn deadline(&self) -> Option<Instant> {
        self.inner.deadline
    }

    /// Time left before the deadline; `None` without a deadline.
    pub fn remaining(&self) -> Option<Duration> {
        self.inner
            .deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    fn state(&self) -> u8 {
        self.inner.state.load(Ordering::Acquire)
    }

    fn moved(&self, from: u8, to: u8) -> bool {
        self.inner
            .state
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// What is known of what committed under the call's key (SPEC 3.6): nothing,
    /// only once this call's own probe found the key free and no COMMIT of its
    /// since may have taken effect.
    pub fn recorded(&self) -> Recorded {
        match self.state() {
            RUNNING | ABANDONED if self.inner.claimed.load(Ordering::Acquire) => Recorded::Nothing,
            _ => Recorded::Unknown,
        }
    }

    /// Fails once the caller is gone or its deadline has passed.
    pub fn ensure_live(&self) -> Result<(), Error> {
        if matches!(self.state(), ABANDONED | ABANDONED_UNCERTAIN) {
            return Err(Error::Cancelled);
        }
        if self.deadline().is_some_and(|d| Instant::now() >= d) {
            return Err(Error::DeadlineExceeded {
                recorded: self.recorded(),
            });
        }
        Ok(())
    }

    /// Claims the right to COMMIT. Fails, and the caller must roll back, when the
    /// call was abandoned or its deadline passed.
    pub fn begin_commit(&self) -> Result<(), Error> {
        self.ensure_live()?;
        if self.moved(RUNNING, COMMITTING) {
            Ok(())
        } else {
            Err(Error::Cancelled)
        }
    }

    /// The COMMIT failed and nothing committed; the work may be retried.
    pub fn end_commit(&self) {
        self.moved(COMMITTING, RUNNING);
    }

    /// The COMMIT's answer was lost: whether it committed is not known.
    pub fn commit_unknown(&self) {
        self.moved(COMMITTING, UNCERTAIN);
    }

    /// This call's probe found the key free: nothing had committed under it,
    /// whatever an earlier attempt's lost COMMIT did.
    pub fn settled_nothing(&self) {
        self.inner.claimed.store(true, Ordering::Release);
        self.moved(UNCERTAIN, RUNNING);
    }

    /// Gives up on the call, saying what the answer may promise.
    pub fn abandon(&self) -> Abandoned {
        let claimed = self.inner.claimed.load(Ordering::Acquire);
        let outcome = if self.moved(RUNNING, ABANDONED) {
            if claimed {
                Abandoned::Nothing
            } else {
                Abandoned::Unknown
            }
        } else if self.moved(UNCERTAIN, ABANDONED_UNCERTAIN) {
            Abandoned::Unknown
        } else {
            match self.state() {
                ABANDONED if claimed => Abandoned::Nothing,
                ABANDONED | ABANDONED_UNCERTAIN => Abandoned::Unknown,
                _ => Abandoned::CommitInFlight,
            }
        };
        if outcome != Abandoned::CommitInFlight {
            self.inner.abandoned.cancel();
        }
        outcome
    }

    /// Completes when the call is abandoned.
    pub async fn abandoned(&self) {
        self.inner.abandoned.cancelled().await;
    }

    /// Completes when the deadline passes; never without a deadline.
    pub async fn expired(&self) {
        match self.inner.deadline {
            Some(deadline) => tokio::time::sleep_until(deadline).await,
            None => std::future::pending().await,
        }
    }

    /// When the caller itself stops waiting; never without a deadline.
    pub fn caller_deadline(&self) -> Option<Instant> {
        self.inner.caller_deadline
    }

    /// The session's `innodb_lock_wait_timeout` for this call, in whole seconds: the
    /// configured bound, lowered to the remaining deadline rounded up, at least 1
    /// (the server's unit is the second).
    pub fn lock_wait_secs(&self, bound: Duration) -> u64 {
        let bound = whole_secs(bound);
        match self.remaining() {
            Some(left) => bound.min(ceil_secs(left)).max(1),
            None => bound,
        }
    }
}

/// A lock-wait bound in the server's unit: whole seconds, at least 1.
pub fn whole_secs(bound: Duration) -> u64 {
    bound.as_secs().max(1)
}

fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lock_wait_is_lowered_to_the_deadline_rounded_up() {
        let bound = Duration::from_secs(5);
        assert_eq!(Call::unbounded().lock_wait_secs(bound), 5);
        let soon = Call::new(Some(Instant::now() + Duration::from_millis(1500)));
        assert_eq!(soon.lock_wait_secs(bound), 2);
        let later = Call::new(Some(Instant::now() + Duration::from_secs(60)));
        assert_eq!(later.lock_wait_secs(bound), 5);
        let past = Call::new(Some(Instant::now()));
        assert_eq!(past.lock_wait_secs(bound), 1);
    }

    /// A call whose probe claimed its key.
    fn claimed() -> Call {
        let call = Call::unbounded();
        call.settled_nothing();
        call
    }

    #[tokio::test]
    async fn abandoning_first_forbids_the_commit() {
        let call = claimed();
        assert_eq!(call.abandon(), Abandoned::Nothing);
        assert!(matches!(call.begin_commit(), Err(Error::Cancelled)));
    }

    /// Before its probe found the key free, an earlier call under the key may
    /// have committed: nothing is promised.
    #[tokio::test]
    async fn a_call_that_never_claimed_its_key_promises_nothing() {
        let call = Call::unbounded();
        assert_eq!(call.recorded(), Recorded::Unknown);
        assert_eq!(call.abandon(), Abandoned::Unknown);
        assert!(matches!(call.begin_commit(), Err(Error::Cancelled)));
        assert_eq!(claimed().recorded(), Recorded::Nothing);
    }

    #[tokio::test]
    async fn committing_first_forbids_abandoning() {
        let call = claimed();
        assert!(call.begin_commit().is_ok());
        assert_eq!(call.abandon(), Abandoned::CommitInFlight);
        call.end_commit();
        assert_eq!(call.abandon(), Abandoned::Nothing);
    }

    #[tokio::test]
    async fn a_lost_commit_is_never_reported_as_nothing_recorded() {
        let call = Call::unbounded();
        assert!(call.begin_commit().is_ok());
        call.commit_unknown();
        assert_eq!(call.recorded(), Recorded::Unknown);
        assert_eq!(call.abandon(), Abandoned::Unknown);
        assert!(matches!(call.begin_commit(), Err(Error::Cancelled)));
        assert_eq!(call.recorded(), Recorded::Unknown);
    }

    #[tokio::test]
    async fn a_key_found_free_settles_a_lost_commit() {
        let call = Call::unbounded();
        assert!(call.begin_commit().is_ok());
        call.commit_unknown();
        call.settled_nothing();
        assert_eq!(call.recorded(), Recorded::Nothing);
        assert!(call.begin_commit().is_ok());
    }

    #[tokio::test]
    async fn a_passed_deadline_forbids_the_commit() {
        let call = Call::new(Some(Instant::now()));
        assert!(matches!(
            call.begin_commit(),
            Err(Error::DeadlineExceeded { .. })
        ));
    }
}
