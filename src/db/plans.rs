//! The statements whose plans are checked with `EXPLAIN` (`tests/api/plans.rs`),
//! with their values written in, as the service sends them: each must reach its
//! rows through an index, never a scan, or a locking one would lock rows of
//! other transactions and a read would cost what the ledger holds.

use super::{tables, watch};
use crate::ledger::ScopedKey;

/// The reads of the exactly-once transaction that lock or check rows by lists of
/// keys, over these rows, as the service sends them (with their values written
/// in), to check their plans with `EXPLAIN`: each must reach its rows through an
/// index, never a scan, or a locking one would lock rows of other transactions.
pub fn keyed_reads(
    accounts: &[u64],
    entries: &[u64],
    holds: &[u64],
    keys: &[ScopedKey],
) -> Vec<(&'static str, String)> {
    use tables::idempotency::{claimed_condition, committed_count_sql};
    let refs: Vec<&ScopedKey> = keys.iter().collect();
    let none = crate::ledger::StoredOutcome::reply(Vec::new());
    let mut reads = vec![
        (
            "lock accounts",
            tables::accounts::lock_sql(accounts).literal(),
        ),
        ("lock holds", tables::holds::lock_sql(holds).literal()),
        ("lock entries", tables::entries::lock_sql(entries).literal()),
        (
            "lock claimed keys",
            tables::idempotency::lock_claimed_sql(&refs).literal(),
        ),
    ];
    if let Some(first) = keys.first() {
        reads.push((
            "guard of a multi-primary batch",
            format!(
                "SELECT 1 FROM idempotency_keys WHERE {}",
                claimed_condition(first)
            ),
        ));
        let committed: Vec<_> = keys.iter().map(|k| (k, &none)).collect();
        reads.push((
            "check after a multi-primary COMMIT",
            committed_count_sql(&committed),
        ));
    }
    reads
}

/// The reads of ListHolds (a first page and a later one of `account`) and of a
/// hold's capture entry, with their values written in, to check their plans with
/// `EXPLAIN`: each reaches the account's open holds, or the hold and its entry,
/// through an index.
pub fn hold_reads(account: u64, hold: u64) -> Vec<(&'static str, String)> {
    use tables::holds::{OpenAfter, capture_of_sql, open_page_sql};
    let (Ok(account), Ok(hold)) = (
        crate::ledger::AccountId::parse("account_id", account),
        crate::ledger::HoldId::parse("hold_id", hold),
    ) else {
        return Vec::new();
    };
    let later = OpenAfter {
        created_micros: 1_790_000_000_000_000,
        hold_id: 1,
    };
    vec![
        (
            "a first page of open holds",
            open_page_sql(account, OpenAfter::default(), 101).literal(),
        ),
        (
            "a later page of open holds",
            open_page_sql(account, later, 101).literal(),
        ),
        ("a hold's capture", capture_of_sql(hold).literal()),
    ]
}

/// The change stream's reads (`watch`), with their values written in, to check
/// their plans with `EXPLAIN`: the highest sequence, a page of every account's
/// entries and of `account`'s after `after` (after a sequence, and after a place
/// in its journal), and the tail's read. Each must reach its rows through an
/// index: the tail runs one every few milliseconds.
pub fn stream_reads(account: u64, after: u64, through: u64) -> Vec<(&'static str, String)> {
    use tables::entries::{After, HIGHEST_SQL, numbered_of_sql, numbered_sql};
    let Ok(account) = crate::ledger::AccountId::parse("account_id", account) else {
        return Vec::new();
    };
    vec![
        ("highest sequence", HIGHEST_SQL.to_owned()),
        (
            "a page of every account",
            numbered_sql(after, through, watch::PAGE).literal(),
        ),
        (
            "a page of one account, after a sequence",
            numbered_of_sql(account, After::Sequence(after), through, watch::PAGE).literal(),
        ),
        (
            "a page of one account, after a place",
            numbered_of_sql(account, After::Place(1), through, watch::PAGE).literal(),
        ),
        (
            "the tail",
            numbered_sql(through, u64::MAX, watch::BATCH_LIMIT).literal(),
        ),
    ]
}

/// The reads of metadata (SPEC 3.11) over `pairs` (at least one), for an
/// account's search and an account listing, with their values written in, to
/// check their plans with `EXPLAIN`: each must reach its rows through an index,
/// so a search costs what its driving pair matches, not what the ledger holds.
pub fn metadata_reads(
    pairs: &crate::ledger::Metadata,
    account: u64,
    keys: &[(Vec<u8>, Vec<u8>)],
    commits: &[u64],
) -> Vec<(&'static str, String)> {
    use tables::metadata::{Filter, counts_sql, of_accounts_sql, of_keys_sql};
    let Some(filter) = Filter::driven_by_first(pairs) else {
        return Vec::new();
    };
    let all: Vec<(String, String)> = pairs
        .pairs()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let id = crate::ledger::AccountId::parse("account_id", account).ok();
    vec![
        ("each pair's matches", counts_sql(&all).literal()),
        (
            "a search of every account",
            tables::entries::search_sql(&filter, None, 0, u64::MAX, 100).literal(),
        ),
        (
            "a search of one account",
            tables::entries::search_sql(&filter, id, 0, u64::MAX, 100).literal(),
        ),
        (
            "accounts by metadata",
            tables::accounts::list_sql(Some(&filter), 0, 100).literal(),
        ),
        (
            "every account",
            tables::accounts::list_sql(None, 0, 100).literal(),
        ),
        ("the pairs of calls", of_keys_sql(keys).literal()),
        (
            "the pairs of accounts",
            of_accounts_sql(&[account]).literal(),
        ),
        (
            "the commits still unnumbered",
            tables::commits::still_unnumbered_sql(commits).literal(),
        ),
        (
            "the commits unnumbered",
            tables::commits::UNNUMBERED_SQL.to_owned(),
        ),
        (
            "how far the search index reaches",
            tables::entries::INDEXED_SQL.to_owned(),
        ),
        (
            "the commits numbered but not indexed",
            super::stream::index::behind_sql(1, u64::MAX, 2_000),
        ),
        (
            "the entries of commits that carry metadata",
            super::stream::index::tagged_sql(commits),
        ),
    ]
}

/// The reads of a balance at a point (SPEC 3.10) of `account`, with their values written in, to check their plans with `EXPLAIN`:
/// each must reach its rows through an index, so the answer costs the same
/// whatever the journal's length.
pub fn balance_reads(account: u64) -> Vec<(&'static str, String)> {
    use tables::balances::{Place, Upto, balance_sql, lock_sql, stamp_past_sql};
    let Ok(id) = crate::ledger::AccountId::parse("account_id", account) else {
        return Vec::new();
    };
    let search = |upto| balance_sql(id, Place::Search(upto)).literal();
    vec![
        ("the balance at a sequence", search(Upto::Sequence(3))),
        (
            "the balance at a time",
            search(Upto::Micros(1_800_000_000_000_000)),
        ),
        ("the balance now", balance_sql(id, Place::Last).literal()),
        (
            "the balance at a place",
            balance_sql(id, Place::At(7)).literal(),
        ),
        ("the account locked for a time", lock_sql(id).literal()),
        (
            "the account's time moved past a point",
            stamp_past_sql(id, 1_800_000_000_000_000).literal(),
        ),
    ]
}

/// The reads of a reversal (SPEC 3.12) of the operations under `originals`,
/// with their values written in, to check their plans with `EXPLAIN`: the
/// originals' entries (located, then loaded once their accounts are locked)
/// and whether a reversal of each committed. Each must reach its rows through
/// an index, on `entries_key` and the `reversals` primary key.
pub fn reversal_reads(originals: &[ScopedKey]) -> Vec<(&'static str, String)> {
    let refs: Vec<&ScopedKey> = originals.iter().collect();
    vec![
        (
            "the originals' entries",
            tables::entries::of_keys_sql(&refs).literal(),
        ),
        (
            "the originals' reversals",
            tables::reversals::reversed_by_sql(&refs).literal(),
        ),
    ]
}
