//! The reads: plain (autocommit) statements on the read pool, bounded like every
//! round trip, and the key look-up, which waits for an operation in flight like a
//! duplicate does and so runs on the keyed pool. They are [`Reads`]' methods, not
//! [`Persistence`]'s, so that a holder of a `Reads` (the console) reads what the
//! gRPC reads read and can reach nothing else.

use super::idempotency::{self, KeyRow};
use super::metadata::Filter;
use super::{accounts, commits, effects, entries, holds, metadata};
use crate::call::Call;
use crate::db::conn::connection::Conn;
use crate::db::conn::failure::{AttemptError, Failure};
use crate::db::conn::lease::{LockWait, checkout};
use crate::db::conn::tx::Tx;
use crate::db::tables::holds::OpenAfter;
use crate::db::{Persistence, Reads};
use crate::error::{Error, Recorded};
use crate::ledger::{Account, AccountId, Entry, EntryId, Hold, HoldId, Metadata, ScopedKey};

/// How often a read waiting for the change stream looks again: about half an
/// assigner's round.
pub(in crate::db) const NUMBERED_POLL: std::time::Duration = std::time::Duration::from_millis(5);
/// How long a read waits for the stream's numbers without a deadline of its
/// own, and how long without progress before it asks whether any instance
/// assigns them.
const NUMBERED_WAIT: std::time::Duration = std::time::Duration::from_secs(30);
const NUMBERED_STALL: std::time::Duration = std::time::Duration::from_millis(500);
/// Commits asked about at once, from the front of those a read waits for.
const NUMBERED_ASKED: usize = 1000;

/// A read waiting for the change stream's numbers: it asks on a read
/// connection every [`NUMBERED_POLL`], holding none while it waits (a read
/// behind a long backlog leaves the pool to the others), within the call's
/// deadline (past it: DEADLINE_EXCEEDED; without one, after [`NUMBERED_WAIT`]:
/// STREAM_BEHIND); when nothing came closer for [`NUMBERED_STALL`] it asks
/// whether an instance holds the stream's lease (none: STREAM_BEHIND).
#[derive(Debug)]
pub(in crate::db) struct Numbering {
    deadline: tokio::time::Instant,
    /// The deadline is the call's.
    called: bool,
    progress: tokio::time::Instant,
}

impl Numbering {
    pub(in crate::db) fn new(call: &Call) -> Self {
        let now = tokio::time::Instant::now();
        Self {
            deadline: call.deadline().unwrap_or(now + NUMBERED_WAIT),
            called: call.deadline().is_some(),
            progress: now,
        }
    }

    /// More of what is waited for is numbered than before.
    pub(in crate::db) fn closer(&mut self) {
        self.progress = tokio::time::Instant::now();
    }

    /// Nothing new on `conn`: whether to go on waiting.
    pub(in crate::db) async fn still_waiting(&mut self, conn: &mut Conn) -> Result<(), Error> {
        if tokio::time::Instant::now() >= self.deadline {
            return Err(if self.called {
                Error::DeadlineExceeded {
                    recorded: Recorded::Nothing,
                }
            } else {
                Error::StreamBehind
            });
        }
        if self.progress.elapsed() >= NUMBERED_STALL {
            if !commits::assigner_alive(conn).await? {
                return Err(Error::StreamBehind);
            }
            self.closer();
        }
        Ok(())
    }
}

/// A page of search results or of accounts, and whether more follow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found<T> {
    pub items: Vec<T>,
    pub more: bool,
}

/// A page of an account's journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// Each entry with its place in the account's journal.
    pub entries: Vec<(u64, Entry)>,
    /// Whether entries follow the last one.
    pub more: bool,
}

/// A page of an account's open holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldPage {
    /// Oldest first.
    pub holds: Vec<Hold>,
    /// Whether holds follow the last one.
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
}

impl Reads {
    async fn read_conn(&self, call: &Call) -> Result<crate::db::conn::pool::Pooled<'_>, Error> {
        self.db.read_conn(call).await
    }

    /// Reads an account, with the sum of its active holds.
    pub async fn get_account(&self, call: &Call, id: AccountId) -> Result<Account, Error> {
        let mut conn = self.read_conn(call).await?;
        let mut account = accounts::find(&mut conn, id)
            .await?
            .ok_or(Error::AccountNotFound(id.get()))?;
        if let Some(pairs) = metadata::of_accounts(&mut conn, &[id.get()])
            .await?
            .remove(&id.get())
        {
            account.metadata = pairs;
        }
        Ok(account)
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
        let (mut hold, now) = holds::find(&mut conn, id)
            .await?
            .ok_or(Error::HoldNotFound(id.get()))?;
        let keys = metadata::distinct_keys(std::iter::once((
            hold.client.as_str(),
            hold.idempotency_key.as_str(),
        )));
        if let Some(pairs) = metadata::of_keys(&mut conn, &keys)
            .await?
            .into_values()
            .next()
        {
            hold.metadata = pairs;
        }
        Ok((hold, now))
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

    /// SPEC 3.11: up to `size` entries whose calls hold every pair (one to
    /// four), of `account` if given, numbered after `after`, in sequence order.
    /// Reads its own writes: it first waits until every commit it can see is
    /// numbered ([`Reads::until_numbered`]), and every entry whose call
    /// was answered, by any instance, before it began is among them.
    pub async fn search_entries(
        &self,
        call: &Call,
        pairs: &Metadata,
        account: Option<AccountId>,
        after: u64,
        size: u32,
    ) -> Result<Found<Entry>, Error> {
        if let Some(id) = account
            && accounts::find(&mut *self.read_conn(call).await?, id)
                .await?
                .is_none()
        {
            return Err(Error::AccountNotFound(id.get()));
        }
        self.until_numbered(call).await?;
        let mut conn = self.read_conn(call).await?;
        let through = entries::highest_sequence(&mut conn).await?;
        let Some(filter) = Filter::choose(&mut conn, pairs).await? else {
            return Err(Error::internal("a search without a pair"));
        };
        let mut items = entries::search(
            &mut conn,
            &filter,
            account,
            after,
            through,
            size.saturating_add(1),
        )
        .await?;
        let more = items.len() > usize::try_from(size).unwrap_or(usize::MAX);
        items.truncate(usize::try_from(size).unwrap_or(usize::MAX));
        Ok(Found { items, more })
    }

    /// SPEC 3.11: up to `size` accounts after `after`, ascending, whose
    /// OpenAccount held every pair (none: every account).
    pub async fn list_accounts(
        &self,
        call: &Call,
        pairs: &Metadata,
        after: u64,
        size: u32,
    ) -> Result<Found<Account>, Error> {
        let mut conn = self.read_conn(call).await?;
        let filter = Filter::choose(&mut conn, pairs).await?;
        let mut items =
            accounts::list(&mut conn, filter.as_ref(), after, size.saturating_add(1)).await?;
        let more = items.len() > usize::try_from(size).unwrap_or(usize::MAX);
        items.truncate(usize::try_from(size).unwrap_or(usize::MAX));
        let ids: Vec<u64> = items.iter().map(|a| a.id.get()).collect();
        let mut found = metadata::of_accounts(&mut conn, &ids).await?;
        for account in &mut items {
            if let Some(pairs) = found.remove(&account.id.get()) {
                account.metadata = pairs;
            }
        }
        Ok(Found { items, more })
    }

    /// Waits until every commit a plain read sees now has its numbers
    /// ([`Numbering`]). A call answered before this began committed before it
    /// began, so its entries are among them (on a cluster, the read pool's
    /// sessions read causally).
    async fn until_numbered(&self, call: &Call) -> Result<(), Error> {
        // In the order the assigner numbers them (its index's): the front of the
        // list is numbered first, so a few at a time are asked about.
        let mut waiting: std::collections::VecDeque<u64> =
            commits::unnumbered(&mut *self.read_conn(call).await?)
                .await?
                .into();
        let mut numbering = Numbering::new(call);
        while !waiting.is_empty() {
            let front: Vec<u64> = waiting.iter().take(NUMBERED_ASKED).copied().collect();
            let mut conn = self.read_conn(call).await?;
            let mut left = commits::still_unnumbered(&mut conn, &front).await?;
            if left.len() < front.len() {
                numbering.closer();
                waiting.drain(..front.len());
                left.sort_unstable();
                for id in front.iter().rev() {
                    if left.binary_search(id).is_ok() {
                        waiting.push_front(*id);
                    }
                }
                continue;
            }
            numbering.still_waiting(&mut conn).await?;
            drop(conn);
            tokio::time::sleep(NUMBERED_POLL).await;
        }
        Ok(())
    }

    /// Up to `size` of the account's open holds (state HELD, not expired by the
    /// database's clock) after `after`, oldest first. An unknown account is
    /// `AccountNotFound`.
    pub async fn list_holds(
        &self,
        call: &Call,
        account: AccountId,
        after: OpenAfter,
        size: u32,
    ) -> Result<HoldPage, Error> {
        let mut conn = self.read_conn(call).await?;
        let mut holds = holds::open_page(&mut conn, account, after, size.saturating_add(1)).await?;
        if holds.is_empty() && accounts::find(&mut conn, account).await?.is_none() {
            return Err(Error::AccountNotFound(account.get()));
        }
        let more = holds.len() > usize::try_from(size).unwrap_or(usize::MAX);
        holds.truncate(usize::try_from(size).unwrap_or(usize::MAX));
        Ok(HoldPage { holds, more })
    }

    /// The entry that captured a hold; `None` unless it was captured.
    pub async fn capture_of(&self, call: &Call, hold: HoldId) -> Result<Option<EntryId>, Error> {
        let mut conn = self.read_conn(call).await?;
        holds::capture_of(&mut conn, hold).await
    }

    /// SPEC 3.7: the key's row in the caller's namespace, waiting (within the
    /// lock-wait bound and the deadline) for an operation still in flight under it.
    /// Executes nothing. `None`: nothing had committed under the key.
    pub async fn look_up_key(&self, call: &Call, key: &ScopedKey) -> Result<Option<KeyRow>, Error> {
        let pool = self.db.inner.keyed.choose_any().pool();
        let fail = |e: AttemptError| e.into_error(1, Recorded::Nothing);
        let mut conn = checkout(pool, call).await.map_err(fail)?;
        let lock_wait = LockWait::lower(&mut conn, pool, call, self.db.inner.limits.lock_wait)
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
