//! A connection for one call: taken from its pool within the call's deadline,
//! and its session's lock wait lowered to the call's while it holds it. The
//! executor and the key look-up take connections alike.

use std::time::Duration;

use super::connection::{self, Conn};
use super::failure::{AttemptError, Step};
use super::pool::{self, CheckoutError, Pooled};
use super::sql::{Bind, Sql};
use super::tx::Tx;
use crate::call::{Call, whole_secs};
use crate::error::{Error, Recorded};

/// The share of a call's remaining time it may spend waiting for a connection.
const CHECKOUT_SHARE: f64 = 0.8;

/// Takes a pooled connection. Waiting counts against the caller's deadline, and
/// stops with a fifth of the remaining time left, so an overloaded service still
/// answers UNAVAILABLE (try elsewhere) before the caller gives up. A database that
/// cannot be reached while it is known to have gone silent is not retried.
pub(crate) async fn checkout<'a>(
    pool: &'a pool::Pool,
    call: &Call,
) -> Result<Pooled<'a>, AttemptError> {
    pool.checkout(call.remaining().map(|left| left.mul_f64(CHECKOUT_SHARE)))
        .await
        .map_err(|e| match e {
            CheckoutError::Unreachable(reason) if pool.silent() => AttemptError::Silent(reason),
            CheckoutError::Unreachable(reason) => AttemptError::ConnectionLost(reason),
            CheckoutError::TimedOut => AttemptError::NoConnection(e.to_string()),
        })
}

/// A connection of the read pool for one plain read, within the call's deadline.
pub(crate) async fn plain<'a>(pool: &'a pool::Pool, call: &Call) -> Result<Pooled<'a>, Error> {
    checkout(pool, call)
        .await
        .map_err(|e| e.into_error(1, Recorded::Nothing))
}

/// A session's lock wait for one call (SPEC 3.2.7). Connections rest at the
/// bound (see `pool::Role`); only a call with a shorter deadline costs the
/// statements that lower it and set it back.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LockWait {
    secs: u64,
    bound: u64,
}

impl LockWait {
    pub(crate) async fn lower(
        conn: &mut Conn,
        pool: &pool::Pool,
        call: &Call,
        limit: Duration,
    ) -> Result<Self, AttemptError> {
        let this = Self {
            secs: call.lock_wait_secs(limit),
            bound: whole_secs(limit),
        };
        if this.secs != this.bound {
            set_lock_wait(conn, pool, this.secs).await?;
        }
        Ok(this)
    }

    pub(crate) fn duration(self) -> Duration {
        Duration::from_secs(self.secs)
    }

    /// Sets it back. The transaction has committed or rolled back, and its result
    /// stands: a connection that cannot be set back is dropped, not the answer.
    pub(crate) async fn restore(self, conn: &mut Conn, pool: &pool::Pool) {
        if self.secs != self.bound && set_lock_wait(conn, pool, self.bound).await.is_err() {
            connection::discard(conn);
        }
    }
}

async fn set_lock_wait(conn: &mut Conn, pool: &pool::Pool, secs: u64) -> Result<(), AttemptError> {
    let mut tx = Tx::new(conn, pool, Duration::from_secs(secs));
    let set = Sql::new("SET SESSION innodb_lock_wait_timeout = ?").bind(Bind::U64(secs));
    match tx.execute(Step::SetLockWait, set).await {
        Ok(_) => tx.finish().await,
        Err(failure) => Err(tx.fail(failure).await),
    }
}
