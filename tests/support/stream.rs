//! The change stream seen from the database: waiting (with a bound) until the
//! assigner has numbered every entry, and the stream's promises checked in SQL.
//!
//! An entry's sequence is its commit's first (`stream_commits.first_sequence`)
//! plus its place in the commit; [`NUMBERED`] gives every entry its `sequence`
//! column back, for queries.

use std::time::Duration;

use mysql_async::prelude::Queryable as _;

use super::server::TestDb;

/// Every entry with its `sequence` (NULL while its commit is not numbered), as a
/// derived table: `format!("SELECT ... FROM {NUMBERED} e ...")`.
pub const NUMBERED: &str = "(SELECT e.*, c.first_sequence + e.commit_pos AS sequence \
    FROM entries e LEFT JOIN stream_commits c ON c.commit_id = e.commit_id)";

/// Entries not numbered yet.
pub const UNNUMBERED_COUNT: &str = "SELECT CAST(COALESCE(SUM(entry_count), 0) AS UNSIGNED) FROM stream_commits \
     WHERE first_sequence IS NULL";

/// The unnumbered commit rows of entries written straight into the journal
/// (those `condition` selects, their `commit_id` and `commit_pos` set), as a
/// writing transaction adds them.
pub async fn add_commits(db: &TestDb, condition: &str) {
    db.sql()
        .await
        .query_drop(format!(
            "INSERT INTO stream_commits (commit_id, entry_count, accounts, created_at) \
             SELECT commit_id, SUM(n), \
               GROUP_CONCAT(CONCAT(account_id, ':', lo, ':', hi) ORDER BY pos SEPARATOR ','), \
               MIN(created_at) \
             FROM (SELECT commit_id, account_id, MIN(account_seq) AS lo, MAX(account_seq) AS hi, \
                     MIN(commit_pos) AS pos, COUNT(*) AS n, MIN(created_at) AS created_at \
                   FROM entries WHERE {condition} GROUP BY commit_id, account_id) spans \
             GROUP BY commit_id"
        ))
        .await
        .unwrap();
}

/// Polls until every entry has a sequence; fails after `limit`. Returns how
/// long it took.
pub async fn until_sequenced(db: &TestDb, limit: Duration) -> Duration {
    let started = tokio::time::Instant::now();
    let mut conn = db.sql().await;
    loop {
        let waiting: u64 = conn
            .query_first(UNNUMBERED_COUNT)
            .await
            .unwrap()
            .unwrap_or(0);
        if waiting == 0 {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "{waiting} entries still without a sequence after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (up to 30 s) until the assigner has numbered every committed entry;
/// returns the highest sequence.
pub async fn number_entries(db: &TestDb) -> u64 {
    until_sequenced(db, Duration::from_secs(30)).await;
    db.sql()
        .await
        .query_first(format!(
            "SELECT COALESCE(MAX(sequence), 0) FROM {NUMBERED} e"
        ))
        .await
        .unwrap()
        .unwrap_or(0)
}

/// The stream's promises over every entry: numbered 1..n without a hole, each
/// account's in its journal order, each operation's consecutive and in leg
/// order, and `ledger_stream` ready to give n + 1.
pub async fn assert_stream_sound(db: &TestDb) {
    let mut conn = db.sql().await;
    let (count, min, max): (u64, Option<u64>, Option<u64>) = conn
        .query_first(format!(
            "SELECT COUNT(*), MIN(sequence), MAX(sequence) FROM {NUMBERED} e \
             WHERE sequence IS NOT NULL"
        ))
        .await
        .unwrap()
        .unwrap();
    if count > 0 {
        assert_eq!((min, max), (Some(1), Some(count)), "contiguous from 1");
    }
    let next: u64 = conn
        .query_first("SELECT next_sequence FROM ledger_stream WHERE id = 1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next, count + 1, "next_sequence follows the last");
    let inversions: u64 = conn
        .query_first(format!(
            "SELECT COUNT(*) FROM {NUMBERED} a JOIN {NUMBERED} b \
             ON b.account_id = a.account_id AND b.account_seq = a.account_seq + 1 \
             WHERE b.sequence < a.sequence OR (b.sequence IS NOT NULL AND a.sequence IS NULL)"
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(inversions, 0, "each account's entries in journal order");
    let out_of_leg_order: u64 = conn
        .query_first(format!(
            "SELECT COUNT(*) FROM {NUMBERED} a JOIN {NUMBERED} b \
             ON b.namespace = a.namespace AND b.idempotency_key = a.idempotency_key \
             AND b.leg = a.leg + 1 \
             WHERE b.sequence <> a.sequence + 1 OR (a.sequence IS NULL) <> (b.sequence IS NULL)"
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        out_of_leg_order, 0,
        "an operation's entries consecutive, in leg order"
    );
}

/// Polls until no instance holds the assigner's lease (the last one stopped and
/// gave it up); fails after 10 s.
pub async fn until_lease_free(db: &TestDb) {
    let mut conn = db.sql().await;
    for _ in 0..500 {
        let held: Option<u64> = conn
            .query_first("SELECT COUNT(*) FROM ledger_stream WHERE lease_until >= UTC_TIMESTAMP(6)")
            .await
            .unwrap();
        if held == Some(0) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the assigner's lease is still held");
}
