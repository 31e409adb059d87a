//! Key retention (SPEC 3.5): key rows are purged after a retention, and a purged
//! key never makes its operation take effect twice: a retry of one that took
//! effect is refused as expired; one whose operation was declined runs anew.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ledger::db::admin::purge::{BATCH_ROWS, Purger};
use ledger::proto::pb;
use mysql_async::prelude::Queryable as _;
use tokio_util::sync::CancellationToken;
use tonic::Code;

use crate::support::{
    Config, TestApp, TestDb, assert_audit_passes, capture, charge, credit, info, leg, place_hold,
    post, raw_call, reason, replayed, transfer, void,
};

type Client = pb::ledger_client::LedgerClient<tonic::transport::Channel>;

const HOUR: Duration = Duration::from_secs(3600);

/// An instance that purges key rows older than a second.
async fn purging(db: &TestDb) -> TestApp {
    TestApp::spawn_with(
        db,
        Config {
            key_retention: Some(Duration::from_secs(1)),
            ..Config::default()
        },
    )
    .await
}

/// The status is IDEMPOTENCY_KEY_EXPIRED of `method`, first used at a real instant.
fn assert_expired(status: &tonic::Status, method: &str) {
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    assert_eq!(reason(status), "IDEMPOTENCY_KEY_EXPIRED", "{status:?}");
    assert_eq!(info(status, "method").as_deref(), Some(method));
    let first_used = info(status, "first_used_at").expect("first_used_at");
    chrono::DateTime::parse_from_rfc3339(&first_used).expect("RFC 3339");
}

async fn lookup(client: &mut Client, key: &str) -> Result<pb::KeyRecord, tonic::Status> {
    client
        .lookup_key(pb::LookupKeyRequest {
            idempotency_key: key.into(),
        })
        .await
        .map(tonic::Response::into_inner)
}

async fn account(client: &mut Client, id: u64) -> pb::Account {
    client
        .get_account(pb::GetAccountRequest { account_id: id })
        .await
        .unwrap()
        .into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purged_charge_is_refused_and_never_charged_again() {
    let db = TestDb::new();
    let app = purging(&db).await;
    let mut c = app.client().await;
    let id = app.funded_account("USD", 100).await;
    c.charge(charge("ride-1", id, 30)).await.unwrap();
    db.until_purged("ride-1").await;

    let again = c.charge(charge("ride-1", id, 30)).await.unwrap_err();
    assert_expired(&again, "Charge");
    assert_eq!(db.balance(id).await, 70, "charged once");
    assert_eq!(db.entries_for_key("ride-1").await, 1);
    assert_eq!(db.key_rows("ride-1").await, 0, "the refusal stores nothing");
    assert_expired(&lookup(&mut c, "ride-1").await.unwrap_err(), "Charge");

    // A different request under the purged key is refused the same way.
    let other = c.charge(charge("ride-1", id, 5)).await.unwrap_err();
    assert_expired(&other, "Charge");
    assert_audit_passes(&db.url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purged_transfer_is_refused_and_moves_nothing_again() {
    let db = TestDb::new();
    let app = purging(&db).await;
    let mut c = app.client().await;
    let (from, to) = (
        app.funded_account("USD", 100).await,
        app.funded_account("USD", 0).await,
    );
    c.transfer(transfer("pay-1", from, to, 40)).await.unwrap();
    db.until_purged("pay-1").await;

    let again = c
        .transfer(transfer("pay-1", from, to, 40))
        .await
        .unwrap_err();
    assert_expired(&again, "Transfer");
    assert_eq!((db.balance(from).await, db.balance(to).await), (60, 40));
    assert_eq!(
        db.entries_for_key("pay-1").await,
        2,
        "one debit, one credit"
    );
}

/// Every leg's entries carry the post's key, so a purged post is refused, not
/// run again, and names its method.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purged_post_is_refused_and_moves_nothing_again() {
    let db = TestDb::new();
    let app = purging(&db).await;
    let mut c = app.client().await;
    let (a, b, fee) = (
        app.funded_account("USD", 100).await,
        app.funded_account("USD", 0).await,
        app.funded_account("USD", 0).await,
    );
    let sale = || post("sale-1", vec![leg(a, b, 40), leg(a, fee, 2)]);
    c.post(sale()).await.unwrap();
    db.until_purged("sale-1").await;

    let again = c.post(sale()).await.unwrap_err();
    assert_expired(&again, "Post");
    assert_eq!(
        (
            db.balance(a).await,
            db.balance(b).await,
            db.balance(fee).await
        ),
        (58, 40, 2)
    );
    assert_eq!(db.entries_for_key("sale-1").await, 4);
    assert_audit_passes(&db.url).await;
}

/// Placing, capturing and voiding a hold, and opening an account: each leaves its
/// key on what it changed, so none of them runs twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purged_hold_and_account_keys_are_refused() {
    let db = TestDb::new();
    let app = purging(&db).await;
    let mut c = app.client().await;
    let id = app.funded_account("USD", 100).await;
    let placed = |key: &str, amount| place_hold(key, id, amount, HOUR);
    let first = c
        .place_hold(placed("hold-1", 30))
        .await
        .unwrap()
        .into_inner();
    let second = c
        .place_hold(placed("hold-2", 20))
        .await
        .unwrap()
        .into_inner();
    let (first, second) = (first.hold.unwrap().hold_id, second.hold.unwrap().hold_id);
    c.capture_hold(capture("take-1", first, 30)).await.unwrap();
    c.void_hold(void("free-2", second)).await.unwrap();
    let open = pb::OpenAccountRequest {
        idempotency_key: "open-late".into(),
        currency: "USD".into(),
        ..Default::default()
    };
    c.open_account(open.clone()).await.unwrap();
    for key in ["hold-1", "take-1", "free-2", "open-late"] {
        db.until_purged(key).await;
    }
    let accounts = db.count("SELECT COUNT(*) FROM accounts").await;

    assert_expired(
        &c.place_hold(placed("hold-1", 30)).await.unwrap_err(),
        "PlaceHold",
    );
    assert_expired(
        &c.capture_hold(capture("take-1", first, 30))
            .await
            .unwrap_err(),
        "CaptureHold",
    );
    assert_expired(
        &c.void_hold(void("free-2", second)).await.unwrap_err(),
        "VoidHold",
    );
    assert_expired(&c.open_account(open).await.unwrap_err(), "OpenAccount");

    let after = account(&mut c, id).await;
    assert_eq!((after.balance, after.held), (70, 0));
    assert_eq!(db.count("SELECT COUNT(*) FROM holds").await, 2);
    assert_eq!(db.count("SELECT COUNT(*) FROM accounts").await, accounts);
    assert_audit_passes(&db.url).await;
}

/// A declined call changed nothing, so once its key is purged a retry is a new
/// request, and this time the money is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purged_decline_runs_again() {
    let db = TestDb::new();
    let app = purging(&db).await;
    let mut c = app.client().await;
    let id = app.funded_account("USD", 100).await;
    let declined = c.charge(charge("big", id, 150)).await.unwrap_err();
    assert_eq!(reason(&declined), "INSUFFICIENT_FUNDS");
    let replay = c.charge(charge("big", id, 150)).await.unwrap_err();
    assert!(replayed(replay.metadata()), "a stored decline, replayed");
    db.until_purged("big").await;
    c.credit(credit("top-up", id, 100)).await.unwrap();

    let ran = c.charge(charge("big", id, 150)).await.unwrap();
    assert!(!replayed(ran.metadata()));
    assert_eq!(db.balance(id).await, 50);
    assert_eq!(db.entries_for_key("big").await, 1);
}

/// Rows a test writes as if they were old: key rows with distinct `created_at`
/// instants two days ago, through a cross join of digits (MySQL bounds recursive
/// CTEs at 1,000 rows).
async fn seed_old_keys(conn: &mut mysql_async::Conn, prefix: &str, rows: u64) {
    let digits = "(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
        UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
        UNION ALL SELECT 8 UNION ALL SELECT 9)";
    conn.query_drop(format!(
        "INSERT INTO idempotency_keys \
           (namespace, idempotency_key, method, fingerprint, outcome_code, outcome, created_at) \
         SELECT '', CONCAT('{prefix}', n), 3, UNHEX(SHA2(n, 256)), 9, x'0809', \
                UTC_TIMESTAMP(6) - INTERVAL 2 DAY + INTERVAL n MICROSECOND \
         FROM (SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d + 100000 * g.d AS n \
               FROM {digits} a, {digits} b, {digits} c, {digits} e, {digits} f, {digits} g) s \
         WHERE n < {rows}"
    ))
    .await
    .unwrap();
}

/// 200,000 old key rows purged while a storm of new keys and their replays runs
/// against the same table: the purge finishes in batches of at most BATCH_ROWS,
/// every call is answered as without it (each replay byte-identical to its
/// original), and only old rows go.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_purge_during_a_storm_changes_no_answer() {
    const OLD: u64 = 200_000;
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let id = app.funded_account("USD", 1_000_000).await;
    seed_old_keys(&mut db.sql().await, "old-", OLD).await;

    let purging = Arc::new(AtomicBool::new(true));
    let started = Arc::new(tokio::sync::Barrier::new(5));
    let mut storm = Vec::new();
    for worker in 0..4 {
        let (channel, purging, started) = (app.channel().await, purging.clone(), started.clone());
        storm.push(tokio::spawn(async move {
            let mut calls = 0u64;
            started.wait().await;
            // Every worker keeps going until the purge has finished.
            while purging.load(Ordering::SeqCst) || calls == 0 {
                let key = format!("new-{worker}-{calls}");
                let (_, first) = raw_call(channel.clone(), "Charge", charge(&key, id, 1))
                    .await
                    .unwrap();
                let (meta, again) = raw_call(channel.clone(), "Charge", charge(&key, id, 1))
                    .await
                    .unwrap();
                assert!(replayed(&meta), "{key}: the second call is a replay");
                assert_eq!(first, again, "{key}: replayed byte for byte");
                calls += 1;
            }
            calls
        }));
    }
    started.wait().await;
    let purged = Purger::new(std::slice::from_ref(&db.url), HOUR)
        .round(Duration::ZERO, &CancellationToken::new())
        .await
        .unwrap()
        .expect("the purge lock is free");
    purging.store(false, Ordering::SeqCst);
    let mut charged = 0;
    for worker in storm {
        charged += worker.await.unwrap();
    }

    assert_eq!(purged.rows, OLD);
    assert!(purged.largest <= BATCH_ROWS, "{purged:?}");
    assert!(purged.batches > OLD / BATCH_ROWS, "{purged:?}");
    assert_eq!(
        db.count("SELECT COUNT(*) FROM idempotency_keys WHERE idempotency_key LIKE 'old-%'")
            .await,
        0
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM idempotency_keys WHERE idempotency_key LIKE 'new-%'")
            .await,
        charged
    );
    assert_eq!(
        db.balance(id).await,
        1_000_000 - i64::try_from(charged).unwrap()
    );
    assert_audit_passes(&db.url).await;
}

/// Before effects carried keys, an opened account's and a voided hold's key rows
/// were the only record of their keys: the purge keeps those, and no other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_rows_older_than_effect_keys_are_kept_only_where_they_are_the_record() {
    let db = TestDb::new();
    let _app = TestApp::spawn(&db).await;
    let mut conn = db.sql().await;
    conn.query_drop(
        "UPDATE ledger_marks SET at = UTC_TIMESTAMP(6) - INTERVAL 1 DAY WHERE name = 'effect-keys'",
    )
    .await
    .unwrap();
    for (key, method, code) in [
        ("legacy-open", 1, 0),
        ("legacy-void", 8, 0),
        ("legacy-open-declined", 1, 9),
        ("legacy-charge", 3, 0),
    ] {
        conn.exec_drop(
            "INSERT INTO idempotency_keys \
               (namespace, idempotency_key, method, fingerprint, outcome_code, outcome, created_at) \
             VALUES ('', ?, ?, UNHEX(SHA2(?, 256)), ?, x'', UTC_TIMESTAMP(6) - INTERVAL 2 DAY)",
            (key, method, key, code),
        )
        .await
        .unwrap();
    }
    let purged = Purger::new(std::slice::from_ref(&db.url), HOUR)
        .round(Duration::ZERO, &CancellationToken::new())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(purged.rows, 2);
    for (key, kept) in [
        ("legacy-open", 1),
        ("legacy-void", 1),
        ("legacy-open-declined", 0),
        ("legacy-charge", 0),
    ] {
        assert_eq!(db.key_rows(key).await, kept, "{key}");
    }
}

/// One instance of a fleet purges at a time: a round finds the lock another holds
/// and skips.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_instance_purges_at_a_time() {
    let db = TestDb::new();
    let _app = TestApp::spawn(&db).await;
    let mut holder = db.sql().await;
    let held: Option<i64> = holder
        .query_first("SELECT GET_LOCK(CONCAT('ledger.purge.', DATABASE()), 0)")
        .await
        .unwrap();
    assert_eq!(held, Some(1));
    let purger = Purger::new(std::slice::from_ref(&db.url), HOUR);
    let skipped = purger
        .round(Duration::ZERO, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(skipped, None);
    holder
        .query_drop("DO RELEASE_LOCK(CONCAT('ledger.purge.', DATABASE()))")
        .await
        .unwrap();
    let ran = purger
        .round(Duration::ZERO, &CancellationToken::new())
        .await
        .unwrap();
    assert!(ran.is_some());
}
