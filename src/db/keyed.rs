//! The exactly-once transaction (SPEC 3.2), one per keyed call:
//!
//! ```text
//! SET SESSION innodb_lock_wait_timeout = <bound, lowered to the deadline>
//! BEGIN
//! INSERT INTO idempotency_keys ... ON DUPLICATE KEY UPDATE idempotency_key = idempotency_key
//!   1 row  -> new key:   lock the account, decide, apply, append the entry,
//!                        store the encoded outcome in the key's row
//!   0 rows -> duplicate: SELECT the key's row FOR UPDATE, check the fingerprint,
//!                        replay the stored outcome
//! COMMIT, unless the caller is gone or its deadline passed (then ROLLBACK)
//! ```
//!
//! A duplicate of an uncommitted original blocks in the probe until the original
//! ends: after a COMMIT it replays, after a ROLLBACK it does the work itself.
//! Deadlocks and lost connections retry the whole transaction with jittered
//! backoff; the probe makes every retry safe.

use std::time::Duration;

use chrono::{NaiveDateTime, SubsecRound, Utc};
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::sql_types::Unsigned;
use diesel::{QueryResult, mysql::Mysql};
use diesel_async::{AnsiTransactionManager, RunQueryDsl, TransactionManager};

use super::failure::{AtStep, AttemptError, Failure, Step, classify};
use super::idempotency::{self, Claim};
use super::pool::{self, CheckoutError, Conn, Pooled};
use super::{Persistence, accounts, posting};
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
        let exhausted = match last {
            AttemptError::Conflict => {
                metrics::retry("conflict");
                Error::Conflict { attempts: attempt }
            }
            AttemptError::ConnectionLost(reason) => {
                metrics::retry("connection");
                Error::Unavailable { reason }
            }
            AttemptError::Final(e) => e,
        };
        if attempt >= max_attempts || !backoff(attempt, call).await {
            return Err(exhausted);
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
    db: &'a Persistence,
    call: &Call,
) -> Result<Pooled<'a>, AttemptError> {
    db.inner
        .pool
        .checkout(call.remaining().map(|left| left.mul_f64(CHECKOUT_SHARE)))
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
    let mut conn = checkout(db, call).await?;
    let conn: &mut Conn = &mut conn;
    let bound = db.inner.limits.lock_wait.as_secs().max(1);
    let lock_wait = call.lock_wait_secs(db.inner.limits.lock_wait);
    let result = async {
        // Connections rest at the bound (see `pool::build`); only a shorter
        // deadline costs the statements that lower it and set it back.
        if lock_wait != bound {
            set_lock_wait(conn, lock_wait).await?;
        }
        let result = transaction(db, conn, call, key, command, fingerprint, lock_wait).await;
        if lock_wait != bound {
            set_lock_wait(conn, bound).await?;
        }
        result
    }
    .await;
    if let Err(AttemptError::ConnectionLost(_)) = &result {
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

/// BEGIN, the body, then COMMIT or ROLLBACK.
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
    // Outside the transaction: an id block's row must never be held across one.
    let entry_id = match command {
        Command::Post { .. } => match db.inner.entry_ids.next(conn).await {
            Ok(id) => Some(id),
            Err(Failure::Db(e)) => return Err(classify(conn, e, lock_wait).await),
            Err(Failure::Final(e)) => return Err(AttemptError::Final(e)),
        },
        Command::OpenAccount { .. } => None,
    };
    if let Err(e) = AnsiTransactionManager::begin_transaction(conn)
        .await
        .at(Step::Begin)
    {
        return Err(classify(conn, e, lock_wait).await);
    }
    let now = Utc::now().naive_utc().trunc_subsecs(6);
    let new = New {
        key,
        command,
        entry_id,
        now,
    };
    let body = body(db, conn, &new, fingerprint).await;
    let decided = match body {
        Ok(outcome) => {
            if !outcome.replayed {
                before_commit(db, call, key, command).await;
            }
            call.begin_commit()
                .map(|()| outcome)
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

/// Commits a decided outcome, or rolls back after a failure; classifies what the
/// server reports while the connection still holds the error.
async fn finish(
    conn: &mut Conn,
    call: &Call,
    decided: Result<KeyedOutcome, Failure>,
    lock_wait: Duration,
) -> Result<KeyedOutcome, AttemptError> {
    let failure = match decided {
        Ok(outcome) => {
            let committed = AnsiTransactionManager::commit_transaction(conn)
                .await
                .at(Step::Commit);
            return match committed {
                Ok(()) => Ok(outcome),
                Err(e) => {
                    call.end_commit();
                    Err(classify(conn, e, lock_wait).await)
                }
            };
        }
        Err(Failure::Db(e)) => classify(conn, e, lock_wait).await,
        Err(Failure::Final(e)) => AttemptError::Final(e),
    };
    if let Err(e) = AnsiTransactionManager::rollback_transaction(conn).await {
        // The pool discards a connection whose rollback failed.
        tracing::debug!(error = %e, "rollback failed");
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

/// Everything between BEGIN and COMMIT.
async fn body(
    db: &Persistence,
    conn: &mut Conn,
    new: &New<'_>,
    fingerprint: &Fingerprint,
) -> Result<KeyedOutcome, Failure> {
    let method = new.command.method();
    match idempotency::probe(conn, new.key, method, fingerprint, new.now).await? {
        Claim::New => Ok(KeyedOutcome {
            outcome: fresh(db, conn, new).await?,
            replayed: false,
        }),
        Claim::Duplicate => {
            let row = idempotency::lock_existing(conn, new.key).await?;
            if !row.binds(method, fingerprint) {
                return Err(Error::KeyReused.into());
            }
            let outcome = row
                .into_outcome()
                .ok_or_else(|| Error::internal("a committed key row has no outcome"))?;
            Ok(KeyedOutcome {
                outcome,
                replayed: true,
            })
        }
    }
}

/// The work of a new key, ending with its outcome stored in the key's row.
async fn fresh(db: &Persistence, conn: &mut Conn, new: &New<'_>) -> Result<StoredOutcome, Failure> {
    match new.command {
        Command::OpenAccount { currency } => {
            let id = accounts::insert(conn, *currency, new.now).await?;
            let outcome = db.inner.encoder.account_opened(&Account {
                id,
                currency: *currency,
                balance: 0,
                created_at: new.now.and_utc(),
            });
            idempotency::store_outcome(conn, new.key, &outcome).await?;
            Ok(outcome)
        }
        Command::Post { kind, posting } => post(db, conn, new, *kind, posting).await,
    }
}

/// Locks the account, decides, and applies a Credit or Charge: its writes and its
/// stored reply in one round trip, or a decline stored alone.
async fn post(
    db: &Persistence,
    conn: &mut Conn,
    new: &New<'_>,
    kind: EntryKind,
    posting: &Posting,
) -> Result<StoredOutcome, Failure> {
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
            idempotency::store_outcome(conn, new.key, &outcome).await?;
            return Ok(outcome);
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
    posting::write(conn, new.key, account, &entry, &outcome).await?;
    Ok(outcome)
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
