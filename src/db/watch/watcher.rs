//! A watcher: its backlog page by page, then the tail's batches, into a
//! channel its reader drains at its own pace.

use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, mpsc};

use super::source::Source;
use super::tail::{Batch, Membership, Tail};

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

/// Streams the numbered entries after `after` (only `account`'s, when given),
/// until the receiver is dropped or the instance shuts down. An unknown
/// account is `AccountNotFound`.
pub(crate) async fn watch(
    source: &Source,
    tail: &Tail,
    account: Option<AccountId>,
    after: u64,
) -> Result<Entries, Error> {
    let membership = tail.join(source)?;
    if let Some(account) = account {
        let mut conn = source.read_conn(&Call::unbounded()).await?;
        if accounts::find(&mut conn, account).await?.is_none() {
            return Err(Error::AccountNotFound(account.get()));
        }
    }
    let (out, entries) = mpsc::channel(BUFFER);
    let watcher = Watcher {
        source: source.clone(),
        tail: tail.clone(),
        account,
        cursor: after,
        place: None,
        out,
        _membership: membership,
    };
    tokio::spawn(watcher.run());
    Ok(entries)
}

struct Watcher {
    source: Source,
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
        let mut conn = self.source.read_conn(&Call::unbounded()).await?;
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
