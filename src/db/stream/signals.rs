//! What the assigner and this instance's writers and readers share.

use tokio::sync::{Notify, watch};

use crate::telemetry::metrics;

/// What the assigner and this instance's writers and readers share.
#[derive(Debug)]
pub struct Signals {
    /// Notified after a local keyed COMMIT: entries may wait for a round.
    pub(super) wake: Notify,
    /// The highest sequence assigned, as this instance last learned it: after
    /// each round it committed, and from the lease row about every second.
    assigned: watch::Sender<u64>,
}

impl Default for Signals {
    fn default() -> Self {
        Self {
            wake: Notify::new(),
            assigned: watch::Sender::new(0),
        }
    }
}

impl Signals {
    /// A local writer committed.
    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }

    pub(crate) fn assigned(&self) -> watch::Receiver<u64> {
        self.assigned.subscribe()
    }

    pub(super) fn publish(&self, highest: u64) {
        self.assigned.send_if_modified(|seen| {
            let newer = highest > *seen;
            if newer {
                *seen = highest;
            }
            newer
        });
        #[expect(clippy::cast_precision_loss, reason = "a gauge")]
        metrics::stream_sequence(highest as f64);
    }
}
