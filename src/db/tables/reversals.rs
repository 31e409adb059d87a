//! The `reversals` table: one row per operation reversed, by the operation's
//! identity (its namespace and the key it committed under), written in the
//! transaction that writes the reversal's entries. Its primary key is what
//! makes a reversal happen at most once (SPEC 3.12): the decision reads the rows
//! to answer ALREADY_REVERSED, but a second row is refused by the engine itself,
//! on every node of a cluster, whatever a read saw.

use diesel::QueryableByName;
use diesel::sql_types::Varbinary;

use crate::db::conn::failure::{Failure, Step};
use crate::db::conn::sql::{Bind, Sql, datetime, hex};
use crate::db::conn::tx::Tx;
use crate::error::Error;
use crate::ledger::book::NewReversal;
use crate::ledger::{IdempotencyKey, ScopedKey};

#[derive(Debug, QueryableByName)]
struct Row {
    #[diesel(sql_type = Varbinary)]
    namespace: Vec<u8>,
    #[diesel(sql_type = Varbinary)]
    original_key: Vec<u8>,
    #[diesel(sql_type = Varbinary)]
    reversal_key: Vec<u8>,
}

/// The statement of [`reversed_by`]: through the primary key.
pub(crate) fn reversed_by_sql<'a>(originals: &[&'a ScopedKey]) -> Sql<'a> {
    let originals = crate::db::conn::sql::padded(originals);
    let pairs = vec!["(?, ?)"; originals.len()].join(", ");
    let mut sql = Sql::new(format!(
        "SELECT namespace, original_key, reversal_key FROM reversals FORCE INDEX (PRIMARY) \
         WHERE (namespace, original_key) IN ({pairs})"
    ));
    for key in &originals {
        sql = sql
            .bind(Bind::Bytes(key.namespace.as_str().as_bytes()))
            .bind(Bind::Bytes(key.key.as_str().as_bytes()));
    }
    sql
}

/// The reversals of `originals` that had committed, as (original, the
/// reversal's key): a plain read, made once the originals' accounts are locked,
/// which a committed reversal of any of them held.
pub(crate) async fn reversed_by(
    tx: &mut Tx<'_>,
    originals: &[&ScopedKey],
) -> Result<Vec<(ScopedKey, IdempotencyKey)>, Failure> {
    let rows: Vec<Row> = tx.load(Step::Read, reversed_by_sql(originals)).await?;
    let key = |bytes: Vec<u8>, field: &str| -> Result<IdempotencyKey, Error> {
        let text = String::from_utf8(bytes)
            .map_err(|_| Error::internal(format!("a stored {field} is not UTF-8")))?;
        IdempotencyKey::parse("key", text).map_err(|v| Error::internal_row(&v))
    };
    let mut found = Vec::with_capacity(rows.len());
    for row in rows {
        let Some(original) = originals
            .iter()
            .find(|o| o.namespace.as_str().as_bytes() == row.namespace)
        else {
            continue;
        };
        let original = ScopedKey {
            namespace: original.namespace.clone(),
            key: key(row.original_key, "original_key")?,
        };
        found.push((original, key(row.reversal_key, "reversal_key")?));
    }
    Ok(found)
}

/// `INSERT` of a transaction's reversals, each with the key of the call that
/// made it: a plain insert, so a second reversal of an operation fails on the
/// primary key (and its transaction is retried, to be answered ALREADY_REVERSED).
pub(crate) fn insert_sql<'k>(
    reversals: &[NewReversal],
    key_of: impl Fn(usize) -> Option<&'k ScopedKey>,
    now: chrono::DateTime<chrono::Utc>,
    guard: Option<&str>,
) -> Result<Option<String>, Error> {
    let mut rows = Vec::with_capacity(reversals.len());
    for reversal in reversals {
        let by = key_of(reversal.call)
            .ok_or_else(|| Error::internal("a reversal by an unknown call"))?;
        rows.push(format!(
            "{}, {}, {}, {}",
            hex(reversal.original.namespace.as_str().as_bytes()),
            hex(reversal.original.key.as_str().as_bytes()),
            hex(by.key.as_str().as_bytes()),
            datetime(now),
        ));
    }
    Ok(crate::db::conn::sql::insert(
        "reversals",
        "namespace, original_key, reversal_key, created_at",
        &rows,
        guard,
    ))
}
