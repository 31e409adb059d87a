//! The `metadata` and `metadata_pairs` tables (SPEC 3.11): a call's pairs,
//! stored once for the call, under its key, in the transaction that records its
//! success; what the call wrote (its entries, its hold, its account) carries the
//! same key, and so shows them. Never changed, and never purged: retention
//! purges key rows only.
//!
//! Each table has one job. `metadata` holds a call's pairs as one value
//! (`Metadata::encode`) by its key, `(namespace, idempotency_key)`: what reads
//! show. `metadata_pairs` holds one row per pair, its primary key `(name,
//! value, namespace, idempotency_key)`: the calls that hold a pair are a range
//! of it, where a search starts, and whether a call holds another pair is one
//! look-up. Both are binary, so values compare byte for byte, and neither has a
//! secondary index: a call with three pairs writes four rows and four index
//! entries.

use std::collections::HashMap;
use std::fmt::Write as _;

use diesel::QueryableByName;
use diesel::sql_types::Varbinary;

use crate::db::conn::connection::Conn;
use crate::db::conn::failure::{Failure, Step};
use crate::db::conn::sql::{Bind, Sql, hex, insert, push_hex};
use crate::db::conn::tx::Tx;
use crate::error::Error;
use crate::ledger::{Metadata, ScopedKey};

/// A call's key, as its rows carry it: `(namespace, idempotency_key)`.
pub(crate) type KeyBytes = (Vec<u8>, Vec<u8>);

/// The `INSERT`s of the pairs of the calls that succeeded: one row of each
/// call's pairs, one row per pair; `guard` as for the batch's other writes
/// (`exec::writes`).
pub(crate) fn insert_sql(calls: &[(&ScopedKey, &Metadata)], guard: Option<&str>) -> Vec<String> {
    let mut calls_rows = Vec::new();
    let mut pair_rows = Vec::new();
    for (key, metadata) in calls {
        if metadata.is_empty() {
            continue;
        }
        let mut owner = hex(key.namespace.as_str().as_bytes());
        owner.push_str(", ");
        push_hex(&mut owner, key.key.as_str().as_bytes());
        let mut row = owner.clone();
        row.push_str(", ");
        push_hex(&mut row, &metadata.encode());
        calls_rows.push(row);
        for (name, value) in metadata.pairs() {
            let mut row = String::with_capacity(owner.len() + 2 * (name.len() + value.len()) + 16);
            push_hex(&mut row, name.as_bytes());
            row.push_str(", ");
            push_hex(&mut row, value.as_bytes());
            let _ = write!(row, ", {owner}");
            pair_rows.push(row);
        }
    }
    [
        insert(
            "metadata",
            "namespace, idempotency_key, pairs",
            &calls_rows,
            guard,
        ),
        insert(
            "metadata_pairs",
            "name, value, namespace, idempotency_key",
            &pair_rows,
            guard,
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}

#[derive(Debug, QueryableByName)]
struct Row {
    #[diesel(sql_type = Varbinary)]
    namespace: Vec<u8>,
    #[diesel(sql_type = Varbinary)]
    idempotency_key: Vec<u8>,
    #[diesel(sql_type = diesel::sql_types::Blob)]
    pairs: Vec<u8>,
}

/// The statement of [`of_keys`]: the pairs of the calls `keys`, by primary key.
/// Their values are bound and the list padded to a power of two (as
/// `Sql::with_ids` pads), so the statement has one of a few texts: a text
/// is prepared and kept per connection, and on the server
/// `max_prepared_stmt_count` bounds them all.
pub(crate) fn of_keys_sql(keys: &[KeyBytes]) -> Sql<'_> {
    let mut sql = Sql::new(
        "SELECT namespace, idempotency_key, pairs FROM metadata FORCE INDEX (PRIMARY) \
         WHERE (namespace, idempotency_key) IN (",
    );
    let last = keys.len().checked_sub(1);
    let padded = keys.len().next_power_of_two();
    for n in 0..padded {
        let Some((namespace, key)) = keys.get(n).or_else(|| keys.get(last?)) else {
            break;
        };
        sql = sql.append(
            Sql::new(if n == 0 { "(?, ?)" } else { ", (?, ?)" })
                .bind(Bind::Bytes(namespace))
                .bind(Bind::Bytes(key)),
        );
    }
    sql.append(Sql::new(")"))
}

/// The metadata of each of the calls `keys` that has any.
pub(crate) async fn of_keys(
    conn: &mut Conn,
    keys: &[KeyBytes],
) -> Result<HashMap<KeyBytes, Metadata>, Error> {
    if keys.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<Row> = crate::db::conn::tx::load(conn, of_keys_sql(keys)).await?;
    collect(rows)
}

/// [`of_keys`] in a transaction, as its `step`: a plain read, of rows that
/// never change.
pub(crate) async fn of_keys_tx(
    tx: &mut Tx<'_>,
    step: Step,
    keys: &[KeyBytes],
) -> Result<HashMap<KeyBytes, Metadata>, Failure> {
    if keys.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<Row> = tx.load(step, of_keys_sql(keys)).await?;
    Ok(collect(rows)?)
}

fn collect(rows: Vec<Row>) -> Result<HashMap<KeyBytes, Metadata>, Error> {
    rows.into_iter()
        .map(|row| Ok(((row.namespace, row.idempotency_key), decode(&row.pairs)?)))
        .collect()
}

fn decode(pairs: &[u8]) -> Result<Metadata, Error> {
    Metadata::decode(pairs).ok_or_else(|| Error::internal("stored metadata does not decode"))
}

#[derive(Debug, QueryableByName)]
struct AccountRow {
    #[diesel(sql_type = diesel::sql_types::Unsigned<diesel::sql_types::BigInt>)]
    account_id: u64,
    #[diesel(sql_type = diesel::sql_types::Blob)]
    pairs: Vec<u8>,
}

/// The statement of [`of_accounts`]: the pairs of the OpenAccount calls of the
/// accounts `ids`, by each account's key (`accounts_key`).
pub(crate) fn of_accounts_sql(ids: &[u64]) -> Sql<'static> {
    Sql::with_ids(
        "SELECT a.account_id, m.pairs FROM accounts a \
         STRAIGHT_JOIN metadata m FORCE INDEX (PRIMARY) \
         ON m.namespace = a.namespace AND m.idempotency_key = a.idempotency_key \
         WHERE a.account_id",
        ids,
        "",
    )
}

/// The metadata of each of the accounts `ids` that has any.
pub(crate) async fn of_accounts(
    conn: &mut Conn,
    ids: &[u64],
) -> Result<HashMap<u64, Metadata>, Error> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<AccountRow> = crate::db::conn::tx::load(conn, of_accounts_sql(ids)).await?;
    collect_accounts(rows)
}

/// [`of_accounts`] in a transaction: a plain read, of rows that never change.
pub(crate) async fn of_accounts_tx(
    tx: &mut Tx<'_>,
    ids: &[u64],
) -> Result<HashMap<u64, Metadata>, Failure> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<AccountRow> = tx.load(Step::LockAccounts, of_accounts_sql(ids)).await?;
    Ok(collect_accounts(rows)?)
}

fn collect_accounts(rows: Vec<AccountRow>) -> Result<HashMap<u64, Metadata>, Error> {
    rows.into_iter()
        .map(|row| Ok((row.account_id, decode(&row.pairs)?)))
        .collect()
}

/// The distinct keys of `items`, as [`of_keys`] takes them.
pub(crate) fn distinct_keys<'a>(keys: impl Iterator<Item = (&'a str, &'a str)>) -> Vec<KeyBytes> {
    let mut seen: Vec<KeyBytes> = keys
        .map(|(namespace, key)| (namespace.as_bytes().to_vec(), key.as_bytes().to_vec()))
        .collect();
    seen.sort_unstable();
    seen.dedup();
    seen
}

/// A search's pairs, the one its statement starts from first: the rows that hold
/// it are a range of `metadata_pairs` (the calls, for a listing of accounts) or
/// of `search_entries` (the entries, for a search), and each is kept only if
/// its call holds the others too (each an `EXISTS`, by primary key). So a read
/// costs what its page holds and the driving pair's rows it passes over,
/// whatever the ledger's size, and [`Filter::choose`] drives it by the pair
/// with the fewest matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Filter {
    drive: (String, String),
    rest: Vec<(String, String)>,
}

/// Matches counted per pair when choosing the driving one: past this many, a
/// pair is as unselective as any.
const COUNTED: u32 = 10_000;

impl Filter {
    /// The filter of `pairs` (at least one) driven by the one with the fewest
    /// matches, counted up to [`COUNTED`] each.
    pub(crate) async fn choose(conn: &mut Conn, pairs: &Metadata) -> Result<Option<Self>, Error> {
        let all: Vec<(String, String)> = pairs
            .pairs()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let Some(first) = all.first().cloned() else {
            return Ok(None);
        };
        let mut drive = first;
        if all.len() > 1 {
            let rows: Vec<Count> = crate::db::conn::tx::load(conn, counts_sql(&all)).await?;
            let fewest = rows.iter().min_by_key(|c| (c.n, c.pair));
            if let Some(pair) = fewest.and_then(|c| all.get(usize::try_from(c.pair).ok()?)) {
                drive = pair.clone();
            }
        }
        let rest = all.into_iter().filter(|p| *p != drive).collect();
        Ok(Some(Self { drive, rest }))
    }

    /// The filter of `pairs` driven by its first pair (in key order), as
    /// [`Filter::choose`] picks when that one has the fewest matches.
    pub(crate) fn driven_by_first(pairs: &Metadata) -> Option<Self> {
        let mut all = pairs.pairs().map(|(k, v)| (k.to_owned(), v.to_owned()));
        let drive = all.next()?;
        Some(Self {
            drive,
            rest: all.collect(),
        })
    }

    /// The condition on the pair row `m` (a range of `metadata_pairs` or of
    /// `search_entries`): it is the driving pair, and the call of the row
    /// `owner` (with its `namespace` and `idempotency_key`) holds the rest. Its
    /// values are bound: its text depends on the number of pairs only.
    pub(crate) fn condition(&self, m: &str, owner: &str) -> Sql<'_> {
        let (name, value) = &self.drive;
        let mut sql = Sql::new(format!("{m}.name = ? AND {m}.value = ?"))
            .bind(Bind::Bytes(name.as_bytes()))
            .bind(Bind::Bytes(value.as_bytes()));
        for (n, (name, value)) in self.rest.iter().enumerate() {
            sql = sql.append(
                Sql::new(format!(
                    " AND EXISTS (SELECT 1 FROM metadata_pairs x{n} FORCE INDEX (PRIMARY) \
                     WHERE x{n}.name = ? AND x{n}.value = ? \
                     AND x{n}.namespace = {owner}.namespace \
                     AND x{n}.idempotency_key = {owner}.idempotency_key)"
                ))
                .bind(Bind::Bytes(name.as_bytes()))
                .bind(Bind::Bytes(value.as_bytes())),
            );
        }
        sql
    }
}

#[derive(Debug, QueryableByName)]
struct Count {
    #[diesel(sql_type = diesel::sql_types::Unsigned<diesel::sql_types::BigInt>)]
    pair: u64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}

/// The statement counting each pair's matches, up to [`COUNTED`], its values
/// bound.
pub(crate) fn counts_sql(pairs: &[(String, String)]) -> Sql<'_> {
    let mut sql = Sql::new("");
    for (i, (name, value)) in pairs.iter().enumerate() {
        sql = sql.append(
            Sql::new(format!(
                "{union}SELECT CAST({i} AS UNSIGNED) AS pair, COUNT(*) AS n FROM (SELECT 1 AS one \
                 FROM metadata_pairs FORCE INDEX (PRIMARY) WHERE name = ? AND value = ? \
                 LIMIT {COUNTED}) c{i}",
                union = if i == 0 { "" } else { " UNION ALL " },
            ))
            .bind(Bind::Bytes(name.as_bytes()))
            .bind(Bind::Bytes(value.as_bytes())),
        );
    }
    sql
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU64;

    use super::{Filter, counts_sql, of_keys_sql};
    use crate::db::tables::{accounts, entries};
    use crate::ledger::{AccountId, Metadata};

    fn filter(pairs: &[(&str, &str)]) -> Filter {
        let pairs = Metadata::stored(pairs.iter().map(|(k, v)| ((*k).into(), (*v).into())));
        Filter::driven_by_first(&pairs).unwrap_or_else(|| unreachable!("pairs were given"))
    }

    /// Each text is prepared once per connection and kept: a text that held
    /// a search's values would leave a statement on the server per search,
    /// until `max_prepared_stmt_count` refused every prepare of the instance.
    #[test]
    fn a_statements_text_never_holds_the_values_it_searches_for() {
        let a = filter(&[("order_id", "A-1"), ("region", "eu")]);
        let b = filter(&[("customer", "c-9"), ("shop", "x'; --")]);
        let (one, other) = (
            Some(AccountId::new(NonZeroU64::MIN)),
            Some(AccountId::new(NonZeroU64::MAX)),
        );
        assert_eq!(
            entries::search_sql(&a, one, 0, 10, 5).text(),
            entries::search_sql(&b, other, 3, 99, 50).text()
        );
        assert_eq!(
            accounts::list_sql(Some(&a), 0, 5).text(),
            accounts::list_sql(Some(&b), 9, 50).text()
        );
        let pairs = |f: &[(&str, &str)]| -> Vec<(String, String)> {
            f.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect()
        };
        let (p, q) = (
            pairs(&[("a", "1"), ("b", "2")]),
            pairs(&[("c", "3"), ("d", "4")]),
        );
        assert_eq!(counts_sql(&p).text(), counts_sql(&q).text());
        let keys = |n: u8| -> Vec<(Vec<u8>, Vec<u8>)> {
            (0..n).map(|i| (b"ns".to_vec(), vec![b'k', i])).collect()
        };
        // Five keys and eight share a text (padded), and so on by powers of two.
        assert_eq!(of_keys_sql(&keys(5)).text(), of_keys_sql(&keys(8)).text());
        assert_ne!(of_keys_sql(&keys(8)).text(), of_keys_sql(&keys(9)).text());
        assert!(
            !of_keys_sql(&keys(3)).text().contains("6b"),
            "no key in the text"
        );
    }
}
