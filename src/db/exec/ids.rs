//! Ids of new accounts, entries and holds, handed out in blocks so a transaction
//! knows the ids of the rows it will write before it writes anything, and can
//! encode its reply first.
//!
//! An instance takes a block of [`BLOCK`] ids of a kind from `id_blocks` in one
//! autocommit statement on a read connection (never inside a ledger transaction,
//! and on a cluster never in a batch another node could abort half way), and
//! hands them out from memory. Ids are unique across instances; ids reserved for
//! a call that did not use them go back; a restarted instance leaves the rest of
//! its blocks unused. No lock is held across a round trip: callers that find the
//! kind used up each take a block, and every block taken is used.
//!
//! A transaction reserves its ids while it holds its rows' locks, so it should
//! not wait for a block: once fewer than [`REFILL_BELOW`] ids of a kind are
//! free, the next block is taken ahead, in a task of its own. A reservation
//! takes a block itself only when the ids run out before that task is done (or
//! it failed); that wait is bounded: each attempt by [`BLOCK_TIMEOUT`], and all
//! of them by the deadline of the call (of a batch, its member with the most time
//! left) it is taken for. `ledger_id_block_waits_total` counts the blocks waited for.

use std::collections::VecDeque;
use std::num::NonZeroU64;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Unsigned};
use diesel_async::{RunQueryDsl as _, SimpleAsyncConnection as _};
use tokio::time::Instant;

use crate::db::conn::failure::Failure;
use crate::db::conn::pool::Pool;
use crate::error::Error;
use crate::ledger::book::{NewIds, RowCounts};
use crate::ledger::{AccountId, EntryId, HoldId, SubscriptionId};
use crate::telemetry::metrics;

/// Ids per block: one allocation (a durable commit) per this many rows.
pub(crate) const BLOCK: u64 = 1000;
/// Free ids of a kind below which its next block is taken ahead: half a block
/// is many batches of common calls (a batch of 9 three-leg posts writes 54
/// entries), so the next block is there before they run out; a batch that needs
/// more than is left (posts of up to 256 legs) may still wait for it.
const REFILL_BELOW: u64 = BLOCK / 2;
/// Blocks one reservation may take before it gives up.
const MAX_BLOCKS_PER_RESERVATION: usize = 3;
/// Attempts at taking a block when a cluster reports a conflict.
const BLOCK_ATTEMPTS: u32 = 5;
/// The longest one attempt may take: two statements on a pooled connection.
const BLOCK_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Accounts,
    Entries,
    Holds,
    Subscriptions,
}

impl Kind {
    /// The row of `id_blocks`, named after the table.
    fn row(self) -> &'static str {
        match self {
            Self::Accounts => "accounts",
            Self::Entries => "entries",
            Self::Holds => "holds",
            Self::Subscriptions => "subscriptions",
        }
    }
}

/// The free ids of one kind.
#[derive(Debug, Default)]
struct Stock {
    /// Ranges handed out front first: given-back ids, then blocks in the order taken.
    ranges: VecDeque<Range<u64>>,
    /// A task is taking the next block ahead.
    refilling: bool,
}

impl Stock {
    fn free(&self) -> u64 {
        self.ranges.iter().map(|r| r.end - r.start).sum()
    }
}

#[derive(Debug, Default)]
struct Free {
    accounts: Stock,
    entries: Stock,
    holds: Stock,
    subscriptions: Stock,
}

impl Free {
    fn of(&mut self, kind: Kind) -> &mut Stock {
        match kind {
            Kind::Accounts => &mut self.accounts,
            Kind::Entries => &mut self.entries,
            Kind::Holds => &mut self.holds,
            Kind::Subscriptions => &mut self.subscriptions,
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Ids {
    free: Mutex<Free>,
}

impl Ids {
    /// Reserves ids for the rows `counts` may create, taking blocks through the
    /// read pool when a kind is used up, until `until` at the latest (`None`: as
    /// long as the attempts at a block take); a kind left short of ids has its
    /// next block taken ahead.
    pub(crate) async fn reserve(
        self: &Arc<Self>,
        counts: RowCounts,
        pool: &Pool,
        until: Option<Instant>,
    ) -> Result<NewIds, Failure> {
        let accounts = self
            .take(Kind::Accounts, counts.accounts, pool, until)
            .await?;
        let entries = self
            .take(Kind::Entries, counts.entries, pool, until)
            .await?;
        let holds = self.take(Kind::Holds, counts.holds, pool, until).await?;
        let subscriptions = self
            .take(Kind::Subscriptions, counts.subscriptions, pool, until)
            .await?;
        Ok(NewIds {
            accounts: ids(accounts, AccountId::new),
            entries: ids(entries, EntryId::new),
            holds: ids(holds, HoldId::new),
            subscriptions: ids(subscriptions, SubscriptionId::new),
        })
    }

    /// Puts back ids reserved but not used, to be handed out first.
    pub(crate) fn give_back(&self, unused: &NewIds) {
        let accounts: Vec<u64> = unused.accounts.iter().map(|i| i.get()).collect();
        let entries: Vec<u64> = unused.entries.iter().map(|i| i.get()).collect();
        let holds: Vec<u64> = unused.holds.iter().map(|i| i.get()).collect();
        let subscriptions: Vec<u64> = unused.subscriptions.iter().map(|i| i.get()).collect();
        self.give_back_raw(Kind::Accounts, &accounts);
        self.give_back_raw(Kind::Entries, &entries);
        self.give_back_raw(Kind::Holds, &holds);
        self.give_back_raw(Kind::Subscriptions, &subscriptions);
    }

    fn give_back_raw(&self, kind: Kind, ids: &[u64]) {
        if let Ok(mut free) = self.free.lock() {
            for id in ids.iter().rev() {
                free.of(kind).ranges.push_front(*id..*id + 1);
            }
        }
    }

    async fn take(
        self: &Arc<Self>,
        kind: Kind,
        n: usize,
        pool: &Pool,
        until: Option<Instant>,
    ) -> Result<Vec<u64>, Failure> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let mut taken = Vec::with_capacity(n);
        // One block covers any call; a second, a reservation that a block's
        // end splits. More means blocks are being taken by others as fast.
        let mut blocks = 0;
        loop {
            if self.take_free(kind, n, &mut taken) {
                self.refill_ahead(kind, pool);
            }
            if taken.len() == n {
                return Ok(taken);
            }
            if blocks == MAX_BLOCKS_PER_RESERVATION {
                break;
            }
            blocks += 1;
            metrics::id_block_wait(kind.row());
            // Without the lock: another caller may take a block meanwhile; both
            // blocks go into the free list.
            let block = take_block(kind, pool, until).await?;
            if let Ok(mut free) = self.free.lock() {
                free.of(kind).ranges.push_back(block);
            }
        }
        self.give_back_raw(kind, &taken);
        Err(Failure::Final(Error::unavailable(format!(
            "no {} ids after taking {MAX_BLOCKS_PER_RESERVATION} blocks",
            kind.row()
        ))))
    }

    /// Takes the kind's next block in a task of its own (one at a time: the
    /// [`take_free`](Self::take_free) that asks for it marks the kind as
    /// refilling). A block it fails to take is taken by the reservation that
    /// runs out of ids.
    fn refill_ahead(self: &Arc<Self>, kind: Kind, pool: &Pool) {
        let (ids, pool) = (Arc::clone(self), pool.clone());
        tokio::spawn(async move {
            let block = take_block(kind, &pool, None).await;
            if let Ok(mut free) = ids.free.lock() {
                let stock = free.of(kind);
                stock.refilling = false;
                match block {
                    Ok(block) => stock.ranges.push_back(block),
                    Err(failure) => tracing::debug!(
                        error = ?failure,
                        kind = kind.row(),
                        "taking a block of ids ahead failed; a reservation will take it"
                    ),
                }
            }
        });
    }

    /// Moves free ids into `into` until it holds `n`. True when it did, and
    /// left fewer than [`REFILL_BELOW`] free with no block being taken ahead:
    /// the kind is then marked refilling, and the caller takes the next block.
    fn take_free(&self, kind: Kind, n: usize, into: &mut Vec<u64>) -> bool {
        let Ok(mut free) = self.free.lock() else {
            return false;
        };
        let stock = free.of(kind);
        while into.len() < n {
            let Some(range) = stock.ranges.front_mut() else {
                return false;
            };
            match range.next() {
                Some(id) => into.push(id),
                None => {
                    stock.ranges.pop_front();
                }
            }
        }
        let refill = !stock.refilling && stock.free() < REFILL_BELOW;
        stock.refilling |= refill;
        refill
    }
}

fn ids<T>(raw: Vec<u64>, wrap: fn(NonZeroU64) -> T) -> VecDeque<T> {
    raw.into_iter()
        .filter_map(NonZeroU64::new)
        .map(wrap)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reservation_spans_the_end_of_a_block() {
        let ids = Ids::default();
        if let Ok(mut free) = ids.free.lock() {
            free.entries.ranges.push_back(1..2);
            free.entries.ranges.push_back(7..9);
        }
        let mut taken = vec![];
        assert!(
            ids.take_free(Kind::Entries, 2, &mut taken),
            "one id left: the next block is asked for"
        );
        assert_eq!(taken, [1, 7]);
        assert!(
            !ids.take_free(Kind::Entries, 3, &mut taken),
            "asked for once, while it is being taken"
        );
        assert_eq!(taken, [1, 7, 8]);
        assert!(!ids.take_free(Kind::Entries, 4, &mut taken));
        assert_eq!(taken, [1, 7, 8], "nothing left");
    }
}

#[derive(QueryableByName)]
struct End {
    #[diesel(sql_type = Unsigned<BigInt>)]
    end: u64,
}

/// Moves the kind's `next_id` on by a block, committed at once (a read
/// connection runs in autocommit), and returns the block; gives up at `until`.
/// It runs outside the caller's transaction, so a failure here is final for the
/// attempt: nothing of it was recorded.
async fn take_block(
    kind: Kind,
    pool: &Pool,
    until: Option<Instant>,
) -> Result<Range<u64>, Failure> {
    let unavailable = |e: String| Failure::Final(Error::unavailable(format!("taking ids: {e}")));
    let mut attempt = 1;
    loop {
        let bound = Instant::now() + BLOCK_TIMEOUT;
        let bound = until.map_or(bound, |until| until.min(bound));
        let taken = tokio::time::timeout_at(bound, try_take_block(kind, pool)).await;
        match taken {
            Ok(Ok(block)) => return Ok(block),
            // A cluster may abort the autocommit statement for a conflicting one.
            Ok(Err(e)) if attempt < BLOCK_ATTEMPTS && until.is_none_or(|u| Instant::now() < u) => {
                tracing::debug!(error = %e, attempt, "taking a block of ids failed; retrying");
                attempt += 1;
            }
            Ok(Err(e)) => return Err(unavailable(e)),
            Err(_) if until.is_some_and(|u| u <= bound) => {
                return Err(unavailable("no answer before the call's deadline".into()));
            }
            Err(_) => return Err(unavailable(format!("no answer within {BLOCK_TIMEOUT:?}"))),
        }
    }
}

async fn try_take_block(kind: Kind, pool: &Pool) -> Result<Range<u64>, String> {
    let mut conn = pool.get().await.map_err(|e| e.to_string())?;
    let moved = async {
        conn.batch_execute(&format!(
            "UPDATE id_blocks SET next_id = LAST_INSERT_ID(next_id + {BLOCK}) WHERE name = '{}'",
            kind.row()
        ))
        .await?;
        diesel::sql_query("SELECT LAST_INSERT_ID() AS end")
            .get_result::<End>(&mut *conn)
            .await
    }
    .await;
    let End { end } = moved.map_err(|e| {
        crate::db::conn::connection::discard(&mut conn);
        e.to_string()
    })?;
    if end <= BLOCK {
        return Err(format!("id_blocks has no row for {}", kind.row()));
    }
    Ok(end - BLOCK..end)
}
