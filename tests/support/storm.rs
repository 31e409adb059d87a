//! Storms: many calls released at once, spread over service instances, and the
//! one-did-the-work check their replies must pass.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Barrier;
use tokio::task::JoinHandle;
use tonic::metadata::MetadataMap;
use tonic::transport::Channel;

use super::app::{Config, TestApp, until_waiting};
use super::gate::Gate;
use super::server::TestDb;
use super::wire::{raw_call, replayed};

/// A reply as the wire carries it: its metadata and its raw bytes.
pub type RawReply = (MetadataMap, Bytes);

/// Pools sized so the 64-call storm has a connection for every call (the 63
/// parked duplicates and the held original) while two storm tests running side
/// by side stay under the server's default 151 connections.
pub fn storm_config() -> Config {
    Config {
        pool_size: 34,
        lock_wait: Duration::from_secs(60),
        pool_timeout: Duration::from_secs(60),
        ..Config::default()
    }
}

/// `n` calls that reach the service together: each waits at one barrier, and
/// call `i` goes through `channels[i % channels.len()]`. `call` only builds the
/// call; nothing is sent before the barrier opens.
pub fn at_once<T, F, Fut>(n: usize, channels: &[Channel], call: F) -> Vec<JoinHandle<T>>
where
    F: Fn(usize, Channel) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let barrier = Arc::new(Barrier::new(n));
    (0..n)
        .map(|i| {
            let barrier = barrier.clone();
            let call = call(i, channels[i % channels.len()].clone());
            tokio::spawn(async move {
                barrier.wait().await;
                call.await
            })
        })
        .collect()
}

/// Exactly one of `replies` did the work, and every other is its replay, byte
/// for byte.
pub fn assert_one_did_the_work(replies: &[RawReply], what: &str) {
    let fresh = replies.iter().filter(|(md, _)| !replayed(md)).count();
    assert_eq!(fresh, 1, "{what}: exactly one call did the work");
    assert!(
        replies.iter().all(|(_, body)| *body == replies[0].1),
        "{what}: {} identical replies",
        replies.len()
    );
}

/// Two instances on one database whose first transaction for the storm's key
/// waits at a gate before COMMIT: every other copy of the call then comes to
/// wait behind it, a true in-flight duplicate.
pub struct HeldStorm {
    pub a: TestApp,
    pub b: TestApp,
    gate: Gate,
}

impl HeldStorm {
    /// Both instances with `config` and the gate for `key`.
    pub async fn start(db: &TestDb, key: &str, config: Config) -> Self {
        let gate = Gate::new(key);
        let config = Config {
            gate: Some(gate.clone()),
            ..config
        };
        let a = TestApp::spawn_with(db, config.clone()).await;
        let b = TestApp::spawn_with(db, config).await;
        Self { a, b, gate }
    }

    /// `copies` copies of `request` to `method` at once, through both instances in
    /// turn. The first to claim the key is held until all the others wait behind
    /// it (parked on its row, or queued behind it for a group-commit writer), then
    /// released. Returns every reply; each call must succeed.
    pub async fn run<M>(
        &self,
        db: &TestDb,
        copies: usize,
        method: &'static str,
        request: M,
    ) -> Vec<RawReply>
    where
        M: prost::Message + Clone + 'static,
    {
        let channels = [self.a.channel().await, self.b.channel().await];
        let calls = at_once(copies, &channels, |_, channel| {
            raw_call(channel, method, request.clone())
        });
        self.gate.reached().await;
        let duplicates = u64::try_from(copies - 1).unwrap();
        until_waiting(db, &[&self.a, &self.b], duplicates).await;
        self.gate.release();
        let mut replies = Vec::new();
        for call in calls {
            replies.push(call.await.unwrap().expect("every call succeeds"));
        }
        replies
    }
}
