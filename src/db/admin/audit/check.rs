//! A check as a query returning its violations, and the SQL several checks
//! share, written from the domain's enums.

use std::fmt::Write as _;

use strum::IntoEnumIterator as _;

use crate::ledger::EntryKind;
use crate::ops::Method;

/// A set check: its name, and the query returning violations as one text column
/// `detail`.
pub(super) struct SetCheck {
    pub(super) name: &'static str,
    pub(super) sql: String,
}

/// `amount` signed by `kind`: what the entry did to its account's balance.
pub(super) fn signed(kind: &str, amount: &str) -> String {
    let mut sql = format!("CASE {kind}");
    for k in EntryKind::iter() {
        let _ = write!(
            sql,
            " WHEN {} THEN {}{amount}",
            k.code(),
            if k.takes() { "-" } else { "" }
        );
    }
    sql.push_str(" END");
    sql
}

pub(super) fn codes(kinds: impl Iterator<Item = EntryKind>) -> String {
    kinds
        .map(|k| k.code().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether `entries` (the kinds a call wrote, in order, as `GROUP_CONCAT` spells
/// them) are what a successful call of `method` writes: its kinds once, or, for a
/// method whose entries repeat per leg, once for each of one or more legs.
pub(super) fn has_its_entries(method: &str, entries: &str) -> String {
    let mut sql = format!("CASE {method}");
    for m in Method::iter() {
        let pattern = m.entries_pattern();
        let _ = write!(sql, " WHEN {} THEN {entries} REGEXP '{pattern}'", m.code());
    }
    sql.push_str(" ELSE FALSE END");
    sql
}
