//! Group commit: keyed calls that arrive while earlier ones are being written are
//! collected and served by one transaction, so a hot account pays one COMMIT per
//! batch rather than one per call. This module serves a batch; the writers that
//! take calls from their queues in batches, and leave a batch that stalls to
//! finish apart, are `writer`'s.
//!
//! Batching is natural: each writer serves the calls of a share of the accounts
//! and takes every call waiting when it becomes free (up to [`MAX_BATCH`]); an
//! idle service runs each call at once, alone. A batch's transaction is the
//! one a lone call runs (`attempt`), for many keys:
//!
//! ```text
//! INSERT INTO idempotency_keys VALUES (k1), (k2), ... ON DUPLICATE KEY UPDATE ...   (keys sorted)
//!   a row inserted for every key -> all new; otherwise:
//!   SELECT ... FROM idempotency_keys WHERE (namespace, key) IN (...) FOR UPDATE
//!     no outcome -> this batch inserted it: new;  an outcome -> a duplicate: replay
//! lock what the new calls need (accounts ascending, holds, entries), once
//! decide each new call in arrival order against the running rows (`Book`)
//! the entries; each account's and each key's UPDATE, by primary key; COMMIT
//!                                                        (one round trip)
//! ```
//!
//! One member's trouble is its own (`attempt`): a reused key, a decline whose key
//! had an effect that retention purged, or a caller that left or ran out of time
//! before the COMMIT is answered alone, its key row deleted, and the others commit
//! without it. The batch waits (for a connection, on a lock) as long as its most
//! patient member may; a member out of time meanwhile is answered by its handler.
//!
//! Anything else out of the ordinary splits the batch: its calls rerun one by one
//! on `keyed`'s path, where the probe settles each (SPEC 3.6). That covers a key
//! whose original is still in flight elsewhere (the probe's lock wait passed), a
//! write that met a purged key's effect, or a lost connection. Deadlocks,
//! certification conflicts and a COMMIT whose outcome is not known (on a cluster,
//! any failure of a guarded batch) retry the whole batch first: its probe settles
//! each member, replaying the keys that committed.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use super::attempt::{self, Answer, Calling, Mode};
use super::core::Core;
use super::keyed;
use super::locate::Reach;
use crate::call::Call;
use crate::db::conn::backoff::Backoff;
use crate::db::conn::failure::AttemptError;
use crate::db::conn::lease::{LockWait, checkout};
use crate::db::conn::route::Route;
use crate::db::conn::tx::Tx;
use crate::error::Error;
use crate::ledger::{Fingerprint, KeyedOutcome, Needs, ScopedKey};
use crate::ops::Command;
use crate::telemetry::metrics;

/// The most calls one transaction serves.
pub(crate) const MAX_BATCH: usize = 64;

/// A keyed call waiting for, or in, a batch.
pub(crate) struct Member {
    pub(crate) call: Call,
    pub(crate) key: ScopedKey,
    pub(crate) command: Command,
    pub(crate) fingerprint: Fingerprint,
    /// The accounts it touches, found before it was queued: its writer routes
    /// and holds it back by them, and its transaction's node is chosen by them.
    pub(crate) reach: Reach,
    /// What it touches, which no later call of its writer may overtake: every
    /// account it reaches, and the entries and holds it names (by themselves
    /// too, for one whose account was not found).
    pub(crate) names: Vec<Name>,
    /// The operations it names by key (a reversal's original), in its
    /// namespace: it is never decided in the batch that decides one of them.
    pub(crate) originals: Vec<ScopedKey>,
    pub(crate) answer: oneshot::Sender<Result<KeyedOutcome, Error>>,
    /// Keeps the key marked as queued or in a batch until the member is dropped.
    claim: Option<Claimed>,
}

impl Member {
    /// A member for `command`, which `needs` what it says.
    pub(crate) fn new(
        call: Call,
        key: ScopedKey,
        command: Command,
        reach: Reach,
        needs: Needs,
        answer: oneshot::Sender<Result<KeyedOutcome, Error>>,
    ) -> Self {
        let originals = needs
            .originals
            .into_iter()
            .map(|original| ScopedKey {
                namespace: key.namespace.clone(),
                key: original,
            })
            .collect();
        let names = reach
            .accounts()
            .iter()
            .map(|a| Name::Account(a.get()))
            .chain(needs.entries.iter().map(|e| Name::Entry(e.get())))
            .chain(needs.holds.iter().map(|h| Name::Hold(h.get())))
            .collect();
        Self {
            fingerprint: command.fingerprint(),
            call,
            key,
            command,
            reach,
            names,
            originals,
            answer,
            claim: None,
        }
    }

    /// Whether it may not be decided in one batch with `other`: one names the
    /// other's key. The reversal would find its original claimed by its own
    /// transaction, neither committed nor absent, and decide against nothing.
    pub(crate) fn names_or_is_named_by(&self, other: &Self) -> bool {
        self.originals.contains(&other.key) || other.originals.contains(&self.key)
    }
}

/// A row a call touches, which no later call of a writer may overtake. Keys
/// need no holding back: a call whose key is queued or in a batch here never
/// queues (`writer::Queue::push`). Ordered accounts first, then entries, then
/// holds, each by id: a call's writer is its lowest name's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Name {
    Account(u64),
    Entry(u64),
    Hold(u64),
}

/// The keys this instance has queued or in a batch, each with the accounts its
/// call touches. A second call with one of them does not queue behind the first
/// (it would wait on it without the lock-wait bound), but goes to the database
/// alone and waits on the key's row there. A call that names one of them (a
/// reversal of an original not yet committed, which has no entries to find)
/// takes on the original's accounts: it goes to the original's writer, behind
/// it, and is held back by them while the original's batch stalls, rather than
/// waiting on the original's key row inside a batch of other accounts' calls.
#[derive(Default)]
pub(crate) struct Keys(Arc<Mutex<HashMap<ScopedKey, Reach>>>);

impl Keys {
    /// Marks the member's key as queued or in a batch until the member is
    /// dropped, after adding to its reach the accounts of the calls here whose
    /// keys it names; false when a call with its key already is.
    pub(crate) fn claim(&self, member: &mut Member) -> Result<bool, Error> {
        let mut keys = self
            .0
            .lock()
            .map_err(|_| Error::internal("the batch keys' lock is poisoned"))?;
        if keys.contains_key(&member.key) {
            return Ok(false);
        }
        for original in &member.originals {
            if let Some(reach) = keys.get(original) {
                member.reach.extend(reach);
                let added = reach.accounts().iter().map(|a| Name::Account(a.get()));
                member.names.extend(added);
            }
        }
        keys.insert(member.key.clone(), member.reach.clone());
        member.claim = Some(Claimed {
            key: member.key.clone(),
            keys: self.0.clone(),
        });
        Ok(true)
    }
}

/// A key this instance has queued or in a batch.
struct Claimed {
    key: ScopedKey,
    keys: Arc<Mutex<HashMap<ScopedKey, Reach>>>,
}

impl Drop for Claimed {
    fn drop(&mut self) {
        if let Ok(mut keys) = self.keys.lock() {
            keys.remove(&self.key);
        }
    }
}

/// Serves a batch: every member is answered.
pub(super) async fn serve(ex: &Core, batch: Vec<Member>) {
    let mut members = Vec::with_capacity(batch.len());
    let mut keys = HashSet::new();
    for member in batch {
        if let Err(e) = member.call.ensure_live() {
            let _ = member.answer.send(Err(e));
        } else if keys.insert(member.key.clone()) {
            members.push(member);
        } else {
            // A second call with a key already in the batch waits for the first on
            // the key's row, then replays it.
            alone(ex, member);
        }
    }
    if members.len() <= 1 {
        // Alone, on the one-call path, but in this writer: calls arriving
        // meanwhile form the next batch.
        for member in members {
            let result = keyed::run(
                ex,
                &member.call,
                &member.key,
                &member.command,
                &member.reach,
            )
            .await;
            let _ = member.answer.send(result);
        }
        return;
    }
    metrics::batch(members.len());
    let max_attempts = ex.inner.limits.max_attempts.max(1);
    let mut attempt = 1;
    let mut backoff = Backoff::new();
    loop {
        match attempt_batch(ex, &members).await {
            Ok(answers) => {
                for (member, answer) in members.into_iter().zip(answers) {
                    let _ = member.answer.send(answer);
                }
                return;
            }
            Err(Split::Retry(reason)) if attempt < max_attempts => {
                metrics::retry(reason);
                // A member whose caller left, or whose deadline passed, meanwhile
                // is answered now rather than bounding the next attempt.
                members = answer_the_gone(members);
                // Backs off as one call would; a delay no member can afford
                // splits the batch instead.
                let Some(loosest) = loosest(members.iter().map(|m| &m.call)) else {
                    return;
                };
                if !backoff.wait(loosest).await {
                    break;
                }
                attempt += 1;
            }
            Err(Split::Retry(_) | Split::Apart) => break,
            Err(Split::Unavailable(reason)) => {
                for member in members {
                    let recorded = member.call.recorded();
                    let reason = reason.clone();
                    let _ = member
                        .answer
                        .send(Err(Error::Unavailable { reason, recorded }));
                }
                return;
            }
        }
    }
    metrics::batch_split();
    for member in members {
        alone(ex, member);
    }
}

/// Answers the members that are no longer live (their caller left, or their
/// deadline passed); returns the others.
fn answer_the_gone(members: Vec<Member>) -> Vec<Member> {
    let mut live = Vec::with_capacity(members.len());
    for member in members {
        match member.call.ensure_live() {
            Ok(()) => live.push(member),
            Err(e) => {
                let _ = member.answer.send(Err(e));
            }
        }
    }
    live
}

/// Runs a member on the one-call path, in its own tracked task.
fn alone(ex: &Core, member: Member) {
    let ex = ex.clone();
    ex.inner.tasks.clone().spawn(async move {
        let Member {
            call,
            key,
            command,
            reach,
            answer,
            ..
        } = member;
        let _ = answer.send(keyed::run(&ex, &call, &key, &command, &reach).await);
    });
}

/// Why a batch did not commit.
enum Split {
    /// A deadlock or conflict rolled it back, or its COMMIT's outcome is not
    /// known: try the whole batch again (the reason, for the retry metric).
    Retry(&'static str),
    /// Serve each member alone.
    Apart,
    /// The database is silent or no connection was free: every member is
    /// answered UNAVAILABLE.
    Unavailable(String),
}

impl From<AttemptError> for Split {
    fn from(e: AttemptError) -> Self {
        match e {
            // The next attempt's probe settles every member, as `keyed`'s does:
            // a committed key replays, a free one is decided again.
            AttemptError::Conflict => Self::Retry("conflict"),
            AttemptError::Unsettled(_) => Self::Retry("unsettled"),
            // The batch waited for a connection as long as its most patient member
            // could: none of them would get one alone.
            AttemptError::Silent(reason) | AttemptError::NoConnection(reason) => {
                Self::Unavailable(reason)
            }
            _ => Self::Apart,
        }
    }
}

/// One transaction for the batch, on the node its first member routes to; on
/// success, each member's answer in order.
async fn attempt_batch(ex: &Core, members: &[Member]) -> Result<Vec<Answer>, Split> {
    let first = members.first().ok_or(Split::Apart)?;
    let route = Route::of(first.reach.accounts(), &first.key);
    let node = ex.inner.keyed.choose(&route);
    let pool = node.pool();
    // The batch waits as long as its most patient member may; a member whose
    // deadline passes meanwhile is answered by its handler and left out before
    // COMMIT (`attempt`), and costs the others nothing.
    let loosest = loosest(members.iter().map(|m| &m.call)).unwrap_or(&first.call);
    let calls: Vec<Calling<'_>> = members
        .iter()
        .map(|m| Calling {
            call: &m.call,
            key: &m.key,
            command: &m.command,
            fingerprint: &m.fingerprint,
        })
        .collect();
    let result = async {
        let mut conn = checkout(pool, loosest).await?;
        let lock_wait =
            LockWait::lower(&mut conn, pool, loosest, ex.inner.limits.lock_wait).await?;
        // Read after checkout, it covers the connection checked out.
        let mode = Mode {
            batch: Core::batch(pool),
            prove_unused: false,
        };
        let tx = Tx::new(&mut conn, pool, lock_wait.duration());
        let result = attempt::transaction(ex, tx, mode, &calls).await;
        lock_wait.restore(&mut conn, pool).await;
        result
    }
    .await;
    if let Err(AttemptError::ConnectionLost(_) | AttemptError::Silent(_)) = &result {
        pool.report_lost();
        ex.inner.keyed.pass_over(node);
    }
    result.map_err(Split::from)
}

/// The call with the most time left, which bounds the batch's waits; a call
/// without a deadline has the most.
fn loosest<'a>(calls: impl Iterator<Item = &'a Call>) -> Option<&'a Call> {
    calls.max_by_key(|call| call.remaining().unwrap_or(Duration::MAX))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::loosest;
    use crate::call::Call;

    #[tokio::test]
    async fn the_loosest_call_is_the_one_with_most_time_left() {
        let unbounded = Call::unbounded();
        let later = Call::new(Some(Instant::now() + Duration::from_secs(60)));
        let soon = Call::new(Some(Instant::now() + Duration::from_secs(2)));
        let found = loosest([&soon, &unbounded, &later].into_iter()).map(Call::deadline);
        assert_eq!(found, Some(None), "no deadline is the most time");
        let found = loosest([&soon, &later].into_iter()).map(Call::deadline);
        assert_eq!(found, Some(later.deadline()));
        assert!(loosest(std::iter::empty()).is_none());
    }
}
