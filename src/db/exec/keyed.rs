//! One keyed call's exactly-once transaction (SPEC 3.2), with its retries. Each
//! attempt is `attempt::transaction` with this call alone, the same transaction a
//! batch runs (`group`):
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

use super::attempt::{self, Calling, Mode};
use super::core::Core;
use super::locate::Reach;
use crate::call::Call;
use crate::db::conn::backoff::Backoff;
use crate::db::conn::failure::AttemptError;
use crate::db::conn::lease::{LockWait, checkout};
use crate::db::conn::pool;
use crate::db::conn::route::Route;
use crate::db::conn::tx::Tx;
use crate::error::Error;
use crate::ledger::{Fingerprint, KeyedOutcome, ScopedKey};
use crate::ops::Command;
use crate::telemetry::metrics;

/// Runs the call; `reach` is what it touches, found before (`locate`), which
/// chooses its node.
pub(crate) async fn run(
    ex: &Core,
    call: &Call,
    key: &ScopedKey,
    command: &Command,
    reach: &Reach,
) -> Result<KeyedOutcome, Error> {
    let fingerprint = command.fingerprint();
    let route = Route::of(reach.accounts(), key);
    let max_attempts = ex.inner.limits.max_attempts.max(1);
    let mut attempt = 1;
    let mut prove_unused = false;
    let mut backoff = Backoff::new();
    loop {
        call.ensure_live()?;
        let node = ex.inner.keyed.choose(&route);
        let last = match run_once(
            ex,
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
                    ex.inner.keyed.pass_over(node);
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
                ex.inner.keyed.pass_over(node);
            }
            AttemptError::Unsettled(_) => metrics::retry("unsettled"),
            AttemptError::Silent(_)
            | AttemptError::NoConnection(_)
            | AttemptError::KeyOnEffect(_)
            | AttemptError::Final(_) => {}
        }
        if attempt >= max_attempts || !backoff.wait(call).await {
            return Err(last.into_error(attempt, call.recorded()));
        }
        attempt += 1;
    }
}

async fn run_once(
    ex: &Core,
    pool: &pool::Pool,
    call: &Call,
    key: &ScopedKey,
    command: &Command,
    fingerprint: &Fingerprint,
    prove_unused: bool,
) -> Result<KeyedOutcome, AttemptError> {
    let mut conn = checkout(pool, call).await?;
    let lock_wait = LockWait::lower(&mut conn, pool, call, ex.inner.limits.lock_wait).await?;
    // Read after checkout, it covers the connection checked out.
    let mode = Mode {
        batch: Core::batch(pool),
        prove_unused,
    };
    let tx = Tx::new(&mut conn, pool, lock_wait.duration());
    let calling = Calling {
        call,
        key,
        command,
        fingerprint,
    };
    let result = attempt::transaction(ex, tx, mode, &[calling]).await;
    lock_wait.restore(&mut conn, pool).await;
    result?
        .pop()
        .unwrap_or_else(|| Err(Error::internal("an attempt answered no call")))
        .map_err(AttemptError::Final)
}
