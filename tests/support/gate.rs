//! A gate that holds a transaction open before its COMMIT, to force the
//! interleavings the race tests claim.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt as _;
use ledger::db::{BeforeCommit, BeforeCommitEvent};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::metadata::MetadataMap;

use super::app::{Config, TestApp};
use super::server::TestDb;
use super::wire::{charge, raw_call};

/// Holds the first new-key transaction for `key` open before COMMIT until
/// released, or until its call is abandoned. Later transactions pass straight
/// through.
#[derive(Clone)]
pub struct Gate {
    inner: Arc<GateInner>,
}

struct GateInner {
    key: String,
    armed: AtomicBool,
    reached: watch::Sender<bool>,
    released: watch::Sender<bool>,
}

impl Gate {
    pub fn new(key: &str) -> Self {
        Self {
            inner: Arc::new(GateInner {
                key: key.to_owned(),
                armed: AtomicBool::new(true),
                reached: watch::channel(false).0,
                released: watch::channel(false).0,
            }),
        }
    }

    /// Waits until the held transaction is at the gate (past its probe and work).
    pub async fn reached(&self) {
        let mut rx = self.inner.reached.subscribe();
        tokio::time::timeout(Duration::from_secs(30), rx.wait_for(|r| *r))
            .await
            .expect("a transaction reaches the gate")
            .unwrap();
    }

    pub fn release(&self) {
        self.inner.released.send_replace(true);
    }

    pub(super) fn hook(self) -> BeforeCommit {
        Arc::new(move |event: BeforeCommitEvent| {
            let gate = self.clone();
            async move {
                if event.key.key.as_str() != gate.inner.key
                    || !gate.inner.armed.swap(false, Ordering::SeqCst)
                {
                    return;
                }
                gate.inner.reached.send_replace(true);
                let mut released = gate.inner.released.subscribe();
                tokio::select! {
                    _ = released.wait_for(|r| *r) => {}
                    () = event.call.abandoned() => {}
                }
            }
            .boxed()
        })
    }
}

/// A Charge of 10 (key `key`) on a fresh account holding 100, held before its
/// COMMIT by a gate until released, on an instance of its own.
pub struct HeldCharge {
    pub app: TestApp,
    pub gate: Gate,
    pub account: u64,
    /// The charge's answer, its reply as the raw bytes on the wire.
    pub original: JoinHandle<Result<(MetadataMap, Bytes), tonic::Status>>,
}

impl HeldCharge {
    /// On an instance with the given lock wait; returns once the charge is at the
    /// gate, past its probe and its debit.
    pub async fn start(db: &TestDb, key: &str, lock_wait: Duration) -> Self {
        let config = Config {
            lock_wait,
            ..Config::default()
        };
        Self::start_with(db, key, config).await
    }

    /// On an instance with `config` and the gate; returns once the charge is at
    /// the gate.
    pub async fn start_with(db: &TestDb, key: &str, config: Config) -> Self {
        let gate = Gate::new(key);
        let config = Config {
            gate: Some(gate.clone()),
            ..config
        };
        let app = TestApp::spawn_with(db, config).await;
        let account = app.funded_account("USD", 100).await;
        let original = tokio::spawn(raw_call(
            app.channel().await,
            "Charge",
            charge(key, account, 10),
        ));
        gate.reached().await;
        Self {
            app,
            gate,
            account,
            original,
        }
    }
}
