//! Callers that give up, callers that cannot be served: every call is answered
//! within its deadline, and whatever a call did not finish leaves no trace.

use std::sync::Arc;
use std::time::Duration;

use mysql_async::prelude::Queryable as _;
use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};
use tokio::time::Instant;
use tonic::Code;

use crate::support::{
    Config, HeldCharge, TestApp, TestDb, assert_audit_passes, charge, replayed, with_deadline,
};

/// A duplicate behind an original that holds its transaction open (before its
/// COMMIT, until the duplicate is answered), called with a 1 s deadline, is
/// answered within about 2 s and leaves no trace; the original still completes,
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_short_deadline_behind_a_long_transaction() {
    let db = TestDb::new();
    let held = HeldCharge::start(&db, "long", Duration::from_secs(30)).await;

    let started = Instant::now();
    let status = held
        .app
        .client()
        .await
        .charge(with_deadline(
            charge("long", held.account, 10),
            Duration::from_secs(1),
        ))
        .await
        .unwrap_err();
    let waited = started.elapsed();
    assert!(
        matches!(status.code(), Code::DeadlineExceeded | Code::Aborted),
        "{status:?}"
    );
    assert!(waited < Duration::from_secs(2), "answered after {waited:?}");
    assert_eq!(
        db.key_rows("long").await,
        0,
        "nothing is committed under the key yet"
    );

    held.gate.release();
    let (original_md, _) = held.original.await.unwrap().unwrap();
    assert!(!replayed(&original_md));
    assert_eq!(db.entries_for_key("long").await, 1);
    assert_eq!(db.balance(held.account).await, 90);
}

/// 1,000 calls abandoned by their client at random points (seeded) leave no
/// transaction open and no lock held; each key is fully done or absent, and the
/// pool serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_cancelled_calls_leave_nothing_half_done() {
    let db = TestDb::new();
    let app = TestApp::spawn_with(
        &db,
        Config {
            pool_size: 8,
            ..Config::default()
        },
    )
    .await;
    let accounts = [
        app.funded_account("USD", 1_000_000).await,
        app.funded_account("USD", 1_000_000).await,
    ];
    let seed: u64 = rand::random();
    println!("cancellation seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    // Spread over connections: HTTP/2 servers end a connection on which a client
    // resets streams in bulk (the rapid-reset defence), which would fail calls
    // that were not cancelled.
    let mut clients = Vec::new();
    for _ in 0..50 {
        clients.push(app.client().await);
    }
    let calls: Vec<_> = (0..1000)
        .map(|i| {
            let mut client = clients[i % clients.len()].clone();
            let account = accounts[i % 2];
            let give_up = Duration::from_micros(rng.random_range(0..300_000));
            tokio::spawn(async move {
                let call = client.charge(charge(&format!("cancel-{i}"), account, 1));
                match tokio::time::timeout(give_up, call).await {
                    Ok(Ok(_)) => "ok".to_owned(),
                    Ok(Err(status)) => format!("{:?} {}", status.code(), status.message()),
                    Err(_) => "cancelled".to_owned(),
                }
            })
        })
        .collect();
    let mut answers = std::collections::BTreeMap::new();
    for call in calls {
        *answers.entry(call.await.unwrap()).or_insert(0) += 1;
    }
    println!("answers before the clients gave up: {answers:?}");

    db.until_no_open_transactions().await;
    assert_audit_passes(&db.url).await;
    let done = db
        .count("SELECT COUNT(*) FROM idempotency_keys WHERE idempotency_key LIKE 'cancel-%'")
        .await;
    let entries = db
        .count("SELECT COUNT(*) FROM entries WHERE idempotency_key LIKE 'cancel-%'")
        .await;
    assert_eq!(done, entries, "every key that exists was fully done");
    println!("{done} keys took effect, {} left no trace", 1000 - done);
    let balances = db.balance(accounts[0]).await + db.balance(accounts[1]).await;
    assert_eq!(balances, 2_000_000 - i64::try_from(entries).unwrap());

    let mut client = app.client().await;
    for i in 0..20 {
        client
            .charge(charge(&format!("after-{i}"), accounts[0], 1))
            .await
            .expect("the pool serves on");
    }
}

/// A pool of 2 and 100 concurrent calls stuck behind a locked account: callers get
/// UNAVAILABLE or ABORTED (DEADLINE_EXCEEDED if a lock wait outlasts what is left of
/// their deadline) before their deadline instead of hanging, and the service serves
/// normally once the lock is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overload_is_answered_within_the_deadline() {
    let db = TestDb::new();
    let config = Config {
        pool_size: 2,
        lock_wait: Duration::from_secs(1),
        ..Config::default()
    };
    let app = TestApp::spawn_with(&db, config).await;
    let account = app.funded_account("USD", 1_000).await;

    let mut holder = db.lock_account(account).await;
    let deadline = Duration::from_secs(3);
    let barrier = Arc::new(tokio::sync::Barrier::new(100));
    let client = app.client().await;
    let calls: Vec<_> = (0..100)
        .map(|i| {
            let mut client = client.clone();
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                let started = Instant::now();
                let answer = client
                    .charge(with_deadline(
                        charge(&format!("load-{i}"), account, 1),
                        deadline,
                    ))
                    .await;
                (answer.map(drop), started.elapsed())
            })
        })
        .collect();
    let mut codes = std::collections::BTreeMap::new();
    for call in calls {
        let (answer, took) = call.await.unwrap();
        let status = answer.expect_err("nothing can be charged while the account is locked");
        assert!(took < deadline, "answered after {took:?}");
        // DEADLINE_EXCEEDED when a lock wait (whole seconds) outlasts the deadline.
        assert!(
            matches!(
                status.code(),
                Code::Unavailable | Code::Aborted | Code::DeadlineExceeded
            ),
            "{status:?}"
        );
        *codes.entry(format!("{:?}", status.code())).or_insert(0) += 1;
    }
    println!("overload answers: {codes:?}");
    holder.query_drop("ROLLBACK").await.unwrap();

    let mut client = app.client().await;
    for i in 0..100 {
        client
            .charge(charge(&format!("load-{i}"), account, 1))
            .await
            .expect("serves normally");
    }
    assert_eq!(db.balance(account).await, 900);
}
