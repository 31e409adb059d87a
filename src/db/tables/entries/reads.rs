//! Entries by id, by the key of the call that wrote them, and an account's journal by page.

use crate::db::conn::connection::Conn;
use crate::db::conn::failure::{Failure, Step};
use crate::db::conn::sql::{Bind, Sql};
use crate::db::conn::tx::Tx;
use crate::db::tables::limits::ENTRY_LIMITS_JOIN;
use crate::error::Error;
use crate::ledger::{AccountId, Entry, EntryId, ScopedKey};

use super::rows::{FULL_COLUMNS, FullRow, WITH_COMMITS, load};

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
