//! Finding and locking the entries a refund or a reversal names.

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Nullable, Text, TinyInt, Unsigned};

use crate::db::conn::connection::Conn;
use crate::db::conn::failure::{Failure, Step};
use crate::db::conn::sql::{Bind, Sql};
use crate::db::conn::tx::Tx;
use crate::error::Error;
use crate::ledger::book::EntryRow;
use crate::ledger::{AccountId, Amount, Currency, EntryId, ScopedKey};

use super::rows::kind;

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
