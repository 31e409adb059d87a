//! A reader of the change stream for tests: follows `WatchEntries` through one or
//! more instances, resuming after the last sequence it saw whenever it moves on
//! or its stream breaks, and checks that every entry continues the sequence.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt as _;
use ledger::proto::pb;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

type Client = pb::ledger_client::LedgerClient<Channel>;

pub struct Follower {
    seen: Arc<Mutex<Vec<pb::Entry>>>,
    stop: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl Follower {
    /// Follows every account through `channels`, moving to the next instance every
    /// `hop_every` entries, and whenever a stream breaks or an instance is gone.
    pub fn start(channels: Vec<Channel>, hop_every: usize) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(follow(channels, hop_every, seen.clone(), stop.clone()));
        Self { seen, stop, task }
    }

    pub async fn seen(&self) -> usize {
        self.seen.lock().await.len()
    }

    /// Waits until `n` entries have been seen; fails after 60 s.
    pub async fn until_seen(&self, n: usize) {
        for _ in 0..1200 {
            if self.seen().await >= n {
                return;
            }
            assert!(!self.task.is_finished(), "the follower stopped");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "the follower saw {} of {n} entries in 60 s",
            self.seen().await
        );
    }

    /// Waits until `total` entries have been seen (fails after 60 s), stops, and
    /// returns them in the order they came.
    pub async fn finish(self, total: usize) -> Vec<pb::Entry> {
        self.until_seen(total).await;
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("the follower's checks hold");
        std::mem::take(&mut *self.seen.lock().await)
    }
}

async fn follow(
    channels: Vec<Channel>,
    hop_every: usize,
    seen: Arc<Mutex<Vec<pb::Entry>>>,
    stop: Arc<AtomicBool>,
) {
    let mut hop = 0usize;
    while !stop.load(Ordering::Relaxed) {
        hop += 1;
        let channel = channels[hop % channels.len()].clone();
        let after = seen
            .lock()
            .await
            .last()
            .map_or(0, |e: &pb::Entry| e.sequence);
        let request = pb::WatchEntriesRequest {
            after_sequence: after,
            account_id: 0,
        };
        let Ok(Ok(stream)) = tokio::time::timeout(
            Duration::from_secs(2),
            Client::new(channel).watch_entries(request),
        )
        .await
        else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let mut stream = stream.into_inner();
        let mut taken = 0;
        while taken < hop_every && !stop.load(Ordering::Relaxed) {
            let Ok(Some(Ok(entry))) =
                tokio::time::timeout(Duration::from_millis(200), stream.next()).await
            else {
                break;
            };
            let mut seen = seen.lock().await;
            let last = seen.last().map_or(0, |e| e.sequence);
            assert_eq!(
                entry.sequence,
                last + 1,
                "through instance {}: the entry after {last} is {}",
                hop % channels.len(),
                entry.sequence
            );
            seen.push(entry);
            taken += 1;
        }
    }
}

/// The stream's checks on everything a follower saw, against the database's
/// `total` entries: each once, numbered 1..=total in order.
pub fn assert_every_entry_once(seen: &[pb::Entry], total: usize) {
    assert_eq!(seen.len(), total, "every committed entry, once");
    let ids: std::collections::HashSet<u64> = seen.iter().map(|e| e.entry_id).collect();
    assert_eq!(ids.len(), seen.len(), "no entry twice");
    for (i, entry) in seen.iter().enumerate() {
        assert_eq!(entry.sequence, u64::try_from(i).unwrap() + 1);
    }
}

/// Each entry as `GetEntry` shows it through `channel`.
pub async fn assert_as_get_entry_shows(channel: Channel, seen: &[pb::Entry]) {
    let client = Client::new(channel);
    let found = futures::stream::iter(seen.iter().map(|entry| {
        let mut client = client.clone();
        async move {
            let stored = client
                .get_entry(pb::GetEntryRequest {
                    entry_id: entry.entry_id,
                })
                .await
                .expect("GetEntry")
                .into_inner();
            (entry, stored)
        }
    }))
    .buffer_unordered(16)
    .collect::<Vec<_>>()
    .await;
    for (entry, stored) in found {
        assert_eq!(&stored, entry, "the stream shows what GetEntry shows");
    }
}
