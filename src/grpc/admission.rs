//! The admission of calls, at both front doors (the gRPC service, through
//! [`super::weigh`], and the console): who may call what, how many calls are
//! served at once, and each call's share of the memory budget.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::auth::Client;
use crate::call::Call;
use crate::error::Error;
use crate::telemetry::metrics;

/// What a read weighs, whatever its request: a page of up to 1,000 entries as
/// rows, as messages and as the encoded reply.
pub(super) const READ_BYTES: usize = 512 * 1024;

/// Who may call what, and how many calls are served at once: past the limit of
/// calls, new calls are refused at once (RESOURCE_EXHAUSTED / TOO_MANY_CALLS)
/// rather than queued without end; within it, each call takes a share of the
/// memory budget by its weight ([`super::weigh`]), waiting for it in order of
/// arrival within its deadline.
#[derive(Debug, Clone)]
pub struct Admission {
    calls: Arc<Semaphore>,
    limit: usize,
    /// The budget, in KiB.
    memory: Arc<Semaphore>,
    budget_kib: u32,
    /// The longest wait for a share of the budget, for a call without a deadline.
    wait: Duration,
    /// Calls waiting for their share now.
    waiting: Arc<AtomicUsize>,
}

/// A call counted under the limit of calls, before its share of the budget.
#[derive(Debug)]
pub struct Counted(OwnedSemaphorePermit);

/// A call's place: one of the calls served at once, and its share of the
/// memory budget, both given back when it is dropped.
#[derive(Debug)]
struct Place {
    _call: OwnedSemaphorePermit,
    _memory: OwnedSemaphorePermit,
}

impl Admission {
    /// At most `max_calls` calls are served at once, holding at most `budget`
    /// bytes between them by their weights; a call waits at most `wait` for its
    /// share when it has no deadline.
    pub fn new(max_calls: usize, budget: usize, wait: Duration) -> Self {
        let budget_kib = u32::try_from(budget.div_ceil(1024)).unwrap_or(u32::MAX);
        Self {
            calls: Arc::new(Semaphore::new(max_calls)),
            limit: max_calls,
            memory: Arc::new(Semaphore::new(budget_kib as usize)),
            budget_kib,
            wait,
            waiting: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Takes a place for `call`, weighed at `weight` bytes: [`Self::count`],
    /// then [`Self::weigh`].
    pub async fn take_place(&self, weight: usize, call: &Call) -> Result<(), Error> {
        let counted = self.count()?;
        self.weigh(counted, weight, call, self.until(call)).await
    }

    /// How long `call` may wait to be admitted: until its deadline, or for the
    /// admission's wait from now.
    pub fn until(&self, call: &Call) -> Instant {
        call.deadline()
            .unwrap_or_else(|| Instant::now() + self.wait)
    }

    /// How many calls wait for their share of the budget now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Counts a call under the limit of calls, or refuses it at once.
    pub fn count(&self) -> Result<Counted, Error> {
        let one = self
            .calls
            .clone()
            .try_acquire_owned()
            .map_err(|_| Error::Overloaded {
                limit: self.limit,
                what: "calls",
            })?;
        Ok(Counted(one))
    }

    /// Gives a counted call its share of the budget, `weight` bytes (at most the
    /// whole budget), waited for until `until` ([`Self::until`]); `call` then
    /// holds both.
    pub async fn weigh(
        &self,
        counted: Counted,
        weight: usize,
        call: &Call,
        until: Instant,
    ) -> Result<(), Error> {
        let kib = u32::try_from(weight.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .clamp(1, self.budget_kib);
        let memory = if let Ok(memory) = self.memory.clone().try_acquire_many_owned(kib) {
            memory
        } else {
            let _waiting = Waiting::begin(&self.waiting);
            let share = self.memory.clone().acquire_many_owned(kib);
            // The semaphore is never closed: only the deadline refuses.
            let Ok(Ok(memory)) = tokio::time::timeout_at(until, share).await else {
                return Err(Error::Overloaded {
                    limit: self.budget_kib as usize,
                    what: "KiB of calls in flight",
                });
            };
            memory
        };
        call.hold_place(Place {
            _call: counted.0,
            _memory: memory,
        });
        Ok(())
    }

    /// Admits `call`: `client` is granted every one of `methods` (a console page
    /// that shows what several RPCs answer needs each of them), and the call has
    /// its place, taken here as a read's unless it was taken when its request
    /// arrived.
    pub async fn admit(
        &self,
        client: &Client,
        methods: &[&'static str],
        call: &Call,
    ) -> Result<(), Error> {
        if let Some(refused) = methods.iter().find(|m| !client.may_call(m)) {
            return Err(Error::PermissionDenied(refused));
        }
        if !call.has_place() {
            self.take_place(READ_BYTES, call).await?;
        }
        Ok(())
    }
}

/// A call waiting for its share, counted until it has it or gives up.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn begin(waiting: &'a AtomicUsize) -> Self {
        waiting.fetch_add(1, Ordering::Relaxed);
        metrics::call_memory_wait_began();
        Self(waiting)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
        metrics::call_memory_wait_ended();
    }
}
