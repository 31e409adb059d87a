//! `ledger audit` passes on a healthy ledger and names every kind of damage.

use mysql_async::prelude::Queryable as _;

use crate::helpers::{TestApp, TestDb, charge, run_ledger};

/// A ledger with accounts, credits, charges, a decline and a replay.
async fn busy_ledger(db: &TestDb) -> u64 {
    let app = TestApp::spawn(db).await;
    let account = app.funded_account("USD", 100).await;
    let mut client = app.client().await;
    for (key, amount) in [("a", 10), ("b", 20), ("a", 10), ("too-much", 1000)] {
        let _ = client.charge(charge(key, account, amount)).await;
    }
    account
}

async fn checks_failed(db: &TestDb) -> Vec<&'static str> {
    let report = ledger::audit::audit(&db.url).await.unwrap();
    let mut checks: Vec<_> = report.violations.iter().map(|v| v.check).collect();
    checks.dedup();
    checks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_ledger_passes_and_the_command_says_so() {
    let db = TestDb::new();
    busy_ledger(&db).await;
    let report = ledger::audit::audit(&db.url).await.unwrap();
    assert!(report.passed(), "{report}");
    assert_eq!(
        (
            report.sizes.accounts,
            report.sizes.entries,
            report.sizes.keys
        ),
        (1, 3, 5)
    );
    let (code, _) = run_ledger(&["audit", "--database-url", &db.url]).await;
    assert_eq!(code, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_damage_is_named() {
    let cases: [(&str, &[&str]); 7] = [
        (
            "UPDATE accounts SET entry_count = entry_count + 1",
            &["each account counts its entries, numbered 1, 2, 3, ..."],
        ),
        (
            "UPDATE accounts SET balance = balance + 1",
            &["balance equals the journal"],
        ),
        (
            "UPDATE entries SET balance_after = balance_after + 5 WHERE idempotency_key = 'a'",
            &[
                "each entry's balance follows the one before",
                "every stored outcome decodes and matches its entry",
            ],
        ),
        (
            "DELETE FROM entries WHERE idempotency_key = 'b'",
            &[
                "balance equals the journal",
                "each account counts its entries, numbered 1, 2, 3, ...",
                "a successful Credit or Charge has exactly one entry of its kind, nothing else has any",
                "every stored outcome decodes and matches its entry",
            ],
        ),
        (
            "DELETE FROM idempotency_keys WHERE idempotency_key = 'a'",
            &["every entry has its key"],
        ),
        (
            "UPDATE idempotency_keys SET outcome = x'0a05ffff' WHERE idempotency_key = 'too-much'",
            &["every stored outcome decodes and matches its entry"],
        ),
        (
            "UPDATE idempotency_keys SET outcome = NULL WHERE idempotency_key = 'b'",
            &["every key has an outcome"],
        ),
    ];
    for (damage, expected) in cases {
        let db = TestDb::new();
        busy_ledger(&db).await;
        db.sql().await.query_drop(damage).await.unwrap();
        assert_eq!(checks_failed(&db).await, expected, "{damage}");
        let (code, _) = run_ledger(&["audit", "--database-url", &db.url]).await;
        assert_eq!(code, Some(1), "{damage}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_negative_balance_is_named() {
    let db = TestDb::new();
    let account = busy_ledger(&db).await;
    let mut conn = db.sql().await;
    let version: String = conn.query_first("SELECT VERSION()").await.unwrap().unwrap();
    // The CHECK constraint refuses it; switch it off the way each server allows.
    if version.contains("MariaDB") {
        conn.query_drop("SET SESSION check_constraint_checks = OFF")
            .await
            .unwrap();
    } else {
        conn.query_drop(
            "ALTER TABLE accounts ALTER CHECK accounts_balance_not_negative NOT ENFORCED",
        )
        .await
        .unwrap();
    }
    conn.exec_drop(
        "UPDATE accounts SET balance = -1 WHERE account_id = ?",
        (account,),
    )
    .await
    .unwrap();
    let failed = checks_failed(&db).await;
    assert!(failed.contains(&"no negative balance"), "{failed:?}");
}
