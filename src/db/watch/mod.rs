//! WatchEntries (SPEC 2, 3.8): a watcher streams numbered entries in sequence
//! order, from the first after its cursor, first the backlog page by page from
//! the database, then the batches the instance's one `tail` publishes.
//!
//! The cursor is the last sequence the watcher has scanned (for an account's
//! stream too: it passes other accounts' entries), and it only ever moves forward
//! over a contiguous run, so the stream has no hole and no repeat. A page read
//! below the highest sequence assigned at its start covers everything up to it,
//! since sequences are assigned as a contiguous prefix, each round in one
//! transaction. A watcher subscribes to the tail before its last page, so the
//! first batch it takes starts at or before its cursor; a batch that starts after
//! it (the watcher lagged, and the channel dropped what it missed) sends it back
//! to the pages.
//!
//! Memory is bounded: the stream is a channel of [`BUFFER`] entries fed by a task
//! that waits for room, so it sends as fast as its reader takes, and the tail's
//! channel holds a bounded number of batches.

mod tail;

use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, mpsc};

pub use tail::WatchStats;
pub(crate) use tail::{BATCH_LIMIT, Tail};
use tail::{Batch, Membership};

use super::{Persistence, Reads};
use crate::call::Call;
use crate::db::tables::entries::After;
use crate::db::tables::{accounts, entries};
use crate::error::Error;
use crate::ledger::{AccountId, Entry};
use crate::telemetry::metrics;

/// Entries a backlog page holds: one indexed range read, a few hundred KiB.
pub(crate) const PAGE: u32 = 500;
/// Entries a watcher's stream holds for its reader; the watcher waits for room.
const BUFFER: usize = 64;

/// A watcher's entries, in sequence order; an error ends them.
pub type Entries = mpsc::Receiver<Result<Entry, Error>>;

impl Reads {
    /// Streams the numbered entries after `after` (only `account`'s, when given),
    /// until the receiver is dropped or the instance shuts down. An unknown
    /// account is `AccountNotFound`.
    pub async fn watch_entries(
        &self,
        account: Option<AccountId>,
        after: u64,
    ) -> Result<Entries, Error> {
        let membership = self.db.inner.tail.join(&self.db)?;
        if let Some(account) = account {
            let mut conn = self.db.read_conn(&Call::unbounded()).await?;
            if accounts::find(&mut conn, account).await?.is_none() {
                return Err(Error::AccountNotFound(account.get()));
            }
        }
        let (out, entries) = mpsc::channel(BUFFER);
        let watcher = Watcher {
            db: self.db.clone(),
            tail: self.db.inner.tail.clone(),
            account,
            cursor: after,
            place: None,
            out,
            _membership: membership,
        };
        tokio::spawn(watcher.run());
        Ok(entries)
    }
}

impl Persistence {
    /// What the change stream has done, and its watchers.
    pub fn watch_stats(&self) -> WatchStats {
        self.inner.tail.stats()
    }

    /// Ends every watcher (each is told to resume elsewhere) and refuses new ones:
    /// a stream never ends by itself, and would hold up a graceful shutdown.
    pub fn close_watchers(&self) {
        self.inner.tail.close();
    }
}

struct Watcher {
    db: Persistence,
    tail: Tail,
    account: Option<AccountId>,
    /// The last sequence scanned.
    cursor: u64,
    /// For an account's stream, while it pages: the place in the account's
    /// journal of the last entry it sent (`None`: found from the cursor).
    place: Option<u64>,
    out: mpsc::Sender<Result<Entry, Error>>,
    _membership: Membership,
}

/// Why a watcher stops.
enum Stop {
    /// Its reader went away.
    Gone,
    Failed(Error),
}

impl From<Error> for Stop {
    fn from(error: Error) -> Self {
        Self::Failed(error)
    }
}

impl Watcher {
    async fn run(mut self) {
        let Err(Stop::Failed(error)) = self.watch().await else {
            return;
        };
        // Told after the entries before it, unless the reader stops reading: then
        // the stream just ends, after a bounded wait, so a shutdown is not held up.
        let notice = std::time::Duration::from_secs(1);
        let _ = tokio::time::timeout(notice, self.out.send(Err(error))).await;
    }

    async fn watch(&mut self) -> Result<(), Stop> {
        loop {
            let batches = self.catch_up().await?;
            self.tail.caught_up(true);
            let followed = self.follow(batches).await;
            self.tail.caught_up(false);
            followed?;
            self.tail.fell_behind();
        }
    }

    /// Pages through the backlog; once a page reaches the highest sequence, the
    /// watcher subscribes to the tail and reads one more page, so nothing numbered
    /// between that page and its subscription is missed.
    async fn catch_up(&mut self) -> Result<broadcast::Receiver<Batch>, Stop> {
        // What the tail sent since the last page moved the cursor.
        self.place = None;
        let mut subscribed = None;
        loop {
            let reached = self.page().await?;
            match (reached, subscribed.take()) {
                (true, Some(batches)) => return Ok(batches),
                (true, None) => subscribed = Some(self.tail.subscribe()),
                // Still behind: a subscription would only lag.
                (false, _) => {}
            }
        }
    }

    /// Sends one page after the cursor. True when it reached the highest sequence
    /// assigned before it was read.
    async fn page(&mut self) -> Result<bool, Stop> {
        let mut conn = self.db.read_conn(&Call::unbounded()).await?;
        self.tail.counted_read();
        let highest = entries::highest_sequence(&mut conn).await?;
        self.tail.counted_read();
        let page = match self.account {
            None => entries::numbered(&mut conn, self.cursor, highest, PAGE).await?,
            Some(account) => {
                let after = self
                    .place
                    .map_or(After::Sequence(self.cursor), After::Place);
                let page = entries::numbered_of(&mut conn, account, after, highest, PAGE).await?;
                if let Some((place, _)) = page.last() {
                    self.place = Some(*place);
                }
                page.into_iter().map(|(_, entry)| entry).collect()
            }
        };
        drop(conn);
        let reached = page.len() < PAGE as usize;
        for entry in page {
            let sequence = entry
                .sequence
                .ok_or_else(|| Error::internal("an entry read by sequence has none"))?;
            if self.account.is_none() && Some(sequence) != self.cursor.checked_add(1) {
                return Err(Error::internal(format!(
                    "a hole in the change stream after sequence {}",
                    self.cursor
                ))
                .into());
            }
            self.send(entry).await?;
            self.cursor = sequence;
        }
        if reached {
            self.cursor = self.cursor.max(highest);
        }
        Ok(reached)
    }

    /// Sends what the tail publishes, until a batch leaves a gap after the cursor
    /// (`Ok`: catch up from the database) or the watcher stops.
    async fn follow(&mut self, mut batches: broadcast::Receiver<Batch>) -> Result<(), Stop> {
        loop {
            let received = tokio::select! {
                () = self.out.closed() => return Err(Stop::Gone),
                () = self.tail.closing().cancelled() => return Err(shutting_down()),
                received = batches.recv() => received,
            };
            let batch = match received {
                Ok(batch) => batch,
                Err(RecvError::Lagged(_)) => return Ok(()),
                Err(RecvError::Closed) => return Err(shutting_down()),
            };
            if batch.last <= self.cursor {
                continue;
            }
            if batch.first > self.cursor.saturating_add(1) {
                return Ok(());
            }
            for (entry, sequence) in batch.entries.iter().zip(batch.first..) {
                if sequence <= self.cursor {
                    continue;
                }
                if self.account.is_none_or(|a| a == entry.account_id) {
                    self.send(entry.clone()).await?;
                }
                self.cursor = sequence;
            }
        }
    }

    /// Waits for room in the stream: a slow reader slows the watcher, never grows
    /// a buffer.
    async fn send(&self, entry: Entry) -> Result<(), Stop> {
        tokio::select! {
            sent = self.out.send(Ok(entry)) => sent.map_err(|_| Stop::Gone)?,
            () = self.tail.closing().cancelled() => return Err(shutting_down()),
        }
        metrics::stream_entries(1);
        Ok(())
    }
}

fn shutting_down() -> Stop {
    Stop::Failed(Error::ShuttingDown)
}
