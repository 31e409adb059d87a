//! Reads that wait for the change stream's numbers (a search, a balance now):
//! bounded by the call's deadline, and told when no instance assigns them.

use super::handle::Reads;
use crate::call::Call;
use crate::db::conn::connection::Conn;
use crate::db::tables::commits;
use crate::error::{Error, Recorded};

/// How often a read waiting for the change stream looks again: about half an
/// assigner's round.
pub(super) const NUMBERED_POLL: std::time::Duration = std::time::Duration::from_millis(5);
/// How long a read waits for the stream's numbers without a deadline of its
/// own, and how long without progress before it asks whether any instance
/// assigns them.
const NUMBERED_WAIT: std::time::Duration = std::time::Duration::from_secs(30);
const NUMBERED_STALL: std::time::Duration = std::time::Duration::from_millis(500);
/// Commits asked about at once, from the front of those a read waits for.
const NUMBERED_ASKED: usize = 1000;

/// A read waiting for the change stream's numbers: it asks on a read
/// connection every [`NUMBERED_POLL`], holding none while it waits (a read
/// behind a long backlog leaves the pool to the others), within the call's
/// deadline (past it: DEADLINE_EXCEEDED; without one, after [`NUMBERED_WAIT`]:
/// STREAM_BEHIND); when nothing came closer for [`NUMBERED_STALL`] it asks
/// whether an instance holds the stream's lease (none: STREAM_BEHIND).
#[derive(Debug)]
pub(super) struct Numbering {
    deadline: tokio::time::Instant,
    /// The deadline is the call's.
    called: bool,
    progress: tokio::time::Instant,
}

impl Numbering {
    pub(super) fn new(call: &Call) -> Self {
        let now = tokio::time::Instant::now();
        Self {
            deadline: call.deadline().unwrap_or(now + NUMBERED_WAIT),
            called: call.deadline().is_some(),
            progress: now,
        }
    }

    /// More of what is waited for is numbered than before.
    pub(super) fn closer(&mut self) {
        self.progress = tokio::time::Instant::now();
    }

    /// Nothing new on `conn`: whether to go on waiting.
    pub(super) async fn still_waiting(&mut self, conn: &mut Conn) -> Result<(), Error> {
        if tokio::time::Instant::now() >= self.deadline {
            return Err(if self.called {
                Error::DeadlineExceeded {
                    recorded: Recorded::Nothing,
                }
            } else {
                Error::StreamBehind
            });
        }
        if self.progress.elapsed() >= NUMBERED_STALL {
            if !commits::assigner_alive(conn).await? {
                return Err(Error::StreamBehind);
            }
            self.closer();
        }
        Ok(())
    }
}

impl Reads {
    /// Waits until every commit a plain read sees now has its numbers
    /// ([`Numbering`]). A call answered before this began committed before it
    /// began, so its entries are among them (on a cluster, the read pool's
    /// sessions read causally).
    pub(super) async fn until_numbered(&self, call: &Call) -> Result<(), Error> {
        // In the order the assigner numbers them (its index's): the front of the
        // list is numbered first, so a few at a time are asked about.
        let mut waiting: std::collections::VecDeque<u64> =
            commits::unnumbered(&mut *self.read_conn(call).await?)
                .await?
                .into();
        let mut numbering = Numbering::new(call);
        while !waiting.is_empty() {
            let front: Vec<u64> = waiting.iter().take(NUMBERED_ASKED).copied().collect();
            let mut conn = self.read_conn(call).await?;
            let mut left = commits::still_unnumbered(&mut conn, &front).await?;
            if left.len() < front.len() {
                numbering.closer();
                waiting.drain(..front.len());
                left.sort_unstable();
                for id in front.iter().rev() {
                    if left.binary_search(id).is_ok() {
                        waiting.push_front(*id);
                    }
                }
                continue;
            }
            numbering.still_waiting(&mut conn).await?;
            drop(conn);
            tokio::time::sleep(NUMBERED_POLL).await;
        }
        Ok(())
    }
}
