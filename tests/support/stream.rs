//! The change stream seen from the database: waiting (with a bound) until the
//! assigner has numbered every entry, and the stream's promises checked in SQL.

use std::time::Duration;

use mysql_async::prelude::Queryable as _;

use super::server::TestDb;

/// Polls until every entry has a sequence; fails after `limit`. Returns how
/// long it took.
pub async fn until_sequenced(db: &TestDb, limit: Duration) -> Duration {
    let started = tokio::time::Instant::now();
    let mut conn = db.sql().await;
    loop {
        let waiting: u64 = conn
            .query_first("SELECT COUNT(*) FROM entries WHERE sequence IS NULL")
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
        .query_first("SELECT COALESCE(MAX(sequence), 0) FROM entries")
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
        .query_first(
            "SELECT COUNT(*), MIN(sequence), MAX(sequence) FROM entries WHERE sequence IS NOT NULL",
        )
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
        .query_first(
            "SELECT COUNT(*) FROM entries a JOIN entries b \
             ON b.account_id = a.account_id AND b.account_seq = a.account_seq + 1 \
             WHERE b.sequence < a.sequence OR (b.sequence IS NOT NULL AND a.sequence IS NULL)",
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(inversions, 0, "each account's entries in journal order");
    let out_of_leg_order: u64 = conn
        .query_first(
            "SELECT COUNT(*) FROM entries a JOIN entries b \
             ON b.namespace = a.namespace AND b.idempotency_key = a.idempotency_key \
             AND b.leg = a.leg + 1 \
             WHERE b.sequence <> a.sequence + 1 OR (a.sequence IS NULL) <> (b.sequence IS NULL)",
        )
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
