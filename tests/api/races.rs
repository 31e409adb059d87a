//! Storms of concurrent duplicates, across two instances on one database.

use ledger::proto::pb;

use crate::support::{
    Config, HeldCharge, HeldStorm, TestApp, TestDb, assert_one_did_the_work, at_once, charge,
    raw_call, storm_config, until_waiting,
};

/// 64 identical charges at once through two instances. The first to claim the key
/// is held before COMMIT until the other 63 wait behind it (parked on its row, or
/// queued behind it for a group-commit writer), so every one of them is a true
/// in-flight duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_identical_charges_debit_once() {
    let db = TestDb::new();
    let storm = HeldStorm::start(&db, "storm", storm_config()).await;
    let account = storm.a.funded_account("USD", 1_000).await;

    let replies = storm
        .run(&db, 64, "Charge", charge("storm", account, 7))
        .await;
    assert_one_did_the_work(&replies, "64 identical charges");
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
        ..storm_config()
    };
    let a = TestApp::spawn_with(&db, config.clone()).await;
    let b = TestApp::spawn_with(&db, config).await;
    let start = 100_000;
    let account = a.funded_account("USD", start).await;
    let channels = [a.channel().await, b.channel().await];

    // Call n is duplicate n % 16 of key n / 16: each key's copies alternate
    // between the two instances.
    let amount = |k: i64| 10 + k;
    let calls = at_once(20 * 16, &channels, |n, channel| {
        let k = i64::try_from(n / 16).unwrap();
        raw_call(
            channel,
            "Charge",
            charge(&format!("hot-{k}"), account, amount(k)),
        )
    });
    let mut by_key: Vec<Vec<_>> = vec![Vec::new(); 20];
    for (n, call) in calls.into_iter().enumerate() {
        by_key[n / 16].push(call.await.unwrap().expect("call succeeds"));
    }
    for (k, replies) in by_key.iter().enumerate() {
        assert_one_did_the_work(replies, &format!("key {k}"));
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
    let held = HeldCharge::start_with(
        &db,
        "rb",
        Config {
            pool_size: 4,
            ..storm_config()
        },
    )
    .await;
    let b = TestApp::spawn_with(
        &db,
        Config {
            pool_size: 10,
            ..storm_config()
        },
    )
    .await;

    let channel = b.channel().await;
    let duplicates: Vec<_> = (0..8)
        .map(|_| {
            tokio::spawn(raw_call(
                channel.clone(),
                "Charge",
                charge("rb", held.account, 10),
            ))
        })
        .collect();
    until_waiting(&db, &[&held.app, &b], 8).await;
    held.original.abort();

    let mut replies = Vec::new();
    for d in duplicates {
        replies.push(d.await.unwrap().expect("every duplicate succeeds"));
    }
    assert_one_did_the_work(&replies, "8 duplicates of a rolled-back original");
    assert_eq!(db.balance(held.account).await, 90);
    assert_eq!(db.entries_for_key("rb").await, 1);
}
