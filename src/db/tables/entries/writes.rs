//! The SQL of the writes: new entries, and a refund's mark on the entry it refunds.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use crate::db::conn::sql::{OrNull, datetime, hex, push_hex, push_text};
use crate::error::Error;
use crate::ledger::book::{EntryRow, NewEntry};
use crate::ledger::{AccountId, EntryId, HoldId, ScopedKey};

const INSERT_COLUMNS: &str = "entry_id, account_id, account_seq, leg, post_leg, kind, amount, \
    currency, balance_after, namespace, idempotency_key, description, created_at, \
    counterparty_account_id, refunded_entry_id, hold_id, commit_id, commit_pos, reverses_entry_id";

/// The column values of one transaction's new entries, one `(...)` row each, in
/// the order it applied them (their places in its commit, `commits`); `key_of`
/// gives the key of the call that created each.
///
/// A batch writes a row for every entry, several for each call: each is pushed
/// onto one string, and a call's key, and an instant, are written out once
/// for all the rows that share them.
pub(crate) fn values<'k>(
    new: &[NewEntry],
    key_of: impl Fn(usize) -> Option<&'k ScopedKey>,
) -> Result<Vec<String>, Error> {
    let commit = crate::db::tables::commits::commit_id(new).unwrap_or_default();
    let mut key: Option<(usize, String)> = None;
    let mut created: Option<(DateTime<Utc>, String)> = None;
    let mut rows = Vec::with_capacity(new.len());
    for (pos, n) in new.iter().enumerate() {
        let e = &n.entry;
        let key = match &key {
            Some((call, written)) if *call == n.call => written,
            _ => {
                let scoped =
                    key_of(n.call).ok_or_else(|| Error::internal("an entry of an unknown call"))?;
                let mut written = hex(scoped.namespace.as_str().as_bytes());
                written.push_str(", ");
                push_hex(&mut written, scoped.key.as_str().as_bytes());
                &key.insert((n.call, written)).1
            }
        };
        let created = match &created {
            Some((at, written)) if *at == e.created_at => written,
            _ => &created.insert((e.created_at, datetime(e.created_at))).1,
        };
        let mut row = String::with_capacity(192 + key.len());
        let _ = write!(
            row,
            "{id}, {account}, {seq}, {leg}, {post_leg}, {kind}, {amount}, ",
            id = e.id,
            account = e.account_id,
            seq = n.seq,
            leg = n.leg,
            post_leg = e.leg,
            kind = e.kind.code(),
            amount = e.amount,
        );
        push_text(&mut row, e.currency.as_str(), "ascii");
        let _ = write!(row, ", {}, {key}, ", e.balance_after);
        push_text(&mut row, e.description.as_str(), "utf8mb4");
        let _ = write!(
            row,
            ", {created}, {counterparty}, {refunded}, {hold}, {commit}, {pos}, {reverses}",
            counterparty = OrNull(e.counterparty.map(AccountId::get)),
            refunded = OrNull(e.refunded_entry.map(EntryId::get)),
            hold = OrNull(e.hold.map(HoldId::get)),
            reverses = OrNull(e.reverses.map(EntryId::get)),
        );
        rows.push(row);
    }
    Ok(rows)
}

/// `INSERT` of rows from [`values`]; `guard`, on a multi-primary node, makes it a
/// no-op unless the transaction still holds its claim.
pub(crate) fn insert_sql(rows: &[String], guard: Option<&str>) -> Option<String> {
    crate::db::conn::sql::insert("entries", INSERT_COLUMNS, rows, guard)
}

/// `UPDATE` of what an entry's refunds returned.
pub(crate) fn refunded_sql(row: &EntryRow, guard: Option<&str>) -> String {
    let mut sql = format!(
        "UPDATE entries SET refunded = {} WHERE entry_id = {}",
        row.refunded, row.id
    );
    if let Some(guard) = guard {
        let _ = write!(sql, " AND {guard}");
    }
    sql
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::model::Entry;
    use crate::ledger::{Description, EntryKind, Metadata, Namespace};
    use crate::ops::testing::{description, id, key, now, usd};

    fn entry(n: u64, call: usize, leg: u16, counterparty: Option<u64>) -> NewEntry {
        NewEntry {
            entry: Entry {
                id: EntryId::parse("e", n).unwrap(),
                account_id: id(n % 3 + 1),
                kind: EntryKind::TransferOut,
                amount: 7,
                currency: usd(),
                balance_after: 93,
                idempotency_key: key("k"),
                client: Namespace::anonymous(),
                metadata: Metadata::NONE,
                description: Description::parse("d", "caf\u{e9}".into()).unwrap(),
                created_at: now() + chrono::Duration::microseconds(i64::try_from(call).unwrap()),
                counterparty: counterparty.map(id),
                refunded_entry: None,
                hold: None,
                leg: leg / 2,
                limits: None,
                reverses: None,
                sequence: None,
            },
            seq: 40 + n,
            call,
            leg,
        }
    }

    #[test]
    fn each_row_holds_its_call_s_key_and_instant() {
        let keys = [
            ScopedKey {
                namespace: Namespace::anonymous(),
                key: key("a"),
            },
            ScopedKey {
                namespace: Namespace::anonymous(),
                key: key("b"),
            },
        ];
        let mut plain = entry(12, 1, 0, None);
        plain.entry.description = description();
        let new = [entry(10, 0, 0, Some(2)), entry(11, 0, 1, Some(1)), plain];
        let rows = values(&new, |call| keys.get(call)).unwrap();
        assert_eq!(
            rows,
            [
                "10, 2, 50, 0, 0, 3, 7, 'USD', 93, x'', x'61', \
                 _utf8mb4 x'636166c3a9', '2026-11-30 12:00:00.000000', 2, NULL, \
                 NULL, 10, 0, NULL",
                "11, 3, 51, 1, 0, 3, 7, 'USD', 93, x'', x'61', \
                 _utf8mb4 x'636166c3a9', '2026-11-30 12:00:00.000000', 1, NULL, \
                 NULL, 10, 1, NULL",
                "12, 1, 52, 0, 0, 3, 7, 'USD', 93, x'', x'62', \
                 '', '2026-11-30 12:00:00.000001', NULL, NULL, NULL, \
                 10, 2, NULL",
            ]
        );
        assert!(values(&new, |call| keys.get(call).filter(|_| call == 0)).is_err());
    }
}
