//! Declines decided inside the transaction are stored under the key and replayed;
//! a key reused for a different request is refused and changes nothing.

use ledger::proto::pb;
use tonic::Code;
use tonic_types::StatusExt as _;

use crate::support::{TestApp, TestDb, charge, replayed};

fn reason(status: &tonic::Status) -> String {
    status.get_details_error_info().expect("ErrorInfo").reason
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn insufficient_funds_is_replayed_even_after_funding() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let account = app.funded_account("USD", 10).await;
    let mut client = app.client().await;

    let first = client
        .charge(charge("too-much", account, 50))
        .await
        .unwrap_err();
    assert_eq!(first.code(), Code::FailedPrecondition);
    assert_eq!(reason(&first), "INSUFFICIENT_FUNDS");
    assert!(!replayed(first.metadata()));

    client
        .credit(pb::CreditRequest {
            idempotency_key: "top-up".into(),
            account_id: account,
            amount: 100,
            currency: "USD".into(),
            description: String::new(),
            ..Default::default()
        })
        .await
        .unwrap();
    let again = client
        .charge(charge("too-much", account, 50))
        .await
        .unwrap_err();
    assert_eq!(again.code(), first.code());
    assert_eq!(again.message(), first.message());
    assert_eq!(again.details(), first.details(), "identical details bytes");
    assert!(replayed(again.metadata()));
    assert_eq!(db.balance(account).await, 110);
    assert_eq!(db.entries_for_key("too-much").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unknown_account_is_replayed_even_after_the_account_exists() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let existing = app.funded_account("USD", 0).await;
    let next = existing + 1;
    let mut client = app.client().await;

    let first = client.charge(charge("ghost", next, 5)).await.unwrap_err();
    assert_eq!(first.code(), Code::NotFound);
    assert_eq!(reason(&first), "ACCOUNT_NOT_FOUND");

    assert_eq!(
        app.funded_account("USD", 100).await,
        next,
        "the account now exists"
    );
    let again = client.charge(charge("ghost", next, 5)).await.unwrap_err();
    assert_eq!(
        (again.code(), again.message()),
        (first.code(), first.message())
    );
    assert_eq!(again.details(), first.details());
    assert!(replayed(again.metadata()));
    assert_eq!(db.balance(next).await, 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn currency_mismatch_and_overflow_are_stored_declines() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let account = app.funded_account("USD", i64::MAX - 1).await;
    let mut client = app.client().await;

    let mut euros = charge("eur", account, 1);
    euros.currency = "EUR".into();
    let mismatch = client.charge(euros.clone()).await.unwrap_err();
    assert_eq!(reason(&mismatch), "CURRENCY_MISMATCH");
    assert!(replayed(client.charge(euros).await.unwrap_err().metadata()));

    let overflow = pb::CreditRequest {
        idempotency_key: "overflow".into(),
        account_id: account,
        amount: 2,
        currency: "USD".into(),
        description: String::new(),
        ..Default::default()
    };
    let first = client.credit(overflow.clone()).await.unwrap_err();
    assert_eq!(first.code(), Code::FailedPrecondition);
    assert_eq!(reason(&first), "BALANCE_OVERFLOW");
    assert!(replayed(
        client.credit(overflow).await.unwrap_err().metadata()
    ));
    assert_eq!(db.balance(account).await, i64::MAX - 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reused_key_is_refused_and_charges_nothing() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let account = app.funded_account("USD", 100).await;
    let other = app.funded_account("USD", 100).await;
    let mut client = app.client().await;
    client.charge(charge("once", account, 10)).await.unwrap();

    let mut variants = vec![
        charge("once", account, 11),
        charge("once", other, 10),
        pb::ChargeRequest {
            currency: "EUR".into(),
            ..charge("once", account, 10)
        },
        pb::ChargeRequest {
            description: "different".into(),
            ..charge("once", account, 10)
        },
    ];
    for request in variants.drain(..) {
        let status = client.charge(request.clone()).await.unwrap_err();
        assert_eq!(status.code(), Code::FailedPrecondition, "{request:?}");
        assert_eq!(reason(&status), "IDEMPOTENCY_KEY_REUSED");
    }
    let as_credit = client
        .credit(pb::CreditRequest {
            idempotency_key: "once".into(),
            account_id: account,
            amount: 10,
            currency: "USD".into(),
            description: String::new(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        reason(&as_credit),
        "IDEMPOTENCY_KEY_REUSED",
        "another method"
    );
    let as_open = client
        .open_account(pb::OpenAccountRequest {
            idempotency_key: "once".into(),
            currency: "USD".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&as_open), "IDEMPOTENCY_KEY_REUSED");

    assert_eq!(db.balance(account).await, 90);
    assert_eq!(db.balance(other).await, 100);
    assert_eq!(db.entries_for_key("once").await, 1);
    assert_eq!(db.count("SELECT COUNT(*) FROM accounts").await, 2);
}
