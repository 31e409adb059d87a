//! The change stream's numbering, done by the tests until the service's assigner
//! numbers entries itself: then `number_entries` becomes a wait for it.

use mysql_async::prelude::Queryable as _;

use super::server::TestDb;

/// Numbers every committed entry without a sequence, in one transaction, in the
/// shape the assigner guarantees (SPEC 3.8): contiguous after the highest
/// sequence, each account's entries in their journal order, an operation's
/// entries together (one operation's entries share their instant and take
/// consecutive ids). Returns the highest sequence. Panics if the order it chose
/// breaks an account's journal order, rather than number entries in a shape the
/// service never sees.
pub async fn number_entries(db: &TestDb) -> u64 {
    let mut conn = db.sql().await;
    conn.query_drop("BEGIN").await.unwrap();
    // The ledger_stream row is the assigner's lock: one numbering at a time.
    conn.query_drop("SELECT next_sequence FROM ledger_stream WHERE id = 1 FOR UPDATE")
        .await
        .unwrap();
    let highest: u64 = conn
        .query_first("SELECT COALESCE(MAX(sequence), 0) FROM entries")
        .await
        .unwrap()
        .unwrap_or(0);
    conn.exec_drop(
        "UPDATE entries e JOIN (SELECT entry_id, \
           ROW_NUMBER() OVER (ORDER BY created_at, entry_id) AS n \
           FROM entries WHERE sequence IS NULL) u ON u.entry_id = e.entry_id \
         SET e.sequence = ? + u.n",
        (highest,),
    )
    .await
    .unwrap();
    let disordered: u64 = conn
        .query_first(
            "SELECT COUNT(*) FROM (SELECT sequence, LAG(sequence) OVER \
               (PARTITION BY account_id ORDER BY account_seq) AS before_it FROM entries) t \
             WHERE before_it > sequence",
        )
        .await
        .unwrap()
        .unwrap_or(0);
    assert_eq!(
        disordered, 0,
        "the numbering broke an account's journal order"
    );
    let split: u64 = conn
        .query_first(
            "SELECT COUNT(*) FROM (SELECT namespace, idempotency_key FROM entries \
             GROUP BY namespace, idempotency_key \
             HAVING MAX(sequence) - MIN(sequence) + 1 <> COUNT(*)) t",
        )
        .await
        .unwrap()
        .unwrap_or(0);
    assert_eq!(split, 0, "the numbering split an operation's entries");
    let highest: u64 = conn
        .query_first("SELECT COALESCE(MAX(sequence), 0) FROM entries")
        .await
        .unwrap()
        .unwrap_or(0);
    conn.exec_drop(
        "UPDATE ledger_stream SET next_sequence = ? + 1 WHERE id = 1",
        (highest,),
    )
    .await
    .unwrap();
    conn.query_drop("COMMIT").await.unwrap();
    highest
}
