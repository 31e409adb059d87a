//! Locks what the operations of a transaction need and loads it into a
//! [`Book`], in one order every transaction follows, so none waits for another
//! in a cycle:
//!
//! 0. before the transaction (`locate`): the accounts of the entries and holds the
//!    requests name, from the cache of them or by a plain read in a transaction
//!    of its own (an entry's or a hold's account never changes);
//! 1. the key rows (the probe, before this);
//! 2. the accounts, in ascending id order, in one statement: those the requests
//!    name, and those of the named entries and holds;
//! 3. the named holds and entries that exist, by primary key;
//! 4. the operations named by key (their key rows were locked with the probe):
//!    their entries and whether they were reversed, by a plain read. Their
//!    entries' accounts were located before the probe; an operation that
//!    committed since (its key row was waited for) names accounts not locked,
//!    and the attempt starts again, to lock them;
//! 5. the named subscriptions, by primary key, and the stream's head when a
//!    call needs it.
//!
//! Every change to an account's holds or to what an entry has had refunded is made
//! by a transaction holding that account's lock, so step 3 never waits, and the
//! held holds of the accounts are read after step 2 without a lock: that read is
//! the transaction's first plain read, which fixes its snapshot (REPEATABLE READ),
//! so it sees every change made to them. A locking read would also lock the gaps
//! of the holds' index around them, where the neighbouring accounts' holds go, and
//! so close cycles between transactions on different accounts.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use super::ids::Ids;
use super::locate::Located;
use crate::db::conn::failure::Failure;
use crate::db::conn::failure::Step;
use crate::db::conn::pool::Pool;
use crate::db::conn::tx::Tx;
use crate::db::tables::{accounts, effects, entries, holds, metadata, reversals, subscriptions};
use crate::error::Error;
use crate::ledger::book::{AccountRow, Original, Record, RowCounts};
use crate::ledger::{
    AccountId, Book, Entry, Hold, HoldId, Needs, ScopedKey, SubscriptionId, SubscriptionRow,
};

/// What the probe and the look-ups before it found of the rows the calls name.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Named<'a> {
    /// What `locate` found before the probe.
    pub(crate) located: &'a Located,
    /// The operations named by key, with their key rows as the probe locked them.
    pub(crate) originals: &'a [(ScopedKey, Option<Record>)],
}

/// Locks what `needs` name and reserves ids for what they may create, waiting for
/// a block of ids until `until` at the latest.
pub(crate) async fn book(
    tx: &mut Tx<'_>,
    needs: &[Needs],
    named: Named<'_>,
    ids: &Arc<Ids>,
    reads: &Pool,
    until: Option<Instant>,
) -> Result<Book, Failure> {
    let (named_entries, named_holds, account_ids) = named.located.named(needs);
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
    let mut holds = load_holds(tx, &mut accounts, &named_holds, now).await?;
    let entries = if named_entries.is_empty() {
        Vec::new()
    } else {
        entries::lock(tx, &named_entries).await?
    };
    describe(tx, needs, &mut accounts, &mut holds, &named_holds).await?;
    let unlocked = holds
        .iter()
        .map(|h| h.account_id)
        .chain(entries.iter().map(|e| e.account_id))
        .any(|account| account_ids.binary_search(&account).is_err());
    if unlocked {
        return Err(Error::internal("a named row's account is not the one located").into());
    }
    let originals = load_originals(tx, named.originals, &account_ids).await?;
    let creates = needs.iter().fold(RowCounts::default(), |sum, n| {
        let mirrors = n
            .originals
            .iter()
            .map(|key| {
                originals
                    .iter()
                    .filter(|o| o.key.key == *key)
                    .map(|o| o.entries.len())
                    .max()
                    .unwrap_or(0)
            })
            .sum();
        sum.plus(n.creates).plus(RowCounts {
            entries: mirrors,
            ..RowCounts::default()
        })
    });
    let (subscriptions, stream_head) = load_subscriptions(tx, needs).await?;
    let ids = ids.reserve(creates, reads, until).await?;
    Ok(Book::new(now, accounts, entries, holds, ids)
        .with_originals(originals)
        .with_subscriptions(subscriptions, stream_head))
}

/// Locks the subscriptions the calls name, and reads the highest sequence
/// assigned when a call needs it: after every other read, so the accounts'
/// first plain read stays first.
async fn load_subscriptions(
    tx: &mut Tx<'_>,
    needs: &[Needs],
) -> Result<(Vec<SubscriptionRow>, Option<u64>), Failure> {
    let mut named: Vec<SubscriptionId> = needs
        .iter()
        .flat_map(|n| n.subscriptions.iter().copied())
        .collect();
    named.sort_unstable();
    named.dedup();
    let rows = if named.is_empty() {
        Vec::new()
    } else {
        subscriptions::lock(tx, &named).await?
    };
    let head = if needs.iter().any(|n| n.stream_head) {
        Some(entries::stream_head(tx).await?)
    } else {
        None
    };
    Ok((rows, head))
}

/// The operations named by key: their entries, whether a reversal of each
/// committed, and, for one whose key row is gone, whether anything carries its
/// key. Plain reads, made once the accounts are locked: a reversal of an
/// operation locked its accounts, and its `reversals` row, which the engine
/// keeps unique, is the guarantee; this read is how a later call is told.
async fn load_originals(
    tx: &mut Tx<'_>,
    originals: &[(ScopedKey, Option<Record>)],
    locked: &[AccountId],
) -> Result<Vec<Original>, Failure> {
    if originals.is_empty() {
        return Ok(Vec::new());
    }
    let keys: Vec<&ScopedKey> = originals.iter().map(|(key, _)| key).collect();
    let written = entries::of_keys(tx, Step::Read, &keys).await?;
    if written
        .iter()
        .any(|entry| locked.binary_search(&entry.account_id).is_err())
    {
        tracing::debug!("an operation named by key committed after its accounts were located");
        return Err(Failure::Overtaken);
    }
    let reversed = reversals::reversed_by(tx, &keys).await?;
    let mut loaded = Vec::with_capacity(originals.len());
    for (key, record) in originals {
        let entries: Vec<Entry> = written
            .iter()
            .filter(|e| e.client == key.namespace && e.idempotency_key == key.key)
            .cloned()
            .collect();
        let record = match record {
            Some(record) => *record,
            None => Record::Absent {
                effects: !entries.is_empty() || effects::first_use(tx, key).await?.is_some(),
            },
        };
        let reversed_by = reversed
            .iter()
            .find(|(original, _)| original == key)
            .map(|(_, by)| by.clone());
        loaded.push(Original {
            key: key.clone(),
            record,
            entries,
            reversed_by,
        });
    }
    Ok(loaded)
}

/// Gives the rows a reply shows their metadata: the named holds (a capture's
/// or a void's reply shows its hold), and the accounts of the calls whose reply
/// shows them (`Needs::describes_accounts`). A plain read, of rows that never
/// change, made once the locks are held and after the first plain read.
async fn describe(
    tx: &mut Tx<'_>,
    needs: &[Needs],
    accounts: &mut [AccountRow],
    holds: &mut [Hold],
    named_holds: &[HoldId],
) -> Result<(), Failure> {
    let named: Vec<&mut Hold> = holds
        .iter_mut()
        .filter(|h| named_holds.binary_search(&h.id).is_ok())
        .collect();
    if !named.is_empty() {
        let keys = metadata::distinct_keys(
            named
                .iter()
                .map(|h| (h.client.as_str(), h.idempotency_key.as_str())),
        );
        let found = metadata::of_keys_tx(tx, Step::LockAccounts, &keys).await?;
        for hold in named {
            let key = (
                hold.client.as_str().as_bytes().to_vec(),
                hold.idempotency_key.as_str().as_bytes().to_vec(),
            );
            if let Some(pairs) = found.get(&key) {
                hold.metadata = pairs.clone();
            }
        }
    }
    let described: Vec<u64> = needs
        .iter()
        .filter(|n| n.describes_accounts)
        .flat_map(|n| n.accounts.iter().map(|a| a.get()))
        .collect();
    if !described.is_empty() {
        let mut found = metadata::of_accounts_tx(tx, &described).await?;
        for row in accounts.iter_mut() {
            if let Some(pairs) = found.remove(&row.account.id.get()) {
                row.account.metadata = pairs;
            }
        }
    }
    Ok(())
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
