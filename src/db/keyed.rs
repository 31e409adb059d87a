//! The exactly-once transaction (SPEC 3.2), one per keyed call:
//!
//! ```text
//! (no BEGIN: the session runs without autocommit, so the probe begins it)
//! INSERT INTO idempotency_keys ... ON DUPLICATE KEY UPDATE idempotency_key = idempotency_key
//!   1 row  -> new key:   SELECT the account FOR UPDATE, decide (a decline is an
//!                        outcome too), encode the outcome
//!   0 rows -> duplicate: SELECT the key's row FOR UPDATE, check the fingerprint,
//!                        replay the stored outcome
//! then, in one round trip:
//!   UPDATE accounts ...; INSERT INTO entries ...; UPDATE idempotency_keys SET outcome ...; COMMIT
//!   (on a multi-primary cluster, guarded, and checked after COMMIT: `writes`)
//! unless the caller is gone or its deadline passed: then ROLLBACK
//! ```
//!
//! A duplicate of an uncommitted original blocks in the probe until the original
//! ends: after a COMMIT it replays, after a ROLLBACK it does the work itself.
//! Deadlocks and lost connections retry the whole transaction with jittered
//! backoff; the probe makes every retry safe. A call whose deadline is shorter
//! than the lock-wait bound lowers `innodb_lock_wait_timeout` first, and restores
//! it after.

use std::time::Duration;

use chrono::{NaiveDateTime, SubsecRound, Utc};
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::sql_types::Unsigned;
use diesel::{QueryResult, mysql::Mysql};
use diesel_async::{RunQueryDsl, SimpleAsyncConnection as _};

use super::failure::{AtStep, AttemptError, Failure, Step, classify};
use super::idempotency::{self, Claim};
use super::pool::{self, CheckoutError, Conn, Pooled};
use super::writes::Writes;
use super::{Persistence, accounts};
use crate::call::Call;
use crate::error::Error;
use crate::ledger::rules;
use crate::ledger::{
    Account, Command, Decline, Entry, EntryKind, Fingerprint, KeyedOutcome, Posting, ScopedKey,
    StoredOutcome,
};
use crate::telemetry::metrics;

/// The first retry waits up to this long; each further one up to twice as long.
const BACKOFF_BASE: Duration = Duration::from_millis(5);
/// The share of a call's remaining time it may spend waiting for a connection.
const CHECKOUT_SHARE: f64 = 0.8;
/// No single retry waits longer: conflicts on a hot row clear within milliseconds.
const BACKOFF_CAP: Duration = Duration::from_millis(250);

pub(super) async fn run(
    db: &Persistence,
    call: &Call,
    key: &ScopedKey,
    command: &Command,
) -> Result<KeyedOutcome, Error> {
    let fingerprint = Fingerprint::of(command);
    let max_attempts = db.inner.limits.max_attempts.max(1);
    let mut attempt = 1;
    loop {
        call.ensure_live()?;
        let last = match run_once(db, call, key, command, &fingerprint).await {
            Ok(outcome) => return Ok(outcome),
            Err(AttemptError::Final(e)) => return Err(e),
            Err(retryable) => retryable,
        };
        tracing::debug!(attempt, error = ?last, "transaction attempt failed; retrying");
        match last {
            AttemptError::Conflict => metrics::retry("conflict"),
            AttemptError::ConnectionLost(_) => metrics::retry("connection"),
            AttemptError::Final(_) => {}
        }
        if attempt >= max_attempts || !backoff(attempt, call).await {
            return Err(last.into_error(attempt));
        }
        attempt += 1;
    }
}

/// Sleeps a jittered, exponentially growing delay. Returns false, without
/// sleeping, when the delay would outlast the caller's deadline.
async fn backoff(attempt: u32, call: &Call) -> bool {
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

/// Takes a pooled connection. Waiting counts against the caller's deadline, and
/// stops with a fifth of the remaining time left, so an overloaded service still
/// answers UNAVAILABLE (try elsewhere) before the caller gives up.
pub(super) async fn checkout<'a>(
    pool: &'a pool::Pool,
    call: &Call,
) -> Result<Pooled<'a>, AttemptError> {
    pool.checkout(call.remaining().map(|left| left.mul_f64(CHECKOUT_SHARE)))
        .await
        .map_err(|e| match e {
            CheckoutError::Unreachable(reason) => AttemptError::ConnectionLost(reason),
            CheckoutError::TimedOut => AttemptError::Final(Error::Unavailable {
                reason: e.to_string(),
            }),
        })
}

async fn run_once(
    db: &Persistence,
    call: &Call,
    key: &ScopedKey,
    command: &Command,
    fingerprint: &Fingerprint,
) -> Result<KeyedOutcome, AttemptError> {
    let mut conn = checkout(&db.inner.pool, call).await?;
    let conn: &mut Conn = &mut conn;
    let bound = db.inner.limits.lock_wait.as_secs().max(1);
    let lock_wait = call.lock_wait_secs(db.inner.limits.lock_wait);
    // Connections rest at the bound (see `pool::build`); only a shorter deadline
    // costs the statements that lower it and set it back.
    if lock_wait == bound {
        return transaction(db, conn, call, key, command, fingerprint, lock_wait).await;
    }
    set_lock_wait(conn, lock_wait).await?;
    let result = transaction(db, conn, call, key, command, fingerprint, lock_wait).await;
    // The transaction has committed or rolled back, and its result stands: a
    // connection that cannot be set back is dropped, not the answer.
    if set_lock_wait(conn, bound).await.is_err() {
        pool::discard(conn);
    }
    result
}

async fn set_lock_wait(conn: &mut Conn, secs: u64) -> Result<(), AttemptError> {
    match SetLockWait(secs).execute(conn).await.at(Step::SetLockWait) {
        Ok(_) => Ok(()),
        Err(e) => Err(classify(conn, e, Duration::from_secs(secs)).await),
    }
}

/// The body, then the final writes and COMMIT in one round trip, or ROLLBACK.
///
/// The session runs without autocommit (`pool::build`), so the probe begins the
/// transaction: no BEGIN round trip. Transactions are plain statements on the
/// connection rather than diesel's transaction manager, since the final writes
/// and COMMIT travel together, which the manager cannot express. Every path ends
/// in COMMIT or ROLLBACK; the work runs in its own task, so none is abandoned half
/// way, and a connection whose ROLLBACK fails is discarded.
async fn transaction(
    db: &Persistence,
    conn: &mut Conn,
    call: &Call,
    key: &ScopedKey,
    command: &Command,
    fingerprint: &Fingerprint,
    lock_wait_secs: u64,
) -> Result<KeyedOutcome, AttemptError> {
    let lock_wait = Duration::from_secs(lock_wait_secs);
    // In a transaction of its own: an id block's row must never be held across a
    // ledger transaction.
    let entry_id = match command {
        Command::Post { .. } => match db.inner.entry_ids.next(conn).await {
            Ok(id) => Some(id),
            Err(failure) => return finish(conn, call, Err(failure), lock_wait).await,
        },
        Command::OpenAccount { .. } => None,
    };
    let now = Utc::now().naive_utc().trunc_subsecs(6);
    let new = New {
        key,
        command,
        entry_id,
        now,
    };
    let decided = match body(db, conn, &new, fingerprint).await {
        Ok((outcome, writes)) => {
            if !outcome.replayed {
                before_commit(db, call, key, command).await;
            }
            call.begin_commit()
                .map(|()| (outcome, writes.then_commit(db.batch())))
                .map_err(Failure::Final)
        }
        Err(failure) => Err(failure),
    };
    finish(conn, call, decided, lock_wait).await
}

async fn before_commit(db: &Persistence, call: &Call, key: &ScopedKey, command: &Command) {
    if let Some(hook) = &db.inner.before_commit {
        hook(super::BeforeCommitEvent {
            method: command.method(),
            key: key.clone(),
            call: call.clone(),
        })
        .await;
    }
}

/// Sends the final writes with COMMIT (`commit`, from [`Writes::then_commit`]), or
/// rolls back after a failure; classifies what the server reports while the
/// connection still holds the error.
async fn finish(
    conn: &mut Conn,
    call: &Call,
    decided: Result<(KeyedOutcome, String), Failure>,
    lock_wait: Duration,
) -> Result<KeyedOutcome, AttemptError> {
    let failure = match decided {
        Ok((outcome, commit)) => {
            match conn.batch_execute(&commit).await.at(Step::Commit) {
                Ok(()) => return Ok(outcome),
                Err(e) => {
                    // A statement of the batch or the COMMIT failed; either way
                    // nothing committed, and a transaction may still be open.
                    call.end_commit();
                    classify(conn, e, lock_wait).await
                }
            }
        }
        Err(Failure::Db(e)) => classify(conn, e, lock_wait).await,
        Err(Failure::Final(e)) => AttemptError::Final(e),
    };
    if let Err(e) = conn.batch_execute("ROLLBACK").await {
        tracing::debug!(error = %e, "rollback failed; discarding the connection");
        pool::discard(conn);
    }
    Err(failure)
}

/// What a new key's work needs to know.
struct New<'a> {
    key: &'a ScopedKey,
    command: &'a Command,
    /// The id of the entry a Credit or Charge will write.
    entry_id: Option<u64>,
    now: NaiveDateTime,
}

/// Everything between BEGIN and the final writes: the outcome, and the writes that
/// record it.
async fn body(
    db: &Persistence,
    conn: &mut Conn,
    new: &New<'_>,
    fingerprint: &Fingerprint,
) -> Result<(KeyedOutcome, Writes), Failure> {
    let method = new.command.method();
    match idempotency::probe(conn, new.key, method, fingerprint, new.now).await? {
        Claim::New => {
            let (outcome, writes) = fresh(db, conn, new).await?;
            Ok((
                KeyedOutcome {
                    outcome,
                    replayed: false,
                },
                writes,
            ))
        }
        Claim::Duplicate => {
            let row = idempotency::lock_existing(conn, new.key).await?;
            if !row.binds(method, fingerprint) {
                return Err(Error::KeyReused.into());
            }
            let outcome = row
                .into_outcome()
                .ok_or_else(|| Error::internal("a committed key row has no outcome"))?;
            Ok((
                KeyedOutcome {
                    outcome,
                    replayed: true,
                },
                Writes::none(),
            ))
        }
    }
}

/// The work of a new key: its outcome, and the writes that record it.
async fn fresh(
    db: &Persistence,
    conn: &mut Conn,
    new: &New<'_>,
) -> Result<(StoredOutcome, Writes), Failure> {
    match new.command {
        Command::OpenAccount { currency } => {
            let id = accounts::insert(conn, *currency, new.now).await?;
            let outcome = db.inner.encoder.account_opened(&Account {
                id,
                currency: *currency,
                balance: 0,
                created_at: new.now.and_utc(),
            });
            let writes = Writes::outcome(new.key, &outcome);
            Ok((outcome, writes))
        }
        Command::Post { kind, posting } => post(db, conn, new, *kind, posting).await,
    }
}

/// Locks the account and decides a Credit or Charge: its outcome, and the writes
/// of the balance, the entry and the reply, or of a decline alone.
async fn post(
    db: &Persistence,
    conn: &mut Conn,
    new: &New<'_>,
    kind: EntryKind,
    posting: &Posting,
) -> Result<(StoredOutcome, Writes), Failure> {
    let encoder = &db.inner.encoder;
    let decided = match accounts::lock(conn, posting.account_id).await? {
        None => Err(Decline::AccountNotFound {
            account_id: posting.account_id,
        }),
        Some(account) => rules::apply(account.state, kind, posting).map(|after| (account, after)),
    };
    let (account, balance_after) = match decided {
        Ok(applied) => applied,
        Err(decline) => {
            let outcome = encoder.declined(&decline);
            let writes = Writes::outcome(new.key, &outcome);
            return Ok((outcome, writes));
        }
    };
    let id = new
        .entry_id
        .ok_or_else(|| Error::internal("a posting without an entry id"))?;
    let entry = Entry {
        id,
        account_id: posting.account_id,
        kind,
        amount: posting.amount,
        currency: posting.currency,
        balance_after,
        idempotency_key: new.key.key.clone(),
        description: posting.description.clone(),
        created_at: new.now.and_utc(),
    };
    let outcome = encoder.posted(&entry);
    let writes = Writes::posting(new.key, account, &entry, &outcome);
    Ok((outcome, writes))
}

/// `SET SESSION innodb_lock_wait_timeout = ?`, with a static query id so the
/// prepared statement is cached.
#[derive(Debug)]
struct SetLockWait(u64);

impl QueryFragment<Mysql> for SetLockWait {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Mysql>) -> QueryResult<()> {
        out.push_sql("SET SESSION innodb_lock_wait_timeout = ");
        out.push_bind_param::<Unsigned<diesel::sql_types::BigInt>, _>(&self.0)?;
        Ok(())
    }
}

impl QueryId for SetLockWait {
    type QueryId = Self;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl diesel::query_builder::Query for SetLockWait {
    type SqlType = diesel::sql_types::Untyped;
}
