//! The group-commit writers: the queues keyed calls wait in, which writer serves
//! a call, and each writer's loop, which takes its calls in batches (`group`
//! serves a batch) so that a batch that stalls holds up only the calls that
//! touch its accounts.
//!
//! Each writer serves a share of the accounts: a call goes to the writer of the
//! lowest account it touches, those it names and those of the entries and holds
//! it names, found before it is queued (`locate`). So every call on an account
//! that touches no lower one meets in one queue, in arrival order, and shares its
//! writer's COMMITs, refunds, captures and voids included. A call whose entry or
//! hold was not found goes by that id; one that touches no account, by its key.
//!
//! A writer waits for its batch, so the calls that arrive meanwhile form the next
//! one, but only for [`Limits::batch_stall`](crate::db::Limits) (20 ms by
//! default: longer than a batch takes when nothing makes it wait, a few round
//! trips and a COMMIT's flush). A batch that takes longer waits on something: a
//! key in flight on another instance (up to the lock wait), a row lock, a
//! connection, a retry's backoff, a block of ids. The writer leaves it to finish
//! in a task of its own and goes on. The bound counts from the batch's start but
//! is armed only once a call waits for any writer ([`Arrivals`]): a batch that
//! nothing waits behind holds nothing up, and a lone call then costs no timer,
//! whose registration wakes a sleeping worker thread to re-arm its clock. Until
//! the batch ends, every call that touches one of its accounts, or names one of
//! its entries or holds, is held back, in arrival order, as is every later call
//! of the same writer that names something a held call names: a hot account's
//! calls still meet in one batch, in order, and never race their own earlier
//! batch. Everything else is served at once.
//!
//! A call can touch the accounts of two writers (a transfer from Y into A goes to
//! Y's writer when Y < A), and no routing can put every call on A in one writer
//! and every call on Y in one writer too. So the writers of an instance share one
//! register of their stalled batches ([`Stalls`]): a call is held back by a stall
//! on any account it touches, in whichever writer it queues, and when any
//! stalled batch ends, every writer holding calls back looks at them again.
//! Calls on one account in two writers are ordered by their row locks alone, as
//! calls of two instances are.
//!
//! ```text
//! take: held-back calls, then the queue's, up to MAX_BATCH; a call touching what
//!       a stalled batch of any writer, or an earlier held call, names is held back
//! serve the batch; once batch_stall passes, it is stalled: registered, and left
//!       to run on alone
//! a stalled batch ends: the calls it held back, in every writer, are taken with
//!       their writer's next batch
//! ```
//!
//! A call that names another call's key (a reversal's original) is never
//! decided in the batch that decides that key: there it would find the key
//! claimed by its own transaction, neither committed nor absent. Of two such
//! calls taken together, the later is held back until the batch ends. While
//! the original is queued or in a batch here, the reversal also takes on the
//! original's accounts (`group::Keys`), which it cannot find otherwise (an
//! original in flight has no entries yet): it goes to the original's writer,
//! behind it, and a stall of the original's batch holds it back as it holds back
//! any call on those accounts, rather than leaving it to wait on the original's
//! key row inside a batch of other accounts' calls.
//!
//! A held-back call still counts as waiting (`ledger_batch_waiting_calls`) and
//! keeps its place under the limit of concurrent calls, as a queued one does. A
//! writer lets at most [`MAX_STALLED`] of its batches run on at once; with that
//! many, it waits out its next batch in its own task, as a writer without the
//! bound would, and goes on taking what no stall holds back.
//!
//! What the hold-back cannot spare a call: the wait of the batch it is in. The
//! calls taken into the batch that first meets a stall share it, and the calls a
//! stalled batch held back are taken with their writer's next batch when it
//! ends, so a row held past the lock wait is met again there.

use std::collections::{HashMap, HashSet, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::FutureExt as _;
use tokio::sync::{Notify, mpsc, watch};

use super::core::{Core, WeakCore};
use super::group::{Keys, MAX_BATCH, Member, Name, serve};
use crate::error::Error;
use crate::telemetry::metrics;

/// Stalled batches one writer lets run at once. Each holds (or waits for) a
/// connection; with this many, the writer waits out its next batch itself.
const MAX_STALLED: usize = 16;

/// Calls waiting for a writer that make it start their batch before its batch
/// in flight ends: below this, they are better off joining the next batch of a
/// writer that waits (one batch's statements and COMMIT serve them all); from it
/// on, the database has room for both. Measured (docs/performance.md, "One
/// writer"): 8 against 64 served hot-merchant 1.15x and posts 1.13x faster, and
/// unique charges alike.
const OVERLAP_BACKLOG: usize = 8;

/// Calls waiting for any writer of the instance, and a signal when one comes: a
/// writer arms its batch's stall bound only once a call waits.
#[derive(Default)]
struct Arrivals {
    waiting: AtomicUsize,
    came: Notify,
}

impl Arrivals {
    fn add(&self, n: usize) {
        self.waiting.fetch_add(n, Ordering::SeqCst);
        self.came.notify_waiters();
    }

    fn sub(&self, n: usize) {
        self.waiting.fetch_sub(n, Ordering::SeqCst);
    }

    /// Until a call waits for a writer: at once if one already does.
    async fn one_waits(&self) {
        let came = self.came.notified();
        tokio::pin!(came);
        // Enabled before the look, so a call counted after it wakes `came`.
        came.as_mut().enable();
        if self.waiting.load(Ordering::SeqCst) == 0 {
            came.await;
        }
    }
}

/// One writer's queue.
struct Shard {
    sender: mpsc::UnboundedSender<Member>,
    waiting: Arc<AtomicUsize>,
}

/// The writers' queues: each writer serves the calls of a share of the
/// accounts, so all the calls on one account meet in one queue and batch there.
pub(crate) struct Queue {
    shards: Vec<Shard>,
    keys: Keys,
    arrivals: Arc<Arrivals>,
}

impl Queue {
    /// The queues, and their writers to run once the storage exists. A writer
    /// stops when the queue is dropped.
    pub(crate) fn start(writers: usize) -> (Self, Writers) {
        let mut shards = Vec::with_capacity(writers);
        let mut receivers = Vec::with_capacity(writers);
        for _ in 0..writers.max(1) {
            let (sender, receiver) = mpsc::unbounded_channel();
            let waiting = Arc::new(AtomicUsize::new(0));
            shards.push(Shard {
                sender,
                waiting: waiting.clone(),
            });
            receivers.push((receiver, waiting));
        }
        let arrivals = Arc::new(Arrivals::default());
        let queue = Self {
            shards,
            keys: Keys::default(),
            arrivals: arrivals.clone(),
        };
        let writers = Writers {
            receivers,
            stalls: Arc::default(),
            arrivals,
        };
        (queue, writers)
    }

    /// Queues a call for its writer; gives it back when a call with its key is
    /// already queued or in a batch here.
    pub(crate) fn push(&self, mut member: Member) -> Result<Option<Member>, Error> {
        if !self.keys.claim(&mut member)? {
            return Ok(Some(member));
        }
        let shard = self
            .shards
            .get(route(&member, self.shards.len()))
            .ok_or_else(|| Error::internal("no batch writer"))?;
        shard.waiting.fetch_add(1, Ordering::SeqCst);
        metrics::batch_waiting(1);
        shard.sender.send(member).map_err(|_| {
            shard.waiting.fetch_sub(1, Ordering::SeqCst);
            metrics::batch_waiting(-1);
            Error::internal("the batch writers have stopped")
        })?;
        self.arrivals.add(1);
        Ok(None)
    }

    /// The writer of the calls whose lowest account is `account`.
    pub(crate) fn writer_of(&self, account: u64) -> usize {
        share(("account", account), self.shards.len())
    }

    /// Calls waiting for a writer.
    pub(crate) fn waiting(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.waiting.load(Ordering::SeqCst))
            .sum()
    }
}

/// The writer of a call: by the lowest account it touches, else by the lowest
/// entry or hold it names (whose account was not found), else by its key.
fn route(member: &Member, writers: usize) -> usize {
    // Accounts order before entries, and entries before holds.
    match member.names.iter().min() {
        Some(Name::Account(id)) => share(("account", id), writers),
        Some(Name::Entry(id)) => share(("entry", id), writers),
        Some(Name::Hold(id)) => share(("hold", id), writers),
        None => share(("key", member.key.key.as_str()), writers),
    }
}

/// The writer, of `writers`, whose share `what` is in.
fn share(what: impl std::hash::Hash, writers: usize) -> usize {
    use std::hash::{BuildHasher as _, BuildHasherDefault, DefaultHasher};
    let hash = BuildHasherDefault::<DefaultHasher>::default().hash_one(what);
    usize::try_from(hash % u64::try_from(writers.max(1)).unwrap_or(1)).unwrap_or(0)
}

/// Writers not yet running: [`Writers::run`] spawns them once the storage they
/// write to exists.
pub(crate) struct Writers {
    receivers: Vec<(mpsc::UnboundedReceiver<Member>, Arc<AtomicUsize>)>,
    stalls: Arc<Stalls>,
    arrivals: Arc<Arrivals>,
}

impl Writers {
    pub(crate) fn run(self, ex: &Core) {
        let stall = ex.inner.limits.batch_stall;
        for (receiver, waiting) in self.receivers {
            let writer = Writer::new(
                receiver,
                waiting,
                self.stalls.clone(),
                self.arrivals.clone(),
                stall,
            );
            tokio::spawn(writer.run(ex.weak()));
        }
    }
}

/// The batches of an instance's writers that run on past the stall bound, by
/// what they touch.
#[derive(Debug)]
struct Stalls {
    /// How many stalled batches touch each.
    named: Mutex<HashMap<Name, usize>>,
    /// Counts the stalled batches that ended, so the writers that hold calls
    /// back look at them again.
    ended: watch::Sender<u64>,
}

impl Default for Stalls {
    fn default() -> Self {
        Self {
            named: Mutex::default(),
            ended: watch::Sender::new(0),
        }
    }
}

impl Stalls {
    fn named(&self) -> MutexGuard<'_, HashMap<Name, usize>> {
        // Each change is a few counts, made whole before the lock is let go.
        self.named.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What the stalled batches touch now.
    fn blocked(&self) -> HashSet<Name> {
        self.named().keys().copied().collect()
    }

    /// Registers a stalled batch of the writer whose stalled batches `count`
    /// counts, until the returned [`Stall`] is dropped.
    fn stall(self: &Arc<Self>, names: HashSet<Name>, count: &Arc<AtomicUsize>) -> Stall {
        let mut register = self.named();
        for name in &names {
            *register.entry(*name).or_default() += 1;
        }
        drop(register);
        count.fetch_add(1, Ordering::SeqCst);
        Stall {
            stalls: self.clone(),
            names,
            count: count.clone(),
        }
    }
}

/// A stalled batch's place in [`Stalls`], given up when the batch ends.
struct Stall {
    stalls: Arc<Stalls>,
    names: HashSet<Name>,
    count: Arc<AtomicUsize>,
}

impl Drop for Stall {
    fn drop(&mut self) {
        let mut register = self.stalls.named();
        for name in &self.names {
            if let Some(n) = register.get_mut(name) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    register.remove(name);
                }
            }
        }
        drop(register);
        self.count.fetch_sub(1, Ordering::SeqCst);
        self.stalls
            .ended
            .send_modify(|ended| *ended = ended.wrapping_add(1));
    }
}

pub(super) struct Writer {
    queue: mpsc::UnboundedReceiver<Member>,
    /// Calls queued or held back here (`Queue::waiting`).
    waiting: Arc<AtomicUsize>,
    /// Calls queued or held back by any writer.
    arrivals: Arc<Arrivals>,
    /// Calls taken from the queue and not yet in a batch, in arrival order.
    held: VecDeque<Member>,
    /// The stalled batches of every writer of the instance.
    stalls: Arc<Stalls>,
    /// Changes when one of them ends.
    ends: watch::Receiver<u64>,
    /// This writer's batches running on apart.
    stalled: Arc<AtomicUsize>,
    stall: Duration,
    /// The queue was dropped: the writer stops once it has nothing held back.
    closed: bool,
}

impl Writer {
    fn new(
        queue: mpsc::UnboundedReceiver<Member>,
        waiting: Arc<AtomicUsize>,
        stalls: Arc<Stalls>,
        arrivals: Arc<Arrivals>,
        stall: Duration,
    ) -> Self {
        let ends = stalls.ended.subscribe();
        Self {
            queue,
            waiting,
            arrivals,
            held: VecDeque::new(),
            stalls,
            ends,
            stalled: Arc::default(),
            stall,
            closed: false,
        }
    }

    async fn run(mut self, ex: WeakCore) {
        loop {
            let batch = self.take();
            if batch.is_empty() {
                if !self.wait().await {
                    return;
                }
                continue;
            }
            self.waiting.fetch_sub(batch.len(), Ordering::SeqCst);
            self.arrivals.sub(batch.len());
            metrics::batch_waiting(-isize::try_from(batch.len()).unwrap_or(isize::MAX));
            let Some(ex) = ex.upgrade() else { return };
            self.serve(ex, batch).await;
        }
    }

    /// The next batch: the held-back calls and then the queue's, in arrival
    /// order, up to [`MAX_BATCH`], but for those that touch what a stalled batch
    /// or an earlier held-back call names, which stay held back.
    fn take(&mut self) -> Vec<Member> {
        // Seen before the look, so a stall that ends after it wakes `wait`.
        self.ends.borrow_and_update();
        let mut blocked = self.stalls.blocked();
        let mut batch: Vec<Member> = Vec::new();
        // Whether a call of the batch names keys: a call is never decided in the
        // batch that decides a key it names (`Member::names_or_is_named_by`), and
        // only then, or for a call that names keys itself, is the batch looked
        // through for one.
        let mut naming = false;
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
            let held_back = if batch.len() >= MAX_BATCH {
                true
            } else if (naming || !member.originals.is_empty())
                && batch
                    .iter()
                    .any(|other| other.names_or_is_named_by(&member))
            {
                // After the batch it would be decided in: the later call waits,
                // and so does every later call on what it touches.
                blocked.extend(member.names.iter().copied());
                true
            } else if blocked.is_empty() {
                false
            } else {
                let touches = member.names.iter().any(|n| blocked.contains(n));
                if touches {
                    blocked.extend(member.names.iter().copied());
                }
                touches
            };
            if held_back {
                held.push_back(member);
            } else {
                naming |= !member.originals.is_empty();
                batch.push(member);
            }
        }
        self.held = held;
        batch
    }

    /// Waits for a call, or, with calls held back, for a stalled batch of any
    /// writer to end; false once the queue is closed and nothing is held back.
    async fn wait(&mut self) -> bool {
        let holding = !self.held.is_empty();
        if self.closed {
            // What is held back waits for a stalled batch, of this writer or
            // another, that will end.
            return holding && self.ends.changed().await.is_ok();
        }
        tokio::select! {
            member = self.queue.recv() => match member {
                Some(member) => self.held.push_back(member),
                None => self.closed = true,
            },
            Ok(()) = self.ends.changed(), if holding => {}
        }
        true
    }

    /// Serves a batch, in this task while it takes at most the stall bound (a
    /// lone call crosses no more tasks than without group commit), then in one of
    /// its own; the bound is armed once a call waits for any writer; in one of its own at once when [`OVERLAP_BACKLOG`] calls already
    /// wait, so a backlog is served by several batches at a time. With
    /// [`MAX_STALLED`] batches running on, a stalled one is waited out here.
    /// Tracked either way, so shutdown waits for it to commit or roll back. A
    /// panic is caught, so the writer goes on (its members are answered as
    /// dropped).
    async fn serve(&mut self, ex: Core, batch: Vec<Member>) {
        let named: HashSet<Name> = batch.iter().flat_map(|m| m.names.iter().copied()).collect();
        let tasks = ex.inner.tasks.clone();
        let mut served = Box::pin(tasks.track_future(async move {
            if AssertUnwindSafe(serve(&ex, batch))
                .catch_unwind()
                .await
                .is_err()
            {
                tracing::error!("a batch panicked; its calls were dropped");
            }
        }));
        let room = self.stalled.load(Ordering::SeqCst) < MAX_STALLED;
        // Enough calls wait for a batch of their own: this one runs on alone
        // at once, as a stalled one does, and the next starts beside it.
        let backlogged = room && self.waiting.load(Ordering::SeqCst) >= OVERLAP_BACKLOG;
        if !backlogged {
            let bound = tokio::time::Instant::now() + self.stall;
            tokio::select! {
                () = &mut served => return,
                () = self.arrivals.one_waits() => {}
            }
            tokio::select! {
                () = &mut served => return,
                () = tokio::time::sleep_until(bound) => metrics::batch_stalled(),
            }
        }
        let stall = self.stalls.stall(named, &self.stalled);
        if room {
            tasks.spawn(async move {
                served.await;
                drop(stall);
            });
        } else {
            served.await;
            drop(stall);
        }
    }
}
