//! The statements of a round whose texts are made for each round (the values
//! written in), apart from the round that sends them so their plans can be
//! checked (`db::plans`).

use std::fmt::Write as _;

use crate::db::conn::sql::hex;

/// The read of a round's unnumbered commits: through the index of numbers,
/// whose NULLs, by instant, are exactly the commits to number, however the
/// statistics count them.
pub fn unnumbered_sql(limit: u64) -> String {
    format!(
        "SELECT commit_id, CAST(entry_count AS UNSIGNED) AS entry_count, accounts, created_at, \
         UTC_TIMESTAMP(6) AS now FROM stream_commits FORCE INDEX (stream_commits_sequence) \
         WHERE first_sequence IS NULL ORDER BY created_at, commit_id LIMIT {limit}"
    )
}

/// The write of `numbers` (commit id, first sequence), guarded by the lease
/// row's being `owner`'s and its `next_sequence` being `last`: a round whose
/// lease was taken meanwhile (by a migration, say) numbers nothing. Through the
/// primary key, however few rows the statistics count: run as a scan, it would
/// wait on the row of every commit not yet committed, and the stream with it.
pub fn numbering_sql(numbers: &[(u64, u64)], last: u64, owner: &[u8]) -> String {
    let mut sql = "UPDATE stream_commits FORCE INDEX (PRIMARY) SET first_sequence = CASE commit_id"
        .to_owned();
    for (id, seq) in numbers {
        let _ = write!(sql, " WHEN {id} THEN {seq}");
    }
    sql.push_str(" END WHERE commit_id IN (");
    for (n, (id, _)) in numbers.iter().enumerate() {
        let comma = if n == 0 { "" } else { ", " };
        let _ = write!(sql, "{comma}{id}");
    }
    let _ = write!(
        sql,
        ") AND (SELECT next_sequence FROM ledger_stream WHERE id = 1 AND owner = {}) = {last}",
        hex(owner)
    );
    sql
}

/// The look-up of which of `predecessors` (account, account_seq) are numbered.
pub fn numbered_sql(predecessors: &[(u64, u64)]) -> String {
    let mut sql = "SELECT e.account_id FROM entries e FORCE INDEX (entries_account_seq) \
        STRAIGHT_JOIN stream_commits c ON c.commit_id = e.commit_id \
        WHERE c.first_sequence IS NOT NULL AND ("
        .to_owned();
    for (n, (account, seq)) in predecessors.iter().enumerate() {
        let or = if n == 0 { "" } else { " OR " };
        let _ = write!(
            sql,
            "{or}(e.account_id = {account} AND e.account_seq = {seq})"
        );
    }
    sql.push(')');
    sql
}
