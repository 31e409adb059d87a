//! The search index (SPEC 3.11, `search_entries`): one row per numbered entry
//! and pair of its call, keyed by the pair and then the entry's sequence, so a
//! page of a search is a range of it and costs what the page holds.
//!
//! A round whose commits carry no metadata, the index holding every number
//! before it, moves the index's next sequence in the COMMIT of its numbers
//! (`any_tagged`): nothing to index, and no second transaction. After any other
//! round's COMMIT of its numbers, the assigner indexes, in a transaction of its own, the commits numbered past what the index holds
//! (`search_index`, the next sequence it lacks), at most [`CATCH_UP`] commits
//! at a time: those of its own round, or what rounds of an older version
//! numbered without indexing (a rolling upgrade). Watchers never wait for the
//! index; a search waits until it reaches every number assigned when the
//! search began, and reads no further. Writers never touch the index; the
//! assigner reads the entries of those commits (`entries_commit`) that carry
//! metadata, and their calls' pairs (`metadata`, by key).

use std::collections::HashMap;
use std::fmt::Write as _;

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Unsigned, Varbinary};

use crate::db::conn::failure::{Failure, Step};
use crate::db::conn::sql::{hex, push_hex};
use crate::db::conn::tx::Tx;
use crate::db::tables::metadata::{self, KeyBytes};
use crate::ledger::Metadata;

/// The most commits numbered by others that one round indexes.
const CATCH_UP: u64 = 2_000;
/// About the most entries one round indexes (a commit is never split): a
/// backlog of posts of hundreds of legs, each with its pairs, is indexed in
/// rounds of a fraction of a second rather than one that outlasts the lease.
const ENTRIES: u64 = 10_000;
/// Commits whose entries one statement reads, and calls whose pairs one reads.
const CHUNK: usize = 1_000;
/// About the most bytes of row values one `INSERT` carries, far below any
/// server's `max_allowed_packet`.
const INSERT_BYTES: usize = 1 << 20;

#[derive(QueryableByName)]
struct Behind {
    #[diesel(sql_type = Unsigned<BigInt>)]
    commit_id: u64,
    #[diesel(sql_type = Unsigned<BigInt>)]
    first_sequence: u64,
    #[diesel(sql_type = Unsigned<BigInt>)]
    entry_count: u64,
}

#[derive(QueryableByName)]
struct Tagged {
    #[diesel(sql_type = Unsigned<BigInt>)]
    commit_id: u64,
    #[diesel(sql_type = Unsigned<BigInt>)]
    commit_pos: u64,
    #[diesel(sql_type = Unsigned<BigInt>)]
    entry_id: u64,
    #[diesel(sql_type = Unsigned<BigInt>)]
    account_id: u64,
    #[diesel(sql_type = Varbinary)]
    namespace: Vec<u8>,
    #[diesel(sql_type = Varbinary)]
    idempotency_key: Vec<u8>,
}

/// The commits numbered from `from` up to (not including) `to` by rounds that
/// did not index them, in sequence order, at most `limit`.
pub fn behind_sql(from: u64, to: u64, limit: u64) -> String {
    format!(
        "SELECT commit_id, first_sequence, CAST(entry_count AS UNSIGNED) AS entry_count \
         FROM stream_commits FORCE INDEX (stream_commits_sequence) \
         WHERE first_sequence >= {from} AND first_sequence < {to} \
         ORDER BY first_sequence LIMIT {limit}"
    )
}

/// The entries of `commits` whose calls carry metadata, with their keys.
pub fn tagged_sql(commits: &[u64]) -> String {
    let mut sql = "SELECT e.commit_id, CAST(e.commit_pos AS UNSIGNED) AS commit_pos, \
        e.entry_id, e.account_id, e.namespace, e.idempotency_key \
        FROM entries e FORCE INDEX (entries_commit) WHERE e.commit_id IN ("
        .to_owned();
    for (n, id) in commits.iter().enumerate() {
        let comma = if n == 0 { "" } else { ", " };
        let _ = write!(sql, "{comma}{id}");
    }
    sql.push_str(
        ") AND EXISTS (SELECT 1 FROM metadata m FORCE INDEX (PRIMARY) \
         WHERE m.namespace = e.namespace AND m.idempotency_key = e.idempotency_key)",
    );
    sql
}

/// Whether any entry of `commits` belongs to a call that carries metadata: a
/// round whose commits have none moves the index's next sequence with its
/// numbers, in its own transaction, and needs no index round after it.
pub(super) async fn any_tagged(tx: &mut Tx<'_>, commits: &[u64]) -> Result<bool, Failure> {
    for chunk in commits.chunks(CHUNK) {
        let found: Vec<Tagged> = tx
            .load_text(Step::Stream, format!("{} LIMIT 1", tagged_sql(chunk)))
            .await?;
        if !found.is_empty() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The write of the index's next sequence, guarded as the round's numbers are:
/// by the lease row's being `owner`'s and its `next_sequence` being `last`.
pub fn watermark_sql(indexed: u64, last: u64, owner: &[u8]) -> String {
    format!(
        "UPDATE search_index SET next_sequence = {indexed} WHERE id = 1 \
         AND (SELECT next_sequence FROM ledger_stream WHERE id = 1 AND owner = {}) = {last}",
        hex(owner)
    )
}

/// Indexes what the index lacks of the sequences below `next`, from
/// `indexed`, at most [`CATCH_UP`] commits and about [`ENTRIES`] entries. Returns the index's next sequence
/// after them, for [`watermark_sql`].
pub(super) async fn write(tx: &mut Tx<'_>, indexed: u64, next: u64) -> Result<u64, Failure> {
    let mut commits: Vec<(u64, u64)> = Vec::new();
    let mut upto = indexed;
    let behind: Vec<Behind> = tx
        .load_text(Step::Stream, behind_sql(indexed, next, CATCH_UP))
        .await?;
    let mut entries = 0;
    for commit in behind {
        // A backlog of wide commits is indexed a bounded share at a time, so a
        // round ends (and the lease is renewed) well within the lease.
        if entries > 0 && entries + commit.entry_count > ENTRIES {
            break;
        }
        entries += commit.entry_count;
        commits.push((commit.commit_id, commit.first_sequence));
        upto = commit.first_sequence + commit.entry_count;
    }
    for chunk in commits.chunks(CHUNK) {
        insert_rows(tx, chunk).await?;
    }
    Ok(upto)
}

/// Inserts the index rows of `commits` (commit, first sequence), each
/// `INSERT` sent once it holds [`INSERT_BYTES`]: a round of wide posts with
/// many long pairs holds no more than one statement's rows at once.
async fn insert_rows(tx: &mut Tx<'_>, commits: &[(u64, u64)]) -> Result<(), Failure> {
    let ids: Vec<u64> = commits.iter().map(|(id, _)| *id).collect();
    let first: HashMap<u64, u64> = commits.iter().copied().collect();
    let tagged: Vec<Tagged> = tx.load_text(Step::Stream, tagged_sql(&ids)).await?;
    let keys = metadata::distinct_keys(tagged.iter().filter_map(|t| {
        Some((
            std::str::from_utf8(&t.namespace).ok()?,
            std::str::from_utf8(&t.idempotency_key).ok()?,
        ))
    }));
    let mut pairs: HashMap<KeyBytes, Metadata> = HashMap::new();
    for chunk in keys.chunks(CHUNK) {
        pairs.extend(metadata::of_keys_tx(tx, Step::Stream, chunk).await?);
    }
    let mut values = String::new();
    for entry in &tagged {
        let key = (entry.namespace.clone(), entry.idempotency_key.clone());
        let (Some(metadata), Some(first)) = (pairs.get(&key), first.get(&entry.commit_id)) else {
            continue;
        };
        let sequence = first + entry.commit_pos;
        for (name, value) in metadata.pairs() {
            values.push_str(if values.is_empty() { "(" } else { ", (" });
            push_hex(&mut values, name.as_bytes());
            values.push_str(", ");
            push_hex(&mut values, value.as_bytes());
            let _ = write!(
                values,
                ", {sequence}, {}, {})",
                entry.account_id, entry.entry_id
            );
            if values.len() >= INSERT_BYTES {
                let insert = insert_sql(&std::mem::take(&mut values));
                tx.execute(Step::Stream, diesel::sql_query(insert)).await?;
            }
        }
    }
    if !values.is_empty() {
        tx.execute(Step::Stream, diesel::sql_query(insert_sql(&values)))
            .await?;
    }
    Ok(())
}

/// One `INSERT` of index rows. A row already there (the same pair and
/// sequence) is the same entry's: it is left as it is.
fn insert_sql(values: &str) -> String {
    format!(
        "INSERT INTO search_entries (name, value, sequence, account_id, entry_id) \
         VALUES {values} ON DUPLICATE KEY UPDATE entry_id = entry_id"
    )
}
