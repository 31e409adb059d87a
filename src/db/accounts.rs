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

/// An account row held locked, with the number of entries it has.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LockedAccount {
    pub(crate) state: Locked,
    pub(crate) entry_count: u64,
}

/// Locks the account's row for the rest of the transaction (`SELECT ... FOR
/// UPDATE`); `None` when there is no such account.
pub(crate) async fn lock(conn: &mut Conn, id: AccountId) -> Result<Option<LockedAccount>, Failure> {
    let row: Option<(String, i64, u64)> = accounts::table
        .find(id.get())
        .select((accounts::currency, accounts::balance, accounts::entry_count))
        .for_update()
        .first(conn)
        .await
        .optional()
        .at(Step::LockAccount)?;
    let Some((currency, balance, entry_count)) = row else {
        return Ok(None);
    };
    let currency = Currency::parse("currency", &currency).map_err(|v| Error::internal_row(&v))?;
    Ok(Some(LockedAccount {
        state: Locked {
            id,
            currency,
            balance,
        },
        entry_count,
    }))
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
