//! The ledger's invariants as queries, for `ledger audit`.
//!
//! Every check runs in one read-only transaction with a consistent snapshot, so a
//! live service can keep writing while it runs. The set checks are aggregated by
//! the server and return only violating rows (at most [`MAX_REPORTED`] each); the
//! stored outcomes are streamed, so memory stays bounded however large the ledger.

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Binary, Integer, Nullable, Text, Unsigned};
use diesel_async::{RunQueryDsl, SimpleAsyncConnection as _};
use futures::TryStreamExt as _;

use super::pool::Conn;

/// Violating rows reported per check; a broken ledger can have millions.
pub const MAX_REPORTED: usize = 100;

/// One broken invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub check: &'static str,
    pub detail: String,
}

/// A set check: its name, what it asserts, and the query returning violations as
/// one text column `detail`.
struct SetCheck {
    name: &'static str,
    sql: &'static str,
}

const SET_CHECKS: &[SetCheck] = &[
    SetCheck {
        name: "balance equals the journal",
        sql: "SELECT CONCAT('account ', a.account_id, ': balance ', a.balance, ', journal ', \
              COALESCE(SUM(CASE e.kind WHEN 2 THEN e.amount WHEN 1 THEN -e.amount END), 0)) AS detail \
              FROM accounts a LEFT JOIN entries e ON e.account_id = a.account_id \
              GROUP BY a.account_id, a.balance \
              HAVING a.balance <> COALESCE(SUM(CASE e.kind WHEN 2 THEN e.amount WHEN 1 THEN -e.amount END), 0)",
    },
    SetCheck {
        name: "each account counts its entries, numbered 1, 2, 3, ...",
        sql: "SELECT CONCAT('account ', a.account_id, ': entry_count ', a.entry_count, ', ', \
              COUNT(e.entry_id), ' entries numbered up to ', COALESCE(MAX(e.account_seq), 0)) AS detail \
              FROM accounts a LEFT JOIN entries e ON e.account_id = a.account_id \
              GROUP BY a.account_id, a.entry_count \
              HAVING a.entry_count <> COUNT(e.entry_id) OR a.entry_count <> COALESCE(MAX(e.account_seq), 0)",
    },
    SetCheck {
        name: "no negative balance",
        sql: "SELECT CONCAT('account ', account_id, ': balance ', balance) AS detail \
              FROM accounts WHERE balance < 0",
    },
    SetCheck {
        name: "each entry's balance follows the one before",
        sql: "SELECT CONCAT('entry ', entry_id, ' of account ', account_id, ': balance_after ', \
              balance_after, ' after ', before_balance) AS detail FROM ( \
                SELECT entry_id, account_id, account_seq, kind, amount, balance_after, \
                  COALESCE(LAG(balance_after) OVER (PARTITION BY account_id ORDER BY account_seq), 0) AS before_balance \
                FROM entries) chain \
              WHERE balance_after <> before_balance + CASE kind WHEN 2 THEN amount ELSE -amount END",
    },
    SetCheck {
        name: "every entry has its key",
        sql: "SELECT CONCAT('entry ', e.entry_id, ' has no key row') AS detail \
              FROM entries e LEFT JOIN idempotency_keys k \
                ON k.namespace = e.namespace AND k.idempotency_key = e.idempotency_key \
              WHERE k.idempotency_key IS NULL",
    },
    SetCheck {
        name: "every key has an outcome",
        sql: "SELECT CONCAT('key ', HEX(idempotency_key), ' (namespace ', HEX(namespace), \
              ') has no outcome') AS detail \
              FROM idempotency_keys WHERE outcome IS NULL OR outcome_code IS NULL",
    },
    SetCheck {
        name: "a successful Credit or Charge has exactly one entry of its kind, nothing else has any",
        sql: "SELECT CONCAT('key ', HEX(k.idempotency_key), ' (namespace ', HEX(k.namespace), \
              ', method ', k.method, ', outcome ', COALESCE(k.outcome_code, 'none'), ') has ', \
              COALESCE(CONCAT('entry ', e.entry_id, ' of kind ', e.kind), 'no entry')) AS detail \
              FROM idempotency_keys k LEFT JOIN entries e \
                ON e.namespace = k.namespace AND e.idempotency_key = k.idempotency_key \
              WHERE (k.method IN (2, 3) AND k.outcome_code = 0) <> (e.entry_id IS NOT NULL) \
                 OR e.kind <> CASE k.method WHEN 3 THEN 1 WHEN 2 THEN 2 ELSE 0 END",
    },
];

#[derive(QueryableByName)]
struct Detail {
    #[diesel(sql_type = Text)]
    detail: String,
}

/// A stored outcome with the entry its key produced, if any.
#[derive(Debug, QueryableByName)]
pub struct StoredRow {
    #[diesel(sql_type = Binary)]
    pub namespace: Vec<u8>,
    #[diesel(sql_type = Binary)]
    pub idempotency_key: Vec<u8>,
    #[diesel(sql_type = Unsigned<diesel::sql_types::TinyInt>)]
    pub method: u8,
    #[diesel(sql_type = Nullable<Integer>)]
    pub outcome_code: Option<i32>,
    #[diesel(sql_type = Nullable<Binary>)]
    pub outcome: Option<Vec<u8>>,
    #[diesel(sql_type = Nullable<Unsigned<BigInt>>)]
    pub entry_id: Option<u64>,
    #[diesel(sql_type = Nullable<Unsigned<BigInt>>)]
    pub account_id: Option<u64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub amount: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub balance_after: Option<i64>,
}

/// Counts for the summary of a clean audit.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    pub accounts: u64,
    pub entries: u64,
    pub keys: u64,
}

#[derive(QueryableByName)]
struct SizesRow {
    #[diesel(sql_type = BigInt)]
    accounts: i64,
    #[diesel(sql_type = BigInt)]
    entries: i64,
    #[diesel(sql_type = BigInt)]
    keys: i64,
}

/// Runs every check inside one consistent snapshot. `inspect` judges each stored
/// outcome (decoding is the wire layer's knowledge) and returns its violation.
pub async fn run(
    conn: &mut Conn,
    mut inspect: impl FnMut(&StoredRow) -> Option<String>,
) -> diesel::QueryResult<(Sizes, Vec<Violation>)> {
    conn.batch_execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
        .await?;
    let result = async {
        let mut violations = Vec::new();
        for check in SET_CHECKS {
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

/// Streams every key row with its entry through `inspect`.
async fn inspect_outcomes(
    conn: &mut Conn,
    inspect: &mut impl FnMut(&StoredRow) -> Option<String>,
) -> diesel::QueryResult<Vec<Violation>> {
    let query = diesel::sql_query(
        "SELECT k.namespace, k.idempotency_key, k.method, k.outcome_code, k.outcome, \
         e.entry_id, e.account_id, e.amount, e.balance_after \
         FROM idempotency_keys k LEFT JOIN entries e \
           ON e.namespace = k.namespace AND e.idempotency_key = k.idempotency_key",
    );
    let mut rows = std::pin::pin!(query.load_stream::<StoredRow>(conn).await?);
    let mut violations = Vec::new();
    while let Some(row) = rows.try_next().await? {
        if let Some(detail) = inspect(&row)
            && violations.len() < MAX_REPORTED
        {
            violations.push(Violation {
                check: "every stored outcome decodes and matches its entry",
                detail,
            });
        }
    }
    Ok(violations)
}

async fn sizes(conn: &mut Conn) -> diesel::QueryResult<Sizes> {
    let row: SizesRow = diesel::sql_query(
        "SELECT (SELECT COUNT(*) FROM accounts) AS accounts, \
         (SELECT COUNT(*) FROM entries) AS entries, \
         (SELECT COUNT(*) FROM idempotency_keys) AS `keys`",
    )
    .get_result(conn)
    .await?;
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    Ok(Sizes {
        accounts: count(row.accounts),
        entries: count(row.entries),
        keys: count(row.keys),
    })
}
