//! The `accounts` table: locking accounts for a transaction, reading one, and the
//! SQL of their writes. An account row holds the limits in force (`min_balance`,
//! NULL for no floor; `max_balance`, NULL for no ceiling), read with its lock;
//! their history, the opening limits included, is `limits`' table.

use std::fmt::Write as _;

use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Datetime, Nullable, Text, Unsigned};

use crate::db::conn::connection::Conn;
use crate::db::conn::failure::{Failure, Step};
use crate::db::conn::sql::{Bind, Sql, datetime, hex, text};
use crate::db::conn::tx::Tx;
use crate::db::tables::metadata::Filter;
use crate::error::Error;
use crate::ledger::book::AccountRow;
use crate::ledger::book::ChangedAccount;
use crate::ledger::{Account, AccountId, Currency, HoldState, Limits, ScopedKey};

#[derive(Debug, QueryableByName)]
struct Row {
    #[diesel(sql_type = Unsigned<BigInt>)]
    account_id: u64,
    #[diesel(sql_type = Text)]
    currency: String,
    #[diesel(sql_type = BigInt)]
    balance: i64,
    #[diesel(sql_type = BigInt)]
    held: i64,
    #[diesel(sql_type = Unsigned<BigInt>)]
    entry_count: u64,
    #[diesel(sql_type = Datetime)]
    created_at: NaiveDateTime,
    #[diesel(sql_type = Nullable<BigInt>)]
    min_balance: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    max_balance: Option<i64>,
    /// The database's clock when the row was read (after its lock was granted).
    #[diesel(sql_type = Datetime)]
    now: NaiveDateTime,
}

impl Row {
    /// The row, with `held` as stored (the executor replaces it with the sum of
    /// the active holds).
    fn into_locked(self) -> Result<(AccountRow, NaiveDateTime), Error> {
        let id =
            AccountId::parse("account_id", self.account_id).map_err(|v| Error::internal_row(&v))?;
        let currency =
            Currency::parse("currency", &self.currency).map_err(|v| Error::internal_row(&v))?;
        let limits = Limits::new(self.min_balance, self.max_balance).ok_or_else(|| {
            Error::internal(format!("account {id} has its floor above its ceiling"))
        })?;
        let row = AccountRow {
            account: Account {
                id,
                currency,
                balance: self.balance,
                held: self.held,
                limits,
                metadata: crate::ledger::Metadata::NONE,
                created_at: self.created_at.and_utc(),
            },
            entry_count: self.entry_count,
            held_total: self.held,
        };
        Ok((row, self.now))
    }
}

/// The columns every write names: the batch upsert of changed accounts, which
/// leaves their limits alone, as well as the insert of new ones.
const COLUMNS: &str = "account_id, currency, balance, held, entry_count, created_at";

/// Locks the accounts (`SELECT ... FOR UPDATE`) in ascending id order, so two
/// transactions locking the same accounts cannot deadlock; returns those that
/// exist, and the time the transaction stamps: the database's clock once every
/// lock was granted (`SYSDATE`, which, unlike `NOW`, is read when evaluated, not
/// when the statement began), or the latest time an account's journal holds or
/// was promised (`stamped_at`) if that is later: so an account's entries are
/// stamped in order also through a node whose clock is behind, and never at or
/// before a time a balance was answered for (SPEC 3.10).
/// The statement of [`lock`].
pub(crate) fn lock_sql(ids: &[u64]) -> Sql<'static> {
    Sql::with_ids(
        &format!(
            "SELECT {COLUMNS}, min_balance, max_balance, \
             GREATEST(SYSDATE(6), stamped_at) AS now FROM accounts WHERE account_id"
        ),
        ids,
        " ORDER BY account_id FOR UPDATE",
    )
}

pub(crate) async fn lock(
    tx: &mut Tx<'_>,
    ids: &[AccountId],
) -> Result<(Vec<AccountRow>, Option<NaiveDateTime>), Failure> {
    let ids: Vec<u64> = ids.iter().map(|id| id.get()).collect();
    let rows: Vec<Row> = tx.load(Step::LockAccounts, lock_sql(&ids)).await?;
    let mut locked = Vec::with_capacity(rows.len());
    let mut now = None;
    for row in rows {
        let (row, at) = row.into_locked()?;
        now = Some(now.map_or(at, |n: NaiveDateTime| n.max(at)));
        locked.push(row);
    }
    Ok((locked, now))
}

#[derive(Debug, QueryableByName)]
struct Now {
    #[diesel(sql_type = Datetime)]
    now: NaiveDateTime,
}

/// The database's clock, for a transaction that locks no account.
pub(crate) async fn now(tx: &mut Tx<'_>) -> Result<NaiveDateTime, Failure> {
    let rows: Vec<Now> = tx
        .load(Step::LockAccounts, Sql::new("SELECT SYSDATE(6) AS now"))
        .await?;
    rows.into_iter()
        .next()
        .map(|r| r.now)
        .ok_or_else(|| Error::internal("SELECT SYSDATE(6) returned no row").into())
}

/// The columns of a read of accounts `a` outside any transaction: an account
/// with the sum of its active holds.
fn read_columns() -> String {
    format!(
        "a.account_id, a.currency, a.balance, a.entry_count, a.created_at, \
         a.min_balance, a.max_balance, UTC_TIMESTAMP(6) AS now, \
         CASE WHEN a.held = 0 THEN 0 ELSE (SELECT COALESCE(SUM(h.amount), 0) FROM holds h \
           WHERE h.account_id = a.account_id AND h.state = {held} \
           AND h.expires_at > UTC_TIMESTAMP(6)) END AS held",
        held = HoldState::Held.code()
    )
}

/// Reads an account outside any transaction, with the sum of its active holds.
pub(crate) async fn find(conn: &mut Conn, id: AccountId) -> Result<Option<Account>, Error> {
    let sql = Sql::new(format!(
        "SELECT {} FROM accounts a WHERE a.account_id = ?",
        read_columns()
    ))
    .bind(Bind::U64(id.get()));
    Ok(read(conn, sql).await?.into_iter().next())
}

async fn read(conn: &mut Conn, sql: Sql<'_>) -> Result<Vec<Account>, Error> {
    let rows: Vec<Row> = crate::db::conn::tx::load(conn, sql).await?;
    rows.into_iter()
        .map(|row| row.into_locked().map(|(row, _)| row.account))
        .collect()
}

/// The statement of [`list`].
pub(crate) fn list_sql(filter: Option<&Filter>, after: u64, limit: u32) -> Sql<'_> {
    let columns = read_columns();
    let sql = match filter {
        None => Sql::new(format!("SELECT {columns} FROM accounts a WHERE")),
        Some(filter) => Sql::new(format!(
            "SELECT {columns} FROM metadata_pairs m FORCE INDEX (PRIMARY) \
             STRAIGHT_JOIN accounts a FORCE INDEX (accounts_key) \
             ON a.namespace = m.namespace AND a.idempotency_key = m.idempotency_key \
             WHERE "
        ))
        .append(filter.condition("m", "m"))
        .append(Sql::new(" AND")),
    };
    sql.append(
        Sql::new(" a.account_id > ? ORDER BY a.account_id LIMIT ?")
            .bind(Bind::U64(after))
            .bind(Bind::U64(u64::from(limit))),
    )
}

/// Up to `limit` accounts after `after`, ascending, whose OpenAccount holds
/// every pair of `filter` (all of them without one); their metadata is the
/// caller's to add.
pub(crate) async fn list(
    conn: &mut Conn,
    filter: Option<&Filter>,
    after: u64,
    limit: u32,
) -> Result<Vec<Account>, Error> {
    read(conn, list_sql(filter, after, limit)).await
}

/// `INSERT` of new accounts, each with the key of the call that opened it;
/// `guard` as for [`update_sql`].
pub(crate) fn insert_sql<'k>(
    rows: &[(usize, AccountRow)],
    key_of: impl Fn(usize) -> Option<&'k ScopedKey>,
    guard: Option<&str>,
) -> Result<Option<String>, Error> {
    let values = rows
        .iter()
        .map(|(call, row)| {
            let key =
                key_of(*call).ok_or_else(|| Error::internal("an account of an unknown call"))?;
            let (floor, ceiling) = limit_values(row.account.limits);
            Ok(format!(
                "{}, {floor}, {ceiling}, {namespace}, {key}, {stamped}",
                values(row),
                stamped = datetime(row.account.created_at),
                namespace = hex(key.namespace.as_str().as_bytes()),
                key = hex(key.key.as_str().as_bytes()),
            ))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    Ok(crate::db::conn::sql::insert(
        "accounts",
        &format!("{COLUMNS}, min_balance, max_balance, namespace, idempotency_key, stamped_at"),
        &values,
        guard,
    ))
}

/// A row's values in the order of [`COLUMNS`].
fn values(row: &AccountRow) -> String {
    let a = &row.account;
    format!(
        "{id}, {currency}, {balance}, {held}, {count}, {created}",
        id = a.id,
        currency = text(a.currency.as_str(), "ascii"),
        balance = a.balance,
        held = row.held_total,
        count = row.entry_count,
        created = datetime(a.created_at),
    )
}

/// The floor and the ceiling as their columns' values, `NULL` for none.
pub(crate) fn limit_values(limits: Limits) -> (String, String) {
    let value = |bound: Option<i64>| bound.map_or_else(|| "NULL".to_owned(), |v| v.to_string());
    (value(limits.floor()), value(limits.ceiling()))
}

/// `UPDATE` of the limits of the changed accounts whose limits changed, by
/// primary key; `guard` as for [`update_sql`]. The money paths never change
/// limits, so they never send it.
pub(crate) fn limits_sql(changed: &[ChangedAccount], guard: Option<&str>) -> Vec<String> {
    changed
        .iter()
        .filter(|c| c.row.account.limits != c.limits_before)
        .map(|c| {
            let (floor, ceiling) = limit_values(c.row.account.limits);
            let mut sql = format!(
                "UPDATE accounts SET min_balance = {floor}, max_balance = {ceiling} \
                 WHERE account_id = {id}",
                id = c.row.account.id,
            );
            if let Some(guard) = guard {
                let _ = write!(sql, " AND {guard}");
            }
            sql
        })
        .collect()
}

/// One statement for every changed account of a batch, on a single server (no
/// guard): a multi-row `INSERT ... ON DUPLICATE KEY UPDATE` by primary key. Every
/// row it names exists and is locked by this transaction, so each is only updated
/// (never inserted), and the statement locks exactly those rows: unlike an
/// `UPDATE ... WHERE account_id IN (...)`, which the optimizer may run as a scan.
/// Each account's journal is stamped up to `now`, the transaction's time.
pub(crate) fn upsert_sql(rows: &[&AccountRow], now: DateTime<Utc>) -> Option<String> {
    if rows.is_empty() {
        return None;
    }
    let now = datetime(now);
    let mut sql = format!("INSERT INTO accounts ({COLUMNS}, stamped_at) VALUES ");
    for (n, row) in rows.iter().enumerate() {
        let comma = if n == 0 { "" } else { ", " };
        let _ = write!(sql, "{comma}({}, {now})", values(row));
    }
    sql.push_str(
        " ON DUPLICATE KEY UPDATE balance = VALUES(balance), held = VALUES(held), \
         entry_count = VALUES(entry_count), \
         stamped_at = GREATEST(stamped_at, VALUES(stamped_at))",
    );
    Some(sql)
}

/// `UPDATE` of a changed account's counters, by its primary key (a statement for
/// several accounts may be run as a scan, locking accounts of other
/// transactions). `guard`, on a multi-primary node, makes it a no-op unless the
/// account still has the entry count it was locked with and the transaction
/// still holds its claim (`writes`).
/// The account's journal is stamped up to `now`, the transaction's time.
pub(crate) fn update_sql(
    row: &AccountRow,
    count_before: u64,
    now: DateTime<Utc>,
    guard: Option<&str>,
) -> String {
    let mut sql = format!(
        "UPDATE accounts SET balance = {balance}, held = {held}, entry_count = {count}, \
         stamped_at = GREATEST(stamped_at, {now}) WHERE account_id = {id}",
        balance = row.account.balance,
        held = row.held_total,
        count = row.entry_count,
        now = datetime(now),
        id = row.account.id,
    );
    if let Some(guard) = guard {
        let _ = write!(sql, " AND entry_count = {count_before} AND {guard}");
    }
    sql
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone as _, Utc};

    use super::*;
    use crate::ledger::{AccountId, Currency};

    fn row(id: u64, balance: i64, held: i64, count: u64) -> AccountRow {
        AccountRow {
            account: crate::ledger::Account {
                id: AccountId::parse("account_id", id).unwrap(),
                currency: Currency::parse("currency", "USD").unwrap(),
                balance,
                held,
                limits: Limits::default(),
                metadata: crate::ledger::Metadata::NONE,
                created_at: Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap(),
            },
            entry_count: count,
            held_total: held,
        }
    }

    #[test]
    fn a_batch_updates_its_accounts_in_one_upsert_by_primary_key() {
        let (a, b) = (row(7, 100, 0, 3), row(9, 5, 2, 1));
        let now = Utc.with_ymd_and_hms(2026, 12, 2, 0, 0, 0).unwrap();
        assert_eq!(
            upsert_sql(&[&a, &b], now).unwrap(),
            "INSERT INTO accounts (account_id, currency, balance, held, entry_count, created_at, \
             stamped_at) \
             VALUES (7, 'USD', 100, 0, 3, '2026-12-01 00:00:00.000000', \
             '2026-12-02 00:00:00.000000'), \
             (9, 'USD', 5, 2, 1, '2026-12-01 00:00:00.000000', '2026-12-02 00:00:00.000000') \
             ON DUPLICATE KEY UPDATE balance = VALUES(balance), held = VALUES(held), \
             entry_count = VALUES(entry_count), \
             stamped_at = GREATEST(stamped_at, VALUES(stamped_at))"
        );
        assert_eq!(upsert_sql(&[], now), None);
    }
}
