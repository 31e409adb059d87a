//! The `entries` table, the append-only journal: finding and locking the entries a
//! refund names, reading entries, pages of an account's journal and numbered
//! entries in sequence order (the change stream), and the SQL of the writes.
//!
//! An entry's sequence is not a column of its own: it is its commit's first
//! sequence (`stream_commits`, see `commits`) plus its place in the commit, so
//! every read of one joins the entry's commit row by its primary key.

use std::fmt::Write as _;

use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Datetime, Nullable, SmallInt, Text, TinyInt, Unsigned, Varbinary};

use crate::db::conn::connection::Conn;
use crate::db::conn::failure::{Failure, Step};
use crate::db::conn::sql::{Bind, OrNull, Sql, datetime, hex, push_hex, push_text};
use crate::db::conn::tx::Tx;
use crate::db::tables::limits::ENTRY_LIMITS_JOIN;
use crate::db::tables::metadata::{self, Filter};
use crate::error::Error;
use crate::ledger::book::{EntryRow, NewEntry};
use crate::ledger::{
    AccountId, Amount, Currency, Description, Entry, EntryId, EntryKind, HoldId, IdempotencyKey,
    Limits, Metadata, Namespace, ScopedKey,
};

/// An entry or a hold, and its account.
#[derive(Debug, QueryableByName)]
pub(crate) struct Located {
    #[diesel(sql_type = Unsigned<BigInt>)]
    pub(crate) id: u64,
    #[diesel(sql_type = Unsigned<BigInt>)]
    pub(crate) account_id: u64,
}

/// The named entries that exist, with their accounts (a plain read: an entry's
/// account never changes).
pub(crate) async fn locate(tx: &mut Tx<'_>, ids: &[EntryId]) -> Result<Vec<Located>, Failure> {
    tx.load(Step::Locate, locate_sql(ids)).await
}

/// The entries written under `keys` (operations a call names by key), each
/// with its account: a plain read on a read connection, by `entries_key`.
pub(crate) async fn locate_keys_read(
    conn: &mut Conn,
    keys: &[&ScopedKey],
) -> Result<Vec<Located>, Error> {
    let keys = crate::db::conn::sql::padded(keys);
    let pairs = vec!["(?, ?)"; keys.len()].join(", ");
    let mut sql = Sql::new(format!(
        "SELECT entry_id AS id, account_id FROM entries FORCE INDEX (entries_key) \
         WHERE (namespace, idempotency_key) IN ({pairs})"
    ));
    for key in &keys {
        sql = sql
            .bind(Bind::Bytes(key.namespace.as_str().as_bytes()))
            .bind(Bind::Bytes(key.key.as_str().as_bytes()));
    }
    crate::db::conn::tx::load(conn, sql).await
}

/// [`locate`] on a read connection.
pub(crate) async fn locate_read(conn: &mut Conn, ids: &[EntryId]) -> Result<Vec<Located>, Error> {
    crate::db::conn::tx::load(conn, locate_sql(ids)).await
}

fn locate_sql(ids: &[EntryId]) -> Sql<'static> {
    let ids: Vec<u64> = ids.iter().map(|id| id.get()).collect();
    Sql::with_ids(
        "SELECT entry_id AS id, account_id FROM entries WHERE entry_id",
        &ids,
        "",
    )
}

#[derive(Debug, QueryableByName)]
struct LockedRow {
    #[diesel(sql_type = Unsigned<BigInt>)]
    entry_id: u64,
    #[diesel(sql_type = Unsigned<BigInt>)]
    account_id: u64,
    #[diesel(sql_type = Unsigned<TinyInt>)]
    kind: u8,
    #[diesel(sql_type = BigInt)]
    amount: i64,
    #[diesel(sql_type = Text)]
    currency: String,
    #[diesel(sql_type = BigInt)]
    refunded: i64,
    #[diesel(sql_type = Nullable<Unsigned<BigInt>>)]
    reverses_entry_id: Option<u64>,
}

/// The statement of [`lock`].
pub(crate) fn lock_sql(ids: &[u64]) -> Sql<'static> {
    Sql::with_ids(
        "SELECT entry_id, account_id, kind, amount, currency, refunded, reverses_entry_id \
         FROM entries \
         WHERE entry_id",
        ids,
        " ORDER BY entry_id FOR UPDATE",
    )
}

/// Locks the named entries, after their accounts (a refund of an entry holds its
/// account's lock, so this never waits). Only entries known to exist are named
/// here: a locking read of a missing key would lock the gap where it would be,
/// and with it the inserts of other accounts' entries.
pub(crate) async fn lock(tx: &mut Tx<'_>, ids: &[EntryId]) -> Result<Vec<EntryRow>, Failure> {
    let ids: Vec<u64> = ids.iter().map(|id| id.get()).collect();
    let rows: Vec<LockedRow> = tx.load(Step::LockEntries, lock_sql(&ids)).await?;
    let parse = |row: LockedRow| -> Result<EntryRow, Error> {
        Ok(EntryRow {
            id: EntryId::parse("entry_id", row.entry_id).map_err(|v| Error::internal_row(&v))?,
            account_id: AccountId::parse("account_id", row.account_id)
                .map_err(|v| Error::internal_row(&v))?,
            kind: kind(row.kind)?,
            amount: Amount::parse("amount", row.amount).map_err(|v| Error::internal_row(&v))?,
            currency: Currency::parse("currency", &row.currency)
                .map_err(|v| Error::internal_row(&v))?,
            refunded: row.refunded,
            reverses: row
                .reverses_entry_id
                .map(|id| EntryId::parse("reverses_entry_id", id))
                .transpose()
                .map_err(|v| Error::internal_row(&v))?,
        })
    };
    Ok(rows.into_iter().map(parse).collect::<Result<_, _>>()?)
}

fn kind(code: u8) -> Result<EntryKind, Error> {
    EntryKind::from_code(code).ok_or_else(|| Error::internal(format!("unknown entry kind {code}")))
}

/// An entry as stored, for reads.
#[derive(Debug, QueryableByName)]
struct FullRow {
    #[diesel(sql_type = Unsigned<BigInt>)]
    entry_id: u64,
    #[diesel(sql_type = Unsigned<BigInt>)]
    account_id: u64,
    #[diesel(sql_type = Unsigned<BigInt>)]
    account_seq: u64,
    #[diesel(sql_type = Unsigned<TinyInt>)]
    kind: u8,
    #[diesel(sql_type = BigInt)]
    amount: i64,
    #[diesel(sql_type = Text)]
    currency: String,
    #[diesel(sql_type = BigInt)]
    balance_after: i64,
    #[diesel(sql_type = Varbinary)]
    namespace: Vec<u8>,
    #[diesel(sql_type = Varbinary)]
    idempotency_key: Vec<u8>,
    #[diesel(sql_type = Text)]
    description: String,
    #[diesel(sql_type = Datetime)]
    created_at: NaiveDateTime,
    #[diesel(sql_type = Nullable<Unsigned<BigInt>>)]
    counterparty_account_id: Option<u64>,
    #[diesel(sql_type = Nullable<Unsigned<BigInt>>)]
    refunded_entry_id: Option<u64>,
    #[diesel(sql_type = Nullable<Unsigned<BigInt>>)]
    hold_id: Option<u64>,
    #[diesel(sql_type = Unsigned<SmallInt>)]
    post_leg: u16,
    #[diesel(sql_type = Nullable<Unsigned<BigInt>>)]
    reverses_entry_id: Option<u64>,
    #[diesel(sql_type = Nullable<Unsigned<BigInt>>)]
    sequence: Option<u64>,
    /// A LIMITS entry's limits (`limits::ENTRY_LIMITS_JOIN`).
    #[diesel(sql_type = Nullable<BigInt>)]
    limit_min: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    limit_max: Option<i64>,
}

/// The columns of [`FullRow`], of `entries e`, its commit `c` and its limits `l`
/// ([`ENTRY_LIMITS_JOIN`]).
const FULL_COLUMNS: &str = "e.entry_id, e.account_id, e.account_seq, e.kind, e.amount, \
    e.currency, e.balance_after, e.namespace, e.idempotency_key, e.description, e.created_at, \
    e.counterparty_account_id, e.refunded_entry_id, e.hold_id, e.post_leg, e.reverses_entry_id, \
    c.first_sequence + e.commit_pos AS sequence, l.min_balance AS limit_min, \
    l.max_balance AS limit_max";

/// Entries with their commits, numbered or not.
const WITH_COMMITS: &str = "entries e LEFT JOIN stream_commits c ON c.commit_id = e.commit_id";

impl FullRow {
    /// A LIMITS entry's limits; nothing for the others.
    fn limits(&self) -> Result<Option<Limits>, Error> {
        if self.kind != EntryKind::Limits.code() {
            return Ok(None);
        }
        Limits::new(self.limit_min, self.limit_max)
            .map(Some)
            .ok_or_else(|| {
                Error::internal(format!(
                    "entry {} sets a floor above its ceiling",
                    self.entry_id
                ))
            })
    }

    fn into_entry(self) -> Result<(u64, Entry), Error> {
        let limits = self.limits()?;
        let bad = |v: crate::ledger::FieldViolation| Error::internal_row(&v);
        let key = String::from_utf8(self.idempotency_key)
            .map_err(|_| Error::internal("a stored idempotency key is not UTF-8"))?;
        let client = String::from_utf8(self.namespace)
            .ok()
            .and_then(|id| Namespace::client(&id))
            .ok_or_else(|| Error::internal("a stored namespace is not a client's"))?;
        let entry = Entry {
            id: EntryId::parse("entry_id", self.entry_id).map_err(bad)?,
            account_id: AccountId::parse("account_id", self.account_id).map_err(bad)?,
            kind: kind(self.kind)?,
            amount: self.amount,
            currency: Currency::parse("currency", &self.currency).map_err(bad)?,
            balance_after: self.balance_after,
            idempotency_key: IdempotencyKey::parse("idempotency_key", key).map_err(bad)?,
            client,
            metadata: Metadata::NONE,
            description: Description::parse("description", self.description).map_err(bad)?,
            created_at: self.created_at.and_utc(),
            counterparty: self
                .counterparty_account_id
                .map(|id| AccountId::parse("counterparty_account_id", id))
                .transpose()
                .map_err(bad)?,
            refunded_entry: self
                .refunded_entry_id
                .map(|id| EntryId::parse("refunded_entry_id", id))
                .transpose()
                .map_err(bad)?,
            hold: self
                .hold_id
                .map(|id| HoldId::parse("hold_id", id))
                .transpose()
                .map_err(bad)?,
            leg: self.post_leg,
            limits,
            reverses: self
                .reverses_entry_id
                .map(|id| EntryId::parse("reverses_entry_id", id))
                .transpose()
                .map_err(bad)?,
            sequence: self.sequence,
        };
        Ok((self.account_seq, entry))
    }
}

/// Reads one entry outside any transaction.
pub(crate) async fn find(conn: &mut Conn, id: EntryId) -> Result<Option<Entry>, Error> {
    let sql = Sql::new(format!(
        "SELECT {FULL_COLUMNS} FROM {WITH_COMMITS} {ENTRY_LIMITS_JOIN} WHERE e.entry_id = ?"
    ))
    .bind(Bind::U64(id.get()));
    Ok(load(conn, sql)
        .await?
        .into_iter()
        .next()
        .map(|(_, entry)| entry))
}

/// The entries `sql` reads (its columns [`FULL_COLUMNS`]), each with its place in
/// its account's journal, in the order read, with the metadata of their calls
/// (one more read, by key).
async fn load(conn: &mut Conn, sql: Sql<'_>) -> Result<Vec<(u64, Entry)>, Error> {
    let rows: Vec<FullRow> = crate::db::conn::tx::load(conn, sql).await?;
    let mut entries: Vec<(u64, Entry)> = rows
        .into_iter()
        .map(FullRow::into_entry)
        .collect::<Result<_, _>>()?;
    let keys = metadata::distinct_keys(
        entries
            .iter()
            .map(|(_, e)| (e.client.as_str(), e.idempotency_key.as_str())),
    );
    let found = metadata::of_keys(conn, &keys).await?;
    if !found.is_empty() {
        for (_, entry) in &mut entries {
            let key = (
                entry.client.as_str().as_bytes().to_vec(),
                entry.idempotency_key.as_str().as_bytes().to_vec(),
            );
            if let Some(pairs) = found.get(&key) {
                entry.metadata = pairs.clone();
            }
        }
    }
    Ok(entries)
}

/// The statement of [`of_keys`]: on `entries_key`, each key's entries in the
/// order its call wrote them.
pub(crate) fn of_keys_sql<'a>(keys: &[&'a ScopedKey]) -> Sql<'a> {
    let keys = crate::db::conn::sql::padded(keys);
    let pairs = vec!["(?, ?)"; keys.len()].join(", ");
    let mut sql = Sql::new(format!(
        "SELECT {FULL_COLUMNS} FROM entries e FORCE INDEX (entries_key) \
         LEFT JOIN stream_commits c ON c.commit_id = e.commit_id {ENTRY_LIMITS_JOIN} \
         WHERE (e.namespace, e.idempotency_key) IN ({pairs}) \
         ORDER BY e.namespace, e.idempotency_key, e.leg"
    ));
    for key in &keys {
        sql = sql
            .bind(Bind::Bytes(key.namespace.as_str().as_bytes()))
            .bind(Bind::Bytes(key.key.as_str().as_bytes()));
    }
    sql
}

/// The entries written under `keys` (the operations a call names by key), in
/// the order written, without their metadata: a plain read, in `step`.
pub(crate) async fn of_keys(
    tx: &mut Tx<'_>,
    step: Step,
    keys: &[&ScopedKey],
) -> Result<Vec<Entry>, Failure> {
    let rows: Vec<FullRow> = tx.load(step, of_keys_sql(keys)).await?;
    let entries = rows
        .into_iter()
        .map(|row| row.into_entry().map(|(_, entry)| entry))
        .collect::<Result<Vec<_>, Error>>()?;
    Ok(entries)
}

/// Up to `limit` entries of an account after its entry numbered `after`, in the
/// order they were applied, each with its number.
pub(crate) async fn page(
    conn: &mut Conn,
    account: AccountId,
    after: u64,
    limit: u32,
) -> Result<Vec<(u64, Entry)>, Error> {
    let sql = Sql::new(format!(
        "SELECT {FULL_COLUMNS} FROM {WITH_COMMITS} {ENTRY_LIMITS_JOIN} WHERE e.account_id = ? \
         AND e.account_seq > ? ORDER BY e.account_seq LIMIT ?"
    ))
    .bind(Bind::U64(account.get()))
    .bind(Bind::U64(after))
    .bind(Bind::U64(u64::from(limit)));
    load(conn, sql).await
}

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

/// The statement of [`search`]: the entries of the calls `filter` finds, from
/// its driving pair's rows (a range of `metadata_pairs`) to their calls' entries
/// (`entries_key`) and their commits, numbered after `after` and up to
/// `through`, of `account` if one is given, in sequence order. Every match of
/// the driving pair is read and sorted: a search costs what its most selective
/// pair matches, whatever the ledger's size.
pub(crate) fn search_sql(
    filter: &Filter,
    account: Option<AccountId>,
    after: u64,
    through: u64,
    limit: u32,
) -> Sql<'_> {
    let account = account.map_or_else(
        || Sql::new(""),
        |a| Sql::new(" AND e.account_id = ?").bind(Bind::U64(a.get())),
    );
    Sql::new(format!(
        "SELECT {FULL_COLUMNS} FROM metadata_pairs m FORCE INDEX (PRIMARY) \
         STRAIGHT_JOIN entries e FORCE INDEX (entries_key) \
           ON e.namespace = m.namespace AND e.idempotency_key = m.idempotency_key \
         STRAIGHT_JOIN stream_commits c ON c.commit_id = e.commit_id {ENTRY_LIMITS_JOIN} \
         WHERE "
    ))
    .append(filter.condition("m"))
    .append(account)
    .append(
        Sql::new(
            " AND c.first_sequence + e.commit_pos > ? \
             AND c.first_sequence + e.commit_pos <= ? ORDER BY sequence LIMIT ?",
        )
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
    let commit = super::commits::commit_id(new).unwrap_or_default();
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
    use crate::ledger::Namespace;
    use crate::ledger::model::Entry;
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
