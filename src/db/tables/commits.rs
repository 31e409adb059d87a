//! The `stream_commits` table: one row for each writing transaction that added
//! entries, which the change stream's assigner (`db::stream`) numbers whole. The
//! row's `first_sequence` (NULL until then) is the number of its first entry,
//! and each entry's sequence is that plus its `commit_pos`, its place among the
//! transaction's entries in the order they were applied. So one small row is
//! written and numbered for a whole batch of calls, and no entry is ever written
//! again to get its number.
//!
//! The row is `commit_id` (its first entry's id, unique because entry ids are),
//! the entry count, the accounts it wrote to with their places in each journal
//! (what the assigner orders commits by, without reading their entries), and the
//! transaction's instant.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use crate::db::conn::sql::datetime;
use crate::ledger::book::NewEntry;

/// The entries one commit wrote to an account: places `first..=last` of its
/// journal (`account_seq`). A transaction holds the account's lock throughout,
/// so its entries there are consecutive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) account_id: u64,
    pub(crate) first: u64,
    pub(crate) last: u64,
}

/// The spans of `new`, one per account, in the order of each account's first
/// entry.
pub(crate) fn spans(new: &[NewEntry]) -> Vec<Span> {
    let mut spans: Vec<Span> = Vec::new();
    for n in new {
        let account_id = n.entry.account_id.get();
        match spans.iter_mut().find(|s| s.account_id == account_id) {
            Some(span) => {
                span.first = span.first.min(n.seq);
                span.last = span.last.max(n.seq);
            }
            None => spans.push(Span {
                account_id,
                first: n.seq,
                last: n.seq,
            }),
        }
    }
    spans
}

/// The `accounts` column: `account_id:first:last`, comma-separated.
pub(crate) fn format_spans(spans: &[Span]) -> String {
    let mut text = String::with_capacity(spans.len() * 16);
    for (n, s) in spans.iter().enumerate() {
        let comma = if n == 0 { "" } else { "," };
        let _ = write!(text, "{comma}{}:{}:{}", s.account_id, s.first, s.last);
    }
    text
}

/// The spans of an `accounts` column; `None` if it is not one.
pub(crate) fn parse_spans(text: &str) -> Option<Vec<Span>> {
    text.split(',')
        .map(|span| {
            let mut parts = span.split(':').map(str::parse::<u64>);
            let (Some(Ok(account_id)), Some(Ok(first)), Some(Ok(last)), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return None;
            };
            (first >= 1 && first <= last).then_some(Span {
                account_id,
                first,
                last,
            })
        })
        .collect()
}

/// The commit's id: its first entry's.
pub(crate) fn commit_id(new: &[NewEntry]) -> Option<u64> {
    new.first().map(|n| n.entry.id.get())
}

/// `INSERT` of the row of a transaction's `new` entries (none if it wrote no
/// entry); `guard`, on a multi-primary node, makes it a no-op unless the
/// transaction still holds its claim.
pub(crate) fn insert_sql(
    new: &[NewEntry],
    now: DateTime<Utc>,
    guard: Option<&str>,
) -> Option<String> {
    let id = commit_id(new)?;
    // Digits, colons and commas only: a plain literal nothing can escape.
    let row = format!(
        "{id}, {count}, '{accounts}', {now}",
        count = new.len(),
        accounts = format_spans(&spans(new)),
        now = datetime(now),
    );
    crate::db::conn::sql::insert(
        "stream_commits",
        "commit_id, entry_count, accounts, created_at",
        &[row],
        guard,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_are_written_and_read_back() {
        let spans = vec![
            Span {
                account_id: 7,
                first: 3,
                last: 5,
            },
            Span {
                account_id: 2,
                first: 1,
                last: 1,
            },
        ];
        let text = format_spans(&spans);
        assert_eq!(text, "7:3:5,2:1:1");
        assert_eq!(parse_spans(&text), Some(spans));
    }

    #[test]
    fn anything_else_is_not_a_list_of_spans() {
        for bad in [
            "",
            "1:2",
            "1:2:3:4",
            "1:0:0",
            "1:5:4",
            "x:1:1",
            "1:1:1,",
            "1:1:1;2:1:1",
        ] {
            assert_eq!(parse_spans(bad), None, "{bad:?}");
        }
    }
}

/// The statement of [`unnumbered`]: the commits without a number yet, through
/// the NULL end of `stream_commits_sequence`.
pub(crate) const UNNUMBERED_SQL: &str = "SELECT commit_id FROM stream_commits \
    FORCE INDEX (stream_commits_sequence) WHERE first_sequence IS NULL";

#[derive(Debug, diesel::QueryableByName)]
struct Id {
    #[diesel(sql_type = diesel::sql_types::Unsigned<diesel::sql_types::BigInt>)]
    commit_id: u64,
}

/// The commits committed and not yet numbered, as a plain read sees them.
pub(crate) async fn unnumbered(
    conn: &mut crate::db::conn::connection::Conn,
) -> Result<Vec<u64>, crate::error::Error> {
    let rows: Vec<Id> =
        crate::db::conn::tx::load(conn, crate::db::conn::sql::Sql::new(UNNUMBERED_SQL)).await?;
    Ok(rows.into_iter().map(|r| r.commit_id).collect())
}

/// The statement of [`still_unnumbered`], by primary key; its list is padded
/// (`Sql::with_ids`), so it has one of a few texts.
pub(crate) fn still_unnumbered_sql(ids: &[u64]) -> crate::db::conn::sql::Sql<'static> {
    crate::db::conn::sql::Sql::with_ids(
        "SELECT commit_id FROM stream_commits FORCE INDEX (PRIMARY) \
         WHERE first_sequence IS NULL AND commit_id",
        ids,
        "",
    )
}

/// Which of the commits `ids` are still without a number (by primary key).
pub(crate) async fn still_unnumbered(
    conn: &mut crate::db::conn::connection::Conn,
    ids: &[u64],
) -> Result<Vec<u64>, crate::error::Error> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<Id> = crate::db::conn::tx::load(conn, still_unnumbered_sql(ids)).await?;
    Ok(rows.into_iter().map(|r| r.commit_id).collect())
}

#[derive(Debug, diesel::QueryableByName)]
struct Alive {
    #[diesel(sql_type = diesel::sql_types::Bool)]
    alive: bool,
}

/// Whether an instance holds the change stream's lease now: one is assigning.
pub(crate) async fn assigner_alive(
    conn: &mut crate::db::conn::connection::Conn,
) -> Result<bool, crate::error::Error> {
    let sql = crate::db::conn::sql::Sql::new(
        "SELECT lease_until > UTC_TIMESTAMP(6) AS alive FROM ledger_stream WHERE id = 1",
    );
    let rows: Vec<Alive> = crate::db::conn::tx::load(conn, sql).await?;
    Ok(rows.first().is_some_and(|r| r.alive))
}
