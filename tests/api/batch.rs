//! Batch (SPEC 3.13): each item is exactly the call it wraps (its key, its
//! stored reply byte for byte, its declines), items that share an account or a
//! key take effect in item order, an invalid item leaves its key free, a batch
//! over 1,000 items runs nothing, one account's stall holds back only its own
//! items, and a caller needs the grant of every method a batch names.

use ledger::grpc::auth::Tokens;
use ledger::proto::pb::{self, batch_item::Call, batch_result::Result as Outcome};
use prost::Message as _;
use tonic::Code;

use crate::support::server::until;
use crate::support::{
    Config, TestApp, TestDb, assert_audit_passes, charge, credit, raw_call, replayed, token_line,
    transfer, with_token,
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
