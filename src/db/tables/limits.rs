//! The `account_limits` table: every account's limits over its history, its
//! opening limits at place 0 of its journal and then the limits each LIMITS entry
//! set, at that entry's place (`account_seq`). The limits in force after a place
//! are those of the row with the highest place at or below it, one descent of
//! the primary key; reads of an entry find a LIMITS entry's limits here, by its
//! place. Only OpenAccount and SetLimits write it: the money paths never do.

use crate::db::conn::sql::insert;
use crate::ledger::book::{AccountRow, NewEntry};
use crate::ledger::{EntryKind, Limits};

use super::accounts::limit_values;

const COLUMNS: &str = "account_id, account_seq, min_balance, max_balance";

/// `INSERT` of the history rows a transaction adds: the opening limits of the
/// accounts it opened, and the limits its LIMITS entries set; `guard` as for an
/// account's update (`accounts::update_sql`).
pub(crate) fn insert_sql(
    opened: &[(usize, AccountRow)],
    entries: &[NewEntry],
    guard: Option<&str>,
) -> Option<String> {
    let row = |account: u64, place: u64, limits: Limits| {
        let (floor, ceiling) = limit_values(limits);
        format!("{account}, {place}, {floor}, {ceiling}")
    };
    let opening = opened
        .iter()
        .map(|(_, a)| row(a.account.id.get(), 0, a.account.limits));
    let changes = entries.iter().filter_map(|n| {
        let limits = n
            .entry
            .limits
            .filter(|_| n.entry.kind == EntryKind::Limits)?;
        Some(row(n.entry.account_id.get(), n.seq, limits))
    });
    let rows: Vec<String> = opening.chain(changes).collect();
    insert("account_limits", COLUMNS, &rows, guard)
}

/// How a read of entries `e` finds a LIMITS entry's limits: the history row at
/// its place, which only a LIMITS entry has (the opening limits are at place 0,
/// before any entry), by primary key.
pub(crate) const ENTRY_LIMITS_JOIN: &str = "LEFT JOIN account_limits l \
    ON l.account_id = e.account_id AND l.account_seq = e.account_seq";
