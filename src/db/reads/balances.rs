//! SPEC 3.10: a balance at a point, exact and repeatable; its search is the
//! table's (`tables::balances`), the waits and the fence for a time are here.

use super::handle::Reads;
use super::numbering::{NUMBERED_POLL, Numbering};
use crate::call::Call;
use crate::db::conn::backoff::Backoff;
use crate::db::conn::failure::AttemptError;
use crate::db::conn::lease::{LockWait, checkout};
use crate::db::conn::pool::Pool;
use crate::db::conn::route::Route;
use crate::db::conn::tx::{Committed, Tx};
use crate::db::tables::balances::{self, Place, Read, Upto};
use crate::db::tables::entries;
use crate::error::{Error, Recorded};
use crate::ledger::{AccountId, Balance, BalancePoint};

impl Reads {
    /// SPEC 3.10: the account's balance and limits after its last entry up to
    /// `point`. Waits, bounded by the call's deadline, for the entry answered to
    /// have its sequence.
    pub async fn get_balance(
        &self,
        call: &Call,
        account: AccountId,
        point: BalancePoint,
    ) -> Result<Balance, Error> {
        let read = match point {
            BalancePoint::Now => {
                balances::read(&mut *self.read_conn(call).await?, account, Place::Last).await?
            }
            BalancePoint::Sequence(n) => {
                let mut conn = self.read_conn(call).await?;
                if n > entries::highest_sequence(&mut conn).await? {
                    return Err(Error::PointNotReached);
                }
                balances::read(&mut conn, account, Place::Search(Upto::Sequence(n))).await?
            }
            BalancePoint::Time(t) => {
                let micros = u64::try_from(t.timestamp_micros())
                    .map_err(|_| Error::AccountNotFound(account.get()))?;
                let upto = Place::Search(Upto::Micros(micros));
                let settled =
                    balances::read(&mut *self.read_conn(call).await?, account, upto).await?;
                if micros < settled.opened {
                    return Err(Error::AccountNotFound(account.get()));
                }
                // The account's time is past the point: every transaction that
                // stamped it at or before the point committed before the one
                // that moved it there, which this read saw; nothing can add to
                // the answer any more.
                if settled.stamped > micros {
                    settled
                } else {
                    self.fenced(call, account, micros).await?
                }
            }
        };
        match read.answer {
            Some(balance) => Ok(balance),
            None => self.numbered(call, account, read.place).await,
        }
    }

    /// The balance at the time `micros`, read under the account's lock, which
    /// is let go only once no entry can be stamped at or before it any more.
    /// Retried on a conflict at COMMIT, as a keyed call is (`exec::keyed`).
    async fn fenced(&self, call: &Call, account: AccountId, micros: u64) -> Result<Read, Error> {
        let route = Route::account(account.get());
        let max_attempts = self.limits.max_attempts.max(1);
        let mut attempt = 1;
        let mut backoff = Backoff::new();
        loop {
            call.ensure_live()?;
            let node = self.keyed.choose(&route);
            let last = match self.fence_once(node.pool(), call, account, micros).await {
                Ok(read) => return Ok(read),
                Err(AttemptError::Final(e)) => return Err(e),
                Err(last @ (AttemptError::Silent(_) | AttemptError::NoConnection(_))) => {
                    if let AttemptError::Silent(_) = last {
                        self.keyed.pass_over(node);
                    }
                    return Err(last.into_error(attempt, Recorded::Nothing));
                }
                Err(AttemptError::ConnectionLost(reason)) => {
                    node.pool().report_lost();
                    self.keyed.pass_over(node);
                    AttemptError::ConnectionLost(reason)
                }
                Err(retryable) => retryable,
            };
            if attempt >= max_attempts || !backoff.wait(call).await {
                return Err(last.into_error(attempt, Recorded::Nothing));
            }
            attempt += 1;
        }
    }

    async fn fence_once(
        &self,
        pool: &Pool,
        call: &Call,
        account: AccountId,
        micros: u64,
    ) -> Result<Read, AttemptError> {
        let mut conn = checkout(pool, call).await?;
        let lock_wait = LockWait::lower(&mut conn, pool, call, self.limits.lock_wait).await?;
        let mut tx = Tx::new(&mut conn, pool, lock_wait.duration());
        let result = match balances::fenced(&mut tx, account, micros).await {
            Ok((read, moved)) => {
                let ended = if moved {
                    match tx.commit("COMMIT", false).await {
                        Committed::Yes => Ok(()),
                        Committed::No(e) | Committed::Unknown(e) => Err(e),
                    }
                } else {
                    tx.finish().await
                };
                ended.map(|()| read)
            }
            Err(failure) => Err(tx.fail(failure).await),
        };
        lock_wait.restore(&mut conn, pool).await;
        result
    }

    /// The balance at `place`, once its entry has a sequence ([`Numbering`]).
    async fn numbered(
        &self,
        call: &Call,
        account: AccountId,
        place: u64,
    ) -> Result<Balance, Error> {
        let mut numbering = Numbering::new(call);
        loop {
            let mut conn = self.read_conn(call).await?;
            if let Some(balance) = balances::read(&mut conn, account, Place::At(place))
                .await?
                .answer
            {
                return Ok(balance);
            }
            numbering.still_waiting(&mut conn).await?;
            drop(conn);
            tokio::time::sleep(NUMBERED_POLL).await;
        }
    }
}
