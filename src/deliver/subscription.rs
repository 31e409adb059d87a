//! One subscription's delivery: read the entries numbered after its cursor,
//! keep those that match, send them (at most [`PER_REQUEST`] a request), and
//! move the cursor once the receiver acknowledged them; on a failure, send the
//! same entries again after a backoff, the later ones waiting behind them.

use std::sync::Arc;
use std::time::Duration;

use prost::Message as _;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::send::{Outcome, Sender};
use crate::db::{Deliveries, Leased};
use crate::ledger::{Entry, SubscriptionState};
use crate::proto::pb;
use crate::telemetry::metrics;

/// The most entries one request carries (SPEC 3.15).
pub(super) const PER_REQUEST: usize = 100;
/// Entries read from the stream at once.
const READ: u32 = 1000;
/// The first wait after a failure; each further failure doubles it.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait between attempts while the subscription is active.
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// Failures for this long make a subscription FAILING (SPEC 3.15).
const FAILING_AFTER: Duration = Duration::from_secs(24 * 3600);
/// How often a FAILING subscription is tried.
const FAILING_RETRY: Duration = Duration::from_secs(3600);

/// The entries a subscription asked for.
#[derive(Debug, Clone, Default)]
pub(super) struct Filter {
    accounts: Vec<u64>,
    kinds: Vec<u8>,
    metadata: Vec<(String, String)>,
}

impl Filter {
    pub(super) fn of(definition: &pb::Subscription) -> Self {
        Self {
            accounts: definition.account_ids.clone(),
            kinds: definition
                .kinds
                .iter()
                .filter_map(|k| u8::try_from(*k).ok())
                .collect(),
            metadata: definition
                .metadata
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        }
    }

    pub(super) fn matches(&self, entry: &Entry) -> bool {
        (self.accounts.is_empty() || self.accounts.contains(&entry.account_id.get()))
            && (self.kinds.is_empty() || self.kinds.contains(&entry.kind.code()))
            && self.metadata.iter().all(|(k, v)| {
                entry
                    .metadata
                    .pairs()
                    .any(|(key, value)| key == k && value == v)
            })
    }
}

/// A subscription this instance holds the lease of.
pub(super) struct Task {
    pub(super) db: Deliveries,
    pub(super) owner: Arc<str>,
    pub(super) sender: Sender,
    /// The row as each renewal of the lease finds it.
    pub(super) lease: watch::Receiver<Leased>,
    /// The highest sequence assigned.
    pub(super) head: watch::Receiver<u64>,
    pub(super) stop: CancellationToken,
}

/// Where a task is in its subscription's stream.
struct Progress {
    /// The last sequence acknowledged (or passed over, matching nothing).
    cursor: u64,
    /// The last sequence read.
    scanned: u64,
    /// Entries read, matching, not yet acknowledged, in sequence order.
    pending: Vec<Entry>,
    /// Failed deliveries in a row.
    failures: u32,
}

/// What to do next.
enum Next {
    Go,
    Stop,
}

impl Task {
    pub(super) async fn run(mut self) {
        let leased = self.lease.borrow().clone();
        let definition =
            pb::Subscription::decode(leased.row.definition.as_slice()).unwrap_or_default();
        let filter = Filter::of(&definition);
        let mut progress = Progress {
            cursor: leased.row.cursor,
            scanned: leased.row.cursor,
            pending: Vec::new(),
            failures: 0,
        };
        // A subscription taken over in a run of failures waits as its last
        // holder would have.
        if let Some(at) = leased.next_attempt_at {
            let wait = (at - chrono::Utc::now()).to_std().unwrap_or_default();
            if self.pause(wait).await {
                return;
            }
        }
        loop {
            if self.stop.is_cancelled() {
                return;
            }
            let next = if progress.pending.is_empty() {
                self.read(&filter, &mut progress).await
            } else {
                self.deliver(&definition.url, &leased.row.secret, &mut progress)
                    .await
            };
            if matches!(next, Next::Stop) {
                return;
            }
        }
    }

    /// Reads the entries numbered after what was read, keeping those that
    /// match; when none does, moves the cursor past them.
    async fn read(&mut self, filter: &Filter, progress: &mut Progress) -> Next {
        let id = self.lease.borrow().row.id;
        let head = *self.head.borrow_and_update();
        if head <= progress.scanned {
            tokio::select! {
                () = self.stop.cancelled() => return Next::Stop,
                changed = self.head.changed() => if changed.is_err() { return Next::Stop },
            }
            return Next::Go;
        }
        match self.db.entries(progress.scanned, head, READ).await {
            Ok(entries) => {
                progress.scanned = entries.last().map_or(head, |e| e.sequence.unwrap_or(head));
                progress.pending = entries.into_iter().filter(|e| filter.matches(e)).collect();
            }
            Err(e) => {
                tracing::warn!(subscription = %id, error = %e, "reading entries failed");
                return if self.pause(FIRST_BACKOFF).await {
                    Next::Stop
                } else {
                    Next::Go
                };
            }
        }
        if progress.pending.is_empty() {
            match self.db.advance(id, &self.owner, progress.scanned).await {
                Ok(true) => progress.cursor = progress.scanned,
                Ok(false) => return Next::Stop,
                Err(e) => {
                    tracing::debug!(subscription = %id, error = %e, "moving a cursor failed");
                }
            }
            metrics::subscription_lag(id.get(), progress.scanned - progress.cursor, None);
        }
        Next::Go
    }

    /// Sends the first pending entries (at most [`PER_REQUEST`]); moves the
    /// cursor once they are acknowledged, or waits out a backoff.
    async fn deliver(&mut self, url: &str, secret: &str, progress: &mut Progress) -> Next {
        let id = self.lease.borrow().row.id;
        let take = progress.pending.len().min(PER_REQUEST);
        let batch = progress.pending.get(..take).unwrap_or_default();
        let first = batch.first().and_then(|e| e.sequence).unwrap_or_default();
        let last = batch.last().and_then(|e| e.sequence).unwrap_or(first);
        // The cursor moves past the unmatched entries read after the last one
        // sent only once nothing is left to send.
        let through = if take == progress.pending.len() {
            progress.scanned
        } else {
            last
        };
        let oldest = batch.first().map(|e| e.created_at);
        match self.db.may_deliver(id, &self.owner).await {
            Ok(true) => {}
            // Paused, deleted, or another instance's now.
            Ok(false) => return Next::Stop,
            Err(e) => {
                tracing::warn!(subscription = %id, error = %e, "checking a lease failed");
                return if self.pause(FIRST_BACKOFF).await {
                    Next::Stop
                } else {
                    Next::Go
                };
            }
        }
        match self
            .sender
            .send(id.get(), url, secret, batch, first, last)
            .await
        {
            Outcome::Acknowledged => {
                metrics::delivery(id.get(), true);
                progress.failures = 0;
                progress.pending.drain(..take);
                match self.db.advance(id, &self.owner, through).await {
                    Ok(true) => progress.cursor = through,
                    // The lease is another instance's now: it sends from the cursor.
                    Ok(false) => return Next::Stop,
                    Err(e) => {
                        tracing::warn!(subscription = %id, error = %e, "moving a cursor failed");
                    }
                }
                let behind = progress.scanned.saturating_sub(progress.cursor);
                metrics::subscription_lag(id.get(), behind, oldest);
                Next::Go
            }
            Outcome::Failed(why) => {
                metrics::delivery(id.get(), false);
                progress.failures = progress.failures.saturating_add(1);
                let failing = self.lease.borrow().row.state == SubscriptionState::Failing;
                let wait = if failing {
                    FAILING_RETRY
                } else {
                    backoff(progress.failures)
                };
                tracing::info!(subscription = %id, error = %why, retry_in = ?wait, "a delivery failed");
                let wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
                let recorded = self
                    .db
                    .record_failure(id, &self.owner, &why, wait_ms, FAILING_AFTER.as_secs())
                    .await;
                if let Err(e) = recorded {
                    tracing::debug!(subscription = %id, error = %e, "recording a failure failed");
                }
                if self.pause(wait).await {
                    Next::Stop
                } else {
                    Next::Go
                }
            }
        }
    }

    /// Waits `wait`, or less when the subscription is resumed (its failures
    /// forgotten); true when the task must stop.
    async fn pause(&mut self, wait: Duration) -> bool {
        let until = tokio::time::Instant::now() + wait;
        loop {
            tokio::select! {
                () = self.stop.cancelled() => return true,
                () = tokio::time::sleep_until(until) => return false,
                changed = self.lease.changed() => {
                    if changed.is_err() {
                        return true;
                    }
                    if self.lease.borrow().next_attempt_at.is_none() {
                        return false;
                    }
                }
            }
        }
    }
}

/// The wait after `failures` failures in a row: doubling from a second, at
/// most five minutes, each between half and all of it (jitter), so receivers
/// coming back are not met by every sender at once.
fn backoff(failures: u32) -> Duration {
    let exp = FIRST_BACKOFF.saturating_mul(1_u32 << failures.saturating_sub(1).min(16));
    let full = exp.min(MAX_BACKOFF);
    let jitter = f64::from(rand::random::<u32>()) / f64::from(u32::MAX);
    full.mul_f64(0.5 + jitter / 2.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_up_to_its_ceiling() {
        for failures in 1..40 {
            let full = FIRST_BACKOFF
                .saturating_mul(1_u32 << (failures - 1).min(16))
                .min(MAX_BACKOFF);
            let wait = backoff(failures);
            assert!(
                wait >= full / 2 && wait <= full,
                "{failures}: {wait:?} of {full:?}"
            );
        }
    }
}
