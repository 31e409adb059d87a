//! Delivery to other systems (SPEC 3.15): every instance runs a [`Deliverer`],
//! which takes the leases of the subscriptions no live instance holds and
//! delivers each one it holds in a task of its own (`subscription`), sending
//! the matching entries in sequence order (`send`), at least once, never
//! skipped.
//!
//! A lease lasts [`LEASE`] and is renewed every [`RENEW`]; an instance that
//! dies stops renewing, and another takes its subscriptions over once their
//! leases lapse. Every move of a cursor is conditioned on the lease, so an
//! instance that lost one (a pause, a takeover after a stall) moves nothing
//! and stops; the new holder sends from the cursor, which repeats at most the
//! deliveries that were not acknowledged in the database.
//!
//! - `subscription`: one subscription's loop: read, filter, send, move the cursor.
//! - `send`: the HTTP request: the body, the signature, the receiver's address.

mod send;
mod subscription;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::db::{Deliveries, Leased};
use crate::ledger::SubscriptionId;

pub use send::is_private;

/// How long a lease lasts without renewal: how soon another instance takes
/// over the subscriptions of one that died.
pub const LEASE: Duration = Duration::from_secs(6);
/// How often the leases are renewed, and free ones taken.
pub const RENEW: Duration = Duration::from_secs(2);
/// How often the highest sequence assigned is read while this instance
/// delivers any subscription and entries are coming ([`BUSY_FOR`] after the
/// last that came)...
const HEAD_POLL: Duration = Duration::from_millis(10);
/// ... and while none came for that long: a quiet ledger costs a read every
/// 50 ms, and its first new entry is seen at most that late.
const QUIET_POLL: Duration = Duration::from_millis(50);
/// How long after the head last moved the reads stay [`HEAD_POLL`] apart.
const BUSY_FOR: Duration = Duration::from_millis(500);

/// How deliveries are made.
#[derive(Debug, Clone, Copy)]
pub struct DeliverySettings {
    /// Receivers on loopback or private addresses are allowed.
    pub allow_private: bool,
}

/// The instance's deliverer: its leases and the tasks that deliver them.
#[derive(Debug)]
pub struct Deliverer {
    db: Deliveries,
    owner: Arc<str>,
    sender: send::Sender,
}

impl Deliverer {
    pub fn new(db: Deliveries, settings: DeliverySettings) -> anyhow::Result<Self> {
        let owner = format!("{:016x}", rand::random::<u64>());
        Ok(Self {
            db,
            owner: owner.into(),
            sender: send::Sender::new(settings.allow_private)?,
        })
    }

    /// Delivers until `stop`, then gives its leases back.
    pub async fn run(self, stop: CancellationToken) {
        let (head_tx, stream_head) = watch::channel(0_u64);
        let mut running: HashMap<SubscriptionId, (watch::Sender<Leased>, CancellationToken)> =
            HashMap::new();
        let mut renew = tokio::time::interval(RENEW);
        let mut next_poll = tokio::time::Instant::now();
        let mut moved_at = tokio::time::Instant::now();
        let lease_ms = u64::try_from(LEASE.as_millis()).unwrap_or(5000);
        let mut failing = false;
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = renew.tick() => {
                    let leases = match self.db.take_leases(&self.owner, lease_ms).await {
                        Ok(leases) => {
                            if std::mem::take(&mut failing) {
                                tracing::info!("subscription leases renewed again");
                            }
                            leases
                        }
                        Err(e) => {
                            // Said once when it starts, not every RENEW while
                            // the database is out of reach.
                            if std::mem::replace(&mut failing, true) {
                                tracing::debug!(error = %e, "renewing subscription leases failed");
                            } else {
                                tracing::warn!(error = %e, "renewing subscription leases failed");
                            }
                            // The leases lapse: stop before another instance starts.
                            for (_, (_, cancel)) in running.drain() {
                                cancel.cancel();
                            }
                            continue;
                        }
                    };
                    running.retain(|id, (_, cancel)| {
                        let keep = leases.iter().any(|l| l.row.id == *id) && !cancel.is_cancelled();
                        if !keep {
                            cancel.cancel();
                        }
                        keep
                    });
                    for leased in leases {
                        let id = leased.row.id;
                        crate::telemetry::metrics::subscription_state(id.get(), leased.row.state.code());
                        if let Some((updates, _)) = running.get(&id) {
                            updates.send_replace(leased);
                            continue;
                        }
                        let cancel = stop.child_token();
                        let (updates, lease) = watch::channel(leased);
                        let task = subscription::Task {
                            db: self.db.clone(),
                            owner: self.owner.clone(),
                            sender: self.sender.clone(),
                            lease,
                            head: stream_head.clone(),
                            stop: cancel.clone(),
                        };
                        tokio::spawn(task.run());
                        running.insert(id, (updates, cancel));
                    }
                    crate::telemetry::metrics::subscriptions_held(running.len());
                }
                () = tokio::time::sleep_until(next_poll), if !running.is_empty() => {
                    match self.db.head().await {
                        Ok(at) => {
                            let moved = head_tx.send_if_modified(|h| {
                                let moved = at > *h;
                                *h = (*h).max(at);
                                moved
                            });
                            if moved {
                                moved_at = tokio::time::Instant::now();
                            }
                        }
                        Err(e) => tracing::debug!(error = %e, "reading the stream's head failed"),
                    }
                    let busy = moved_at.elapsed() < BUSY_FOR;
                    next_poll = tokio::time::Instant::now() + if busy { HEAD_POLL } else { QUIET_POLL };
                }
            }
        }
        for (_, (_, cancel)) in running.drain() {
            cancel.cancel();
        }
        if let Err(e) = self.db.release_leases(&self.owner).await {
            tracing::warn!(error = %e, "giving back subscription leases failed");
        }
    }
}
