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
