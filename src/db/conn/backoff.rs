//! The waits between the attempts of a transaction retried whole (a deadlock, a
//! conflict at certification, a lost connection): jittered, growing
//! exponentially, never past the caller's deadline.

use std::time::Duration;

use crate::call::Call;

/// The first retry waits up to this long; each further one up to twice as long.
const BACKOFF_BASE: Duration = Duration::from_millis(5);
/// No single retry waits longer: conflicts on a hot row clear within milliseconds.
const BACKOFF_CAP: Duration = Duration::from_millis(250);

/// The waits between a call's attempts: growing exponentially from
/// [`BACKOFF_BASE`] to [`BACKOFF_CAP`], each jittered (up to twice as long), so
/// calls that conflicted together spread out.
pub(crate) struct Backoff(backon::ExponentialBackoff);

impl Backoff {
    pub(crate) fn new() -> Self {
        use backon::BackoffBuilder as _;
        let delays = backon::ExponentialBuilder::new()
            .with_min_delay(BACKOFF_BASE)
            .with_max_delay(BACKOFF_CAP)
            .with_jitter()
            .without_max_times()
            .build();
        Self(delays)
    }

    /// Sleeps the next wait. Returns false, without sleeping, when it would
    /// outlast the caller's deadline.
    pub(crate) async fn wait(&mut self, call: &Call) -> bool {
        let Some(delay) = self.0.next() else {
            return false;
        };
        if call.remaining().is_some_and(|left| left <= delay) {
            return false;
        }
        tokio::time::sleep(delay).await;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_waits_grow_to_the_cap_each_jittered_within_twice_its_bound() {
        let mut backoff = Backoff::new();
        let waits: Vec<Duration> = (0..12).filter_map(|_| backoff.0.next()).collect();
        assert_eq!(waits.len(), 12, "no limit on the number of waits");
        assert!(waits[0] >= BACKOFF_BASE && waits[0] < 2 * BACKOFF_BASE);
        assert!(waits.iter().all(|w| *w < 2 * BACKOFF_CAP), "{waits:?}");
        assert!(waits[11] >= BACKOFF_CAP, "{waits:?}");
    }
}
