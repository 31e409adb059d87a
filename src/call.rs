//! A call's lifetime as its database work sees it: the caller's deadline, and
//! whether the caller still waits for the answer.
//!
//! The database work of a call runs in its own task (so a disconnecting client never
//! leaves a half-finished transaction on a pooled connection), while the RPC handler
//! waits for it. The two agree on who decides the outcome through one atomic state:
//! the task may only COMMIT after moving `Running -> Committing`, and the handler may
//! only answer early (deadline passed, caller gone) after moving `Running ->
//! Abandoned`. Whoever moves first wins, so a caller told DEADLINE_EXCEEDED can rely
//! on the transaction having rolled back, and a transaction that commits always has
//! its answer delivered to a caller that is still there.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::Error;

const RUNNING: u8 = 0;
const COMMITTING: u8 = 1;
const ABANDONED: u8 = 2;

#[derive(Debug, Clone)]
pub struct Call {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// When the caller stops waiting; `None` when it sent no deadline.
    deadline: Option<Instant>,
    state: AtomicU8,
    /// Fired when the call is abandoned, to wake anything waiting on the caller.
    abandoned: CancellationToken,
}

impl Call {
    pub fn new(deadline: Option<Instant>) -> Self {
        Self {
            inner: Arc::new(Inner {
                deadline,
                state: AtomicU8::new(RUNNING),
                abandoned: CancellationToken::new(),
            }),
        }
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

    /// Fails once the caller is gone or its deadline has passed.
    pub fn ensure_live(&self) -> Result<(), Error> {
        if self.inner.state.load(Ordering::Acquire) == ABANDONED {
            return Err(Error::Cancelled);
        }
        if self.deadline().is_some_and(|d| Instant::now() >= d) {
            return Err(Error::DeadlineExceeded);
        }
        Ok(())
    }

    /// Claims the right to COMMIT. Fails, and the caller must roll back, when the
    /// call was abandoned or its deadline passed.
    pub fn begin_commit(&self) -> Result<(), Error> {
        self.ensure_live()?;
        self.inner
            .state
            .compare_exchange(RUNNING, COMMITTING, Ordering::AcqRel, Ordering::Acquire)
            .map(drop)
            .map_err(|_| Error::Cancelled)
    }

    /// Ends a COMMIT that failed and will be retried.
    pub fn end_commit(&self) {
        let _ = self.inner.state.compare_exchange(
            COMMITTING,
            RUNNING,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// Gives up on the call. Returns false when a COMMIT is already under way: its
    /// result must then be awaited and delivered.
    pub fn abandon(&self) -> bool {
        let won = self
            .inner
            .state
            .compare_exchange(RUNNING, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if won {
            self.inner.abandoned.cancel();
        }
        won
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

    /// The session's `innodb_lock_wait_timeout` for this call, in whole seconds: the
    /// configured bound, lowered to the remaining deadline rounded up, at least 1
    /// (the server's unit is the second).
    pub fn lock_wait_secs(&self, bound: Duration) -> u64 {
        let bound = bound.as_secs().max(1);
        match self.remaining() {
            Some(left) => bound.min(ceil_secs(left)).max(1),
            None => bound,
        }
    }
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

    #[tokio::test]
    async fn abandoning_first_forbids_the_commit() {
        let call = Call::unbounded();
        assert!(call.abandon());
        assert!(matches!(call.begin_commit(), Err(Error::Cancelled)));
    }

    #[tokio::test]
    async fn committing_first_forbids_abandoning() {
        let call = Call::unbounded();
        assert!(call.begin_commit().is_ok());
        assert!(!call.abandon());
        call.end_commit();
        assert!(call.abandon());
    }

    #[tokio::test]
    async fn a_passed_deadline_forbids_the_commit() {
        let call = Call::new(Some(Instant::now()));
        assert!(matches!(call.begin_commit(), Err(Error::DeadlineExceeded)));
    }
}
