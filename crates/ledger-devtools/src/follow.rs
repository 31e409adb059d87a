//! What `ledger bench`'s watchers, and its subscription's receiver, saw: the lag
//! of each entry of a measured call, and how far each watcher got.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::time::Instant;

/// How long the watchers get, after the last call, to receive its entries.
pub(crate) const DRAIN: Duration = Duration::from_secs(15);

/// Which of the two instants of an entry came first.
#[derive(Debug, Clone, Copy)]
enum Seen {
    Replied(Instant),
    Received(Instant),
}

/// What the watchers saw: the lag of each entry of a measured call (reply to
/// arrival in watcher 0), and how far each watcher got.
#[derive(Debug)]
pub(crate) struct Follow {
    /// Entries with one instant of the two; an entry whose arrival beats its reply
    /// counts a lag of zero.
    pending: std::sync::Mutex<HashMap<u64, Seen>>,
    pub(crate) lag: std::sync::Mutex<Histogram<u64>>,
    /// Entries of measured calls replied to.
    pub(crate) replied: AtomicU64,
    /// Of those, the ones watcher 0 received.
    pub(crate) matched: AtomicU64,
    /// Streams that have answered their request.
    pub(crate) open: AtomicU64,
    /// The highest sequence each watcher received: the ones reading at speed,
    /// then the slow ones.
    pub(crate) reached: Vec<AtomicU64>,
    /// How many of them read at speed (the first ones); the run waits for those.
    pub(crate) fast: usize,
}

impl Follow {
    pub(crate) fn new(fast: usize, slow: usize) -> anyhow::Result<Self> {
        Ok(Self {
            pending: std::sync::Mutex::default(),
            lag: std::sync::Mutex::new(Histogram::new_with_bounds(1, 600_000_000, 3)?),
            replied: AtomicU64::new(0),
            matched: AtomicU64::new(0),
            open: AtomicU64::new(0),
            reached: (0..fast + slow).map(|_| AtomicU64::new(0)).collect(),
            fast,
        })
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Seen>> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn record(&self, replied: Instant, received: Instant) {
        let micros = received.saturating_duration_since(replied).as_micros();
        self.lag
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .saturating_record(u64::try_from(micros).unwrap_or(u64::MAX).max(1));
        self.matched.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn replied(&self, ids: impl IntoIterator<Item = u64>, at: Instant) {
        let mut pending = self.pending();
        for id in ids {
            self.replied.fetch_add(1, Ordering::Relaxed);
            match pending.remove(&id) {
                Some(Seen::Received(received)) => self.record(at, received),
                _ => {
                    pending.insert(id, Seen::Replied(at));
                }
            }
        }
    }

    pub(crate) fn received(&self, id: u64, at: Instant) {
        let mut pending = self.pending();
        match pending.remove(&id) {
            Some(Seen::Replied(replied)) => self.record(replied, at),
            _ => {
                pending.insert(id, Seen::Received(at));
            }
        }
    }

    /// After the last call: waits until watcher 0 has received every entry of a
    /// measured call and every watcher has reached where watcher 0 is, then ends
    /// the streams. Fails on a watcher's error (a hole in its sequences, a stream
    /// that ended) or when they do not get there in `DRAIN`.
    pub(crate) async fn drain(
        &self,
        watchers: Vec<tokio::task::JoinHandle<anyhow::Result<()>>>,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + DRAIN;
        let outcome = loop {
            if let Some(done) = watchers
                .iter()
                .position(tokio::task::JoinHandle::is_finished)
            {
                break Err(done);
            }
            let first = self
                .reached
                .first()
                .map_or(0, |r| r.load(Ordering::Relaxed));
            let all_matched =
                self.matched.load(Ordering::Relaxed) == self.replied.load(Ordering::Relaxed);
            if all_matched
                && self
                    .reached
                    .iter()
                    .take(self.fast)
                    .all(|r| r.load(Ordering::Relaxed) >= first)
            {
                break Ok(());
            }
            if Instant::now() >= deadline {
                let reached: Vec<u64> = self
                    .reached
                    .iter()
                    .map(|r| r.load(Ordering::Relaxed))
                    .collect();
                anyhow::bail!(
                    "after {DRAIN:?}, watcher 0 received {} of the {} entries of measured calls; \
                     the watchers reached sequences {reached:?}",
                    self.matched.load(Ordering::Relaxed),
                    self.replied.load(Ordering::Relaxed),
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        match outcome {
            Ok(()) => {
                for w in &watchers {
                    w.abort();
                }
                Ok(())
            }
            Err(done) => {
                let mut watchers = watchers;
                let failed = watchers.swap_remove(done);
                for w in &watchers {
                    w.abort();
                }
                failed.await??;
                anyhow::bail!("watcher {done} ended early")
            }
        }
    }
}
