//! The exactly-once transaction (SPEC 3.2), one per keyed call, the same for
//! every operation:
//!
//! ```text
//! (no BEGIN: the session runs without autocommit, so the probe begins it)
//! INSERT INTO idempotency_keys ... ON DUPLICATE KEY UPDATE idempotency_key = idempotency_key
//!   1 row  -> new key:   lock what the operation needs (`load`), let it decide (a
//!                        decline is an outcome too), encode the outcome
//!   0 rows -> duplicate: SELECT the key's row FOR UPDATE, check the fingerprint,
//!                        replay the stored outcome
//! then, in one round trip:
//!   the writes of what changed; UPDATE idempotency_keys SET outcome ...; COMMIT
//!   (on a multi-primary cluster, guarded, and checked after COMMIT: `writes`)
//! unless the caller is gone or its deadline passed: then ROLLBACK
//! ```
//!
//! A duplicate of an uncommitted original blocks in the probe until the original
//! ends: after a COMMIT it replays, after a ROLLBACK it does the work itself.
//! Deadlocks, certification conflicts and lost connections retry the whole
//! transaction with jittered backoff; the probe makes every retry safe, and
//! settles a COMMIT whose answer was lost (`call`). Each attempt goes to the node
//! its route chooses (`route`); a node whose connection was lost is passed over,
//! so the retry goes to the next. A call whose deadline is shorter than the lock-wait bound
//! lowers `innodb_lock_wait_timeout` first, and restores it after.

use std::time::Duration;

use super::load;
use super::writes::{self, KeyOutcome};
use crate::call::Call;
use crate::db::Persistence;
use crate::db::conn::failure::{AttemptError, Failure};
use crate::db::conn::lease::{LockWait, checkout};
use crate::db::conn::pool;
use crate::db::conn::tx::{Committed, Tx};
use crate::db::tables::effects;
use crate::db::tables::idempotency::{self, Claim};
use crate::error::Error;
use crate::ledger::{Command, Fingerprint, KeyedOutcome, Refusal, ScopedKey};
use crate::telemetry::metrics;

/// The first retry waits up to this long; each further one up to twice as long.
const BACKOFF_BASE: Duration = Duration::from_millis(5);
/// No single retry waits longer: conflicts on a hot row clear within milliseconds.
const BACKOFF_CAP: Duration = Duration::from_millis(250);

pub(crate) async fn run(
    db: &Persistence,
    call: &Call,
    key: &ScopedKey,
    command: &Command,
) -> Result<KeyedOutcome, Error> {
    let fingerprint = Fingerprint::of(command);
    let route = db
        .inner
        .keyed
        .route(&command.operation().needs(), key, &db.inner.reads)
        .await;
    let max_attempts = db.inner.limits.max_attempts.max(1);
    let mut attempt = 1;
    let mut prove_unused = false;
    loop {
        call.ensure_live()?;
        let node = db.inner.keyed.choose(&route);
        let last = match run_once(
            db,
            node.pool(),
            call,
            key,
            command,
            &fingerprint,
            prove_unused,
        )
        .await
        {
            Ok(outcome) => return Ok(outcome),
            Err(AttemptError::Final(e)) => return Err(e),
            Err(AttemptError::KeyOnEffect(reason)) if !prove_unused => {
                tracing::debug!(%reason, "an effect already carries the key; proving it");
                prove_unused = true;
                continue;
            }
            Err(last @ (AttemptError::Silent(_) | AttemptError::NoConnection(_))) => {
                if let AttemptError::Silent(_) = last {
                    db.inner.keyed.pass_over(node);
                }
                return Err(last.into_error(attempt, call.recorded()));
            }
            Err(retryable) => retryable,
        };
        tracing::debug!(attempt, error = ?last, "transaction attempt failed; retrying");
        match last {
            AttemptError::Conflict => metrics::retry("conflict"),
            AttemptError::ConnectionLost(_) => {
                metrics::retry("connection");
                node.pool().report_lost();
                db.inner.keyed.pass_over(node);
            }
            AttemptError::Unsettled(_) => metrics::retry("unsettled"),
            AttemptError::Silent(_)
            | AttemptError::NoConnection(_)
            | AttemptError::KeyOnEffect(_)
            | AttemptError::Final(_) => {}
        }
        if attempt >= max_attempts || !backoff(attempt, call).await {
            return Err(last.into_error(attempt, call.recorded()));
        }
        attempt += 1;
    }
}

/// Sleeps a jittered, exponentially growing delay. Returns false, without
/// sleeping, when the delay would outlast the caller's deadline.
pub(super) async fn backoff(attempt: u32, call: &Call) -> bool {
    let ceiling = BACKOFF_BASE
        .saturating_mul(1 << attempt.min(16))
        .min(BACKOFF_CAP);
    let delay = ceiling.mul_f64(rand::random::<f64>());
    if call.remaining().is_some_and(|left| left <= delay) {
        return false;
    }
    tokio::time::sleep(delay).await;
    true
}

async fn run_once(
    db: &Persistence,
    pool: &pool::Pool,
    call: &Call,
    key: &ScopedKey,
    command: &Command,
    fingerprint: &Fingerprint,
    prove_unused: bool,
) -> Result<KeyedOutcome, AttemptError> {
    let mut conn = checkout(pool, call).await?;
    let lock_wait = LockWait::lower(&mut conn, pool, call, db.inner.limits.lock_wait).await?;
    // Read after checkout, it covers the connection checked out.
    let mode = Mode {
        batch: Persistence::batch(pool),
        prove_unused,
    };
    let tx = Tx::new(&mut conn, pool, lock_wait.duration());
    let result = transaction(db, tx, mode, call, key, command, fingerprint).await;
    lock_wait.restore(&mut conn, pool).await;
    result
}

/// How an attempt runs: how its final batch is sent on its connection's node, and
/// whether an earlier attempt's write met an effect carrying the key
/// (`prove_unused`).
#[derive(Debug, Clone, Copy)]
struct Mode {
    batch: writes::Batch,
    prove_unused: bool,
}

/// The probe, then the work of a new key or the replay of a duplicate.
///
/// Transactions are plain statements on the connection rather than diesel's
/// transaction manager, since the final writes and COMMIT travel together, which
/// the manager cannot express. Every path ends in COMMIT or ROLLBACK, or in a
/// connection dropped by [`Tx`].
async fn transaction(
    db: &Persistence,
    mut tx: Tx<'_>,
    mode: Mode,
    call: &Call,
    key: &ScopedKey,
    command: &Command,
    fingerprint: &Fingerprint,
) -> Result<KeyedOutcome, AttemptError> {
    let claim = match idempotency::probe(&mut tx, key, command.method(), fingerprint).await {
        Ok(claim) => claim,
        Err(failure) => return Err(tx.fail(failure).await),
    };
    if claim == Claim::Duplicate {
        return replay(tx, key, command, fingerprint).await;
    }
    // The key was free: whatever an earlier attempt's lost COMMIT did, it did not
    // commit.
    call.settled_nothing();
    let decided = match decide(db, &mut tx, mode, key, command).await {
        Ok(decided) => decided,
        Err(failure) => return Err(tx.fail(failure).await),
    };
    let (outcome, sql) = decided;
    before_commit(db, call, key, command).await;
    if let Err(e) = call.begin_commit() {
        return Err(tx.fail(Failure::Final(e)).await);
    }
    match tx.commit(&sql, mode.batch == writes::Batch::Guarded).await {
        Committed::Yes => Ok(KeyedOutcome {
            outcome,
            replayed: false,
        }),
        Committed::No(failure) => {
            call.end_commit();
            Err(failure)
        }
        Committed::Unknown(failure) => {
            call.commit_unknown();
            tracing::debug!(error = ?failure, "whether the COMMIT took effect is not known; settling through the key");
            Err(match failure {
                silent @ AttemptError::Silent(_) => silent,
                other => AttemptError::Unsettled(format!("{other:?}")),
            })
        }
    }
}

/// Locks what the operation needs, lets it decide, and returns the outcome and
/// the batch that records it.
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
    key: &ScopedKey,
    command: &Command,
) -> Result<(crate::ledger::StoredOutcome, String), Failure> {
    let operation = command.operation();
    let needs = [operation.needs()];
    let mut book = load::book(tx, &needs, &db.inner.ids, &db.inner.reads).await?;
    book.start_call(key.key.clone());
    let decided = operation.decide(&mut book);
    book.finish_call(decided.is_ok());
    if (mode.prove_unused || matches!(decided, Err(Refusal::Declined(_))))
        && let Some(first) = effects::purged_use(tx, key).await?
    {
        db.inner.ids.give_back(&book.into_changes().unused);
        return Err(first.expired().into());
    }
    let encoder = &db.inner.encoder;
    let outcome = match decided {
        Ok(reply) => encoder.reply(&reply),
        Err(Refusal::Declined(decline)) => encoder.declined(&decline),
        Err(Refusal::Internal(detail)) => return Err(Error::internal(detail).into()),
    };
    let changes = book.into_changes();
    db.inner.ids.give_back(&changes.unused);
    let keys = [KeyOutcome {
        key,
        outcome: &outcome,
    }];
    let sql = writes::commit_batch(&changes, &keys, mode.batch)?;
    Ok((outcome, sql))
}

/// SPEC 3.2 step 5: the key's committed outcome, if the request is the one the
/// key was first used for.
async fn replay(
    mut tx: Tx<'_>,
    key: &ScopedKey,
    command: &Command,
    fingerprint: &Fingerprint,
) -> Result<KeyedOutcome, AttemptError> {
    let row = match idempotency::lock_existing(&mut tx, key).await {
        Ok(row) => row,
        Err(failure) => return Err(tx.fail(failure).await),
    };
    let outcome = if row.binds(command.method(), fingerprint) {
        row.outcome()
            .ok_or_else(|| Error::internal("a committed key row has no outcome"))
    } else {
        Err(Error::KeyReused)
    };
    match outcome {
        Ok(outcome) => {
            tx.finish().await?;
            Ok(KeyedOutcome {
                outcome,
                replayed: true,
            })
        }
        Err(e) => Err(tx.fail(Failure::Final(e)).await),
    }
}

/// The fault-injection point (`BeforeCommit`), when one is set.
pub(super) async fn before_commit(
    db: &Persistence,
    call: &Call,
    key: &ScopedKey,
    command: &Command,
) {
    if let Some(hook) = &db.inner.before_commit {
        hook(crate::db::BeforeCommitEvent {
            method: command.method(),
            key: key.clone(),
            call: call.clone(),
        })
        .await;
    }
}
