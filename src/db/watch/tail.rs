//! The tail: one per instance, shared by every watcher. While any watcher is
//! connected it reads the entries numbered since its last read, every account's,
//! and publishes them as contiguous batches on a broadcast channel; when none is,
//! it stops and reads nothing. N idle watchers cost the database one cheap
//! indexed query per tick, not N.
//!
//! The broadcast channel holds a bounded number of batches: a watcher that falls
//! behind (a slow reader) loses the oldest (`RecvError::Lagged`) and reads what it
//! missed from the database, page by page, so no reader makes the server buffer
//! without bound.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::source::Source;
use crate::call::Call;
use crate::db::tables::entries;
use crate::error::Error;
use crate::ledger::Entry;
use crate::telemetry::metrics;

/// The most entries one read of the tail takes (and one batch holds); a full read
/// is followed by the next at once.
pub(crate) const BATCH_LIMIT: u32 = 1000;
/// How often the tail looks for newly numbered entries while watchers are
/// connected, when this instance's assigner has not woken it: entries are numbered
/// by one instance of the fleet, so the others learn of new numbers only by
/// reading. One indexed read that finds nothing when nothing is new.
const POLL: Duration = Duration::from_millis(25);
/// How often it looks while another instance's assigner is numbering: for
/// [`BUSY_FOR`] after a read it was not woken for found entries. A watcher on an
/// instance that does not number sees an entry about this long after one that
/// does; a quiet ledger is polled at [`POLL`] as before.
const BUSY_POLL: Duration = Duration::from_millis(2);
/// How long the tail polls at [`BUSY_POLL`] after the last entries another
/// instance numbered: a few of the assigner's rounds.
const BUSY_FOR: Duration = Duration::from_millis(100);
/// How long the tail waits after a failed read (the database is down, or a
/// broken invariant): it logs each failure, and should not do so 200 times a
/// second.
const AFTER_FAILURE: Duration = Duration::from_secs(1);
/// Batches the broadcast channel keeps for a watcher that is behind: 40 ms of
/// ticks, at most 8,000 entries in memory. Past that, the watcher reads from the
/// database instead.
const CAPACITY: usize = 8;

/// Entries `first..=last`, every account's, with no hole.
#[derive(Debug, Clone)]
pub(crate) struct Batch {
    pub(crate) first: u64,
    pub(crate) last: u64,
    pub(crate) entries: Arc<[Entry]>,
}

/// What the change stream has done since the instance started (for tests and
/// operators: the cost of the watchers to the database).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WatchStats {
    /// Watchers connected.
    pub watchers: usize,
    /// Watchers caught up, following the tail.
    pub following: usize,
    /// Times the tail looked for new entries.
    pub ticks: u64,
    /// The highest sequence the tail has published.
    pub published: u64,
    /// Statements the change stream sent (the tail's and the watchers' pages).
    pub reads: u64,
    /// Times a watcher found a gap in what the tail gave it (it fell behind, or
    /// joined late) and went back to reading pages from the database.
    pub catch_ups: u64,
}

/// The instance's tail, started by the first watcher.
#[derive(Debug, Clone)]
pub(crate) struct Tail {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    batches: broadcast::Sender<Batch>,
    state: Mutex<State>,
    /// Fired when the instance shuts down: watchers end, and no new one starts.
    closing: CancellationToken,
    following: AtomicUsize,
    ticks: AtomicU64,
    published: AtomicU64,
    reads: AtomicU64,
    catch_ups: AtomicU64,
    /// Watchers served at once (`--max-watchers`); each holds a task and, while
    /// it catches up, connections of the read pool in turn.
    max_watchers: usize,
}

#[derive(Debug, Default)]
struct State {
    watchers: usize,
    /// Whether the tail's task runs; it ends when the last watcher leaves.
    running: bool,
}

impl Tail {
    /// A tail for at most `max_watchers` watchers at once.
    pub(crate) fn new(max_watchers: usize) -> Self {
        Self {
            shared: Arc::new(Shared {
                batches: broadcast::channel(CAPACITY).0,
                state: Mutex::default(),
                closing: CancellationToken::new(),
                following: AtomicUsize::new(0),
                ticks: AtomicU64::new(0),
                published: AtomicU64::new(0),
                reads: AtomicU64::new(0),
                catch_ups: AtomicU64::new(0),
                max_watchers,
            }),
        }
    }
}

/// A watcher's place: counted while it lives; the tail runs while any does.
#[derive(Debug)]
pub(crate) struct Membership {
    tail: Tail,
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.tail.shared.lock().watchers -= 1;
        metrics::stream_watchers(-1);
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Tail {
    /// Counts a new watcher, starting the tail if it is the first.
    pub(crate) fn join(&self, source: &Source) -> Result<Membership, Error> {
        if self.shared.closing.is_cancelled() {
            return Err(Error::ShuttingDown);
        }
        let mut state = self.shared.lock();
        if state.watchers >= self.shared.max_watchers {
            return Err(Error::Overloaded {
                limit: self.shared.max_watchers,
                what: "WatchEntries streams",
            });
        }
        state.watchers += 1;
        metrics::stream_watchers(1);
        if !state.running {
            state.running = true;
            tokio::spawn(run(self.shared.clone(), source.clone()));
        }
        Ok(Membership { tail: self.clone() })
    }

    /// Batches published from now on.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Batch> {
        self.shared.batches.subscribe()
    }

    /// Fired when the instance shuts down.
    pub(crate) fn closing(&self) -> &CancellationToken {
        &self.shared.closing
    }

    /// Ends every watcher and refuses new ones.
    pub(crate) fn close(&self) {
        self.shared.closing.cancel();
    }

    pub(crate) fn counted_read(&self) {
        self.shared.reads.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn caught_up(&self, following: bool) {
        if following {
            self.shared.following.fetch_add(1, Ordering::Relaxed);
        } else {
            self.shared.following.fetch_sub(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn fell_behind(&self) {
        self.shared.catch_ups.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn stats(&self) -> WatchStats {
        WatchStats {
            watchers: self.shared.lock().watchers,
            following: self.shared.following.load(Ordering::Relaxed),
            ticks: self.shared.ticks.load(Ordering::Relaxed),
            published: self.shared.published.load(Ordering::Relaxed),
            reads: self.shared.reads.load(Ordering::Relaxed),
            catch_ups: self.shared.catch_ups.load(Ordering::Relaxed),
        }
    }
}

/// The tail's task: a read per tick while watchers are connected. It starts from
/// the highest sequence when it starts (a watcher reads anything older from the
/// database), and ends, reading nothing more, when the last watcher leaves or
/// the instance shuts down.
async fn run(shared: Arc<Shared>, source: Source) {
    let tail = Tail { shared };
    let mut last = None;
    // Rounds this instance's assigner commits wake the tail at once.
    let mut assigned = source.assigned();
    // Whether this read follows a wake of the local assigner, and until when
    // entries numbered elsewhere keep the poll short.
    let mut woken = false;
    let mut busy_until = Instant::now();
    loop {
        {
            let mut state = tail.shared.lock();
            if state.watchers == 0 || tail.shared.closing.is_cancelled() {
                state.running = false;
                return;
            }
        }
        let pause = match read(&tail, &source, &mut last).await {
            Ok(Found::Full) => Duration::ZERO,
            Ok(found) => {
                if found == Found::Some && !woken {
                    busy_until = Instant::now() + BUSY_FOR;
                }
                if Instant::now() < busy_until {
                    BUSY_POLL
                } else {
                    POLL
                }
            }
            Err(error) => {
                tracing::warn!(error = %error, "the change stream's tail could not read");
                AFTER_FAILURE
            }
        };
        woken = false;
        if !pause.is_zero() {
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                Ok(()) = assigned.changed() => woken = true,
                () = tail.shared.closing.cancelled() => {}
            }
        }
    }
}

/// What one read of the tail found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    None,
    Some,
    /// As many as one read takes: more are waiting.
    Full,
}

/// One tick: the entries numbered after `last`, published as one batch.
async fn read(tail: &Tail, source: &Source, last: &mut Option<u64>) -> Result<Found, Error> {
    tail.shared.ticks.fetch_add(1, Ordering::Relaxed);
    let mut conn = source.read_conn(&Call::unbounded()).await?;
    let after = if let Some(after) = *last {
        after
    } else {
        tail.counted_read();
        let highest = entries::highest_sequence(&mut conn).await?;
        // Where the tail starts, published as a batch of nothing: a watcher
        // whose last page ended below it (what was numbered between that page
        // and this read) finds the gap and reads it from the database, rather
        // than waiting for the next entry to show it.
        let _ = tail.shared.batches.send(Batch {
            first: highest.saturating_add(1),
            last: highest,
            entries: Vec::new().into(),
        });
        highest
    };
    *last = Some(after);
    tail.counted_read();
    let found = entries::numbered(&mut conn, after, u64::MAX, BATCH_LIMIT).await?;
    drop(conn);
    let outcome = if found.len() == BATCH_LIMIT as usize {
        Found::Full
    } else if found.is_empty() {
        Found::None
    } else {
        Found::Some
    };
    // Numbering commits a contiguous prefix, so what a read finds follows `after`
    // without a hole; should it not, only the part that does is published, and the
    // hole is reported.
    let run = found
        .iter()
        .zip(after + 1..)
        .take_while(|(e, n)| e.sequence == Some(*n))
        .count();
    let mut found = found;
    let hole = (run < found.len()).then(|| after + 1 + run as u64);
    found.truncate(run);
    if let Some(newest) = found.last().and_then(|e| e.sequence) {
        *last = Some(newest);
        // No receiver is fine: every watcher has gone since this tick began.
        let _ = tail.shared.batches.send(Batch {
            first: after + 1,
            last: newest,
            entries: found.into(),
        });
        tail.shared.published.store(newest, Ordering::Relaxed);
    }
    match hole {
        Some(missing) => Err(Error::internal(format!(
            "sequence {missing} is missing from the change stream, below a higher one"
        ))),
        None => Ok(outcome),
    }
}
