//! One attempt at the exactly-once transaction (SPEC 3.2), the same for a lone
//! call and for a batch of calls sharing a connection:
//!
//! ```text
//! only if the calls name entries or holds: find their accounts (`load::locate`),
//!   then ROLLBACK, so the transaction the probe begins has no snapshot yet
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

use super::load;
use super::writes::{self, KeyOutcome};
use crate::call::Call;
use crate::db::Persistence;
use crate::db::conn::failure::{AttemptError, Failure};
use crate::db::conn::tx::{Committed, Tx};
use crate::db::tables::effects;
use crate::db::tables::idempotency::{self, Claim, KeyRow};
use crate::error::Error;
use crate::ledger::{Book, Fingerprint, KeyedOutcome, Refusal, ScopedKey, StoredOutcome};
use crate::ops::Command;

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

/// The attempt: on success, each call's outcome, in order. The calls' keys are
/// distinct.
///
/// Transactions are plain statements on the connection rather than diesel's
/// transaction manager, since the final writes and COMMIT travel together, which
/// the manager cannot express. Every path ends in COMMIT or ROLLBACK, or in a
/// connection dropped by [`Tx`].
pub(super) async fn transaction(
    db: &Persistence,
    mut tx: Tx<'_>,
    mode: Mode,
    calls: &[Calling<'_>],
) -> Result<Vec<KeyedOutcome>, AttemptError> {
    let needs: Vec<_> = calls.iter().map(|c| c.command.needs()).collect();
    let located = match load::locate(&mut tx, &needs).await {
        Ok(located) => located,
        Err(failure) => return Err(tx.fail(failure).await),
    };
    let found = match claim(&mut tx, calls).await {
        Ok(found) => found,
        Err(failure) => return Err(tx.fail(failure).await),
    };
    if found.iter().any(|f| matches!(f, Found::Reused)) {
        // Its answer is an error, not an outcome: a batch splits, and the call
        // alone is answered IDEMPOTENCY_KEY_REUSED.
        return Err(tx.fail(Failure::Final(Error::KeyReused)).await);
    }
    let fresh: Vec<Calling<'_>> = calls
        .iter()
        .zip(&found)
        .filter(|(_, f)| matches!(f, Found::New))
        .map(|(c, _)| *c)
        .collect();
    for calling in &fresh {
        // The key was free: whatever an earlier attempt's lost COMMIT did, it did
        // not commit.
        calling.call.settled_nothing();
    }
    if fresh.is_empty() {
        tx.finish().await?;
        return Ok(answers(found, Vec::new()));
    }
    let (decided, sql) = match decide(db, &mut tx, mode, &fresh, &located).await {
        Ok(decided) => decided,
        Err(failure) => return Err(tx.fail(failure).await),
    };
    for calling in &fresh {
        before_commit(db, calling).await;
    }
    commit(tx, mode, &fresh, &sql).await?;
    Ok(answers(found, decided))
}

/// Each call's answer, in order: a replay, or the next new call's outcome.
fn answers(found: Vec<Found>, decided: Vec<StoredOutcome>) -> Vec<KeyedOutcome> {
    let mut decided = decided.into_iter();
    found
        .into_iter()
        .filter_map(|found| match found {
            Found::New => decided.next().map(|outcome| KeyedOutcome {
                outcome,
                replayed: false,
            }),
            Found::Replay(outcome) => Some(KeyedOutcome {
                outcome,
                replayed: true,
            }),
            Found::Reused => None,
        })
        .collect()
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

/// Locks what the new calls need, decides each in order against one book, and
/// returns their outcomes and the batch that records them.
///
/// A key that is new here may still have had an effect, if retention purged its
/// row (SPEC 3.5). A success finds out for free: its write meets the effect's
/// unique key, and the next attempt comes back with `prove_unused`. A decline
/// writes no effect, so before one is stored the effects are looked up: a stale
/// decline must never replace a purged success.
async fn decide(
    db: &Persistence,
    tx: &mut Tx<'_>,
    mode: Mode,
    fresh: &[Calling<'_>],
    located: &load::Located,
) -> Result<(Vec<StoredOutcome>, String), Failure> {
    let needs: Vec<_> = fresh.iter().map(|c| c.command.needs()).collect();
    let mut book = load::book(tx, &needs, located, &db.inner.ids, &db.inner.reads).await?;
    let decided = decide_each(db, tx, mode, fresh, &mut book).await;
    let changes = book.into_changes();
    db.inner.ids.give_back(&changes.unused);
    let outcomes = decided?;
    let keys: Vec<KeyOutcome<'_>> = fresh
        .iter()
        .zip(&outcomes)
        .map(|(c, outcome)| KeyOutcome {
            key: c.key,
            outcome,
        })
        .collect();
    let sql = writes::commit_batch(&changes, &keys, mode.batch)?;
    Ok((outcomes, sql))
}

async fn decide_each(
    db: &Persistence,
    tx: &mut Tx<'_>,
    mode: Mode,
    fresh: &[Calling<'_>],
    book: &mut Book,
) -> Result<Vec<StoredOutcome>, Failure> {
    let mut outcomes = Vec::with_capacity(fresh.len());
    for calling in fresh {
        book.start_call(calling.key.key.clone());
        let decided = calling.command.decide(book);
        book.finish_call(decided.is_ok());
        if (mode.prove_unused || matches!(decided, Err(Refusal::Declined(_))))
            && let Some(first) = effects::purged_use(tx, calling.key).await?
        {
            return Err(Failure::Final(
                first.expired(Some(calling.command.method())),
            ));
        }
        outcomes.push(match decided {
            Ok(reply) => StoredOutcome::reply(reply),
            Err(Refusal::Declined(decline)) => db.inner.encoder.declined(&decline),
            Err(Refusal::Internal(detail)) => return Err(Error::internal(detail).into()),
        });
    }
    Ok(outcomes)
}

/// Sends the writes with COMMIT, if every new call may still commit, and
/// settles each call's state by what the COMMIT did (SPEC 3.6).
async fn commit(
    tx: Tx<'_>,
    mode: Mode,
    fresh: &[Calling<'_>],
    sql: &str,
) -> Result<(), AttemptError> {
    for (i, calling) in fresh.iter().enumerate() {
        if let Err(e) = calling.call.begin_commit() {
            for committing in fresh.iter().take(i) {
                committing.call.end_commit();
            }
            return Err(tx.fail(Failure::Final(e)).await);
        }
    }
    match tx.commit(sql, mode.batch == writes::Batch::Guarded).await {
        Committed::Yes => Ok(()),
        Committed::No(failure) => {
            for calling in fresh {
                calling.call.end_commit();
            }
            Err(failure)
        }
        Committed::Unknown(failure) => {
            for calling in fresh {
                calling.call.commit_unknown();
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
async fn before_commit(db: &Persistence, calling: &Calling<'_>) {
    if let Some(hook) = &db.inner.before_commit {
        hook(crate::db::BeforeCommitEvent {
            method: calling.command.method(),
            key: calling.key.clone(),
            call: calling.call.clone(),
        })
        .await;
    }
}
