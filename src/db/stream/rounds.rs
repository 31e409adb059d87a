//! What the rounds in a row have done, and how long the assigner waits after each.

use std::time::Duration;

use crate::db::conn::failure::AttemptError;

/// Between rounds while they find nothing and no local writer commits: entries
/// written through other instances wait at most about this long.
pub(super) const IDLE_TICK: Duration = Duration::from_millis(20);
/// After a failed round or lease attempt (the database down, say).
pub(super) const ERROR_PAUSE: Duration = Duration::from_millis(250);
/// Rounds failed in a row before it is worth a warning (about 5 s of them).
const FAILURES_REPORTED: u32 = 20;
/// The most commits one round reads (and numbers).
pub const ROUND_LIMIT: u64 = 2_000;
/// The most a round reads after rounds cut at their limit numbered nothing:
/// each such round doubles the read, so the commits that come first on their
/// accounts, when the instants and ids of the rest put them past the limit (a
/// migrated ledger of one instant, a clock that stepped back), are reached.
const MAX_ROUND_LIMIT: u64 = 262_144;

/// What a round did.
pub(super) enum Round {
    /// The lease is not (or no longer) this instance's.
    NotOurs,
    Done {
        numbered: usize,
        held_back: usize,
        /// The read stopped at its limit.
        cut: bool,
    },
}

/// What the rounds in a row have done: for the log, and the next one's limit.
#[derive(Debug)]
pub(super) struct Rounds {
    /// The last round could number none of the commits it read.
    stuck: bool,
    /// Rounds failed in a row.
    failures: u32,
    /// How many commits the next round reads.
    pub(super) limit: u64,
}

impl Default for Rounds {
    fn default() -> Self {
        Self {
            stuck: false,
            failures: 0,
            limit: ROUND_LIMIT,
        }
    }
}

impl Rounds {
    /// Logs what deserves it, and says how long to wait before the next round
    /// (`None`: the lease is lost).
    pub(super) fn judge(&mut self, round: Result<Round, AttemptError>) -> Option<Duration> {
        match round {
            Ok(Round::NotOurs) => None,
            Ok(Round::Done {
                numbered,
                held_back,
                cut,
            }) => {
                if self.failures >= FAILURES_REPORTED {
                    tracing::info!(
                        failures = self.failures,
                        "rounds of the change stream succeed again"
                    );
                }
                self.failures = 0;
                let stuck = numbered == 0 && held_back > 0;
                if !cut {
                    self.limit = ROUND_LIMIT;
                } else if stuck && self.limit < MAX_ROUND_LIMIT {
                    self.limit = (self.limit * 2).min(MAX_ROUND_LIMIT);
                    tracing::debug!(
                        limit = self.limit,
                        "the commits first on their accounts are past the round's limit; reading more"
                    );
                    return Some(Duration::ZERO);
                }
                if stuck && !self.stuck {
                    tracing::warn!(
                        held_back,
                        "a round of the change stream can number none of the commits it read"
                    );
                }
                self.stuck = stuck;
                Some(if numbered > 0 {
                    Duration::ZERO
                } else {
                    IDLE_TICK
                })
            }
            Err(e) => {
                self.failures += 1;
                if self.failures == FAILURES_REPORTED {
                    tracing::warn!(failures = self.failures, error = ?e, "rounds of the change stream keep failing; entries wait for their numbers");
                } else {
                    tracing::debug!(error = ?e, "a round of the change stream failed; trying again");
                }
                // A deadlock or a certification conflict clears at once; the
                // database gone does not.
                Some(if matches!(e, AttemptError::Conflict) {
                    Duration::ZERO
                } else {
                    ERROR_PAUSE
                })
            }
        }
    }
}
