//! Locks what the operations of a transaction need and loads it into a
//! [`Book`], in one order every transaction follows, so none waits for another
//! in a cycle:
//!
//! 0. before the transaction, in one of its own ([`locate`]): the accounts of the
//!    entries and holds the requests name, by a plain read (an entry's or a hold's
//!    account never changes);
//! 1. the key rows (the probe, before this);
//! 2. the accounts, in ascending id order, in one statement: those the requests
//!    name, and those of the named entries and holds;
//! 3. the named holds and entries that exist, by primary key.
//!
//! Every change to an account's holds or to what an entry has had refunded is made
//! by a transaction holding that account's lock, so step 3 never waits, and the
//! held holds of the accounts are read after step 2 without a lock: that read is
//! the transaction's first plain read, which fixes its snapshot (REPEATABLE READ),
//! so it sees every change made to them. A locking read would also lock the gaps
//! of the holds' index around them, where the neighbouring accounts' holds go, and
//! so close cycles between transactions on different accounts.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use super::ids::Ids;
use crate::db::conn::failure::{Failure, Step};
use crate::db::conn::pool::Pool;
use crate::db::conn::tx::Tx;
use crate::db::tables::{accounts, entries, holds};
use crate::error::Error;
use crate::ledger::book::{AccountRow, RowCounts};
use crate::ledger::{AccountId, Book, EntryId, Hold, HoldId, Needs};

/// The entries and holds the calls name that exist, each with its account.
#[derive(Debug, Default)]
pub(crate) struct Located {
    entries: BTreeMap<EntryId, AccountId>,
    holds: BTreeMap<HoldId, AccountId>,
}

impl Located {
    /// The entries and holds `needs` name that exist, and every account to lock:
    /// those `needs` name and those of the named rows, each list ascending.
    fn named(&self, needs: &[Needs]) -> (Vec<EntryId>, Vec<HoldId>, Vec<AccountId>) {
        let entries = sorted(
            needs
                .iter()
                .flat_map(|n| n.entries.iter())
                .filter(|id| self.entries.contains_key(id))
                .copied(),
        );
        let holds = sorted(
            needs
                .iter()
                .flat_map(|n| n.holds.iter())
                .filter(|id| self.holds.contains_key(id))
                .copied(),
        );
        let accounts = sorted(
            needs
                .iter()
                .flat_map(|n| n.accounts.iter().copied())
                .chain(
                    entries
                        .iter()
                        .filter_map(|id| self.entries.get(id).copied()),
                )
                .chain(holds.iter().filter_map(|id| self.holds.get(id).copied())),
        );
        (entries, holds, accounts)
    }
}

/// Finds the entries and holds `needs` name, and their accounts, by a plain read
/// in a transaction of its own, ended here: run before the probe, so the
/// transaction the probe begins has no snapshot until its accounts are locked.
///
/// An entry's or a hold's account never changes, and none is ever deleted, so
/// what this finds stays true. A named row it does not find did not exist when
/// the attempt began, so it is not one the caller learnt of from a reply (a
/// reply is sent after its COMMIT): the operation is told it does not exist, as
/// it would have been an instant earlier, and nothing locks or reads its key.
pub(crate) async fn locate(tx: &mut Tx<'_>, needs: &[Needs]) -> Result<Located, Failure> {
    let named_entries: Vec<EntryId> = sorted(needs.iter().flat_map(|n| n.entries.iter().copied()));
    let named_holds: Vec<HoldId> = sorted(needs.iter().flat_map(|n| n.holds.iter().copied()));
    let mut located = Located::default();
    if named_entries.is_empty() && named_holds.is_empty() {
        return Ok(located);
    }
    let account = |id: u64| AccountId::parse("account_id", id).map_err(|v| Error::internal_row(&v));
    if !named_entries.is_empty() {
        for found in entries::locate(tx, &named_entries).await? {
            let id = EntryId::parse("entry_id", found.id).map_err(|v| Error::internal_row(&v))?;
            located.entries.insert(id, account(found.account_id)?);
        }
    }
    if !named_holds.is_empty() {
        for found in holds::locate(tx, &named_holds).await? {
            let id = HoldId::parse("hold_id", found.id).map_err(|v| Error::internal_row(&v))?;
            located.holds.insert(id, account(found.account_id)?);
        }
    }
    tx.end_reads(Step::Locate).await?;
    Ok(located)
}

/// Locks what `needs` name and reserves ids for what they may create, waiting for
/// a block of ids until `until` at the latest; `located` is what [`locate`] found
/// before the probe.
pub(crate) async fn book(
    tx: &mut Tx<'_>,
    needs: &[Needs],
    located: &Located,
    ids: &Arc<Ids>,
    reads: &Pool,
    until: Option<Instant>,
) -> Result<Book, Failure> {
    let (named_entries, named_holds, account_ids) = located.named(needs);
    let (mut accounts, now) = if account_ids.is_empty() {
        (Vec::new(), None)
    } else {
        accounts::lock(tx, &account_ids).await?
    };
    let now = match now {
        Some(now) => now,
        None => accounts::now(tx).await?,
    }
    .and_utc();
    let holds = load_holds(tx, &mut accounts, &named_holds, now).await?;
    let entries = if named_entries.is_empty() {
        Vec::new()
    } else {
        entries::lock(tx, &named_entries).await?
    };
    let unlocked = holds
        .iter()
        .map(|h| h.account_id)
        .chain(entries.iter().map(|e| e.account_id))
        .any(|account| account_ids.binary_search(&account).is_err());
    if unlocked {
        return Err(Error::internal("a named row's account is not the one located").into());
    }
    let creates = needs
        .iter()
        .fold(RowCounts::default(), |sum, n| sum.plus(n.creates));
    let ids = ids.reserve(creates, reads, until).await?;
    Ok(Book::new(now, accounts, entries, holds, ids))
}

/// Reads the held holds of the accounts that have any, sets each account's
/// `held` to what its active ones reserve at `now`, and locks the named holds
/// not among them. Returns every hold read.
async fn load_holds(
    tx: &mut Tx<'_>,
    accounts: &mut [AccountRow],
    named: &[HoldId],
    now: DateTime<Utc>,
) -> Result<Vec<Hold>, Failure> {
    let holding: Vec<AccountId> = accounts
        .iter()
        .filter(|row| row.held_total != 0)
        .map(|row| row.account.id)
        .collect();
    let mut read = if holding.is_empty() {
        Vec::new()
    } else {
        holds::read_held(tx, &holding).await?
    };
    for row in accounts.iter_mut() {
        row.account.held = read
            .iter()
            .filter(|h| h.account_id == row.account.id && h.reserves_at(now))
            .map(|h| h.amount.get())
            .sum();
    }
    let missing: Vec<HoldId> = named
        .iter()
        .filter(|id| !read.iter().any(|h| h.id == **id))
        .copied()
        .collect();
    if !missing.is_empty() {
        read.extend(holds::lock(tx, &missing).await?);
    }
    Ok(read)
}

fn sorted<T: Ord>(items: impl Iterator<Item = T>) -> Vec<T> {
    items.collect::<BTreeSet<_>>().into_iter().collect()
}
