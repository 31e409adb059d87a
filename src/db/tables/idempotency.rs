//! The `idempotency_keys` table: the probe that claims a key, the locking reads of
//! an existing key, and the SQL that stores an outcome.

use std::fmt::Write as _;

use chrono::NaiveDateTime;
use diesel::QueryableByName;
use diesel::mysql::Mysql;
use diesel::prelude::QueryResult;
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::sql_types::{Binary, Blob, Datetime, Integer, Nullable, TinyInt, Unsigned, Varbinary};

use crate::db::conn::failure::{Failure, Step};
use crate::db::conn::sql::{Bind, Sql, hex};
use crate::db::conn::tx::Tx;
use crate::error::Error;
use crate::ledger::{Fingerprint, ScopedKey, StoredOutcome};
use crate::ops::Method;

/// What the probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claim {
    /// The row was inserted: this transaction does the work.
    New,
    /// The row existed (and, if another transaction held it, that one has ended):
    /// replay its outcome.
    Duplicate,
}

/// SPEC 3.2 step 3. Affected rows are 1 for a new key and 0 for a duplicate, which
/// only holds on connections without `CLIENT_FOUND_ROWS` (see `pool`). A duplicate
/// whose row is still uncommitted blocks here until its transaction ends.
///
/// The statement names the key twice: the second row is always a duplicate of
/// the first, unchanged, which adds nothing to the affected rows unless the
/// connection counts found rows. On such a connection the probe reports 2 for a
/// new key and for a duplicate alike, and is refused, so the trap cannot turn a
/// retry into a second charge even past the self-check.
pub(crate) async fn probe(
    tx: &mut Tx<'_>,
    key: &ScopedKey,
    method: Method,
    fingerprint: &Fingerprint,
) -> Result<Claim, Failure> {
    let probe = Probe {
        namespace: key.namespace.as_str().as_bytes(),
        key: key.key.as_str().as_bytes(),
        method: method.code(),
        fingerprint: fingerprint.as_bytes().as_slice(),
    };
    claim_of(tx.execute(Step::Probe, probe).await?).map_err(Failure::from)
}

/// What the probe's affected rows say (SPEC 3.2 step 3: never guess).
fn claim_of(affected: usize) -> Result<Claim, Error> {
    match affected {
        1 => Ok(Claim::New),
        0 => Ok(Claim::Duplicate),
        n => Err(Error::internal(format!(
            "the probe affected {n} rows; only 1 (new) or 0 (duplicate) are meaningful"
        ))),
    }
}

/// The probe statement, written out so the SQL the guarantee rests on reads as one
/// line, and with a static query id so the prepared statement is cached (diesel's
/// own upsert builder opts out of caching).
#[derive(Debug)]
struct Probe<'a> {
    namespace: &'a [u8],
    key: &'a [u8],
    method: u8,
    fingerprint: &'a [u8],
}

impl QueryFragment<Mysql> for Probe<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Mysql>) -> QueryResult<()> {
        out.push_sql(
            "INSERT INTO idempotency_keys \
             (namespace, idempotency_key, method, fingerprint, created_at) VALUES ",
        );
        // The same key twice: see `probe`.
        for row in ["(", "), ("] {
            out.push_sql(row);
            out.push_bind_param::<Varbinary, _>(&self.namespace)?;
            out.push_sql(", ");
            out.push_bind_param::<Varbinary, _>(&self.key)?;
            out.push_sql(", ");
            out.push_bind_param::<Unsigned<TinyInt>, _>(&self.method)?;
            out.push_sql(", ");
            out.push_bind_param::<Binary, _>(&self.fingerprint)?;
            // The database's clock, which retention compares key ages with.
            out.push_sql(", UTC_TIMESTAMP(6)");
        }
        out.push_sql(") ON DUPLICATE KEY UPDATE idempotency_key = idempotency_key");
        Ok(())
    }
}

impl QueryId for Probe<'_> {
    type QueryId = ProbeId;
    const HAS_STATIC_QUERY_ID: bool = true;
}

/// The cache identity of [`Probe`]'s SQL text, which never changes.
#[derive(Debug)]
struct ProbeId;

impl diesel::query_builder::Query for Probe<'_> {
    type SqlType = diesel::sql_types::Untyped;
}

/// An existing key's row.
#[derive(Debug, QueryableByName)]
pub struct KeyRow {
    #[diesel(sql_type = Unsigned<TinyInt>)]
    pub method: u8,
    #[diesel(sql_type = Binary)]
    pub fingerprint: Vec<u8>,
    #[diesel(sql_type = Nullable<Integer>)]
    pub outcome_code: Option<i32>,
    #[diesel(sql_type = Nullable<Blob>)]
    pub outcome: Option<Vec<u8>>,
    #[diesel(sql_type = Datetime)]
    pub created_at: NaiveDateTime,
}

impl KeyRow {
    pub fn binds(&self, method: Method, fingerprint: &Fingerprint) -> bool {
        self.method == method.code() && self.fingerprint == fingerprint.as_bytes()
    }

    /// The stored outcome; `None` only for a row that was never completed, which a
    /// committed row cannot be.
    pub fn outcome(&self) -> Option<StoredOutcome> {
        Some(StoredOutcome {
            code: self.outcome_code?,
            body: self.outcome.clone()?,
        })
    }
}

const KEY_COLUMNS: &str = "method, fingerprint, outcome_code, outcome, created_at";

fn select_key<'a>(key: &'a ScopedKey, lock: &str) -> Sql<'a> {
    Sql::new(format!(
        "SELECT {KEY_COLUMNS} FROM idempotency_keys \
         WHERE namespace = ? AND idempotency_key = ? {lock}"
    ))
    .bind(Bind::Bytes(key.namespace.as_str().as_bytes()))
    .bind(Bind::Bytes(key.key.as_str().as_bytes()))
}

/// SPEC 3.2 step 5: a locking read, so it sees the original's committed outcome
/// rather than a snapshot taken before the original committed.
pub(crate) async fn lock_existing(tx: &mut Tx<'_>, key: &ScopedKey) -> Result<KeyRow, Failure> {
    let rows: Vec<KeyRow> = tx
        .load(Step::ReadKey, select_key(key, "FOR UPDATE"))
        .await?;
    rows.into_iter()
        .next()
        .ok_or_else(|| Error::internal("the probe found a key row that is gone").into())
}

/// SPEC 3.7: the key's row, read with a shared lock so that an operation still
/// in flight under the key is waited for; `None` when nothing has committed under
/// the key.
pub(crate) async fn look_up(tx: &mut Tx<'_>, key: &ScopedKey) -> Result<Option<KeyRow>, Failure> {
    let rows: Vec<KeyRow> = tx
        .load(Step::ReadKey, select_key(key, "LOCK IN SHARE MODE"))
        .await?;
    Ok(rows.into_iter().next())
}

/// The condition that selects a key's row, whoever wrote it.
pub(crate) fn row_condition(key: &ScopedKey) -> String {
    format!(
        "namespace = {} AND idempotency_key = {}",
        hex(key.namespace.as_str().as_bytes()),
        hex(key.key.as_str().as_bytes())
    )
}

/// The condition that holds only inside the transaction that claimed the key:
/// its row exists and has no outcome yet.
pub(crate) fn claimed_condition(key: &ScopedKey) -> String {
    format!("{} AND outcome IS NULL", row_condition(key))
}

/// `UPDATE` of a new key's row with its outcome; on a multi-primary node only
/// while the row is still claimed.
pub(crate) fn outcome_sql(key: &ScopedKey, outcome: &StoredOutcome, guarded: bool) -> String {
    let condition = if guarded {
        claimed_condition(key)
    } else {
        row_condition(key)
    };
    format!(
        "UPDATE idempotency_keys SET outcome_code = {code}, outcome = {body} WHERE {condition}",
        code = outcome.code,
        body = hex(&outcome.body),
    )
}

/// A new key's stored outcome, with what its row was claimed with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Recorded<'a> {
    pub(crate) key: &'a ScopedKey,
    pub(crate) method: Method,
    pub(crate) fingerprint: &'a Fingerprint,
    pub(crate) outcome: &'a StoredOutcome,
}

/// One statement for the outcomes of every new key of a batch, on a single server
/// (no guard): a multi-row `INSERT ... ON DUPLICATE KEY UPDATE` by primary key.
/// Each row exists (this transaction's probe inserted it and holds its lock), so
/// each is only updated, and the statement locks exactly those rows: an `UPDATE`
/// with an IN list may be run as a scan of the index, locking other transactions'
/// key rows. The row's claim (method, fingerprint) is named as claimed, so even an
/// insert could store nothing the probe did not.
pub(crate) fn outcomes_sql(recorded: &[Recorded<'_>]) -> Option<String> {
    if recorded.is_empty() {
        return None;
    }
    let mut sql = "INSERT INTO idempotency_keys \
        (namespace, idempotency_key, method, fingerprint, created_at, outcome_code, outcome) VALUES "
        .to_owned();
    for (n, r) in recorded.iter().enumerate() {
        let comma = if n == 0 { "" } else { ", " };
        let _ = write!(
            sql,
            "{comma}({namespace}, {key}, {method}, {fingerprint}, UTC_TIMESTAMP(6), {code}, {body})",
            namespace = hex(r.key.namespace.as_str().as_bytes()),
            key = hex(r.key.key.as_str().as_bytes()),
            method = r.method.code(),
            fingerprint = hex(r.fingerprint.as_bytes()),
            code = r.outcome.code,
            body = hex(&r.outcome.body),
        );
    }
    sql.push_str(
        " ON DUPLICATE KEY UPDATE outcome_code = VALUES(outcome_code), outcome = VALUES(outcome)",
    );
    Some(sql)
}

/// `DELETE` of a key's row that this transaction inserted and will not use (its
/// call left or was refused): only while it holds no outcome, so a committed row
/// is never touched.
pub(crate) fn unclaim_sql(key: &ScopedKey) -> String {
    format!(
        "DELETE FROM idempotency_keys WHERE {}",
        claimed_condition(key)
    )
}

/// True when the key's committed row holds exactly this outcome (for the check
/// after COMMIT).
/// How many of `keys` have committed with their outcome: through the primary
/// key (forced: on a small table the optimizer may scan it whole), then by the
/// outcome.
pub(crate) fn committed_count_sql(keys: &[(&ScopedKey, &StoredOutcome)]) -> String {
    let pairs: Vec<String> = keys
        .iter()
        .map(|(key, _)| {
            format!(
                "({}, {})",
                hex(key.namespace.as_str().as_bytes()),
                hex(key.key.as_str().as_bytes())
            )
        })
        .collect();
    let committed: Vec<String> = keys
        .iter()
        .map(|(key, outcome)| committed_condition(key, outcome))
        .collect();
    format!(
        "SELECT COUNT(*) FROM idempotency_keys FORCE INDEX (PRIMARY) \
         WHERE (namespace, idempotency_key) IN ({}) \
         AND (namespace, idempotency_key, outcome_code, outcome) IN ({})",
        pairs.join(", "),
        committed.join(", ")
    )
}

pub(crate) fn committed_condition(key: &ScopedKey, outcome: &StoredOutcome) -> String {
    format!(
        "({}, {}, {}, {})",
        hex(key.namespace.as_str().as_bytes()),
        hex(key.key.as_str().as_bytes()),
        outcome.code,
        hex(&outcome.body)
    )
}

/// A key's row as a batch reads it back: which key, and what it holds.
#[derive(Debug, QueryableByName)]
pub(crate) struct BatchKeyRow {
    #[diesel(sql_type = Varbinary)]
    pub(crate) namespace: Vec<u8>,
    #[diesel(sql_type = Varbinary)]
    pub(crate) idempotency_key: Vec<u8>,
    #[diesel(embed)]
    pub(crate) row: KeyRow,
}

impl BatchKeyRow {
    pub(crate) fn is(&self, key: &ScopedKey) -> bool {
        self.namespace == key.namespace.as_str().as_bytes()
            && self.idempotency_key == key.key.as_str().as_bytes()
    }
}

/// The probe of a batch's keys, sorted so two batches claim shared keys in one
/// order: whether it inserted a row for every key. Its affected rows cannot tell
/// which keys are new when some are duplicates (the locking read after it does:
/// [`lock_claimed`]), but when it inserted as many rows as there are distinct keys,
/// every key is new.
///
/// The rows always repeat a key at least once (padded past the keys' count), and
/// a repeated row adds nothing to the affected rows unless the connection counts
/// found rows: there it makes the total exceed the keys, which is refused rather
/// than read as "all new".
pub(crate) async fn probe_all(
    tx: &mut Tx<'_>,
    keys: &[(&ScopedKey, Method, &Fingerprint)],
) -> Result<bool, Failure> {
    let distinct = keys.len();
    let mut keys = keys.to_vec();
    if let Some(last) = keys.last().copied() {
        keys.push(last);
    }
    let keys = crate::db::conn::sql::padded(&keys);
    let rows = vec!["(?, ?, ?, ?, UTC_TIMESTAMP(6))"; keys.len()].join(", ");
    let mut sql = Sql::new(format!(
        "INSERT INTO idempotency_keys \
         (namespace, idempotency_key, method, fingerprint, created_at) VALUES {rows} \
         ON DUPLICATE KEY UPDATE idempotency_key = idempotency_key"
    ));
    for (key, method, fingerprint) in &keys {
        sql = sql
            .bind(Bind::Bytes(key.namespace.as_str().as_bytes()))
            .bind(Bind::Bytes(key.key.as_str().as_bytes()))
            .bind(Bind::U64(u64::from(method.code())))
            .bind(Bind::Bytes(fingerprint.as_bytes().as_slice()));
    }
    all_new(tx.execute(Step::Probe, sql).await?, distinct).map_err(Failure::from)
}

/// Whether a batch probe that inserted `inserted` rows for `keys` distinct keys
/// (with at least one repeated) claimed every key. More rows than keys can only
/// be a connection counting found rows: never guessed at.
fn all_new(inserted: usize, keys: usize) -> Result<bool, Error> {
    if inserted > keys {
        return Err(Error::internal(format!(
            "the batch probe affected {inserted} rows for {keys} keys: the connection counts \
             found rows"
        )));
    }
    Ok(inserted == keys)
}

/// The batch's key rows, locked. After [`probe_all`], a row without an outcome is
/// one this transaction inserted (a row another transaction held would have made
/// the probe wait until it committed, with an outcome, or rolled back, leaving the
/// key to this probe); a row with one is a duplicate.
pub(crate) async fn lock_claimed(
    tx: &mut Tx<'_>,
    keys: &[&ScopedKey],
) -> Result<Vec<BatchKeyRow>, Failure> {
    tx.load(Step::ReadKey, lock_claimed_sql(keys)).await
}

/// The statement of [`lock_claimed`]: through the primary key, forced, since on a
/// small table the optimizer may scan it whole, which would lock every key row,
/// other transactions' too.
pub(crate) fn lock_claimed_sql<'a>(keys: &[&'a ScopedKey]) -> Sql<'a> {
    let keys = crate::db::conn::sql::padded(keys);
    let pairs = vec!["(?, ?)"; keys.len()].join(", ");
    let mut sql = Sql::new(format!(
        "SELECT namespace, idempotency_key, {KEY_COLUMNS} FROM idempotency_keys \
         FORCE INDEX (PRIMARY) WHERE (namespace, idempotency_key) IN ({pairs}) FOR UPDATE"
    ));
    for key in &keys {
        sql = sql
            .bind(Bind::Bytes(key.namespace.as_str().as_bytes()))
            .bind(Bind::Bytes(key.key.as_str().as_bytes()));
    }
    sql
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_reads_its_affected_rows_and_guesses_at_nothing_else() {
        assert!(matches!(claim_of(1), Ok(Claim::New)));
        assert!(matches!(claim_of(0), Ok(Claim::Duplicate)));
        // A connection counting found rows reports 2 for the doubled key.
        assert!(claim_of(2).is_err());
    }

    /// Four keys, one a duplicate: with found rows counted, 3 inserted + 1 found
    /// + the repeated row found = 5, which betrays the connection; without, 3.
    #[test]
    fn a_batch_probe_inflated_by_found_rows_is_refused() {
        assert!(matches!(all_new(4, 4), Ok(true)));
        assert!(matches!(all_new(3, 4), Ok(false)));
        assert!(all_new(5, 4).is_err());
    }
}
