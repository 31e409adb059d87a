//! Invalid requests are refused before the database is touched: INVALID_ARGUMENT
//! naming the field, and no trace.

use ledger::proto::pb;
use tonic::Code;
use tonic_types::StatusExt as _;

use crate::support::{TestApp, TestDb, charge};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn invalid_fields_are_named_and_leave_no_trace() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let account = app.funded_account("USD", 100).await;
    let mut client = app.client().await;
    let keys_before = db.count("SELECT COUNT(*) FROM idempotency_keys").await;

    let cases: Vec<(&str, pb::ChargeRequest)> = vec![
        ("idempotency_key", charge("", account, 1)),
        ("idempotency_key", charge(&"k".repeat(256), account, 1)),
        ("idempotency_key", charge("has space", account, 1)),
        ("idempotency_key", charge("caf\u{e9}", account, 1)),
        ("idempotency_key", charge("tab\t", account, 1)),
        ("account_id", charge("ok-key", 0, 1)),
        ("amount", charge("ok-key", account, 0)),
        ("amount", charge("ok-key", account, -5)),
        ("amount", charge("ok-key", account, i64::MIN)),
        (
            "currency",
            pb::ChargeRequest {
                currency: "usd".into(),
                ..charge("ok-key", account, 1)
            },
        ),
        (
            "currency",
            pb::ChargeRequest {
                currency: "US".into(),
                ..charge("ok-key", account, 1)
            },
        ),
        (
            "currency",
            pb::ChargeRequest {
                currency: String::new(),
                ..charge("ok-key", account, 1)
            },
        ),
        (
            "description",
            pb::ChargeRequest {
                description: "é".repeat(501),
                ..charge("ok-key", account, 1)
            },
        ),
    ];
    for (field, request) in cases {
        let status = client.charge(request.clone()).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{field}");
        assert!(
            status.message().contains(field),
            "{field}: {}",
            status.message()
        );
        let info = status.get_details_error_info().expect("ErrorInfo");
        assert_eq!(
            (info.reason.as_str(), info.domain.as_str()),
            ("INVALID_REQUEST", "ledger.v1")
        );
        let violations = status
            .get_details_bad_request()
            .expect("BadRequest")
            .field_violations;
        assert_eq!(violations.len(), 1, "{field}");
        assert_eq!(violations[0].field, field);
    }

    let open = client
        .open_account(pb::OpenAccountRequest {
            idempotency_key: "o".into(),
            currency: "usd".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(open.code(), Code::InvalidArgument);
    let get = client
        .get_account(pb::GetAccountRequest { account_id: 0 })
        .await
        .unwrap_err();
    assert_eq!(get.code(), Code::InvalidArgument);
    assert_eq!(
        get.get_details_error_info().unwrap().reason,
        "INVALID_REQUEST"
    );

    assert_eq!(
        db.count("SELECT COUNT(*) FROM idempotency_keys").await,
        keys_before
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM entries WHERE kind = 1")
            .await,
        0
    );
    assert_eq!(db.balance(account).await, 100);

    // A 500-character description is accepted.
    let ok = pb::ChargeRequest {
        description: "é".repeat(500),
        ..charge("ok-key", account, 1)
    };
    client.charge(ok).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unknown_accounts_read_as_not_found() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let status = app
        .client()
        .await
        .get_account(pb::GetAccountRequest { account_id: 42 })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    assert_eq!(
        status.get_details_error_info().unwrap().reason,
        "ACCOUNT_NOT_FOUND"
    );
}
