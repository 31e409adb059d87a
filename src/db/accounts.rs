//! The `accounts` table: locking accounts for a transaction, reading one, and the
//! SQL of their writes.

use std::fmt::Write as _;

use chrono::NaiveDateTime;
use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Datetime, Text, Unsigned};

use super::failure::{Failure, Step};
use super::pool::Conn;
use super::sql::{Bind, Sql, datetime, hex};
use super::tx::Tx;
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
pub(crate) async fn lock(
    tx: &mut Tx<'_>,
    ids: &[AccountId],
) -> Result<(Vec<AccountRow>, Option<NaiveDateTime>), Failure> {
    let ids: Vec<u64> = ids.iter().map(|id| id.get()).collect();
    let sql = Sql::with_ids(
        &format!("SELECT {COLUMNS}, SYSDATE(6) AS now FROM accounts WHERE account_id"),
        &ids,
        " ORDER BY account_id FOR UPDATE",
    );
    let rows: Vec<Row> = tx.load(Step::LockAccounts, sql).await?;
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
    let rows: Vec<Row> = super::reads::load(conn, sql).await?;
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
            let a = &row.account;
            Ok(format!(
                "{id}, CONVERT({currency} USING ascii), {balance}, {held}, {count}, {created}, \
                 {namespace}, {key}",
                id = a.id,
                currency = hex(a.currency.as_str().as_bytes()),
                balance = a.balance,
                held = row.held_total,
                count = row.entry_count,
                created = datetime(a.created_at),
                namespace = hex(key.namespace.as_str().as_bytes()),
                key = hex(key.key.as_str().as_bytes()),
            ))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    Ok(super::writes::insert(
        "accounts",
        &format!("{COLUMNS}, namespace, idempotency_key"),
        &values,
        guard,
    ))
}

/// `UPDATE` of the changed accounts' counters, one statement for them all.
/// `guard`, on a multi-primary node, makes it a no-op for an account unless it
/// still has the entry count it was locked with, and for all unless the
/// transaction still holds its claim (`writes`).
pub(crate) fn update_sql(rows: &[(AccountRow, u64)], guard: Option<&str>) -> Option<String> {
    let mut sql = match rows {
        [] => return None,
        [(row, _)] => format!(
            "UPDATE accounts SET balance = {balance}, held = {held}, entry_count = {count} \
             WHERE account_id = {id}",
            balance = row.account.balance,
            held = row.held_total,
            count = row.entry_count,
            id = row.account.id,
        ),
        many => {
            // Every CASE is chosen by account_id, which no assignment changes, so
            // the order MySQL applies them in does not matter.
            let case = |value: &dyn Fn(&AccountRow) -> String| {
                let mut case = String::from("CASE account_id");
                for (row, _) in many {
                    let _ = write!(case, " WHEN {} THEN {}", row.account.id, value(row));
                }
                case + " END"
            };
            let ids: Vec<String> = many
                .iter()
                .map(|(row, _)| row.account.id.to_string())
                .collect();
            format!(
                "UPDATE accounts SET balance = {}, held = {}, entry_count = {} \
                 WHERE account_id IN ({})",
                case(&|row| row.account.balance.to_string()),
                case(&|row| row.held_total.to_string()),
                case(&|row| row.entry_count.to_string()),
                ids.join(", "),
            )
        }
    };
    if let Some(guard) = guard {
        let _ = match rows {
            [(_, before)] => write!(sql, " AND entry_count = {before}"),
            many => {
                let mut before = String::from("CASE account_id");
                for (row, count) in many {
                    let _ = write!(before, " WHEN {} THEN {count}", row.account.id);
                }
                write!(sql, " AND entry_count = {before} END")
            }
        };
        let _ = write!(sql, " AND {guard}");
    }
    Some(sql)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: u64, balance: i64, held: i64, entry_count: u64) -> (AccountRow, u64) {
        let account = Account {
            id: AccountId::parse("account_id", id).unwrap(),
            currency: Currency::parse("currency", "USD").unwrap(),
            balance,
            held,
            created_at: chrono::DateTime::UNIX_EPOCH,
        };
        let row = AccountRow {
            account,
            entry_count,
            held_total: held,
        };
        (row, entry_count - 1)
    }

    #[test]
    fn one_statement_updates_every_changed_account() {
        assert_eq!(update_sql(&[], None), None);
        assert_eq!(
            update_sql(&[row(7, 10, 0, 3)], Some("G")).unwrap(),
            "UPDATE accounts SET balance = 10, held = 0, entry_count = 3 \
             WHERE account_id = 7 AND entry_count = 2 AND G"
        );
        let rows = [row(7, 10, 0, 3), row(9, -4, 5, 8)];
        let plain = "UPDATE accounts SET \
             balance = CASE account_id WHEN 7 THEN 10 WHEN 9 THEN -4 END, \
             held = CASE account_id WHEN 7 THEN 0 WHEN 9 THEN 5 END, \
             entry_count = CASE account_id WHEN 7 THEN 3 WHEN 9 THEN 8 END \
             WHERE account_id IN (7, 9)";
        assert_eq!(update_sql(&rows, None).unwrap(), plain);
        assert_eq!(
            update_sql(&rows, Some("G")).unwrap(),
            format!(
                "{plain} AND entry_count = CASE account_id WHEN 7 THEN 2 WHEN 9 THEN 7 END AND G"
            )
        );
    }
}
