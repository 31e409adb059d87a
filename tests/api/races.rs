//! Storms of concurrent duplicates, across two instances on one database.

use std::sync::Arc;

use ledger::proto::pb;
use tokio::sync::Barrier;
use tokio::time::Duration;

use crate::support::{Config, Gate, TestApp, TestDb, charge, raw_call, replayed, until_waiting};

/// Pools sized so the 64-call storm has a connection for every call (the 63
/// parked duplicates and the held original) while two storm tests running side
/// by side stay under the server's default 151 connections.
fn storm_config(gate: Option<Gate>) -> Config {
    Config {
        pool_size: 34,
        lock_wait: Duration::from_secs(60),
        pool_timeout: Duration::from_secs(60),
        gate,
        ..Config::default()
    }
}

/// 64 identical charges at once through two instances. The first to claim the key
/// is held before COMMIT until the other 63 wait behind it (parked on its row, or
/// queued behind it for a group-commit writer), so every one of them is a true
/// in-flight duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_identical_charges_debit_once() {
    let db = TestDb::new();
    let gate = Gate::new("storm");
    let a = TestApp::spawn_with(&db, storm_config(Some(gate.clone()))).await;
    let b = TestApp::spawn_with(&db, storm_config(Some(gate.clone()))).await;
    let account = a.funded_account("USD", 1_000).await;
    let channels = [a.channel().await, b.channel().await];

    let barrier = Arc::new(Barrier::new(64));
    let calls: Vec<_> = (0..64)
        .map(|i| {
            let channel = channels[i % 2].clone();
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                raw_call(channel, "Charge", charge("storm", account, 7)).await
            })
        })
        .collect();
    gate.reached().await;
    until_waiting(&db, &[&a, &b], 63).await;
    gate.release();

    let mut replies = Vec::new();
    for call in calls {
        replies.push(call.await.unwrap().expect("every call succeeds"));
    }
    let fresh = replies.iter().filter(|(md, _)| !replayed(md)).count();
    assert_eq!(fresh, 1, "exactly one call did the work");
    assert!(
        replies.iter().all(|(_, body)| *body == replies[0].1),
        "64 identical replies"
    );
    assert_eq!(db.entries_for_key("storm").await, 1);
    assert_eq!(db.balance(account).await, 993);
}

/// 20 keys x 16 duplicates each, all at once on one hot account.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_keys_times_sixteen_duplicates_on_one_account() {
    let db = TestDb::new();
    // Fewer connections than calls: most calls also queue for the pool.
    let config = Config {
        pool_size: 16,
        ..storm_config(None)
    };
    let a = TestApp::spawn_with(&db, config.clone()).await;
    let b = TestApp::spawn_with(&db, config).await;
    let start = 100_000;
    let account = a.funded_account("USD", start).await;
    let channels = [a.channel().await, b.channel().await];

    let amount = |k: i64| 10 + k;
    let barrier = Arc::new(Barrier::new(20 * 16));
    let mut calls = Vec::new();
    for k in 0..20_i64 {
        for d in 0..16 {
            let channel = channels[d % 2].clone();
            let barrier = barrier.clone();
            calls.push((
                k,
                tokio::spawn(async move {
                    barrier.wait().await;
                    let request = charge(&format!("hot-{k}"), account, amount(k));
                    raw_call(channel, "Charge", request).await
                }),
            ));
        }
    }
    let mut by_key: Vec<Vec<_>> = vec![Vec::new(); 20];
    for (k, call) in calls {
        by_key[usize::try_from(k).unwrap()].push(call.await.unwrap().expect("call succeeds"));
    }
    for (k, replies) in by_key.iter().enumerate() {
        assert_eq!(
            replies.iter().filter(|(md, _)| !replayed(md)).count(),
            1,
            "key {k}"
        );
        assert!(
            replies.iter().all(|(_, body)| *body == replies[0].1),
            "key {k}"
        );
        let entry = <pb::ChargeReply as prost::Message>::decode(replies[0].1.clone())
            .unwrap()
            .entry
            .unwrap();
        assert_eq!(entry.amount, amount(i64::try_from(k).unwrap()));
    }
    let total: i64 = (0..20).map(amount).sum();
    assert_eq!(db.balance(account).await, start - total);
    assert_eq!(
        db.count("SELECT COUNT(*) FROM entries WHERE kind = 1")
            .await,
        20
    );
}

/// When an original rolls back with several duplicates parked on its row, InnoDB
/// may resolve their race for the row with deadlocks; those retry and replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_duplicates_of_a_rolled_back_original_charge_once() {
    let db = TestDb::new();
    let gate = Gate::new("rb");
    let a = TestApp::spawn_with(
        &db,
        Config {
            pool_size: 4,
            ..storm_config(Some(gate.clone()))
        },
    )
    .await;
    let b = TestApp::spawn_with(
        &db,
        Config {
            pool_size: 10,
            ..storm_config(None)
        },
    )
    .await;
    let account = a.funded_account("USD", 100).await;

    let original = tokio::spawn(raw_call(
        a.channel().await,
        "Charge",
        charge("rb", account, 40),
    ));
    gate.reached().await;
    let channel = b.channel().await;
    let duplicates: Vec<_> = (0..8)
        .map(|_| {
            tokio::spawn(raw_call(
                channel.clone(),
                "Charge",
                charge("rb", account, 40),
            ))
        })
        .collect();
    until_waiting(&db, &[&a, &b], 8).await;
    original.abort();

    let mut replies = Vec::new();
    for d in duplicates {
        replies.push(d.await.unwrap().expect("every duplicate succeeds"));
    }
    assert_eq!(replies.iter().filter(|(md, _)| !replayed(md)).count(), 1);
    assert!(replies.iter().all(|(_, body)| *body == replies[0].1));
    assert_eq!(db.balance(account).await, 60);
    assert_eq!(db.entries_for_key("rb").await, 1);
}
