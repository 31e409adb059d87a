//! Batch (SPEC 3.13): each item is exactly the call it wraps (its key, its
//! stored reply byte for byte, its declines), for every keyed RPC and both ways
//! round; items that share an account or a key take effect in item order, an
//! invalid item leaves its key free, a batch over 1,000 items runs nothing, one
//! account's stall holds back only its own items, and a caller needs the grant
//! of every method a batch names. A batch cut after its COMMIT, racing another
//! through a second instance, or killed half way takes each item once.

use std::time::Duration;

use ledger::grpc::auth::Tokens;
use ledger::proto::pb::{self, batch_item::Call, batch_result::Result as Outcome};
use mysql_async::prelude::Queryable as _;
use prost::Message as _;
use tonic::Code;
use tonic::metadata::MetadataMap;
use tonic::transport::Channel;

use crate::support::proxy::Proxy;
use crate::support::server::until;
use crate::support::{
    Config, LedgerProcess, TestApp, TestDb, assert_audit_passes, capture, charge, credit, leg,
    limits, open_account, open_funded, place_hold, post, raw_call, refund, replayed, reverse,
    set_limits, token_line, transfer, void, with_token,
};

type Client = pb::ledger_client::LedgerClient<tonic::transport::Channel>;

fn batch(calls: Vec<Call>) -> pb::BatchRequest {
    pb::BatchRequest {
        items: calls
            .into_iter()
            .map(|call| pb::BatchItem { call: Some(call) })
            .collect(),
    }
}

async fn run(client: &mut Client, calls: Vec<Call>) -> Vec<pb::BatchResult> {
    client
        .batch(batch(calls))
        .await
        .expect("a batch is answered")
        .into_inner()
        .results
}

/// The item's status when it failed: its code and its ErrorInfo reason.
fn failure(result: &pb::BatchResult) -> (Code, String) {
    match &result.result {
        Some(Outcome::Error(status)) => {
            let reason = status
                .details
                .iter()
                .find(|any| any.type_url.ends_with("google.rpc.ErrorInfo"))
                .and_then(|any| tonic_types::pb::ErrorInfo::decode(any.value.as_slice()).ok())
                .map(|info| info.reason)
                .unwrap_or_default();
            (Code::from_i32(status.code), reason)
        }
        other => panic!("expected a failure, found {other:?}"),
    }
}

fn lookup(key: &str) -> pb::LookupKeyRequest {
    pb::LookupKeyRequest {
        idempotency_key: key.into(),
    }
}

/// An item's reply is the call's: the same key sent to the item's own RPC
/// replays it byte for byte, LookupKey names the wrapped method, and a key used
/// by a call before the batch replays that call's outcome in the item.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_item_is_exactly_the_call_it_wraps() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let a = app.funded_account("USD", 1_000).await;
    let b = app.funded_account("USD", 0).await;
    let mut client = app.client().await;
    let before = client.charge(charge("before", a, 5)).await.unwrap();
    let before = before.into_inner();

    let results = run(
        &mut client,
        vec![
            Call::Charge(charge("b-charge", a, 100)),
            Call::Credit(credit("b-credit", b, 7)),
            Call::Transfer(transfer("b-transfer", a, b, 50)),
            Call::Charge(charge("before", a, 5)),
        ],
    )
    .await;
    assert_eq!(results.len(), 4);
    let Some(Outcome::Charge(charged)) = &results[0].result else {
        panic!("{:?}", results[0]);
    };
    let Some(Outcome::Transfer(moved)) = &results[2].result else {
        panic!("{:?}", results[2]);
    };
    assert!(!results[0].replayed && !results[1].replayed && !results[2].replayed);
    assert_eq!(results[3].result, Some(Outcome::Charge(before)));
    assert!(results[3].replayed, "a key used before the batch replays");

    let channel = app.channel().await;
    let (meta, body) = raw_call(channel.clone(), "Charge", charge("b-charge", a, 100))
        .await
        .unwrap();
    assert!(replayed(&meta));
    assert_eq!(body.as_ref(), charged.encode_to_vec().as_slice());
    let (meta, body) = raw_call(channel, "Transfer", transfer("b-transfer", a, b, 50))
        .await
        .unwrap();
    assert!(replayed(&meta));
    assert_eq!(body.as_ref(), moved.encode_to_vec().as_slice());

    let record = client.lookup_key(lookup("b-credit")).await.unwrap();
    assert_eq!(record.into_inner().method, "/ledger.v1.Ledger/Credit");
    assert_eq!(db.balance(a).await, 1_000 - 5 - 100 - 50);
    assert_eq!(db.balance(b).await, 57);

    // And the other way round: the batch again replays every item.
    let again = run(
        &mut client,
        vec![
            Call::Charge(charge("b-charge", a, 100)),
            Call::Credit(credit("b-credit", b, 7)),
        ],
    )
    .await;
    assert!(again.iter().all(|r| r.replayed), "{again:?}");
    assert_eq!(again[0].result, results[0].result);
    assert_eq!(db.balance(a).await, 1_000 - 5 - 100 - 50);
    assert_audit_passes(&db.url).await;
}

/// Items on one account see every earlier item's effect: a credit then two
/// charges that only the credit pays for, repeated on several accounts
/// interleaved in one batch, leave each account's first charge paid and its
/// second declined.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn items_sharing_an_account_take_effect_in_item_order() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let mut accounts = Vec::new();
    for _ in 0..4 {
        accounts.push(app.funded_account("USD", 0).await);
    }
    let mut calls = Vec::new();
    for step in 0..3 {
        for (i, account) in accounts.iter().enumerate() {
            calls.push(match step {
                0 => Call::Credit(credit(&format!("c-{i}"), *account, 100)),
                n => Call::Charge(charge(&format!("d-{i}-{n}"), *account, 60)),
            });
        }
    }
    let results = run(&mut client, calls).await;
    for (i, account) in accounts.iter().enumerate() {
        assert!(matches!(results[i].result, Some(Outcome::Credit(_))));
        assert!(matches!(results[4 + i].result, Some(Outcome::Charge(_))));
        assert_eq!(
            failure(&results[8 + i]),
            (Code::FailedPrecondition, "INSUFFICIENT_FUNDS".to_owned())
        );
        assert_eq!(db.balance(*account).await, 40);
    }
    assert_audit_passes(&db.url).await;
}

/// A key twice in one batch: the second item gets the first's outcome,
/// replayed; with another request, the second is IDEMPOTENCY_KEY_REUSED.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_key_twice_in_one_batch_gets_the_first_outcome() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let a = app.funded_account("USD", 100).await;
    let mut client = app.client().await;
    let results = run(
        &mut client,
        vec![
            Call::Charge(charge("twice", a, 10)),
            Call::Charge(charge("twice", a, 10)),
            Call::Charge(charge("reused", a, 10)),
            Call::Charge(charge("reused", a, 20)),
        ],
    )
    .await;
    assert!(!results[0].replayed);
    assert!(results[1].replayed);
    assert_eq!(results[0].result, results[1].result);
    assert_eq!(
        failure(&results[3]),
        (
            Code::FailedPrecondition,
            "IDEMPOTENCY_KEY_REUSED".to_owned()
        )
    );
    assert_eq!(db.balance(a).await, 80);
}

/// An invalid item is its own INVALID_ARGUMENT, as its call would be, and
/// leaves its key free; the other items run. An item that names no call is
/// invalid too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_invalid_item_fails_alone_and_leaves_its_key_free() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let a = app.funded_account("USD", 100).await;
    let mut client = app.client().await;
    let mut request = batch(vec![
        Call::Charge(charge("bad", a, 0)),
        Call::Charge(charge("good", a, 10)),
    ]);
    request.items.push(pb::BatchItem { call: None });
    let results = client.batch(request).await.unwrap().into_inner().results;
    assert_eq!(failure(&results[0]).0, Code::InvalidArgument);
    assert!(matches!(results[1].result, Some(Outcome::Charge(_))));
    assert_eq!(failure(&results[2]).0, Code::InvalidArgument);

    let fresh = client.charge(charge("bad", a, 5)).await.unwrap();
    assert!(
        !replayed(fresh.metadata()),
        "the invalid item claimed nothing"
    );
    assert_eq!(db.balance(a).await, 85);
}

/// More than 1,000 items: INVALID_ARGUMENT for the whole batch, nothing run.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_over_its_bound_runs_nothing() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let a = app.funded_account("USD", 10_000).await;
    let mut client = app.client().await;
    let calls = (0..1_001)
        .map(|i| Call::Charge(charge(&format!("over-{i}"), a, 1)))
        .collect();
    let status = client.batch(batch(calls)).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert_eq!(db.balance(a).await, 10_000);
    let status = client.lookup_key(lookup("over-0")).await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound);

    let calls = (0..1_000)
        .map(|i| Call::Charge(charge(&format!("full-{i}"), a, 1)))
        .collect();
    let results = run(&mut client, calls).await;
    assert!(
        results
            .iter()
            .all(|r| matches!(r.result, Some(Outcome::Charge(_))))
    );
    assert_eq!(db.balance(a).await, 9_000);
}

/// While a batch of Z's writer waits on Z's row (an outside transaction holds
/// it, `busy_writer_on`), a batch's item on Z is held back as a call on Z would
/// be, and its items on other accounts commit (LookupKey finds them) while the
/// batch waits for Z's item alone; let go, the batch answers every item.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stalled_account_holds_back_only_its_own_items() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let z = app.funded_account("USD", 100).await;
    let a = app.funded_account("USD", 100).await;
    let b = app.funded_account("USD", 100).await;
    let holder = app.busy_writer_on(&db, z).await;
    let mut client = app.client().await;
    let sent = tokio::spawn(async move {
        run(
            &mut client,
            vec![
                Call::Charge(charge("s-z", z, 1)),
                Call::Charge(charge("s-a", a, 1)),
                Call::Charge(charge("s-b", b, 1)),
            ],
        )
        .await
    });
    let mut client = app.client().await;
    for key in ["s-a", "s-b"] {
        until(&format!("{key} commits while Z stalls"), async || {
            client.lookup_key(lookup(key)).await.is_ok()
        })
        .await;
    }
    assert!(!sent.is_finished(), "the batch waits for Z's item");
    drop(holder);
    let results = sent.await.unwrap();
    assert!(
        results
            .iter()
            .all(|r| matches!(r.result, Some(Outcome::Charge(_))))
    );
    assert_eq!(db.balance(z).await, 98, "the stalled charge and Z's item");
}

/// A caller must be granted Batch and every method its items name: a batch
/// naming one method it may not call runs none of its items.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_needs_the_grant_of_every_method_it_names() {
    let db = TestDb::new();
    let lines = token_line("teller", "teller-token")
        + &token_line("importer", "importer-token").replace('\n', " Batch,Charge\n")
        + &token_line("charger", "charger-token").replace('\n', " Charge\n");
    let app = TestApp::spawn_with(
        &db,
        Config {
            auth: Some(Tokens::parse(&lines).unwrap()),
            ..Config::default()
        },
    )
    .await;
    let mut teller = with_token(app.channel().await, "teller-token");
    let account = teller
        .open_account(pb::OpenAccountRequest {
            idempotency_key: "open".into(),
            currency: "USD".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .account
        .unwrap()
        .account_id;
    teller.credit(credit("fund", account, 100)).await.unwrap();

    let mut importer = with_token(app.channel().await, "importer-token");
    let denied = importer
        .batch(batch(vec![
            Call::Charge(charge("g-1", account, 1)),
            Call::Credit(credit("g-2", account, 1)),
        ]))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
    let mut charger = with_token(app.channel().await, "charger-token");
    let denied = charger
        .batch(batch(vec![Call::Charge(charge("g-3", account, 1))]))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
    assert_eq!(db.balance(account).await, 100, "nothing ran");

    let allowed = importer
        .batch(batch(vec![Call::Charge(charge("g-4", account, 1))]))
        .await
        .unwrap()
        .into_inner();
    assert!(matches!(
        allowed.results[0].result,
        Some(Outcome::Charge(_))
    ));
    assert_eq!(db.balance(account).await, 99);
}

/// The call an item wraps, sent on its own: its metadata and its reply's bytes.
async fn call_alone(channel: Channel, call: Call) -> (MetadataMap, Vec<u8>) {
    let answer = match call {
        Call::OpenAccount(r) => raw_call(channel, "OpenAccount", r).await,
        Call::Credit(r) => raw_call(channel, "Credit", r).await,
        Call::Charge(r) => raw_call(channel, "Charge", r).await,
        Call::Transfer(r) => raw_call(channel, "Transfer", r).await,
        Call::Refund(r) => raw_call(channel, "Refund", r).await,
        Call::PlaceHold(r) => raw_call(channel, "PlaceHold", r).await,
        Call::CaptureHold(r) => raw_call(channel, "CaptureHold", r).await,
        Call::VoidHold(r) => raw_call(channel, "VoidHold", r).await,
        Call::Post(r) => raw_call(channel, "Post", r).await,
        Call::Reverse(r) => raw_call(channel, "Reverse", r).await,
        Call::SetLimits(r) => raw_call(channel, "SetLimits", r).await,
        Call::CreateSubscription(r) => raw_call(channel, "CreateSubscription", r).await,
        Call::PauseSubscription(r) => raw_call(channel, "PauseSubscription", r).await,
        Call::ResumeSubscription(r) => raw_call(channel, "ResumeSubscription", r).await,
        Call::DeleteSubscription(r) => raw_call(channel, "DeleteSubscription", r).await,
    };
    let (meta, body) = answer.expect("the call is answered");
    (meta, body.to_vec())
}

/// An item's reply as its call's would be on the wire.
fn reply_bytes(result: &pb::BatchResult) -> Vec<u8> {
    match &result.result {
        Some(Outcome::OpenAccount(r)) => r.encode_to_vec(),
        Some(Outcome::Credit(r)) => r.encode_to_vec(),
        Some(Outcome::Charge(r)) => r.encode_to_vec(),
        Some(Outcome::Transfer(r)) => r.encode_to_vec(),
        Some(Outcome::Refund(r)) => r.encode_to_vec(),
        Some(Outcome::PlaceHold(r)) => r.encode_to_vec(),
        Some(Outcome::CaptureHold(r)) => r.encode_to_vec(),
        Some(Outcome::VoidHold(r)) => r.encode_to_vec(),
        Some(Outcome::Post(r)) => r.encode_to_vec(),
        Some(Outcome::Reverse(r)) => r.encode_to_vec(),
        Some(Outcome::SetLimits(r)) => r.encode_to_vec(),
        Some(Outcome::CreateSubscription(r)) => r.encode_to_vec(),
        Some(
            Outcome::PauseSubscription(r)
            | Outcome::ResumeSubscription(r)
            | Outcome::DeleteSubscription(r),
        ) => r.encode_to_vec(),
        other => panic!("expected a reply, found {other:?}"),
    }
}

/// The calls that need nothing but two accounts: every keyed RPC but those
/// that name an entry, a hold, a key or a subscription.
fn first_calls(p: &str, a: u64, b: u64) -> Vec<Call> {
    let hour = Duration::from_secs(3600);
    vec![
        Call::OpenAccount(open_account(&format!("{p}-open"), None)),
        Call::Credit(credit(&format!("{p}-credit"), b, 100)),
        Call::Charge(charge(&format!("{p}-charge"), a, 50)),
        Call::Transfer(transfer(&format!("{p}-transfer"), a, b, 20)),
        Call::PlaceHold(place_hold(&format!("{p}-hold-1"), a, 30, hour)),
        Call::PlaceHold(place_hold(&format!("{p}-hold-2"), a, 10, hour)),
        Call::Post(post(&format!("{p}-post"), vec![leg(a, b, 5), leg(b, a, 1)])),
        Call::SetLimits(set_limits(
            &format!("{p}-limits"),
            b,
            limits(Some(-10), None),
        )),
        Call::CreateSubscription(pb::CreateSubscriptionRequest {
            idempotency_key: format!("{p}-subscribe"),
            url: format!("https://hooks.invalid/{p}"),
            account_ids: vec![a],
            after_sequence: Some(0),
            ..Default::default()
        }),
    ]
}

/// The calls that name what `first` made: its charge's entry, its holds, its
/// transfer's key, and its subscription (paused, resumed, deleted, in order).
fn second_calls(p: &str, first: &[pb::BatchResult]) -> Vec<Call> {
    let Some(Outcome::Charge(charged)) = &first[2].result else {
        panic!("{:?}", first[2]);
    };
    let Some(Outcome::CreateSubscription(created)) = &first[8].result else {
        panic!("{:?}", first[8]);
    };
    let subscribed = created.subscription.as_ref().unwrap().subscription_id;
    let hold = |result: &pb::BatchResult| match &result.result {
        Some(Outcome::PlaceHold(placed)) => placed.hold.as_ref().unwrap().hold_id,
        other => panic!("{other:?}"),
    };
    vec![
        Call::Refund(refund(
            &format!("{p}-refund"),
            charged.entry.as_ref().unwrap().entry_id,
            10,
        )),
        Call::CaptureHold(capture(&format!("{p}-capture"), hold(&first[4]), 30)),
        Call::VoidHold(void(&format!("{p}-void"), hold(&first[5]))),
        Call::Reverse(reverse(&format!("{p}-reverse"), &format!("{p}-transfer"))),
        Call::PauseSubscription(subscription(&format!("{p}-pause"), subscribed)),
        Call::ResumeSubscription(subscription(&format!("{p}-resume"), subscribed)),
        Call::DeleteSubscription(subscription(&format!("{p}-delete"), subscribed)),
    ]
}

fn subscription(key: &str, subscription_id: u64) -> pb::SubscriptionRequest {
    pb::SubscriptionRequest {
        idempotency_key: key.into(),
        subscription_id,
    }
}

/// Every keyed request as an item, both ways round: an item then the call with
/// its key (replayed, byte for byte the item's reply), and a call then the item
/// (replayed, byte for byte the call's reply).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_keyed_request_is_an_item_replayed_both_ways() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let a = app.funded_account("USD", 1_000).await;
    let b = app.funded_account("USD", 0).await;
    let mut client = app.client().await;
    let channel = app.channel().await;

    // An item, then its call.
    let first = run(&mut client, first_calls("item", a, b)).await;
    let second = run(&mut client, second_calls("item", &first)).await;
    let calls = first_calls("item", a, b)
        .into_iter()
        .chain(second_calls("item", &first));
    let results = first.iter().chain(&second);
    let mut methods = std::collections::BTreeSet::new();
    for (call, result) in calls.zip(results) {
        assert!(!result.replayed, "{result:?}");
        let expected = reply_bytes(result);
        methods.insert(format!("{call:?}").split('(').next().unwrap().to_owned());
        let (meta, body) = call_alone(channel.clone(), call).await;
        assert!(replayed(&meta), "{result:?}");
        assert_eq!(body, expected, "{result:?}");
    }
    assert_eq!(methods.len(), 15, "every keyed RPC: {methods:?}");

    // A call, then its item.
    let mut alone = Vec::new();
    for call in first_calls("call", a, b) {
        alone.push(call_alone(channel.clone(), call).await);
    }
    let first = run(&mut client, first_calls("call", a, b)).await;
    for call in second_calls("call", &first) {
        alone.push(call_alone(channel.clone(), call).await);
    }
    let second = run(&mut client, second_calls("call", &first)).await;
    assert_eq!(alone.len(), 16);
    for ((meta, body), result) in alone.iter().zip(first.iter().chain(&second)) {
        assert!(!replayed(meta), "each call ran once, first");
        assert!(result.replayed, "{result:?}");
        assert_eq!(&reply_bytes(result), body, "{result:?}");
    }
    // Each round: charge 50, transfer 20, post 5 less 1, captured 30, refunded
    // 10, the transfer reversed; the holds' rest voided.
    assert_eq!(db.balance(a).await, 1_000 - 2 * (50 + 5 - 1 + 30 - 10));
    assert_eq!(db.balance(b).await, 2 * (100 + 5 - 1));
    assert_audit_passes(&db.url).await;
}

/// The journal's entries under keys starting with `prefix`, and their keys.
async fn entries_and_keys(db: &TestDb, prefix: &str) -> (u64, u64) {
    db.sql()
        .await
        .exec_first(
            "SELECT COUNT(*), COUNT(DISTINCT idempotency_key) FROM entries \
             WHERE idempotency_key LIKE ?",
            (format!("{prefix}%"),),
        )
        .await
        .unwrap()
        .unwrap()
}

/// A batch's COMMIT goes through and the database's answer is lost (the
/// connection cut once the outcomes' upsert went out): whatever the first
/// answer said of an item is what the batch sent again replays, and every item
/// took effect once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_cut_after_its_commit_and_sent_again_takes_each_item_once() {
    let db = TestDb::new();
    let proxy = Proxy::start(db.server()).await;
    let app = TestApp::spawn_with(
        &db,
        Config {
            database_url: Some(proxy.url(db.server(), &db.name)),
            ..Config::default()
        },
    )
    .await;
    let mut accounts = Vec::new();
    for _ in 0..8 {
        accounts.push(app.funded_account("USD", 1_000).await);
    }
    let calls = || -> Vec<Call> {
        (0..40)
            .map(|i| Call::Charge(charge(&format!("cut-{i}"), accounts[i % 8], 1)))
            .collect()
    };
    let mut client = app.client().await;
    // On a single server a group commit stores its outcomes with one upsert.
    let forwarded = proxy.cut_after_forwarding("VALUES(outcome_code)", Duration::from_millis(50));
    let first = client.batch(batch(calls())).await;
    tokio::time::timeout(Duration::from_secs(10), forwarded.notified())
        .await
        .expect("a COMMIT of the batch went out and was cut");

    let again = run(&mut client, calls()).await;
    assert!(
        again
            .iter()
            .all(|r| matches!(r.result, Some(Outcome::Charge(_)))),
        "{again:?}"
    );
    if let Ok(first) = first {
        for (was, is) in first.into_inner().results.iter().zip(&again) {
            if matches!(was.result, Some(Outcome::Charge(_))) {
                assert!(is.replayed, "an outcome the first answer gave is replayed");
                assert_eq!(was.result, is.result);
            }
        }
    }
    assert_eq!(
        entries_and_keys(&db, "cut-").await,
        (40, 40),
        "each item one entry"
    );
    for account in accounts {
        assert_eq!(db.balance(account).await, 1_000 - 5);
    }
    assert_audit_passes(&db.url).await;
}

/// Two batches naming the same keys, sent at once through two instances of
/// one ledger: the first items of both wait on a row an outside transaction
/// holds (one on the account, the other on the key the first claimed), so both
/// are in flight together. Each key takes effect once: one batch's item runs
/// it, the other's replays the same outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_batches_sharing_keys_through_two_instances_take_each_key_once() {
    let db = TestDb::new();
    let one = TestApp::spawn(&db).await;
    let two = TestApp::spawn(&db).await;
    let z = one.funded_account("USD", 1_000).await;
    let others = [
        one.funded_account("USD", 1_000).await,
        one.funded_account("USD", 1_000).await,
    ];
    let calls = || -> Vec<Call> {
        (0..10)
            .map(|i| {
                let account = if i < 5 { z } else { others[i % 2] };
                Call::Charge(charge(&format!("shared-{i}"), account, 10))
            })
            .collect()
    };
    let holder = db.lock_account(z).await;
    let mut sent = Vec::new();
    for app in [&one, &two] {
        let mut client = app.client().await;
        let calls = calls();
        sent.push(tokio::spawn(async move { run(&mut client, calls).await }));
    }
    until("both batches wait on Z's row or on a key", async || {
        db.waiting_on("accounts").await + db.waiting_on("idempotency_keys").await >= 2
    })
    .await;
    drop(holder);
    let mut answers = Vec::new();
    for batch in sent {
        answers.push(batch.await.unwrap());
    }
    for (a, b) in answers[0].iter().zip(&answers[1]) {
        assert!(matches!(a.result, Some(Outcome::Charge(_))), "{a:?}");
        assert_eq!(a.result, b.result, "one outcome a key");
        assert!(a.replayed != b.replayed, "one ran it, the other replayed");
    }
    for i in 0..10 {
        assert_eq!(db.entries_for_key(&format!("shared-{i}")).await, 1);
    }
    assert_eq!(db.balance(z).await, 1_000 - 50);
    assert_eq!(db.balance(others[0]).await, 1_000 - 20, "shared-6 and -8");
    assert_eq!(
        db.balance(others[1]).await,
        1_000 - 30,
        "shared-5, -7 and -9"
    );
    assert_audit_passes(&db.url).await;
}

/// `ledger serve` killed with SIGKILL while a batch of 1,000 items is half
/// done (one account's row held, so its items wait), then the batch sent
/// again to a new process: every item has an outcome, each key one entry, and
/// every balance is what its items imply.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_killed_half_way_and_sent_again_takes_each_item_once() {
    let db = TestDb::new();
    let server = LedgerProcess::serve(&db, &[]).await;
    let mut client = pb::ledger_client::LedgerClient::new(server.channel());
    let mut accounts = Vec::new();
    for i in 0..50 {
        accounts.push(open_funded(&mut client, &format!("k{i}"), "USD", 100_000).await);
    }
    let calls = || -> Vec<Call> {
        (0..1_000)
            .map(|i| {
                Call::Charge(charge(
                    &format!("killed-{i}"),
                    accounts[i % 50],
                    1 + i64::try_from(i % 7).unwrap(),
                ))
            })
            .collect()
    };
    // The first account's row held: its 20 items cannot commit, so the batch
    // is still running when the server is killed.
    let holder = db.lock_account(accounts[0]).await;
    let sent = tokio::spawn({
        let mut client = client.clone();
        let request = batch(calls());
        async move { client.batch(request).await }
    });
    until("some of the batch's items committed", async || {
        entries_and_keys(&db, "killed-").await.0 >= 100
    })
    .await;
    server.signal(nix::sys::signal::Signal::SIGKILL);
    let status = server.wait(Duration::from_secs(10)).await;
    assert!(!status.success(), "{status:?}");
    drop(holder);
    let cut = sent.await.unwrap();
    assert!(cut.is_err(), "the killed server answered nothing");
    let (done, _) = entries_and_keys(&db, "killed-").await;
    assert!(done <= 980, "killed half way: {done} items had committed");

    let server = LedgerProcess::serve(&db, &[]).await;
    let mut client = pb::ledger_client::LedgerClient::new(server.channel());
    let results = run(&mut client, calls()).await;
    assert!(
        results
            .iter()
            .all(|r| matches!(r.result, Some(Outcome::Charge(_))))
    );
    let replays = results.iter().filter(|r| r.replayed).count();
    assert!(
        replays >= 100,
        "{replays} replayed, at least what had committed"
    );
    assert_eq!(
        entries_and_keys(&db, "killed-").await,
        (1_000, 1_000),
        "each item one entry"
    );
    for (n, account) in accounts.iter().enumerate() {
        let charged: i64 = (0..1_000)
            .filter(|i| i % 50 == n)
            .map(|i| 1 + i64::try_from(i % 7).unwrap())
            .sum();
        assert_eq!(db.balance(*account).await, 100_000 - charged);
    }
    assert_audit_passes(&db.url).await;
}
