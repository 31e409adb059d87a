//! LookupKey (SPEC 3.7): what happened under a key, without executing anything;
//! it waits for an operation still in flight, so "not found" is definitive.

use std::time::Duration;

use ledger::proto::pb;
use tonic::Code;

use crate::support::{
    Config, HeldCharge, TestApp, TestDb, capture, charge, credit, place_hold, reason, refund,
    transfer, void,
};

fn lookup(key: &str) -> pb::LookupKeyRequest {
    pb::LookupKeyRequest {
        idempotency_key: key.into(),
    }
}

/// The original is held uncommitted before its COMMIT; LookupKey parks on its key,
/// and answers with the original's reply once it commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lookup_waits_for_the_operation_in_flight() {
    let db = TestDb::new();
    let held = HeldCharge::start_with(&db, "in-flight", Config::default()).await;
    let mut client = held.app.client().await;
    let looked = tokio::spawn(async move { client.lookup_key(lookup("in-flight")).await });
    db.until_waiting_on("key lookups", 1).await;
    assert!(!looked.is_finished(), "the lookup waits for the original");
    held.gate.release();

    let (_, reply) = held.original.await.unwrap().unwrap();
    let record = looked.await.unwrap().expect("found").into_inner();
    assert_eq!(record.idempotency_key, "in-flight");
    assert_eq!(record.method, "/ledger.v1.Ledger/Charge");
    assert!(record.created_at.is_some());
    assert_eq!(
        record.outcome,
        Some(pb::key_record::Outcome::Reply(reply.to_vec())),
        "the exact bytes a replay returns"
    );
}

/// The original rolls back (its caller gave up) while the lookup waits: nothing
/// committed, so the lookup says so, and nothing was executed by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lookup_of_a_rolled_back_original_finds_nothing() {
    let db = TestDb::new();
    let held = HeldCharge::start_with(&db, "gone", Config::default()).await;
    let mut client = held.app.client().await;
    let looked = tokio::spawn(async move { client.lookup_key(lookup("gone")).await });
    db.until_waiting_on("key lookups", 1).await;
    held.original.abort();
    let status = looked.await.unwrap().unwrap_err();
    assert_eq!(
        (status.code(), reason(&status).as_str()),
        (Code::NotFound, "KEY_NOT_FOUND")
    );
    assert_eq!(db.key_rows("gone").await, 0);
    assert_eq!(db.balance(held.account).await, 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_claim_nothing_for_unused_keys_and_show_declines() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let account = app.funded_account("USD", 10).await;

    let unused = client.lookup_key(lookup("never-used")).await.unwrap_err();
    assert_eq!(
        (unused.code(), reason(&unused).as_str()),
        (Code::NotFound, "KEY_NOT_FOUND")
    );
    assert_eq!(
        db.key_rows("never-used").await,
        0,
        "a lookup executes nothing"
    );

    let declined = client
        .charge(charge("too-much", account, 11))
        .await
        .unwrap_err();
    let record = client
        .lookup_key(lookup("too-much"))
        .await
        .unwrap()
        .into_inner();
    let Some(pb::key_record::Outcome::Error(status)) = record.outcome else {
        panic!("a stored decline: {record:?}");
    };
    assert_eq!(status.code, Code::FailedPrecondition as i32);
    assert_eq!(status.message, declined.message());

    let invalid = client.lookup_key(lookup("")).await.unwrap_err();
    assert_eq!(invalid.code(), Code::InvalidArgument);
}

/// The keyed methods.
const METHODS: [&str; 8] = [
    "OpenAccount",
    "Credit",
    "Charge",
    "Transfer",
    "Refund",
    "PlaceHold",
    "CaptureHold",
    "VoidHold",
];

/// One key is one operation across all methods: used once on any keyed method,
/// it is refused on every other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_used_on_one_method_is_refused_on_every_other() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut c = app.client().await;
    let account = app.funded_account("USD", 1_000).await;
    let other = app.funded_account("USD", 0).await;
    let entry = c
        .charge(charge("seed-charge", account, 10))
        .await
        .unwrap()
        .into_inner()
        .entry
        .unwrap()
        .entry_id;
    let hold = c
        .place_hold(place_hold(
            "seed-hold",
            account,
            10,
            Duration::from_secs(60),
        ))
        .await
        .unwrap()
        .into_inner()
        .hold
        .unwrap()
        .hold_id;

    for first in METHODS {
        let key = format!("reused-{first}");
        call(&mut c, first, &key, account, other, entry, hold)
            .await
            .map_err(|s| (s.code(), reason(&s)))
            .ok();
        for second in METHODS.iter().filter(|m| **m != first) {
            let status = call(&mut c, second, &key, account, other, entry, hold)
                .await
                .expect_err(&format!("{first} then {second}"));
            assert_eq!(
                (status.code(), reason(&status).as_str()),
                (Code::FailedPrecondition, "IDEMPOTENCY_KEY_REUSED"),
                "{first} then {second}"
            );
        }
    }
}

/// Calls `method` under `key` with a valid request; the answer's code only.
async fn call(
    c: &mut pb::ledger_client::LedgerClient<tonic::transport::Channel>,
    method: &str,
    key: &str,
    account: u64,
    other: u64,
    entry: u64,
    hold: u64,
) -> Result<(), tonic::Status> {
    let ttl = Duration::from_secs(60);
    match method {
        "OpenAccount" => c
            .open_account(pb::OpenAccountRequest {
                idempotency_key: key.into(),
                currency: "USD".into(),
                ..Default::default()
            })
            .await
            .map(drop),
        "Credit" => c.credit(credit(key, account, 1)).await.map(drop),
        "Charge" => c.charge(charge(key, account, 1)).await.map(drop),
        "Transfer" => c.transfer(transfer(key, account, other, 1)).await.map(drop),
        "Refund" => c.refund(refund(key, entry, 1)).await.map(drop),
        "PlaceHold" => c
            .place_hold(place_hold(key, account, 1, ttl))
            .await
            .map(drop),
        "CaptureHold" => c.capture_hold(capture(key, hold, 1)).await.map(drop),
        "VoidHold" => c.void_hold(void(key, hold)).await.map(drop),
        other => panic!("no method {other}"),
    }
}
