//! A gate that holds a transaction open before its COMMIT, to force the
//! interleavings the race tests claim.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::FutureExt as _;
use ledger::db::{BeforeCommit, BeforeCommitEvent};
use ledger::proto::pb;
use tokio::sync::watch;

use super::app::{Config, TestApp};
use super::server::TestDb;
use super::wire::charge;

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
/// COMMIT by a gate until released, on an instance with the given lock wait.
pub struct HeldCharge {
    pub app: TestApp,
    pub gate: Gate,
    pub account: u64,
    pub original: tokio::task::JoinHandle<Result<tonic::Response<pb::ChargeReply>, tonic::Status>>,
}

impl HeldCharge {
    /// Returns once the charge is at the gate, past its probe and its debit.
    pub async fn start(db: &TestDb, key: &str, lock_wait: Duration) -> Self {
        let gate = Gate::new(key);
        let config = Config {
            lock_wait,
            gate: Some(gate.clone()),
            ..Config::default()
        };
        let app = TestApp::spawn_with(db, config).await;
        let account = app.funded_account("USD", 100).await;
        let mut client = app.client().await;
        let request = charge(key, account, 10);
        let original = tokio::spawn(async move { client.charge(request).await });
        gate.reached().await;
        Self {
            app,
            gate,
            account,
            original,
        }
    }
}
