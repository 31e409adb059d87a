//! Locks what the operations of a transaction need and loads it into a
//! [`Book`], in one order every transaction follows, so none waits for another
//! in a cycle:
//!
//! 1. the key rows (the probe, before this);
//! 2. the accounts, in ascending id order, in one statement: those the requests
//!    name, and those of the entries and holds they name (found first with a plain
//!    read: an entry's or a hold's account never changes);
//! 3. the holds of those accounts that are still held, and the named holds;
//! 4. the named entries.
//!
//! Every change to an account's holds or to what an entry has had refunded is made
//! by a transaction holding that account's lock, so steps 3 and 4 never wait.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use super::ids::Ids;
use crate::db::conn::failure::Failure;
use crate::db::conn::pool::Pool;
use crate::db::conn::tx::Tx;
use crate::db::tables::{accounts, entries, holds};
use crate::ledger::book::{AccountRow, RowCounts};
use crate::ledger::{AccountId, Book, EntryId, Hold, HoldId, Needs};

/// Locks what `needs` name and reserves ids for what they may create, waiting for
/// a block of ids until `until` at the latest.
pub(crate) async fn book(
    tx: &mut Tx<'_>,
    needs: &[Needs],
    ids: &Ids,
    reads: &Pool,
    until: Option<Instant>,
) -> Result<Book, Failure> {
    let named_entries: Vec<EntryId> = sorted(needs.iter().flat_map(|n| n.entries.iter().copied()));
    let named_holds: Vec<HoldId> = sorted(needs.iter().flat_map(|n| n.holds.iter().copied()));
    let mut account_ids: BTreeSet<AccountId> = needs
        .iter()
        .flat_map(|n| n.accounts.iter().copied())
        .collect();
    if !named_entries.is_empty() {
        for found in entries::locate(tx, &named_entries).await? {
            account_ids.extend(AccountId::parse("account_id", found.account_id).ok());
        }
    }
    if !named_holds.is_empty() {
        for found in holds::locate(tx, &named_holds).await? {
            account_ids.extend(AccountId::parse("account_id", found.account_id).ok());
        }
    }
    let account_ids: Vec<AccountId> = account_ids.into_iter().collect();

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
    let holds = lock_holds(tx, &mut accounts, &named_holds, now).await?;
    let entries = if named_entries.is_empty() {
        Vec::new()
    } else {
        entries::lock(tx, &named_entries).await?
    };
    let creates = needs
        .iter()
        .fold(RowCounts::default(), |sum, n| sum.plus(n.creates));
    let ids = ids.reserve(creates, reads, until).await?;
    Ok(Book::new(now, accounts, entries, holds, ids))
}

/// Locks the held holds of the accounts that have any, sets each account's `held`
/// to what its active ones reserve at `now`, and locks the named holds not among
/// them. Returns every hold locked.
async fn lock_holds(
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
    let mut locked = if holding.is_empty() {
        Vec::new()
    } else {
        holds::lock_held(tx, &holding).await?
    };
    for row in accounts.iter_mut() {
        row.account.held = locked
            .iter()
            .filter(|h| h.account_id == row.account.id && h.reserves_at(now))
            .map(|h| h.amount.get())
            .sum();
    }
    let missing: Vec<HoldId> = named
        .iter()
        .filter(|id| !locked.iter().any(|h| h.id == **id))
        .copied()
        .collect();
    if !missing.is_empty() {
        locked.extend(holds::lock(tx, &missing).await?);
    }
    Ok(locked)
}

fn sorted<T: Ord>(items: impl Iterator<Item = T>) -> Vec<T> {
    items.collect::<BTreeSet<_>>().into_iter().collect()
}
