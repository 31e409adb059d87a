//! Every check in one read-only snapshot, and every stored outcome streamed
//! through the judgement of the wire layer.

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Binary, Integer, Nullable, Text, TinyInt, Unsigned};
use diesel_async::{RunQueryDsl, SimpleAsyncConnection as _};
use futures::TryStreamExt as _;

use super::check::SetCheck;
use super::{keys, money, stream};
use crate::db::conn::connection::Conn;

/// Violating rows reported per check; a broken ledger can have millions.
pub const MAX_REPORTED: usize = 100;

/// One broken invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub check: &'static str,
    pub detail: String,
}

fn set_checks() -> Vec<SetCheck> {
    [
        money::journal_checks(),
        money::limits_checks(),
        stream::time_checks(),
        keys::metadata_checks(),
        keys::key_checks(),
        money::movement_checks(),
        money::hold_checks(),
        keys::reversal_checks(),
        stream::numbering_checks(),
        stream::order_checks(),
        stream::search_index_checks(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

#[derive(QueryableByName)]
struct Detail {
    #[diesel(sql_type = Text)]
    detail: String,
}

/// A key row, with the entries and the hold written under its key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredKey {
    pub namespace: Vec<u8>,
    pub idempotency_key: Vec<u8>,
    pub method: u8,
    pub outcome_code: Option<i32>,
    pub outcome: Option<Vec<u8>>,
    /// In leg order.
    pub entries: Vec<EntryFacts>,
    /// The hold placed under the key.
    pub hold: Option<(u64, i64)>,
}

/// What an entry's reply must agree with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryFacts {
    pub entry_id: u64,
    pub account_id: u64,
    pub kind: u8,
    pub amount: i64,
    pub balance_after: i64,
}

#[derive(Debug, QueryableByName)]
struct KeyEffectRow {
    #[diesel(sql_type = Binary)]
    namespace: Vec<u8>,
    #[diesel(sql_type = Binary)]
    idempotency_key: Vec<u8>,
    #[diesel(sql_type = Unsigned<TinyInt>)]
    method: u8,
    #[diesel(sql_type = Nullable<Integer>)]
    outcome_code: Option<i32>,
    #[diesel(sql_type = Nullable<Binary>)]
    outcome: Option<Vec<u8>>,
    #[diesel(sql_type = Nullable<Unsigned<BigInt>>)]
    entry_id: Option<u64>,
    #[diesel(sql_type = Nullable<Unsigned<BigInt>>)]
    account_id: Option<u64>,
    #[diesel(sql_type = Nullable<Unsigned<TinyInt>>)]
    kind: Option<u8>,
    #[diesel(sql_type = Nullable<BigInt>)]
    amount: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    balance_after: Option<i64>,
    #[diesel(sql_type = Nullable<Unsigned<BigInt>>)]
    hold_id: Option<u64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    hold_amount: Option<i64>,
}

/// Counts for the summary of a clean audit.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    pub accounts: u64,
    pub entries: u64,
    pub holds: u64,
    pub keys: u64,
}

#[derive(QueryableByName)]
struct SizesRow {
    #[diesel(sql_type = BigInt)]
    accounts: i64,
    #[diesel(sql_type = BigInt)]
    entries: i64,
    #[diesel(sql_type = BigInt)]
    holds: i64,
    #[diesel(sql_type = BigInt)]
    keys: i64,
}

/// Runs every check inside one consistent snapshot. `inspect` judges each stored
/// outcome (decoding is the wire layer's knowledge) and returns its violation.
pub async fn run(
    conn: &mut Conn,
    mut inspect: impl FnMut(&StoredKey) -> Option<String>,
) -> diesel::QueryResult<(Sizes, Vec<Violation>)> {
    // A post's entries, listed by GROUP_CONCAT, outgrow its default 1,024 bytes.
    conn.batch_execute(
        "SET SESSION group_concat_max_len = 1048576; \
         START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY",
    )
    .await?;
    let result = async {
        let mut violations = Vec::new();
        for check in set_checks() {
            let sql = format!("{} LIMIT {MAX_REPORTED}", check.sql);
            let rows: Vec<Detail> = diesel::sql_query(sql).load(conn).await?;
            violations.extend(rows.into_iter().map(|r| Violation {
                check: check.name,
                detail: r.detail,
            }));
        }
        violations.extend(inspect_outcomes(conn, &mut inspect).await?);
        let sizes = sizes(conn).await?;
        Ok((sizes, violations))
    }
    .await;
    conn.batch_execute("ROLLBACK").await?;
    result
}

/// Streams every key row with what was written under its key through `inspect`,
/// one key at a time.
async fn inspect_outcomes(
    conn: &mut Conn,
    inspect: &mut impl FnMut(&StoredKey) -> Option<String>,
) -> diesel::QueryResult<Vec<Violation>> {
    let query = diesel::sql_query(
        "SELECT k.namespace, k.idempotency_key, k.method, k.outcome_code, k.outcome, \
         e.entry_id, e.account_id, e.kind, e.amount, e.balance_after, \
         h.hold_id, h.amount AS hold_amount \
         FROM idempotency_keys k \
         LEFT JOIN entries e ON e.namespace = k.namespace AND e.idempotency_key = k.idempotency_key \
         LEFT JOIN holds h ON h.namespace = k.namespace AND h.idempotency_key = k.idempotency_key \
         ORDER BY k.namespace, k.idempotency_key, e.leg",
    );
    let mut rows = std::pin::pin!(query.load_stream::<KeyEffectRow>(conn).await?);
    let mut violations = Vec::new();
    let mut judge = |key: &StoredKey| {
        if let Some(detail) = inspect(key)
            && violations.len() < MAX_REPORTED
        {
            violations.push(Violation {
                check: "every stored outcome decodes and matches what its key wrote",
                detail,
            });
        }
    };
    let mut current: Option<StoredKey> = None;
    while let Some(row) = rows.try_next().await? {
        let same = current.as_ref().is_some_and(|c| {
            c.namespace == row.namespace && c.idempotency_key == row.idempotency_key
        });
        if !same {
            if let Some(done) = current.take() {
                judge(&done);
            }
            current = Some(StoredKey {
                namespace: row.namespace,
                idempotency_key: row.idempotency_key,
                method: row.method,
                outcome_code: row.outcome_code,
                outcome: row.outcome,
                entries: Vec::new(),
                hold: row.hold_id.zip(row.hold_amount),
            });
        }
        if let (
            Some(key),
            Some(entry_id),
            Some(account_id),
            Some(kind),
            Some(amount),
            Some(balance_after),
        ) = (
            current.as_mut(),
            row.entry_id,
            row.account_id,
            row.kind,
            row.amount,
            row.balance_after,
        ) {
            key.entries.push(EntryFacts {
                entry_id,
                account_id,
                kind,
                amount,
                balance_after,
            });
        }
    }
    if let Some(done) = current.take() {
        judge(&done);
    }
    Ok(violations)
}

async fn sizes(conn: &mut Conn) -> diesel::QueryResult<Sizes> {
    let row: SizesRow = diesel::sql_query(
        "SELECT (SELECT COUNT(*) FROM accounts) AS accounts, \
         (SELECT COUNT(*) FROM entries) AS entries, \
         (SELECT COUNT(*) FROM holds) AS holds, \
         (SELECT COUNT(*) FROM idempotency_keys) AS `keys`",
    )
    .get_result(conn)
    .await?;
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    Ok(Sizes {
        accounts: count(row.accounts),
        entries: count(row.entries),
        holds: count(row.holds),
        keys: count(row.keys),
    })
}
