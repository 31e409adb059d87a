//! Where the entries and holds that calls name live: their accounts. An entry's
//! or a hold's account never changes, and neither is ever deleted, so an account
//! once found stays true, and a bounded cache ([`Locator`]) keeps it.
//!
//! A keyed call's accounts are found before it is queued or routed
//! ([`Locator::reach`], a plain read on the read pool for what the cache lacks,
//! and for the accounts of the operations it names by key, a reversal's):
//! its writer routes it and holds it back by every account it touches
//! (`writer`), and a cluster's node is chosen by them (`conn::route`). Its
//! attempt then takes from the cache what it must lock, and reads only the rest
//! itself ([`locate`]), on its own connection and before its probe.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::call::Call;
use crate::db::conn::failure::{Failure, Step};
use crate::db::conn::pool::Pool;
use crate::db::conn::tx::Tx;
use crate::db::tables::{entries, holds};
use crate::error::Error;
use crate::ledger::{AccountId, EntryId, HoldId, Namespace, Needs, ScopedKey};

/// Ids whose accounts the cache keeps, the oldest leaving first: far more than
/// the calls in flight, so a call's attempts and its retries find what its
/// look-up found. About 1 MiB at most.
const CACHED: usize = 16_384;

/// The longest a call's look-up before it is queued waits for a read
/// connection; past it the call goes on with the accounts it names.
const LOCATE_TIMEOUT: Duration = Duration::from_secs(1);

/// The entries and holds the calls name that exist, each with its account.
#[derive(Debug, Default)]
pub(crate) struct Located {
    entries: BTreeMap<EntryId, AccountId>,
    holds: BTreeMap<HoldId, AccountId>,
    /// The accounts of the entries of the operations named by key that had
    /// committed; never cached (an operation still in flight has none yet).
    originals: BTreeSet<AccountId>,
}

impl Located {
    /// The entries and holds `needs` name that exist, and every account to lock:
    /// those `needs` name and those of the named rows, each list ascending.
    pub(crate) fn named(&self, needs: &[Needs]) -> (Vec<EntryId>, Vec<HoldId>, Vec<AccountId>) {
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
                .chain(holds.iter().filter_map(|id| self.holds.get(id).copied()))
                .chain(self.originals.iter().copied()),
        );
        (entries, holds, accounts)
    }

    fn extend(&mut self, more: Self) {
        self.entries.extend(more.entries);
        self.holds.extend(more.holds);
        self.originals.extend(more.originals);
    }

    fn add(&mut self, rows: Vec<entries::Located>, kind: Kind) -> Result<(), Error> {
        for row in rows {
            let account = AccountId::parse("account_id", row.account_id)
                .map_err(|v| Error::internal_row(&v))?;
            match kind {
                Kind::Entry => {
                    let id =
                        EntryId::parse("entry_id", row.id).map_err(|v| Error::internal_row(&v))?;
                    self.entries.insert(id, account);
                }
                Kind::Hold => {
                    let id =
                        HoldId::parse("hold_id", row.id).map_err(|v| Error::internal_row(&v))?;
                    self.holds.insert(id, account);
                }
            }
        }
        Ok(())
    }
}

/// The accounts a call touches, as far as they are known before it is queued:
/// those it names, and those of the entries and holds it names that were found;
/// ascending. A named entry or hold not found (it does not exist, or the look-up
/// went unanswered) adds none: the call is then held back and routed by what it
/// names, and its attempt finds the rest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Reach(Vec<AccountId>);

impl Reach {
    pub(crate) fn accounts(&self) -> &[AccountId] {
        &self.0
    }

    /// Adds the accounts `other` touches (a reversal's, those of its original
    /// still queued or in a batch here, which has no entries yet).
    pub(crate) fn extend(&mut self, other: &Self) {
        if other.0.is_empty() {
            return;
        }
        self.0 = sorted(self.0.iter().chain(&other.0).copied());
    }
}

/// The accounts of the entries and holds calls named, looked up before they are
/// queued and by their attempts.
#[derive(Debug, Default)]
pub(crate) struct Locator {
    cache: Mutex<Cache>,
}

#[derive(Debug, Default)]
struct Cache {
    entries: HashMap<EntryId, AccountId>,
    holds: HashMap<HoldId, AccountId>,
    /// Every id kept, the oldest first.
    order: VecDeque<Id>,
}

#[derive(Debug, Clone, Copy)]
enum Id {
    Entry(EntryId),
    Hold(HoldId),
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Entry,
    Hold,
}

impl Cache {
    /// What the cache knows of `entries` and `holds`, and the ids it lacks.
    fn find(&self, entries: &[EntryId], holds: &[HoldId]) -> (Located, Vec<EntryId>, Vec<HoldId>) {
        let mut known = Located::default();
        let mut lacking = (Vec::new(), Vec::new());
        for id in entries {
            if let Some(account) = self.entries.get(id) {
                known.entries.insert(*id, *account);
            } else {
                lacking.0.push(*id);
            }
        }
        for id in holds {
            if let Some(account) = self.holds.get(id) {
                known.holds.insert(*id, *account);
            } else {
                lacking.1.push(*id);
            }
        }
        (known, lacking.0, lacking.1)
    }

    fn keep(&mut self, found: &Located) {
        for (id, account) in &found.entries {
            if self.entries.insert(*id, *account).is_none() {
                self.order.push_back(Id::Entry(*id));
            }
        }
        for (id, account) in &found.holds {
            if self.holds.insert(*id, *account).is_none() {
                self.order.push_back(Id::Hold(*id));
            }
        }
        while self.order.len() > CACHED {
            match self.order.pop_front() {
                Some(Id::Entry(id)) => {
                    self.entries.remove(&id);
                }
                Some(Id::Hold(id)) => {
                    self.holds.remove(&id);
                }
                None => break,
            }
        }
    }
}

impl Locator {
    fn cache(&self) -> MutexGuard<'_, Cache> {
        // The cache is only ever inserted into and trimmed; a panic halfway
        // leaves accounts that are all still true.
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every account `needs` touches that can be known before the call is
    /// queued: the cache's, and for the rest a plain read on `reads`, which waits
    /// for a connection at most [`LOCATE_TIMEOUT`] (and the call's deadline) and
    /// is bounded as every plain read is.
    /// The operations it names by key (`originals`, in `namespace`) are read
    /// every time, never cached: one still in flight has no entries yet.
    pub(crate) async fn reach(
        &self,
        needs: &Needs,
        namespace: &Namespace,
        reads: &Pool,
        call: &Call,
    ) -> Reach {
        if needs.entries.is_empty() && needs.holds.is_empty() && needs.originals.is_empty() {
            return Reach(sorted(needs.accounts.iter().copied()));
        }
        let (mut located, entries, holds) = self.cache().find(&needs.entries, &needs.holds);
        let originals: Vec<ScopedKey> = needs
            .originals
            .iter()
            .map(|key| ScopedKey {
                namespace: namespace.clone(),
                key: key.clone(),
            })
            .collect();
        if !entries.is_empty() || !holds.is_empty() || !originals.is_empty() {
            match read(reads, call, &entries, &holds, &originals).await {
                Ok(found) => {
                    self.cache().keep(&found);
                    located.extend(found);
                }
                Err(reason) => {
                    tracing::debug!(%reason, "the accounts of a call's entries, holds and originals were not looked up; it goes by the accounts it names");
                }
            }
        }
        Reach(sorted(
            needs
                .accounts
                .iter()
                .chain(located.entries.values())
                .chain(located.holds.values())
                .chain(located.originals.iter())
                .copied(),
        ))
    }
}

/// A plain read of the accounts of `entries` and `holds`, on a read connection.
async fn read(
    reads: &Pool,
    call: &Call,
    entries: &[EntryId],
    holds: &[HoldId],
    originals: &[ScopedKey],
) -> Result<Located, String> {
    let limit = call
        .remaining()
        .map_or(LOCATE_TIMEOUT, |left| left.min(LOCATE_TIMEOUT));
    let mut conn = reads
        .checkout(Some(limit))
        .await
        .map_err(|e| e.to_string())?;
    let mut located = Located::default();
    if !entries.is_empty() {
        let rows = entries::locate_read(&mut conn, entries)
            .await
            .map_err(|e| e.to_string())?;
        located.add(rows, Kind::Entry).map_err(|e| e.to_string())?;
    }
    if !holds.is_empty() {
        let rows = holds::locate_read(&mut conn, holds)
            .await
            .map_err(|e| e.to_string())?;
        located.add(rows, Kind::Hold).map_err(|e| e.to_string())?;
    }
    if !originals.is_empty() {
        let keys: Vec<&ScopedKey> = originals.iter().collect();
        let rows = entries::locate_keys_read(&mut conn, &keys)
            .await
            .map_err(|e| e.to_string())?;
        for row in rows {
            let account = AccountId::parse("account_id", row.account_id)
                .map_err(|v| Error::internal_row(&v).to_string())?;
            located.originals.insert(account);
        }
    }
    Ok(located)
}

/// Finds the entries and holds `needs` name, and their accounts: those the
/// cache lacks by a plain read in a transaction of its own, ended here, run
/// before the probe, so the transaction the probe begins has no snapshot until
/// its accounts are locked.
///
/// The operations named by key (`originals`, each in its call's namespace)
/// are read the same way, every time: their entries' accounts are locked with
/// the others. One that commits after this read is found by the attempt once
/// it holds the key row, which then starts again (`load`).
///
/// What the cache or this read finds stays true. A named row found by neither
/// did not exist when the attempt began, so it is not one the caller learnt of
/// from a reply (a reply is sent after its COMMIT): the operation is told it
/// does not exist, as it would have been an instant earlier, and nothing locks
/// or reads its key.
pub(crate) async fn locate(
    tx: &mut Tx<'_>,
    needs: &[Needs],
    originals: &[&ScopedKey],
    locator: &Locator,
) -> Result<Located, Failure> {
    let named_entries: Vec<EntryId> = sorted(needs.iter().flat_map(|n| n.entries.iter().copied()));
    let named_holds: Vec<HoldId> = sorted(needs.iter().flat_map(|n| n.holds.iter().copied()));
    let (mut located, entries, holds) = locator.cache().find(&named_entries, &named_holds);
    if entries.is_empty() && holds.is_empty() && originals.is_empty() {
        return Ok(located);
    }
    if !originals.is_empty() {
        let written = entries::of_keys(tx, Step::Locate, originals).await?;
        located
            .originals
            .extend(written.iter().map(|entry| entry.account_id));
    }
    if entries.is_empty() && holds.is_empty() {
        tx.end_reads(Step::Locate).await?;
        return Ok(located);
    }
    let mut found = Located::default();
    if !entries.is_empty() {
        found.add(entries::locate(tx, &entries).await?, Kind::Entry)?;
    }
    if !holds.is_empty() {
        found.add(holds::locate(tx, &holds).await?, Kind::Hold)?;
    }
    tx.end_reads(Step::Locate).await?;
    locator.cache().keep(&found);
    located.extend(found);
    Ok(located)
}

fn sorted<T: Ord>(items: impl Iterator<Item = T>) -> Vec<T> {
    items.collect::<BTreeSet<_>>().into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: u64) -> EntryId {
        EntryId::parse("e", id).unwrap()
    }

    fn account(id: u64) -> AccountId {
        AccountId::parse("a", id).unwrap()
    }

    #[test]
    fn the_cache_keeps_the_latest_ids_and_says_which_it_lacks() {
        let mut cache = Cache::default();
        let mut found = Located::default();
        for id in 1..=u64::try_from(CACHED + 2).unwrap() {
            found.entries.insert(entry(id), account(id % 7 + 1));
        }
        cache.keep(&found);
        assert_eq!(cache.entries.len(), CACHED);
        assert_eq!(cache.order.len(), CACHED);
        let (known, lacking, _) = cache.find(&[entry(1), entry(2), entry(3)], &[]);
        assert_eq!(lacking, vec![entry(1), entry(2)], "the oldest left first");
        assert_eq!(known.entries.get(&entry(3)), Some(&account(4)));
    }
}
