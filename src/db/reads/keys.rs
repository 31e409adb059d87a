//! SPEC 3.7: a key's stored outcome, waiting for an operation in flight under
//! it as a duplicate does, so it runs on the keyed pool.

use super::handle::Reads;
use crate::call::Call;
use crate::db::conn::failure::{AttemptError, Failure};
use crate::db::conn::lease::{LockWait, checkout};
use crate::db::conn::tx::Tx;
use crate::db::tables::effects;
use crate::db::tables::idempotency::{self, KeyRow};
use crate::error::{Error, Recorded};
use crate::ledger::ScopedKey;

impl Reads {
    /// SPEC 3.7: the key's row in the caller's namespace, waiting (within the
    /// lock-wait bound and the deadline) for an operation still in flight under it.
    /// Executes nothing. `None`: nothing had committed under the key.
    pub async fn look_up_key(&self, call: &Call, key: &ScopedKey) -> Result<Option<KeyRow>, Error> {
        let pool = self.keyed.choose_any().pool();
        let fail = |e: AttemptError| e.into_error(1, Recorded::Nothing);
        let mut conn = checkout(pool, call).await.map_err(fail)?;
        let lock_wait = LockWait::lower(&mut conn, pool, call, self.limits.lock_wait)
            .await
            .map_err(fail)?;
        let mut tx = Tx::new(&mut conn, pool, lock_wait.duration());
        let row = match look_up_or_expired(&mut tx, key).await {
            Ok(row) => tx.finish().await.map(|()| row),
            Err(failure) => Err(tx.fail(failure).await),
        };
        lock_wait.restore(&mut conn, pool).await;
        row.map_err(fail)
    }
}

/// The key's row; when there is none, a key whose row retention purged after it
/// took effect is `KeyExpired`, not unknown.
async fn look_up_or_expired(tx: &mut Tx<'_>, key: &ScopedKey) -> Result<Option<KeyRow>, Failure> {
    if let Some(row) = idempotency::look_up(tx, key).await? {
        return Ok(Some(row));
    }
    let Some(first) = effects::first_use(tx, key).await? else {
        return Ok(None);
    };
    // The key may have been committed since its row was looked for (on a cluster,
    // with its effect, by another node): then its row is the answer.
    match idempotency::look_up(tx, key).await? {
        Some(row) => Ok(Some(row)),
        None => Err(first.expired(None).into()),
    }
}
