//! The `accounts` table: locking accounts for a transaction, reading one, and the
//! SQL of their writes.

use std::fmt::Write as _;

use chrono::NaiveDateTime;
use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Datetime, Text, Unsigned};

use crate::db::conn::connection::Conn;
use crate::db::conn::failure::{Failure, Step};
use crate::db::conn::sql::{Bind, Sql, datetime, hex, text};
use crate::db::conn::tx::Tx;
use crate::error::Error;
use crate::ledger::book::AccountRow;
use crate::ledger::{Account, AccountId, Currency, HoldState, ScopedKey};

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
        let row = AccountRow {
            account: Account {
                id,
                currency,
                balance: self.balance,
                held: self.held,
                created_at: self.created_at.and_utc(),
            },
            entry_count: self.entry_count,
            held_total: self.held,
        };
        Ok((row, self.now))
    }
}

const COLUMNS: &str = "account_id, currency, balance, held, entry_count, created_at";

/// Locks the accounts (`SELECT ... FOR UPDATE`) in ascending id order, so two
/// transactions locking the same accounts cannot deadlock; returns those that
/// exist, and the database's clock once every lock was granted (`SYSDATE`, which,
/// unlike `NOW`, is read when evaluated, not when the statement began).
/// The statement of [`lock`].
pub(crate) fn lock_sql(ids: &[u64]) -> Sql<'static> {
    Sql::with_ids(
        &format!("SELECT {COLUMNS}, SYSDATE(6) AS now FROM accounts WHERE account_id"),
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

/// Reads an account outside any transaction, with the sum of its active holds.
pub(crate) async fn find(conn: &mut Conn, id: AccountId) -> Result<Option<Account>, Error> {
    let sql = Sql::new(format!(
        "SELECT a.account_id, a.currency, a.balance, a.entry_count, a.created_at, \
         UTC_TIMESTAMP(6) AS now, \
         CASE WHEN a.held = 0 THEN 0 ELSE (SELECT COALESCE(SUM(h.amount), 0) FROM holds h \
           WHERE h.account_id = a.account_id AND h.state = {held} \
           AND h.expires_at > UTC_TIMESTAMP(6)) END AS held \
         FROM accounts a WHERE a.account_id = ?",
        held = HoldState::Held.code()
    ))
    .bind(Bind::U64(id.get()));
    let rows: Vec<Row> = crate::db::conn::tx::load(conn, sql).await?;
    rows.into_iter()
        .next()
        .map(|row| row.into_locked().map(|(row, _)| row.account))
        .transpose()
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
            Ok(format!(
                "{}, {namespace}, {key}",
                values(row),
                namespace = hex(key.namespace.as_str().as_bytes()),
                key = hex(key.key.as_str().as_bytes()),
            ))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    Ok(crate::db::conn::sql::insert(
        "accounts",
        &format!("{COLUMNS}, namespace, idempotency_key"),
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

/// One statement for every changed account of a batch, on a single server (no
/// guard): a multi-row `INSERT ... ON DUPLICATE KEY UPDATE` by primary key. Every
/// row it names exists and is locked by this transaction, so each is only updated
/// (never inserted), and the statement locks exactly those rows: unlike an
/// `UPDATE ... WHERE account_id IN (...)`, which the optimizer may run as a scan.
pub(crate) fn upsert_sql(rows: &[&AccountRow]) -> Option<String> {
    if rows.is_empty() {
        return None;
    }
    let mut sql = format!("INSERT INTO accounts ({COLUMNS}) VALUES ");
    for (n, row) in rows.iter().enumerate() {
        let comma = if n == 0 { "" } else { ", " };
        let _ = write!(sql, "{comma}({})", values(row));
    }
    sql.push_str(
        " ON DUPLICATE KEY UPDATE balance = VALUES(balance), held = VALUES(held), \
         entry_count = VALUES(entry_count)",
    );
    Some(sql)
}

/// `UPDATE` of a changed account's counters, by its primary key (a statement for
/// several accounts may be run as a scan, locking accounts of other
/// transactions). `guard`, on a multi-primary node, makes it a no-op unless the
/// account still has the entry count it was locked with and the transaction
/// still holds its claim (`writes`).
pub(crate) fn update_sql(row: &AccountRow, count_before: u64, guard: Option<&str>) -> String {
    let mut sql = format!(
        "UPDATE accounts SET balance = {balance}, held = {held}, entry_count = {count} \
         WHERE account_id = {id}",
        balance = row.account.balance,
        held = row.held_total,
        count = row.entry_count,
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
                created_at: Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap(),
            },
            entry_count: count,
            held_total: held,
        }
    }

    #[test]
    fn a_batch_updates_its_accounts_in_one_upsert_by_primary_key() {
        let (a, b) = (row(7, 100, 0, 3), row(9, 5, 2, 1));
        assert_eq!(
            upsert_sql(&[&a, &b]).unwrap(),
            "INSERT INTO accounts (account_id, currency, balance, held, entry_count, created_at) \
             VALUES (7, 'USD', 100, 0, 3, '2026-12-01 00:00:00.000000'), \
             (9, 'USD', 5, 2, 1, '2026-12-01 00:00:00.000000') \
             ON DUPLICATE KEY UPDATE balance = VALUES(balance), held = VALUES(held), \
             entry_count = VALUES(entry_count)"
        );
        assert_eq!(upsert_sql(&[]), None);
    }
}
