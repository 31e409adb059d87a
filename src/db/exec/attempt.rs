//! One attempt at the exactly-once transaction (SPEC 3.2), the same for a lone
//! call and for a batch of calls sharing a connection:
//!
//! ```text
//! only if the calls name entries or holds the cache of their accounts lacks:
//!   find those accounts (`locate`), then ROLLBACK, so the transaction the probe
//!   begins has no snapshot yet
//! probe the keys: one key, affected rows 1 (new) or 0 (duplicate), anything
//!   else an internal error; several keys, one statement, and their rows read
//!   back under lock unless it inserted a row for every key
//! a duplicate: its stored outcome, replayed (or IDEMPOTENCY_KEY_REUSED)
//! the new calls: lock what they need (`load`), decide each in order against
//!   one Book, encode each outcome; a decline (or any outcome after a write met
//!   an effect carrying the key) is stored only if the key had no effect
//!   that retention's purge left behind (`effects`)
//! one round trip: the writes, the outcomes, COMMIT (guarded on a
//!   multi-primary node); only replays: ROLLBACK
//! ```
//!
//! `keyed` retries attempts of one call; `group` retries a batch whole, or splits
//! it so one call's trouble does not hold up the others. Each call's state
//! (`call`) follows the COMMIT: an answer lost with it leaves the call uncertain,
//! and the next attempt's probe settles it.

use std::collections::BTreeSet;

use tokio::time::Instant;

use super::core::Core;
use super::load;
use super::locate::{self, Located};
use super::writes::{self, KeyOutcome};
use crate::call::Call;
use crate::db::conn::failure::{AttemptError, Failure};
use crate::db::conn::tx::{Committed, Tx};
use crate::db::tables::effects;
use crate::db::tables::idempotency::{self, BatchKeyRow, Claim, KeyRow};
use crate::error::Error;
use crate::ledger::book::{Caller, Record};
use crate::ledger::{
    Book, Fingerprint, KeyedOutcome, Metadata, Needs, Refusal, ScopedKey, StoredOutcome,
};
use crate::ops::Command;
use crate::telemetry::metrics::{self, Phase};

/// One call of an attempt.
#[derive(Debug, Clone, Copy)]
pub(super) struct Calling<'a> {
    pub(super) call: &'a Call,
    pub(super) key: &'a ScopedKey,
    pub(super) command: &'a Command,
    pub(super) fingerprint: &'a Fingerprint,
}

/// How an attempt runs.
#[derive(Debug, Clone, Copy)]
pub(super) struct Mode {
    /// How its final batch is sent on its connection's node.
    pub(super) batch: writes::Batch,
    /// An earlier attempt's write met an effect carrying the key (a purged key
    /// that took effect): every outcome waits for its key's effects to be
    /// looked up.
    pub(super) prove_unused: bool,
}

/// What the attempt found under a call's key.
enum Found {
    New,
    Replay(StoredOutcome),
    /// The key was first used for a different request.
    Reused,
}

/// A call's answer from an attempt: its outcome, or an error final for it alone
/// (its key was first used for another request, it met a purged key's effect, or
/// its caller left before COMMIT). Either way the others go on without it.
pub(super) type Answer = Result<KeyedOutcome, Error>;

/// The attempt: on success, each call's answer, in order. The calls' keys are
/// distinct.
///
/// One call's trouble is its own: a call refused (a reused key, a purged key's
/// decline) or gone before COMMIT (its caller left, its deadline passed) is
/// answered alone and left out of the writes, and the key row its probe inserted
/// is deleted with them; the others commit as they were decided, or are decided
/// again without it when it left after the decisions.
///
/// Transactions are plain statements on the connection rather than diesel's
/// transaction manager, since the final writes and COMMIT travel together, which
/// the manager cannot express. Every path ends in COMMIT or ROLLBACK, or in a
/// connection dropped by [`Tx`].
pub(super) async fn transaction(
    ex: &Core,
    mut tx: Tx<'_>,
    mode: Mode,
    calls: &[Calling<'_>],
) -> Result<Vec<Answer>, AttemptError> {
    let started = Instant::now();
    let (located, found, originals) = match claim_all(ex, &mut tx, calls).await {
        Ok(claimed) => claimed,
        Err(failure) => return Err(tx.fail(failure).await),
    };
    metrics::transaction_phase(Phase::Claim, started.elapsed());
    let mut slots: Vec<Slot<'_, '_>> = calls.iter().zip(found).map(Slot::new).collect();
    // Keys this probe inserted whose calls are out: deleted with the writes.
    let mut dropped: Vec<&ScopedKey> = Vec::new();
    loop {
        for slot in pending_mut(&mut slots) {
            if let Err(e) = slot.calling.call.ensure_live() {
                slot.drop_out(e, &mut dropped);
            }
        }
        let deciding: Vec<Calling<'_>> = pending(&slots).map(|s| *s.calling).collect();
        if deciding.is_empty() {
            // Nothing to write: the ROLLBACK takes the probe's rows with it.
            tx.finish().await?;
            return Ok(settle(slots));
        }
        let context = Context {
            located: &located,
            originals: &originals,
            dropped: &dropped,
        };
        let decided = match decide(ex, &mut tx, mode, &deciding, context).await {
            Ok(decided) => decided,
            Err(failure) => return Err(tx.fail(failure).await),
        };
        for (slot, outcome) in pending_mut(&mut slots).zip(decided.outcomes) {
            match outcome {
                Ok(outcome) => slot.decided = Some(outcome),
                Err(e) => slot.drop_out(e, &mut dropped),
            }
        }
        for slot in pending_mut(&mut slots) {
            if !std::mem::replace(&mut slot.hooked, true) {
                before_commit(ex, slot.calling).await;
            }
        }
        let committing: Vec<&Call> = pending(&slots).map(|s| s.calling.call).collect();
        if committing.is_empty() {
            tx.finish().await?;
            return Ok(settle(slots));
        }
        if let Err((gone, e)) = begin_commit(&committing) {
            // It may have shaped the others' decisions: decide them again without
            // it (the locks are held, and nothing is written yet).
            if let Some(slot) = pending_mut(&mut slots).nth(gone) {
                slot.drop_out(e, &mut dropped);
            }
            continue;
        }
        let committing_at = Instant::now();
        commit(tx, mode, &committing, &decided.sql).await?;
        metrics::transaction_phase(Phase::Commit, committing_at.elapsed());
        // Its entries wait for the assigner's next round.
        ex.inner.stream.wake();
        for slot in pending_mut(&mut slots) {
            slot.answer = slot.decided.take().map(|outcome| {
                Ok(KeyedOutcome {
                    outcome,
                    replayed: false,
                })
            });
        }
        return Ok(settle(slots));
    }
}

/// Finds what the calls name (`locate`), then claims their keys, with the key
/// rows of the operations they name: what each call found under its key, and
/// each named operation's record.
async fn claim_all(
    ex: &Core,
    tx: &mut Tx<'_>,
    calls: &[Calling<'_>],
) -> Result<(Located, Vec<Found>, Vec<(ScopedKey, Option<Record>)>), Failure> {
    let needs: Vec<_> = calls.iter().map(|c| c.command.needs()).collect();
    let named = originals(calls, &needs);
    let named_refs: Vec<&ScopedKey> = named.iter().collect();
    let located = locate::locate(tx, &needs, &named_refs, &ex.inner.locator).await?;
    let (found, originals) = if named.is_empty() {
        (claim(tx, calls).await?, Vec::new())
    } else {
        claim_with_originals(tx, calls, &named).await?
    };
    Ok((located, found, originals))
}

/// A call of the attempt, and what has become of it.
struct Slot<'a, 'c> {
    calling: &'a Calling<'c>,
    /// Its answer, once it has one: a replay, a refusal, or its committed outcome.
    answer: Option<Answer>,
    /// Its outcome in the last round of decisions.
    decided: Option<StoredOutcome>,
    /// The fault-injection point has seen it.
    hooked: bool,
}

impl<'a, 'c> Slot<'a, 'c> {
    /// The call, answered already if its key had an outcome.
    fn new((calling, found): (&'a Calling<'c>, Found)) -> Self {
        let answer = match found {
            Found::New => {
                // The key was free: whatever an earlier attempt's lost COMMIT
                // did, it did not commit.
                calling.call.settled_nothing();
                None
            }
            Found::Replay(outcome) => Some(Ok(KeyedOutcome {
                outcome,
                replayed: true,
            })),
            Found::Reused => Some(Err(Error::KeyReused)),
        };
        Self {
            calling,
            answer,
            decided: None,
            hooked: false,
        }
    }

    /// Answers the call alone and leaves it out: the key row its probe inserted
    /// is deleted with the writes.
    fn drop_out(&mut self, error: Error, dropped: &mut Vec<&'c ScopedKey>) {
        self.answer = Some(Err(error));
        dropped.push(self.calling.key);
    }
}

/// The calls still to be answered, in order.
fn pending<'s, 'a, 'c>(slots: &'s [Slot<'a, 'c>]) -> impl Iterator<Item = &'s Slot<'a, 'c>> {
    slots.iter().filter(|s| s.answer.is_none())
}

fn pending_mut<'s, 'a, 'c>(
    slots: &'s mut [Slot<'a, 'c>],
) -> impl Iterator<Item = &'s mut Slot<'a, 'c>> {
    slots.iter_mut().filter(|s| s.answer.is_none())
}

/// Every call's answer, once each has one.
fn settle(slots: Vec<Slot<'_, '_>>) -> Vec<Answer> {
    slots
        .into_iter()
        .map(|s| {
            s.answer
                .unwrap_or_else(|| Err(Error::internal("an attempt left a call unanswered")))
        })
        .collect()
}

/// Claims the right to COMMIT for each call about to commit; when one may not
/// (its caller left, its deadline passed), releases the others and names it.
fn begin_commit(committing: &[&Call]) -> Result<(), (usize, Error)> {
    for (n, call) in committing.iter().enumerate() {
        if let Err(e) = call.begin_commit() {
            for begun in committing.iter().take(n) {
                begun.end_commit();
            }
            return Err((n, e));
        }
    }
    Ok(())
}

/// Claims the calls' keys and tells new from duplicate.
async fn claim(tx: &mut Tx<'_>, calls: &[Calling<'_>]) -> Result<Vec<Found>, Failure> {
    if let [one] = calls {
        let method = one.command.method();
        return match idempotency::probe(tx, one.key, method, one.fingerprint).await? {
            Claim::New => Ok(vec![Found::New]),
            Claim::Duplicate => {
                let row = idempotency::lock_existing(tx, one.key).await?;
                let outcome = row
                    .outcome()
                    .ok_or_else(|| Error::internal("a committed key row has no outcome"))?;
                Ok(vec![found(&row, one, outcome)])
            }
        };
    }
    let mut keys: Vec<_> = calls
        .iter()
        .map(|c| (c.key, c.command.method(), c.fingerprint))
        .collect();
    // Sorted, so two batches claim shared keys in one order.
    keys.sort_by(|a, b| {
        (a.0.namespace.as_str(), a.0.key.as_str()).cmp(&(b.0.namespace.as_str(), b.0.key.as_str()))
    });
    if idempotency::probe_all(tx, &keys).await? {
        return Ok(calls.iter().map(|_| Found::New).collect());
    }
    let keys: Vec<&ScopedKey> = keys.iter().map(|k| k.0).collect();
    let rows = idempotency::lock_claimed(tx, &keys).await?;
    found_in(&rows, calls)
}

/// The operations the calls name by key, each in its call's namespace,
/// ascending, once each.
fn originals(calls: &[Calling<'_>], needs: &[Needs]) -> Vec<ScopedKey> {
    let named: BTreeSet<ScopedKey> = calls
        .iter()
        .zip(needs)
        .flat_map(|(calling, needs)| {
            needs.originals.iter().map(|key| ScopedKey {
                namespace: calling.key.namespace.clone(),
                key: key.clone(),
            })
        })
        .collect();
    named.into_iter().collect()
}

/// A key [`claim_with_originals`] takes: a call's own, or an operation's it
/// names (where the two are equal, the call's own first: it is the probe's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Taken<'a> {
    Own(&'a ScopedKey),
    Original(&'a ScopedKey),
}

impl<'a> Taken<'a> {
    fn key(self) -> &'a ScopedKey {
        match self {
            Self::Own(key) | Self::Original(key) => key,
        }
    }
}

/// [`claim`] for calls that name operations by key: the calls' keys and the
/// operations' key rows, all in the keys' order, so that two transactions
/// taking any of the same key rows take them in one order. Each run of the
/// calls' own keys is probed in one statement, each run of the operations' key
/// rows locked in one (a row still uncommitted is waited for, as `LookupKey`
/// waits); then the calls' rows are read back under lock. Returns each call's
/// finding and each operation's key row, if it has one.
async fn claim_with_originals(
    tx: &mut Tx<'_>,
    calls: &[Calling<'_>],
    originals: &[ScopedKey],
) -> Result<(Vec<Found>, Vec<(ScopedKey, Option<Record>)>), Failure> {
    let mut taken: Vec<Taken<'_>> = calls
        .iter()
        .map(|c| Taken::Own(c.key))
        .chain(originals.iter().map(Taken::Original))
        .collect();
    taken.sort_by(|a, b| a.key().cmp(b.key()).then(a.cmp(b)));
    let mut rows: Vec<BatchKeyRow> = Vec::new();
    for run in taken.chunk_by(|a, b| matches!(a, Taken::Own(_)) == matches!(b, Taken::Own(_))) {
        let keys: Vec<&ScopedKey> = run.iter().map(|t| t.key()).collect();
        if matches!(run.first(), Some(Taken::Own(_))) {
            let probed: Vec<_> = run
                .iter()
                .filter_map(|t| calls.iter().find(|c| c.key == t.key()))
                .map(|c| (c.key, c.command.method(), c.fingerprint))
                .collect();
            idempotency::probe_all(tx, &probed).await?;
        } else {
            rows.extend(idempotency::lock_claimed(tx, &keys).await?);
        }
    }
    let own: Vec<&ScopedKey> = calls.iter().map(|c| c.key).collect();
    let own_rows = idempotency::lock_claimed(tx, &own).await?;
    let found = found_in(&own_rows, calls)?;
    let records = originals
        .iter()
        .map(|key| {
            let record = match rows.iter().find(|r| r.is(key)) {
                None => None,
                Some(r) => {
                    // The lock waited out every other transaction's claim, so a
                    // row with no outcome is this one's: a call decided in the
                    // batch that decides the key it names, which the writers
                    // never form (`writer`). It would decide against nothing.
                    let outcome = r.row.outcome().ok_or_else(|| {
                        Error::internal("a call names a key its own transaction claims")
                    })?;
                    Some(Record::Committed {
                        method: r.row.method,
                        succeeded: outcome.code == 0,
                    })
                }
            };
            Ok((key.clone(), record))
        })
        .collect::<Result<_, Failure>>()?;
    Ok((found, records))
}

/// Each call's finding in its key's row, read back under lock after its probe.
fn found_in(rows: &[BatchKeyRow], calls: &[Calling<'_>]) -> Result<Vec<Found>, Failure> {
    calls
        .iter()
        .map(|calling| {
            let row = rows
                .iter()
                .find(|r| r.is(calling.key))
                .ok_or_else(|| Error::internal("a probed key has no row"))?;
            // No outcome: this probe inserted it (a row another transaction held
            // would have made the probe wait until that one committed, with an
            // outcome, or rolled back).
            Ok(match row.row.outcome() {
                None => Found::New,
                Some(outcome) => found(&row.row, calling, outcome),
            })
        })
        .collect()
}

/// A duplicate: its outcome if the request is the one its key was first used
/// for (SPEC 3.2 step 5).
fn found(row: &KeyRow, calling: &Calling<'_>, outcome: StoredOutcome) -> Found {
    if row.binds(calling.command.method(), calling.fingerprint) {
        Found::Replay(outcome)
    } else {
        Found::Reused
    }
}

/// The new calls' decisions, in order, and the batch that records them.
struct Decided {
    /// Each call's outcome, or the error that refuses it alone.
    outcomes: Vec<Result<StoredOutcome, Error>>,
    /// The writes, the outcomes stored, the dropped keys' rows deleted; COMMIT.
    sql: String,
}

/// What the decisions of an attempt are made with, besides its calls.
#[derive(Clone, Copy)]
struct Context<'a> {
    /// What `locate` found before the probe.
    located: &'a Located,
    /// The operations named by key, with their key rows as the probe locked them.
    originals: &'a [(ScopedKey, Option<Record>)],
    /// Keys this probe inserted whose calls are out.
    dropped: &'a [&'a ScopedKey],
}

/// Locks what the new calls need, decides each in order against one book, and
/// returns their outcomes and the batch that records them; the rows of the
/// `dropped` keys, and of any call refused here, are deleted by it.
///
/// A key that is new here may still have had an effect, if retention purged its
/// row (SPEC 3.5). A success finds out for free: its write meets the effect's
/// unique key, and the next attempt comes back with `prove_unused`. A decline
/// writes no effect, so before one is stored the effects are looked up: a stale
/// decline must never replace a purged success.
async fn decide(
    ex: &Core,
    tx: &mut Tx<'_>,
    mode: Mode,
    fresh: &[Calling<'_>],
    context: Context<'_>,
) -> Result<Decided, Failure> {
    let needs: Vec<_> = fresh.iter().map(|c| c.command.needs()).collect();
    let until = latest_deadline(fresh);
    let locking = Instant::now();
    let named = load::Named {
        located: context.located,
        originals: context.originals,
    };
    let mut book = load::book(tx, &needs, named, &ex.inner.ids, &ex.inner.reads, until).await?;
    let deciding = Instant::now();
    metrics::transaction_phase(Phase::Lock, deciding - locking);
    let decided = decide_each(ex, tx, mode, fresh, &mut book).await;
    let changes = book.into_changes();
    ex.inner.ids.give_back(&changes.unused);
    let outcomes = decided?;
    // One per call of the book, in its order (an entry names its call's key by
    // index), then the dropped keys.
    let keys: Vec<KeyOutcome<'_>> = fresh
        .iter()
        .zip(&outcomes)
        .map(|(c, outcome)| KeyOutcome {
            key: c.key,
            outcome: outcome
                .as_ref()
                .ok()
                .map(|o| (c.command.method(), c.fingerprint, o)),
            metadata: c.command.metadata(),
        })
        .chain(context.dropped.iter().map(|key| KeyOutcome {
            key,
            outcome: None,
            metadata: Metadata::none(),
        }))
        .collect();
    let sql = writes::commit_batch(&changes, &keys, mode.batch)?;
    metrics::transaction_phase(Phase::Decide, deciding.elapsed());
    Ok(Decided { outcomes, sql })
}

/// The latest of the calls' deadlines, which bounds the batch's waits outside its
/// transaction (a block of ids); `None` when one of them has none.
fn latest_deadline(calls: &[Calling<'_>]) -> Option<Instant> {
    let mut latest: Option<Instant> = None;
    for calling in calls {
        let deadline = calling.call.deadline()?;
        latest = Some(latest.map_or(deadline, |l| l.max(deadline)));
    }
    latest
}

async fn decide_each(
    ex: &Core,
    tx: &mut Tx<'_>,
    mode: Mode,
    fresh: &[Calling<'_>],
    book: &mut Book,
) -> Result<Vec<Result<StoredOutcome, Error>>, Failure> {
    let mut outcomes = Vec::with_capacity(fresh.len());
    for calling in fresh {
        book.start_call(Caller {
            key: calling.key.clone(),
            metadata: calling.command.metadata().clone(),
        });
        let decided = calling.command.decide(book);
        let purged = if mode.prove_unused || matches!(decided, Err(Refusal::Declined(_))) {
            effects::purged_use(tx, calling.key).await?
        } else {
            None
        };
        // A call refused here leaves the book as it found it.
        book.finish_call(decided.is_ok() && purged.is_none());
        if let Some(first) = purged {
            outcomes.push(Err(first.expired(Some(calling.command.method()))));
            continue;
        }
        outcomes.push(match decided {
            Ok(reply) => Ok(StoredOutcome::reply(reply)),
            Err(Refusal::Declined(decline)) => Ok(ex.inner.encoder.declined(&decline)),
            Err(Refusal::Internal(detail)) => return Err(Error::internal(detail).into()),
        });
    }
    Ok(outcomes)
}

/// Sends the writes with COMMIT (every call committing holds the right to) and
/// settles each call's state by what the COMMIT did (SPEC 3.6).
async fn commit(
    tx: Tx<'_>,
    mode: Mode,
    committing: &[&Call],
    sql: &str,
) -> Result<(), AttemptError> {
    match tx.commit(sql, mode.batch == writes::Batch::Guarded).await {
        Committed::Yes => Ok(()),
        Committed::No(failure) => {
            for call in committing {
                call.end_commit();
            }
            Err(failure)
        }
        Committed::Unknown(failure) => {
            for call in committing {
                call.commit_unknown();
            }
            tracing::debug!(error = ?failure, "whether the COMMIT took effect is not known; settling through the keys");
            // Whatever the failure, every call settles through its key.
            Err(match failure {
                lost @ (AttemptError::ConnectionLost(_) | AttemptError::Silent(_)) => lost,
                other => AttemptError::Unsettled(format!("{other:?}")),
            })
        }
    }
}

/// The fault-injection point (`BeforeCommit`), when one is set.
async fn before_commit(ex: &Core, calling: &Calling<'_>) {
    if let Some(hook) = &ex.inner.before_commit {
        hook(super::core::BeforeCommitEvent {
            method: calling.command.method(),
            key: calling.key.clone(),
            call: calling.call.clone(),
        })
        .await;
    }
}
