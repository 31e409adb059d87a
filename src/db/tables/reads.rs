//! The reads: plain (autocommit) statements on the read pool, bounded like every
//! round trip, and the key look-up, which waits for an operation in flight like a
//! duplicate does and so runs on the keyed pool.

use super::idempotency::{self, KeyRow};
use super::{accounts, effects, entries, holds};
use crate::call::Call;
use crate::db::Persistence;
use crate::db::conn::failure::{AttemptError, Failure};
use crate::db::conn::lease::{LockWait, checkout};
use crate::db::conn::tx::Tx;
use crate::error::{Error, Recorded};
use crate::ledger::{Account, AccountId, Entry, EntryId, Hold, HoldId, ScopedKey};

/// A page of an account's journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// Each entry with its place in the account's journal.
    pub entries: Vec<(u64, Entry)>,
    /// Whether entries follow the last one.
    pub more: bool,
}

impl Persistence {
    /// A connection of the read pool, within the call's deadline.
    pub(in crate::db) async fn read_conn(
        &self,
        call: &Call,
    ) -> Result<crate::db::conn::pool::Pooled<'_>, Error> {
        checkout(&self.inner.reads, call)
            .await
            .map_err(|e| e.into_error(1, Recorded::Nothing))
    }

    /// Reads an account, with the sum of its active holds.
    pub async fn get_account(&self, call: &Call, id: AccountId) -> Result<Account, Error> {
        let mut conn = self.read_conn(call).await?;
        accounts::find(&mut conn, id)
            .await?
            .ok_or(Error::AccountNotFound(id.get()))
    }

    pub async fn get_entry(&self, call: &Call, id: EntryId) -> Result<Entry, Error> {
        let mut conn = self.read_conn(call).await?;
        entries::find(&mut conn, id)
            .await?
            .ok_or(Error::EntryNotFound(id.get()))
    }

    /// A hold, with the database's clock at the read (its state at that instant is
    /// `Hold::state_at`).
    pub async fn get_hold(
        &self,
        call: &Call,
        id: HoldId,
    ) -> Result<(Hold, chrono::DateTime<chrono::Utc>), Error> {
        let mut conn = self.read_conn(call).await?;
        holds::find(&mut conn, id)
            .await?
            .ok_or(Error::HoldNotFound(id.get()))
    }

    /// Up to `size` entries of the account after its entry numbered `after`. An
    /// unknown account is `AccountNotFound`.
    pub async fn list_entries(
        &self,
        call: &Call,
        account: AccountId,
        after: u64,
        size: u32,
    ) -> Result<Page, Error> {
        let mut conn = self.read_conn(call).await?;
        let mut entries = entries::page(&mut conn, account, after, size.saturating_add(1)).await?;
        if entries.is_empty() && accounts::find(&mut conn, account).await?.is_none() {
            return Err(Error::AccountNotFound(account.get()));
        }
        let more = entries.len() > usize::try_from(size).unwrap_or(usize::MAX);
        entries.truncate(usize::try_from(size).unwrap_or(usize::MAX));
        Ok(Page { entries, more })
    }

    /// SPEC 3.7: the key's row in the caller's namespace, waiting (within the
    /// lock-wait bound and the deadline) for an operation still in flight under it.
    /// Executes nothing. `None`: nothing had committed under the key.
    pub async fn look_up_key(&self, call: &Call, key: &ScopedKey) -> Result<Option<KeyRow>, Error> {
        let pool = self.inner.keyed.choose_any().pool();
        let fail = |e: AttemptError| e.into_error(1, Recorded::Nothing);
        let mut conn = checkout(pool, call).await.map_err(fail)?;
        let lock_wait = LockWait::lower(&mut conn, pool, call, self.inner.limits.lock_wait)
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
