//! The `accounts` table.

use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel_async::RunQueryDsl;

use super::failure::{AtStep, Failure, Step};
use super::pool::Conn;
use super::schema::accounts;
use crate::error::Error;
use crate::ledger::rules::Locked;
use crate::ledger::{Account, AccountId, Currency};

diesel::define_sql_function! {
    /// The id the last `AUTO_INCREMENT` insert of this session generated.
    fn last_insert_id() -> Unsigned<BigInt>;
}

#[derive(Debug, Queryable)]
struct Row {
    account_id: u64,
    currency: String,
    balance: i64,
    created_at: NaiveDateTime,
}

impl Row {
    fn into_account(self) -> Result<Account, Error> {
        let id =
            AccountId::parse("account_id", self.account_id).map_err(|v| Error::internal_row(&v))?;
        let currency =
            Currency::parse("currency", &self.currency).map_err(|v| Error::internal_row(&v))?;
        Ok(Account {
            id,
            currency,
            balance: self.balance,
            created_at: self.created_at.and_utc(),
        })
    }
}

/// Inserts a new account with a zero balance and returns its id.
pub(crate) async fn insert(
    conn: &mut Conn,
    currency: Currency,
    now: NaiveDateTime,
) -> Result<AccountId, Failure> {
    diesel::insert_into(accounts::table)
        .values((
            accounts::currency.eq(currency.as_str()),
            accounts::balance.eq(0_i64),
            accounts::created_at.eq(now),
        ))
        .execute(conn)
        .await
        .at(Step::Write)?;
    let id: u64 = diesel::select(last_insert_id())
        .get_result(conn)
        .await
        .at(Step::Write)?;
    Ok(AccountId::parse("account_id", id).map_err(|v| Error::internal_row(&v))?)
}

/// Locks the account's row for the rest of the transaction (`SELECT ... FOR
/// UPDATE`); `None` when there is no such account.
pub(crate) async fn lock(conn: &mut Conn, id: AccountId) -> Result<Option<Locked>, Failure> {
    let row: Option<(String, i64)> = accounts::table
        .find(id.get())
        .select((accounts::currency, accounts::balance))
        .for_update()
        .first(conn)
        .await
        .optional()
        .at(Step::LockAccount)?;
    let Some((currency, balance)) = row else {
        return Ok(None);
    };
    let currency = Currency::parse("currency", &currency).map_err(|v| Error::internal_row(&v))?;
    Ok(Some(Locked {
        id,
        currency,
        balance,
    }))
}

/// Sets the balance of an account whose row this transaction holds locked.
pub(crate) async fn set_balance(
    conn: &mut Conn,
    id: AccountId,
    balance: i64,
) -> Result<(), Failure> {
    diesel::update(accounts::table.find(id.get()))
        .set(accounts::balance.eq(balance))
        .execute(conn)
        .await
        .at(Step::Write)?;
    Ok(())
}

/// Reads an account outside any transaction.
pub(crate) async fn find(conn: &mut Conn, id: AccountId) -> Result<Option<Account>, Failure> {
    let row: Option<Row> = accounts::table
        .find(id.get())
        .select((
            accounts::account_id,
            accounts::currency,
            accounts::balance,
            accounts::created_at,
        ))
        .first(conn)
        .await
        .optional()
        .at(Step::Read)?;
    Ok(row.map(Row::into_account).transpose()?)
}
