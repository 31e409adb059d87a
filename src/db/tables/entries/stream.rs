//! Numbered entries in sequence order (the change stream), searches by metadata,
//! and the highest sequence assigned.

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Nullable, Unsigned};

use crate::db::conn::connection::Conn;
use crate::db::conn::sql::{Bind, Sql};
use crate::db::tables::limits::ENTRY_LIMITS_JOIN;
use crate::db::tables::metadata::Filter;
use crate::error::Error;
use crate::ledger::{AccountId, Entry};

use super::rows::{FULL_COLUMNS, load};

/// Up to `limit` numbered entries, every account's, with a sequence in
/// `after + 1 ..= through`, in sequence order.
pub(crate) async fn numbered(
    conn: &mut Conn,
    after: u64,
    through: u64,
    limit: u32,
) -> Result<Vec<Entry>, Error> {
    let sql = numbered_sql(after, through, limit);
    let mut entries: Vec<Entry> = load(conn, sql).await?.into_iter().map(|(_, e)| e).collect();
    entries.sort_unstable_by_key(|e| e.sequence);
    Ok(entries)
}

/// The statement of [`numbered`]: the commits whose numbers meet the range
/// (from the one that holds `after + 1`, on `stream_commits_sequence`), and
/// their entries (on `entries_commit`). Sequences are contiguous, so the range
/// holds at most `limit` entries, and the commits it meets hold it whole; the
/// caller puts them in order (a sort by the second table's column would sort
/// every row the join reads, in the database).
pub(crate) fn numbered_sql(after: u64, through: u64, limit: u32) -> Sql<'static> {
    let last = through.min(after.saturating_add(u64::from(limit)));
    Sql::new(format!(
        "SELECT {FULL_COLUMNS} FROM stream_commits c STRAIGHT_JOIN entries e \
         ON e.commit_id = c.commit_id {ENTRY_LIMITS_JOIN} \
         WHERE c.first_sequence >= (SELECT COALESCE(MAX(first_sequence), 0) \
           FROM stream_commits WHERE first_sequence <= ?) \
         AND c.first_sequence <= ? \
         AND c.first_sequence + e.commit_pos > ? AND c.first_sequence + e.commit_pos <= ?"
    ))
    .bind(Bind::U64(after.saturating_add(1)))
    .bind(Bind::U64(last))
    .bind(Bind::U64(after))
    .bind(Bind::U64(last))
}

/// The statement of [`search`]: a range of the search index
/// (`search_entries`, by the driving pair and the sequence; for one account,
/// its second key, by the pair, the account and the sequence), numbered after
/// `after` and up to `through`, in the index's order, and each row's entry and
/// commit by primary key; the other pairs are one look-up each. So a page reads
/// what it holds (and the rows of the driving pair that lack another pair),
/// however many entries its pair matches.
pub(crate) fn search_sql(
    filter: &Filter,
    account: Option<AccountId>,
    after: u64,
    through: u64,
    limit: u32,
) -> Sql<'_> {
    let (index, account) = account.map_or_else(
        || ("PRIMARY", Sql::new("")),
        |a| {
            (
                "search_entries_account",
                Sql::new(" AND s.account_id = ?").bind(Bind::U64(a.get())),
            )
        },
    );
    Sql::new(format!(
        "SELECT {FULL_COLUMNS} FROM search_entries s FORCE INDEX ({index}) \
         STRAIGHT_JOIN entries e FORCE INDEX (PRIMARY) ON e.entry_id = s.entry_id \
         STRAIGHT_JOIN stream_commits c FORCE INDEX (PRIMARY) ON c.commit_id = e.commit_id \
         {ENTRY_LIMITS_JOIN} WHERE "
    ))
    .append(filter.condition("s", "e"))
    .append(account)
    .append(
        Sql::new(" AND s.sequence > ? AND s.sequence <= ? ORDER BY s.sequence LIMIT ?")
            .bind(Bind::U64(after))
            .bind(Bind::U64(through))
            .bind(Bind::U64(u64::from(limit))),
    )
}

/// Up to `limit` numbered entries the search `filter` finds (see
/// [`search_sql`]), in sequence order.
pub(crate) async fn search(
    conn: &mut Conn,
    filter: &Filter,
    account: Option<AccountId>,
    after: u64,
    through: u64,
    limit: u32,
) -> Result<Vec<Entry>, Error> {
    let sql = search_sql(filter, account, after, through, limit);
    Ok(load(conn, sql).await?.into_iter().map(|(_, e)| e).collect())
}

/// Where a page of one account's numbered entries starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum After {
    /// After its entries numbered up to this sequence.
    Sequence(u64),
    /// After this place in its journal (`account_seq`).
    Place(u64),
}

/// Up to `limit` numbered entries of `account` after `after`, with sequences up
/// to `through`, in its journal's order (which is their sequence order), each
/// with its place in the journal.
pub(crate) async fn numbered_of(
    conn: &mut Conn,
    account: AccountId,
    after: After,
    through: u64,
    limit: u32,
) -> Result<Vec<(u64, Entry)>, Error> {
    let sql = numbered_of_sql(account, after, through, limit);
    load(conn, sql).await
}

/// The statement of [`numbered_of`], on the journal's index
/// (`entries_account_seq`). An account's numbered entries come first in its
/// journal, so the place after a sequence is found walking the journal back from
/// its end to the last entry numbered up to it: as many entries as the stream
/// then sends, and the unnumbered few.
pub(crate) fn numbered_of_sql(
    account: AccountId,
    after: After,
    through: u64,
    limit: u32,
) -> Sql<'static> {
    let from = match after {
        After::Place(place) => Sql::new("?").bind(Bind::U64(place)),
        After::Sequence(0) => Sql::new("0"),
        After::Sequence(sequence) => Sql::new(
            "COALESCE((SELECT x.account_seq FROM entries x FORCE INDEX (entries_account_seq) \
             STRAIGHT_JOIN stream_commits y ON y.commit_id = x.commit_id \
             WHERE x.account_id = ? AND y.first_sequence + x.commit_pos <= ? \
             ORDER BY x.account_seq DESC LIMIT 1), 0)",
        )
        .bind(Bind::U64(account.get()))
        .bind(Bind::U64(sequence)),
    };
    Sql::new(format!(
        "SELECT {FULL_COLUMNS} FROM entries e FORCE INDEX (entries_account_seq) \
         STRAIGHT_JOIN stream_commits c ON c.commit_id = e.commit_id {ENTRY_LIMITS_JOIN} \
         WHERE e.account_id = ? AND e.account_seq > "
    ))
    .bind(Bind::U64(account.get()))
    .append(from)
    .append(
        Sql::new(" AND c.first_sequence + e.commit_pos <= ? ORDER BY e.account_seq LIMIT ?")
            .bind(Bind::U64(through))
            .bind(Bind::U64(u64::from(limit))),
    )
}

/// The statement of [`highest_sequence`].
pub(crate) const HIGHEST_SQL: &str =
    "SELECT next_sequence - 1 AS sequence FROM ledger_stream WHERE id = 1";

#[derive(Debug, QueryableByName)]
struct Highest {
    #[diesel(sql_type = Nullable<Unsigned<BigInt>>)]
    sequence: Option<u64>,
}

/// The statement of [`indexed_sequence`].
pub(crate) const INDEXED_SQL: &str = "SELECT LEAST(s.next_sequence, \
    COALESCE(i.next_sequence, s.next_sequence)) - 1 AS sequence \
    FROM ledger_stream s LEFT JOIN search_index i ON i.id = 1 WHERE s.id = 1";

/// The highest sequence assigned whose entries the search index holds, with
/// every lower one (`db::stream::index`): the highest assigned, but while
/// rounds of an older version number without indexing.
pub(crate) async fn indexed_sequence(conn: &mut Conn) -> Result<u64, Error> {
    let rows: Vec<Highest> = crate::db::conn::tx::load(conn, Sql::new(INDEXED_SQL)).await?;
    Ok(rows
        .into_iter()
        .next()
        .and_then(|r| r.sequence)
        .unwrap_or(0))
}

/// The highest sequence assigned, read inside a keyed transaction (a plain
/// read of its snapshot).
pub(crate) async fn stream_head(
    tx: &mut crate::db::conn::tx::Tx<'_>,
) -> Result<u64, crate::db::conn::failure::Failure> {
    let rows: Vec<Highest> = tx
        .load(crate::db::conn::failure::Step::Read, Sql::new(HIGHEST_SQL))
        .await?;
    Ok(rows
        .into_iter()
        .next()
        .and_then(|r| r.sequence)
        .unwrap_or(0))
}

/// The highest sequence assigned (0: none yet). Each round numbers the commits
/// after the last one and moves `next_sequence` past them in one transaction,
/// so every entry up to it is visible to any later read.
pub(crate) async fn highest_sequence(conn: &mut Conn) -> Result<u64, Error> {
    let sql = Sql::new(HIGHEST_SQL);
    let rows: Vec<Highest> = crate::db::conn::tx::load(conn, sql).await?;
    Ok(rows
        .into_iter()
        .next()
        .and_then(|r| r.sequence)
        .unwrap_or(0))
}
