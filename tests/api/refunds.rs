//! Refunds: money back to the account a charge (or capture) took it from, never
//! more than the entry took, however many refunds run at once.

use std::sync::Arc;

use ledger::proto::pb;
use tokio::sync::Barrier;
use tonic::Code;

use crate::support::{
    Config, TestApp, TestDb, assert_audit_passes, charge, info, reason, refund, replayed,
};

/// A charge's entry id on a fresh account.
async fn charged(app: &TestApp, balance: i64, amount: i64) -> (u64, u64) {
    let account = app.funded_account("USD", balance).await;
    let key = format!("charge-{:x}", rand::random::<u64>());
    let entry = app
        .client()
        .await
        .charge(charge(&key, account, amount))
        .await
        .unwrap()
        .into_inner()
        .entry
        .unwrap();
    (account, entry.entry_id)
}

/// 8 refunds of 30 at once on a charge of 100, under different keys, through two
/// instances: exactly 3 succeed, the other 5 are told how much is left (10).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_concurrent_refunds_of_thirty_on_a_hundred_three_succeed() {
    let db = TestDb::new();
    let config = Config {
        pool_size: 8,
        ..Config::default()
    };
    let a = TestApp::spawn_with(&db, config.clone()).await;
    let b = TestApp::spawn_with(&db, config).await;
    let (account, entry) = charged(&a, 100, 100).await;
    let clients = [a.client().await, b.client().await];

    let barrier = Arc::new(Barrier::new(8));
    let calls: Vec<_> = (0..8)
        .map(|i| {
            let (mut client, barrier) = (clients[i % 2].clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                client.refund(refund(&format!("r{i}"), entry, 30)).await
            })
        })
        .collect();
    let mut succeeded = 0;
    for call in calls {
        match call.await.unwrap() {
            Ok(reply) => {
                let e = reply.into_inner().entry.unwrap();
                assert_eq!(
                    (e.kind(), e.account_id, e.refunded_entry_id, e.amount),
                    (pb::EntryKind::Refund, account, entry, 30)
                );
                succeeded += 1;
            }
            Err(status) => {
                assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
                assert_eq!(reason(&status), "REFUND_EXCEEDS_CHARGE");
                assert_eq!(info(&status, "refundable").as_deref(), Some("10"));
            }
        }
    }
    assert_eq!(succeeded, 3);
    assert_eq!(db.balance(account).await, 90);
    assert_eq!(
        db.count("SELECT COUNT(*) FROM entries WHERE kind = 5")
            .await,
        3
    );
    assert_audit_passes(&db.url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refunds_are_exactly_once_and_declines_are_stored() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let (account, entry) = charged(&app, 100, 60).await;
    let mut client = app.client().await;

    let first = client.refund(refund("back", entry, 25)).await.unwrap();
    let again = client.refund(refund("back", entry, 25)).await.unwrap();
    assert!(replayed(again.metadata()));
    assert_eq!(first.into_inner(), again.into_inner());
    assert_eq!(db.balance(account).await, 65);

    let refund_entry = db
        .count("SELECT MAX(entry_id) FROM entries WHERE kind = 5")
        .await;
    let cases = [
        (
            refund("too-much", entry, 36),
            "REFUND_EXCEEDS_CHARGE",
            Code::FailedPrecondition,
        ),
        (
            refund("of-a-refund", refund_entry, 1),
            "NOT_REFUNDABLE",
            Code::FailedPrecondition,
        ),
        (
            refund("nothing", 999_999, 1),
            "ENTRY_NOT_FOUND",
            Code::NotFound,
        ),
        (
            refund("zero", entry, 0),
            "INVALID_REQUEST",
            Code::InvalidArgument,
        ),
    ];
    for (request, expected, code) in cases {
        let status = client.refund(request.clone()).await.unwrap_err();
        assert_eq!((status.code(), reason(&status).as_str()), (code, expected));
        let stored = code != Code::InvalidArgument;
        let again = client.refund(request).await.unwrap_err();
        assert_eq!(replayed(again.metadata()), stored);
    }
    // The decline did not spend what is left: 35 can still be refunded.
    client.refund(refund("rest", entry, 35)).await.unwrap();
    assert_eq!(db.balance(account).await, 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credit_is_not_refundable() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let account = app.funded_account("USD", 0).await;
    let credit = client
        .credit(crate::support::credit("in", account, 10))
        .await
        .unwrap()
        .into_inner()
        .entry
        .unwrap();
    let status = client
        .refund(refund("r", credit.entry_id, 1))
        .await
        .unwrap_err();
    assert_eq!(reason(&status), "NOT_REFUNDABLE");
}
