//! The seed scenarios and the keys' byte-exact identity.

use bytes::Bytes;
use ledger::proto::pb;
use tokio::task::JoinHandle;
use tokio::time::Duration;
use tonic::metadata::MetadataMap;

use crate::support::{Config, Gate, TestApp, TestDb, charge, raw_call, replayed};

type Answer = JoinHandle<Result<(MetadataMap, Bytes), tonic::Status>>;

/// Instance `a`, whose transactions for `key` wait at the returned gate before
/// COMMIT, and instance `b`, on the same database.
async fn two_instances_gating(db: &TestDb, key: &str) -> (TestApp, TestApp, Gate) {
    let gate = Gate::new(key);
    let config = Config {
        gate: Some(gate.clone()),
        ..Config::default()
    };
    let a = TestApp::spawn_with(db, config).await;
    let b = TestApp::spawn(db).await;
    (a, b, gate)
}

/// Charge 25 with key req-99 through `a`, held at the gate after its probe and
/// debit; then its duplicate through `b`, shown to be still waiting after 300 ms.
async fn held_original_and_waiting_duplicate(
    a: &TestApp,
    b: &TestApp,
    gate: &Gate,
    account: u64,
) -> (Answer, Answer) {
    let original = tokio::spawn(raw_call(
        a.channel().await,
        "Charge",
        charge("req-99", account, 25),
    ));
    gate.reached().await;
    let mut duplicate = tokio::spawn(raw_call(
        b.channel().await,
        "Charge",
        charge("req-99", account, 25),
    ));
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut duplicate)
            .await
            .is_err(),
        "the duplicate waits for the original"
    );
    (original, duplicate)
}

/// Seed scenario 1 (a retry through another instance replays), then seed scenario
/// 2 (a duplicate racing an uncommitted original waits for it, then replays).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seed_scenarios() {
    let db = TestDb::new();
    let (a, b, gate) = two_instances_gating(&db, "req-99").await;
    let account = a.funded_account("USD", 100).await;

    // Scenario 1.
    let (first_md, first) = raw_call(a.channel().await, "Charge", charge("req-42", account, 30))
        .await
        .unwrap();
    assert!(!replayed(&first_md));
    assert_eq!(db.balance(account).await, 70);
    let (retry_md, retry) = raw_call(b.channel().await, "Charge", charge("req-42", account, 30))
        .await
        .unwrap();
    assert!(replayed(&retry_md), "the retry is marked as a replay");
    assert_eq!(retry, first, "the replay is byte-identical");
    assert_eq!(
        first.as_ref(),
        db.stored_outcome("req-42").await,
        "the wire carries the stored bytes"
    );
    assert_eq!(db.balance(account).await, 70);
    assert_eq!(db.entries_for_key("req-42").await, 1);

    // Scenario 2: the original is held after its probe and debit.
    let (original, duplicate) = held_original_and_waiting_duplicate(&a, &b, &gate, account).await;
    assert_eq!(
        db.parked_probes().await,
        1,
        "the duplicate is parked on the key's row lock"
    );
    gate.release();

    let (original_md, original) = original.await.unwrap().unwrap();
    let (duplicate_md, duplicate) = duplicate.await.unwrap().unwrap();
    assert!(!replayed(&original_md));
    assert!(replayed(&duplicate_md));
    assert_eq!(duplicate, original);
    assert_eq!(db.balance(account).await, 45);
    assert_eq!(db.entries_for_key("req-99").await, 1);
}

/// Seed scenario 2 with the original rolled back: the waiting duplicate does the
/// work itself, and exactly one debit exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_duplicate_of_a_rolled_back_original_does_the_work() {
    let db = TestDb::new();
    let (a, b, gate) = two_instances_gating(&db, "req-99").await;
    let account = a.funded_account("USD", 70).await;

    let (original, duplicate) = held_original_and_waiting_duplicate(&a, &b, &gate, account).await;

    // The original's caller goes away: its transaction rolls back instead of committing.
    original.abort();
    let (md, reply) = duplicate.await.unwrap().unwrap();
    assert!(!replayed(&md), "the duplicate did the work itself");
    let entry = <pb::ChargeReply as prost::Message>::decode(reply)
        .unwrap()
        .entry
        .unwrap();
    assert_eq!(entry.balance_after, 45);
    assert_eq!(db.balance(account).await, 45);
    assert_eq!(db.entries_for_key("req-99").await, 1);
    db.until_no_open_transactions().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn keys_are_compared_byte_for_byte() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let account = app.funded_account("USD", 100).await;
    let mut client = app.client().await;

    client.charge(charge("k1", account, 10)).await.unwrap();
    let upper = client.charge(charge("K1", account, 10)).await.unwrap();
    assert!(!replayed(upper.metadata()), "K1 is not k1");
    assert_eq!(db.balance(account).await, 80);

    let long = "x".repeat(255);
    let first = client.charge(charge(&long, account, 5)).await.unwrap();
    let again = client.charge(charge(&long, account, 5)).await.unwrap();
    assert!(replayed(again.metadata()));
    assert_eq!(first.into_inner(), again.into_inner());
    assert_eq!(db.balance(account).await, 75);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_keyed_method_replays() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;

    let open = pb::OpenAccountRequest {
        idempotency_key: "open-eur".into(),
        currency: "EUR".into(),
        ..Default::default()
    };
    let opened = client.open_account(open.clone()).await.unwrap();
    let reopened = client.open_account(open).await.unwrap();
    assert!(replayed(reopened.metadata()));
    let account = opened.into_inner().account.unwrap();
    assert_eq!(reopened.into_inner().account.unwrap(), account);
    assert_eq!(db.count("SELECT COUNT(*) FROM accounts").await, 1);

    let credit = pb::CreditRequest {
        idempotency_key: "credit-1".into(),
        account_id: account.account_id,
        amount: 500,
        currency: "EUR".into(),
        description: "refund #7 ✓".into(),
        ..Default::default()
    };
    let credited = client.credit(credit.clone()).await.unwrap().into_inner();
    let again = client.credit(credit).await.unwrap();
    assert!(replayed(again.metadata()));
    assert_eq!(again.into_inner(), credited);
    let entry = credited.entry.unwrap();
    assert_eq!(entry.kind(), pb::EntryKind::Credit);
    assert_eq!(entry.description, "refund #7 ✓");
    assert_eq!(entry.balance_after, 500);

    let read = client
        .get_account(pb::GetAccountRequest {
            account_id: account.account_id,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(read.balance, 500);
    assert_eq!(read.created_at, account.created_at);
}

/// Every migration applied, each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn instances_starting_together_migrate_once() {
    let db = TestDb::new();
    let (a, b) = tokio::join!(TestApp::spawn(&db), TestApp::spawn(&db));
    let account = a.funded_account("USD", 10).await;
    let read = b
        .client()
        .await
        .get_account(pb::GetAccountRequest {
            account_id: account,
        })
        .await
        .unwrap();
    assert_eq!(read.into_inner().balance, 10);
    let migrations = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
        .unwrap()
        .count();
    assert_eq!(
        db.count("SELECT COUNT(*) FROM __diesel_schema_migrations")
            .await,
        u64::try_from(migrations).unwrap()
    );
}
