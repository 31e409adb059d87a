//! A budget spent with the outcome unknown: the typed `Unknown { key }`, within
//! the budget; and an unknown outcome settled by `LookupKey`.

use std::time::Duration;

use ledger_client::{Backoff, Budget, Client, Error, pb};
use tokio::time::Instant;

use crate::support::{Fault, FaultProxy, TestApp, TestDb};

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn short_budget() -> Budget {
    Budget {
        timeout: Duration::from_secs(2),
        attempt_timeout: Duration::from_millis(300),
        lookup_reserve: Duration::from_millis(500),
        backoff: Backoff {
            initial: Duration::from_millis(20),
            max: Duration::from_millis(200),
            multiplier: 2.0,
        },
    }
}

fn charge(key: &str, account_id: u64) -> pb::ChargeRequest {
    pb::ChargeRequest {
        idempotency_key: key.into(),
        account_id,
        amount: 7,
        currency: "USD".into(),
        description: String::new(),
    }
}

/// The call returns `Unknown` with its key, and no later than the budget allows
/// (plus a generous 2 s: a bound, not a benchmark).
async fn assert_unknown_in_time(client: &Client, key: &str) {
    let started = Instant::now();
    let result = client.charge(charge(key, 1)).await;
    let took = started.elapsed();
    match result {
        Err(Error::Unknown { key: k }) => assert_eq!(k, key),
        other => panic!("expected Unknown, got {other:?}"),
    }
    assert!(
        took < short_budget().timeout + Duration::from_secs(2),
        "{took:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn nothing_listening_ends_in_unknown_with_the_key() {
    let client = Client::builder()
        .endpoint(format!("http://127.0.0.1:{}", free_port()))
        .budget(short_budget())
        .build()
        .unwrap();
    assert_unknown_in_time(&client, "budget-dead").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_black_hole_ends_in_unknown_with_the_key() {
    let nowhere = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let proxy = FaultProxy::start(nowhere, |_| Fault::BlackHole).await;
    let client = Client::builder()
        .endpoint(proxy.url())
        .budget(short_budget())
        .build()
        .unwrap();
    assert_unknown_in_time(&client, "budget-hole").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_read_that_gets_no_answer_is_unavailable_not_unknown() {
    let client = Client::builder()
        .endpoint(format!("http://127.0.0.1:{}", free_port()))
        .budget(short_budget())
        .build()
        .unwrap();
    let result = client
        .get_account(pb::GetAccountRequest { account_id: 1 })
        .await;
    assert!(
        matches!(result, Err(Error::Unavailable { .. })),
        "{result:?}"
    );
}

/// Every charge is forwarded and its reply lost; the look-up (a small request)
/// passes and brings back the stored reply.
#[tokio::test(flavor = "multi_thread")]
async fn a_lost_reply_is_settled_by_the_lookup() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let account = app.funded_account("USD", 100).await;
    // The LookupKey of this 14-character key is 21 bytes with its gRPC prefix;
    // the charge under it, 30.
    let proxy = FaultProxy::start(app.addr, |_| Fault::CutRequestsLongerThan(25)).await;
    let client = Client::builder()
        .endpoint(proxy.url())
        .budget(short_budget())
        .build()
        .unwrap();

    let answer = client
        .charge(charge("budget-settled", account))
        .await
        .unwrap();

    assert!(answer.replayed, "the stored reply, read back");
    assert!(answer.attempts >= 1);
    assert!(
        proxy
            .counts()
            .cuts
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    );
    let stored = app
        .client()
        .lookup_key(pb::LookupKeyRequest {
            idempotency_key: "budget-settled".into(),
        })
        .await
        .unwrap()
        .reply;
    let Some(pb::key_record::Outcome::Reply(bytes)) = stored.outcome else {
        panic!("a stored reply");
    };
    assert_eq!(bytes, prost::Message::encode_to_vec(&answer.reply));
    assert_eq!(db.entries_for_key("budget-settled").await, 1);
    assert_eq!(db.balance(account).await, 93);
}
