//! A budget spent with the outcome unknown: the typed `Unknown { key }`, within
//! the budget; and an unknown outcome settled by `LookupKey` and the request
//! sent once more, which replays it or refuses a reused key, never answering
//! with another request's outcome. The same for a call by method
//! (`call_encoded`, ledgerctl's), which goes through the same loop.

use std::time::Duration;

use std::sync::atomic::Ordering;

use ledger_client::{Answer, Backoff, Budget, Client, Error, Reason, pb};
use prost::Message as _;
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
        ..Default::default()
    }
}

/// How a test calls Charge: its typed method, or by method with the request
/// encoded (the reply decoded here, to compare).
#[derive(Debug, Clone, Copy)]
enum Via {
    Typed,
    Encoded,
}

async fn charge_via(
    client: &Client,
    via: Via,
    request: pb::ChargeRequest,
) -> Result<Answer<pb::ChargeReply>, Error> {
    match via {
        Via::Typed => client.charge(request).await,
        Via::Encoded => {
            let key = Some(request.idempotency_key.clone());
            let answer = client
                .call_encoded(
                    "/ledger.v1.Ledger/Charge",
                    key,
                    request.encode_to_vec().into(),
                )
                .await?;
            Ok(Answer {
                reply: pb::ChargeReply::decode(answer.reply).unwrap(),
                replayed: answer.replayed,
                key: answer.key,
                attempts: answer.attempts,
            })
        }
    }
}

/// The call returns `Unknown` with its key, and no later than the budget allows
/// (plus a generous 2 s: a bound, not a benchmark).
async fn assert_unknown_in_time(client: &Client, via: Via, key: &str) {
    let started = Instant::now();
    let result = charge_via(client, via, charge(key, 1)).await;
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
    assert_unknown_in_time(&client, Via::Typed, "budget-dead").await;
    assert_unknown_in_time(&client, Via::Encoded, "budget-dead-by-method").await;
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
    assert_unknown_in_time(&client, Via::Typed, "budget-hole").await;
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

/// A budget with room to settle: the last 3 s of 6 s kept for the look-up and
/// the resend, 1.5 s each: room on a loaded machine, where an answer may take a
/// second.
fn settling_budget() -> Budget {
    Budget {
        timeout: Duration::from_secs(6),
        lookup_reserve: Duration::from_secs(3),
        ..short_budget()
    }
}

/// The size of `LookupKey(key)` with its gRPC prefix: a proxy that cuts requests
/// longer than this cuts the charges under `key` and lets their look-up pass.
fn lookup_size(key: &str) -> usize {
    let lookup = pb::LookupKeyRequest {
        idempotency_key: key.into(),
    };
    let size = lookup.encoded_len() + 5;
    assert!(charge(key, 1).encoded_len() + 5 > size);
    size
}

/// A client through a proxy whose every connection meets `fault`.
async fn through(app: &TestApp, fault: Fault) -> (FaultProxy, Client) {
    let proxy = FaultProxy::start(app.addr, move |_| fault).await;
    let client = Client::builder()
        .endpoint(proxy.url())
        .budget(settling_budget())
        .build()
        .unwrap();
    (proxy, client)
}

fn cuts(proxy: &FaultProxy) -> u64 {
    proxy.counts().cuts.load(Ordering::Relaxed)
}

/// Every attempt of the charge is forwarded and its reply lost; the look-up
/// finds the key's record, and the charge sent once more is replayed. Returns
/// the attempts the call made and the connections the proxy cut.
async fn settle_a_lost_reply(via: Via, fault: impl FnOnce(usize) -> Fault) -> (u32, u64) {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let account = app.funded_account("USD", 100).await;
    let key = "budget-settled";
    let (proxy, client) = through(&app, fault(lookup_size(key))).await;

    let answer = charge_via(&client, via, charge(key, account))
        .await
        .unwrap();

    assert!(answer.replayed, "the stored reply, replayed");
    let stored = app
        .client()
        .lookup_key(pb::LookupKeyRequest {
            idempotency_key: key.into(),
        })
        .await
        .unwrap()
        .reply;
    let Some(pb::key_record::Outcome::Reply(bytes)) = stored.outcome else {
        panic!("a stored reply");
    };
    assert_eq!(bytes, answer.reply.encode_to_vec());
    assert_eq!(db.entries_for_key(key).await, 1);
    assert_eq!(db.balance(account).await, 93);
    (answer.attempts, cuts(&proxy))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_reply_is_settled_by_the_lookup_and_a_replay() {
    for via in [Via::Typed, Via::Encoded] {
        let (attempts, cuts) = settle_a_lost_reply(via, |limit| {
            Fault::CutRequestsLongerThanBeforeLookup { limit, then: 0 }
        })
        .await;

        assert!(attempts >= 2, "{via:?}: the attempts cut, and the resend");
        assert!(cuts >= 1, "{via:?}");
    }
}

/// The resend's connection closes under it (an instance going away between
/// the look-up and the resend): the resend is tried again within the budget,
/// which is safe because the key has a record, and the call still settles.
#[tokio::test(flavor = "multi_thread")]
async fn a_resend_that_meets_a_closing_connection_is_sent_again() {
    let (attempts, cuts) = settle_a_lost_reply(Via::Typed, |limit| {
        Fault::CutRequestsLongerThanBeforeLookup { limit, then: 1 }
    })
    .await;

    assert!(
        attempts >= 3,
        "the attempts cut, the resend cut, and its retry"
    );
    assert!(cuts >= 2);
}

/// `Charge(K, 30)` committed; `Charge(K, 50)`'s attempts are all cut. The
/// key's record is of a charge, but not of this one: the client must not
/// return the 30 charge's reply as the 50 charge's success.
async fn settle_a_reused_key(
    via: Via,
    fault: impl FnOnce(usize) -> Fault,
) -> Result<Answer<pb::ChargeReply>, Error> {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let account = app.funded_account("USD", 100).await;
    let key = "budget-reused";
    let mut first = charge(key, account);
    first.amount = 30;
    app.client().charge(first).await.unwrap();
    let (proxy, client) = through(&app, fault(lookup_size(key))).await;

    let mut second = charge(key, account);
    second.amount = 50;
    let result = charge_via(&client, via, second).await;

    assert!(cuts(&proxy) >= 1);
    assert_eq!(db.entries_for_key(key).await, 1);
    assert_eq!(db.balance(account).await, 70);
    result
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reused_key_settles_as_reused_not_as_the_other_requests_success() {
    for via in [Via::Typed, Via::Encoded] {
        let result = settle_a_reused_key(via, |limit| Fault::CutRequestsLongerThanBeforeLookup {
            limit,
            then: 0,
        })
        .await;

        let Err(Error::Declined(decline)) = result else {
            panic!("{via:?}: expected IDEMPOTENCY_KEY_REUSED, got {result:?}");
        };
        assert_eq!(decline.reason, Reason::IdempotencyKeyReused, "{via:?}");
        assert_eq!(decline.key.as_deref(), Some("budget-reused"));
    }
}

/// The same, with the resend cut too: unknown, never a success.
#[tokio::test(flavor = "multi_thread")]
async fn a_reused_key_whose_resend_is_cut_is_unknown() {
    let result = settle_a_reused_key(Via::Typed, Fault::CutRequestsLongerThan).await;

    match result {
        Err(Error::Unknown { key }) => assert_eq!(key, "budget-reused"),
        other => panic!("expected Unknown, got {other:?}"),
    }
}

/// A key recorded for another method is another operation's (SPEC 3.1): the
/// record says so, with no resend.
#[tokio::test(flavor = "multi_thread")]
async fn a_key_recorded_for_another_method_is_reused() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let account = app.funded_account("USD", 100).await;
    let key = "budget-credit";
    app.client()
        .credit(pb::CreditRequest {
            idempotency_key: key.into(),
            account_id: account,
            amount: 5,
            currency: "USD".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let (_proxy, client) = through(&app, Fault::CutRequestsLongerThan(lookup_size(key))).await;

    for via in [Via::Typed, Via::Encoded] {
        let result = charge_via(&client, via, charge(key, account)).await;

        let Err(Error::Declined(decline)) = result else {
            panic!("{via:?}: expected IDEMPOTENCY_KEY_REUSED, got {result:?}");
        };
        assert_eq!(decline.reason, Reason::IdempotencyKeyReused, "{via:?}");
        assert!(!decline.replayed, "not an answer the server stored");
        assert_eq!(
            decline.metadata.get("method").map(String::as_str),
            Some("/ledger.v1.Ledger/Credit")
        );
    }
    assert_eq!(db.balance(account).await, 105);
}
