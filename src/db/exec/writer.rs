//! One group-commit writer: takes its share's calls in batches (`group`) and
//! serves each batch, so that a batch that stalls holds up only its own accounts.
//!
//! A writer waits for its batch, so the calls that arrive meanwhile form the next
//! one, but only for [`Limits::batch_stall`](crate::db::Limits) (20 ms by
//! default: longer than a batch takes when nothing makes it wait, a few round trips
//! and a COMMIT's flush). A batch that takes longer waits on something: a key in
//! flight on another instance (up to the lock wait), a row lock, a connection, a
//! retry's backoff, a block of ids. The writer leaves it to finish in a task of
//! its own and goes on. Until it ends, every call that names one of its accounts,
//! entries or holds is held back, in arrival order, as is every later call
//! that names something a held call names: a hot account's calls still meet in
//! one batch, in order, and never race their own earlier batch. Everything else is
//! served at once.
//!
//! ```text
//! take: held-back calls, then the queue's, up to MAX_BATCH; a call naming what a
//!       stalled batch or an earlier held call names is held back
//! serve the batch; once batch_stall passes, it is stalled: it runs on alone
//! a stalled batch ends: the calls it held back are taken with the next batch
//! ```
//!
//! A held-back call still counts as waiting (`ledger_batch_waiting_calls`) and
//! keeps its place under the limit of concurrent calls, as a queued one does. A
//! writer lets at most [`MAX_STALLED`] batches run on at once; with that many it
//! waits for one to end, as a writer without the bound would.

use std::collections::{HashSet, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::FutureExt as _;
use tokio::sync::mpsc;

use super::group::{MAX_BATCH, Member, serve};
use crate::db::{Persistence, WeakPersistence};
use crate::telemetry::metrics;

/// Stalled batches one writer lets run at once. Each holds (or waits for) a
/// connection; past this many the share is stalled as a whole, and its writer
/// waits like one without the bound.
const MAX_STALLED: usize = 16;

/// Calls waiting for a writer that make it start their batch before its batch
/// in flight ends: below this, they are better off joining the next batch of a
/// writer that waits (one batch's statements and COMMIT serve them all); from it
/// on, the database has room for both. Measured (docs/performance.md, "One
/// writer"): 8 against 64 served hot-merchant 1.15x and posts 1.13x faster, and
/// unique charges alike.
const OVERLAP_BACKLOG: usize = 8;

/// A row a call names, which no later call of the same writer may overtake. Keys
/// need no holding back: a call whose key is queued or in a batch here never
/// queues (`Queue::push`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Name {
    Account(u64),
    Entry(u64),
    Hold(u64),
}

fn names(member: &Member) -> impl Iterator<Item = Name> {
    let needs = member.command.needs();
    let accounts = needs.accounts.into_iter().map(|a| Name::Account(a.get()));
    let entries = needs.entries.into_iter().map(|e| Name::Entry(e.get()));
    let holds = needs.holds.into_iter().map(|h| Name::Hold(h.get()));
    accounts.chain(entries).chain(holds)
}

/// A batch running on past the stall bound, in a task of its own.
struct Stalled {
    id: u64,
    names: HashSet<Name>,
}

pub(super) struct Writer {
    queue: mpsc::UnboundedReceiver<Member>,
    /// Calls queued or held back here (`Queue::waiting`).
    waiting: Arc<AtomicUsize>,
    /// Calls taken from the queue and not yet in a batch, in arrival order.
    held: VecDeque<Member>,
    stalled: Vec<Stalled>,
    /// Each stalled batch sends its id here when it ends.
    ended: mpsc::UnboundedSender<u64>,
    ends: mpsc::UnboundedReceiver<u64>,
    next_id: u64,
    stall: Duration,
    /// The queue was dropped: the writer stops once it has nothing held back.
    closed: bool,
}

impl Writer {
    pub(super) fn new(
        queue: mpsc::UnboundedReceiver<Member>,
        waiting: Arc<AtomicUsize>,
        stall: Duration,
    ) -> Self {
        let (ended, ends) = mpsc::unbounded_channel();
        Self {
            queue,
            waiting,
            held: VecDeque::new(),
            stalled: Vec::new(),
            ended,
            ends,
            next_id: 0,
            stall,
            closed: false,
        }
    }

    pub(super) async fn run(mut self, db: WeakPersistence) {
        loop {
            while let Ok(id) = self.ends.try_recv() {
                self.end(id);
            }
            if self.stalled.len() >= MAX_STALLED {
                if let Some(id) = self.ends.recv().await {
                    self.end(id);
                }
                continue;
            }
            let batch = self.take();
            if batch.is_empty() {
                if !self.wait().await {
                    return;
                }
                continue;
            }
            self.waiting.fetch_sub(batch.len(), Ordering::SeqCst);
            metrics::batch_waiting(-isize::try_from(batch.len()).unwrap_or(isize::MAX));
            let Some(db) = db.upgrade() else { return };
            self.serve(db, batch).await;
        }
    }

    /// The next batch: the held-back calls and then the queue's, in arrival
    /// order, up to [`MAX_BATCH`], but for those that name what a stalled batch
    /// or an earlier held-back call names, which stay held back.
    fn take(&mut self) -> Vec<Member> {
        let mut blocked: HashSet<Name> = self
            .stalled
            .iter()
            .flat_map(|s| s.names.iter().copied())
            .collect();
        let mut batch = Vec::new();
        let mut held = VecDeque::new();
        let mut arrivals = std::mem::take(&mut self.held);
        loop {
            let member = match arrivals.pop_front() {
                Some(member) => member,
                None if batch.len() >= MAX_BATCH => break,
                None => match self.queue.try_recv() {
                    Ok(member) => member,
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => {
                        self.closed = true;
                        break;
                    }
                },
            };
            if batch.len() >= MAX_BATCH {
                held.push_back(member);
            } else if blocked.is_empty() {
                batch.push(member);
            } else {
                let named: Vec<Name> = names(&member).collect();
                if named.iter().any(|n| blocked.contains(n)) {
                    blocked.extend(named);
                    held.push_back(member);
                } else {
                    batch.push(member);
                }
            }
        }
        self.held = held;
        batch
    }

    /// Waits for a call or for a stalled batch to end; false once the queue is
    /// closed and no call is held back for a batch still running.
    async fn wait(&mut self) -> bool {
        if self.closed {
            if self.held.is_empty() || self.stalled.is_empty() {
                return false;
            }
            if let Some(id) = self.ends.recv().await {
                self.end(id);
            }
            return true;
        }
        tokio::select! {
            member = self.queue.recv() => match member {
                Some(member) => self.held.push_back(member),
                None => self.closed = true,
            },
            Some(id) = self.ends.recv() => self.end(id),
        }
        true
    }

    fn end(&mut self, id: u64) {
        self.stalled.retain(|s| s.id != id);
    }

    /// Serves a batch, in this task while it takes at most the stall bound (a
    /// lone call crosses no more tasks than without group commit), then in one of
    /// its own; in one of its own at once when [`OVERLAP_BACKLOG`] calls already
    /// wait, so a backlog is served by several batches at a time. Tracked either way, so shutdown waits for it to commit or roll
    /// back. A panic is caught, so the writer goes on (its members are answered as
    /// dropped).
    async fn serve(&mut self, db: Persistence, batch: Vec<Member>) {
        let named: HashSet<Name> = batch.iter().flat_map(names).collect();
        let tasks = db.inner.tasks.clone();
        let mut served = Box::pin(tasks.track_future(async move {
            if AssertUnwindSafe(serve(&db, batch))
                .catch_unwind()
                .await
                .is_err()
            {
                tracing::error!("a batch panicked; its calls were dropped");
            }
        }));
        // Enough calls wait for a batch of their own: this one runs on alone
        // at once, as a stalled one does, and the next starts beside it.
        let backlogged = self.waiting.load(Ordering::SeqCst) >= OVERLAP_BACKLOG;
        if !backlogged {
            tokio::select! {
                () = &mut served => return,
                () = tokio::time::sleep(self.stall) => metrics::batch_stalled(),
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        self.stalled.push(Stalled { id, names: named });
        let ended = self.ended.clone();
        tasks.spawn(async move {
            served.await;
            let _ = ended.send(id);
        });
    }
}
