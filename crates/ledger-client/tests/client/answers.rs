//! What a call returns: the reply, whether it was a replay, the typed decline;
//! the same for a call by method, with the request and the reply encoded.

use ledger_client::{Client, Error, Reason, pb};
use prost::Message as _;

use crate::support::{TestApp, TestDb};

fn charge(key: &str, account_id: u64, amount: i64) -> pb::ChargeRequest {
    pb::ChargeRequest {
        idempotency_key: key.into(),
        account_id,
        amount,
        currency: "USD".into(),
        description: String::new(),
        ..Default::default()
    }
}

fn declined(
    result: Result<ledger_client::Answer<pb::ChargeReply>, Error>,
) -> ledger_client::Decline {
    match result {
        Err(Error::Declined(decline)) => *decline,
        other => panic!("expected a decline, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_with_the_key_is_a_replay_of_the_same_reply() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let account = app.funded_account("USD", 100).await;
    let client = app.client();

    let first = client
        .charge(charge("answers-1", account, 30))
        .await
        .unwrap();
    let again = client
        .charge(charge("answers-1", account, 30))
        .await
        .unwrap();

    assert!(!first.replayed);
    assert!(again.replayed);
    assert_eq!(first.reply, again.reply);
    assert_eq!(first.key.as_deref(), Some("answers-1"));
    assert_eq!(db.balance(account).await, 70);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_without_a_key_gets_one_made_before_it_is_sent() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let account = app.funded_account("USD", 100).await;

    let answer = app.client().charge(charge("", account, 5)).await.unwrap();

    let key = answer.key.expect("a key was made");
    let uuid = uuid::Uuid::parse_str(&key).expect("a UUID");
    assert_eq!(uuid.get_version_num(), 7, "{key}");
    assert_eq!(answer.reply.entry.unwrap().idempotency_key, key);
    assert_eq!(db.entries_for_key(&key).await, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stored_decline_is_typed_with_its_metadata_and_replays() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let account = app.funded_account("USD", 10).await;
    let client = app.client();

    let first = declined(client.charge(charge("answers-2", account, 11)).await);
    let again = declined(client.charge(charge("answers-2", account, 11)).await);

    assert_eq!(first.code, tonic::Code::FailedPrecondition);
    assert_eq!(first.reason, Reason::InsufficientFunds);
    assert_eq!(first.account_id(), Some(account));
    assert!(!first.replayed);
    assert!(again.replayed);
    assert_eq!(again.reason, Reason::InsufficientFunds);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_invalid_request_names_its_fields_and_is_not_retried() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let account = app.funded_account("USD", 10).await;

    let decline = declined(app.client().charge(charge("answers-3", account, 0)).await);

    assert_eq!(decline.code, tonic::Code::InvalidArgument);
    assert_eq!(decline.reason, Reason::InvalidRequest);
    assert!(
        decline.violations.iter().any(|v| v.field == "amount"),
        "{decline:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dead_endpoint_fails_over_to_the_next() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let account = app.funded_account("USD", 10).await;
    let dead = format!("http://127.0.0.1:{}", crate::budget::free_port());
    let client = Client::builder()
        .endpoint(dead)
        .endpoint(app.url())
        .build()
        .unwrap();

    let answer = client
        .charge(charge("answers-4", account, 1))
        .await
        .unwrap();
    let read = client
        .get_account(pb::GetAccountRequest {
            account_id: account,
        })
        .await
        .unwrap();

    assert!(
        answer.attempts >= 2,
        "the first attempt went to the dead endpoint"
    );
    assert_eq!(read.reply.balance, 9);
    assert_eq!(read.key, None);
}

/// A call by method (the request encoded by the caller, ledgerctl's way)
/// answers as the typed call does: the reply's bytes, a replay marked, a
/// decline typed; a keyed call without its key, or a path that is none, is
/// refused before anything is sent.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_by_method_answers_as_the_typed_call_does() {
    const CHARGE: &str = "/ledger.v1.Ledger/Charge";
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let account = app.funded_account("USD", 100).await;
    let client = app.client();
    let request = charge("answers-5", account, 30);

    let typed = client.charge(request.clone()).await.unwrap();
    let by_method = client
        .call_encoded(
            CHARGE,
            Some("answers-5".into()),
            request.encode_to_vec().into(),
        )
        .await
        .unwrap();
    let read = client
        .call_encoded(
            "/ledger.v1.Ledger/GetAccount",
            None,
            pb::GetAccountRequest {
                account_id: account,
            }
            .encode_to_vec()
            .into(),
        )
        .await
        .unwrap();
    let over = charge("answers-6", account, 1000);
    let declined = client
        .call_encoded(
            CHARGE,
            Some("answers-6".into()),
            over.encode_to_vec().into(),
        )
        .await;
    let keyless = client
        .call_encoded(
            CHARGE,
            Some(String::new()),
            charge("", account, 1).encode_to_vec().into(),
        )
        .await;
    let pathless = client
        .call_encoded("not a path", None, Vec::new().into())
        .await;

    assert!(by_method.replayed);
    assert_eq!(by_method.key.as_deref(), Some("answers-5"));
    assert_eq!(by_method.reply, typed.reply.encode_to_vec());
    assert_eq!(pb::Account::decode(read.reply).unwrap().balance, 70);
    assert_eq!(read.key, None);
    let Err(Error::Declined(decline)) = declined else {
        panic!("expected INSUFFICIENT_FUNDS, got {declined:?}");
    };
    assert_eq!(decline.reason, Reason::InsufficientFunds);
    assert_eq!(decline.key.as_deref(), Some("answers-6"));
    assert!(matches!(keyless, Err(Error::Config(_))), "{keyless:?}");
    assert!(matches!(pathless, Err(Error::Config(_))), "{pathless:?}");
    assert_eq!(db.balance(account).await, 70);
}
