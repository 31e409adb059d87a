//! Every wait is bounded: by the configured lock wait, and by the caller's deadline.
//! A call that gives up leaves no trace, so a retry with the same key does the work.

use std::time::Duration;

use mysql_async::prelude::Queryable as _;
use tonic::Code;
use tonic_types::StatusExt as _;

use crate::support::{Config, HeldCharge, TestApp, TestDb, charge, replayed};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_duplicate_parked_past_the_lock_wait_is_told_to_retry() {
    let db = TestDb::new();
    let held = HeldCharge::start(&db, "slow", Duration::from_secs(1)).await;

    let status = held
        .app
        .client()
        .await
        .charge(charge("slow", held.account, 10))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Aborted);
    assert_eq!(
        status.get_details_error_info().unwrap().reason,
        "IDEMPOTENCY_KEY_IN_PROGRESS"
    );
    assert!(status.get_details_retry_info().is_some());

    held.gate.release();
    let (original_md, _) = held.original.await.unwrap().unwrap();
    assert!(!replayed(&original_md));
    let retry = held
        .app
        .client()
        .await
        .charge(charge("slow", held.account, 10))
        .await
        .unwrap();
    assert!(replayed(retry.metadata()));
    assert_eq!(db.balance(held.account).await, 90);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_charge_on_a_locked_account_is_told_to_retry_and_leaves_no_trace() {
    let db = TestDb::new();
    let config = Config {
        lock_wait: Duration::from_secs(1),
        ..Config::default()
    };
    let app = TestApp::spawn_with(&db, config).await;
    let account = app.funded_account("USD", 100).await;

    let mut holder = db.lock_account(account).await;

    let status = app
        .client()
        .await
        .charge(charge("busy", account, 10))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Aborted);
    assert_eq!(
        status.get_details_error_info().unwrap().reason,
        "ACCOUNT_BUSY"
    );
    assert_eq!(db.key_rows("busy").await, 0, "the rollback freed the key");

    holder.query_drop("ROLLBACK").await.unwrap();
    let retry = app
        .client()
        .await
        .charge(charge("busy", account, 10))
        .await
        .unwrap();
    assert!(!replayed(retry.metadata()), "the retry does the work");
    assert_eq!(db.balance(account).await, 90);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_callers_deadline_bounds_the_wait_and_nothing_is_recorded() {
    let db = TestDb::new();
    let held = HeldCharge::start(&db, "held", Duration::from_secs(30)).await;

    let mut request = tonic::Request::new(charge("held", held.account, 10));
    request.set_timeout(Duration::from_secs(1));
    let started = tokio::time::Instant::now();
    let status = held.app.client().await.charge(request).await.unwrap_err();
    let waited = started.elapsed();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(
        waited < Duration::from_secs(3),
        "answered after {waited:?}, not the 30 s lock wait"
    );

    held.gate.release();
    held.original.await.unwrap().unwrap();
    assert_eq!(db.entries_for_key("held").await, 1);
    assert_eq!(db.balance(held.account).await, 90);
}
