//! Transfers: two entries committed together, exactly once under their key, and
//! no deadlock whichever way money moves between two accounts.

use ledger::proto::pb;
use prost::Message as _;
use tonic::Code;

use crate::support::{
    Config, HeldStorm, TestApp, TestDb, assert_audit_passes, assert_one_did_the_work, at_once,
    raw_call, reason, replayed, storm_config, transfer,
};

/// 64 identical Transfers through two instances, the first held before COMMIT
/// until the other 63 are parked on its key: one debit, one credit, 64 identical
/// replies.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_identical_transfers_move_money_once() {
    let db = TestDb::new();
    let storm = HeldStorm::start(&db, "xfer", storm_config()).await;
    let from = storm.a.funded_account("USD", 1_000).await;
    let to = storm.a.funded_account("USD", 0).await;

    let request = transfer("xfer", from, to, 250);
    let replies = storm.run(&db, 64, "Transfer", request).await;
    assert_one_did_the_work(&replies, "64 identical transfers");
    let reply = pb::TransferReply::decode(replies[0].1.clone()).unwrap();
    let (debit, credit) = (reply.debit.unwrap(), reply.credit.unwrap());
    assert_eq!(
        (
            debit.kind(),
            debit.account_id,
            debit.counterparty_account_id,
            debit.balance_after
        ),
        (pb::EntryKind::TransferOut, from, to, 750)
    );
    assert_eq!(
        (
            credit.kind(),
            credit.account_id,
            credit.counterparty_account_id,
            credit.balance_after
        ),
        (pb::EntryKind::TransferIn, to, from, 250)
    );
    assert_eq!(db.entries_for_key("xfer").await, 2);
    assert_eq!((db.balance(from).await, db.balance(to).await), (750, 250));
}

/// 300 transfers at once between two accounts, half each way, through two
/// instances: accounts are locked in ascending id order whatever the direction,
/// so none deadlocks, no error reaches a caller, and money is conserved.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_hundred_transfers_both_ways_never_deadlock() {
    let db = TestDb::new();
    let config = Config {
        pool_size: 16,
        max_attempts: Some(1),
        ..storm_config()
    };
    let first = TestApp::spawn_with(&db, config.clone()).await;
    let second = TestApp::spawn_with(&db, config).await;
    let x = first.funded_account("USD", 100_000).await;
    let y = first.funded_account("USD", 100_000).await;
    let channels = [first.channel().await, second.channel().await];

    let calls = at_once(300, &channels, |i, channel| {
        let i = i64::try_from(i).unwrap();
        let (from, to) = if i % 3 == 0 { (y, x) } else { (x, y) };
        raw_call(
            channel,
            "Transfer",
            transfer(&format!("t{i}"), from, to, 1 + i),
        )
    });
    let mut net_to_y = 0;
    for (i, call) in calls.into_iter().enumerate() {
        call.await.unwrap().expect("no error reaches a caller");
        let i = i64::try_from(i).unwrap();
        net_to_y += if i % 3 == 0 { -(1 + i) } else { 1 + i };
    }
    assert_eq!(db.balance(x).await, 100_000 - net_to_y);
    assert_eq!(db.balance(y).await, 100_000 + net_to_y);
    assert_eq!(
        db.count("SELECT COUNT(*) FROM entries WHERE kind IN (3, 4)")
            .await,
        600
    );
    assert_audit_passes(&db.url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declined_transfers_move_nothing_and_replay() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let from = app.funded_account("USD", 100).await;
    let to = app.funded_account("USD", 0).await;
    let euros = {
        let mut client = app.client().await;
        crate::support::open_funded(&mut client, "eur", "EUR", 0).await
    };
    let mut client = app.client().await;

    let cases = [
        (
            transfer("too-much", from, to, 101),
            Code::FailedPrecondition,
            "INSUFFICIENT_FUNDS",
        ),
        (
            transfer("no-dest", from, 999_999, 1),
            Code::NotFound,
            "ACCOUNT_NOT_FOUND",
        ),
        (
            transfer("no-source", 999_999, to, 1),
            Code::NotFound,
            "ACCOUNT_NOT_FOUND",
        ),
        (
            transfer("currency", from, euros, 1),
            Code::FailedPrecondition,
            "CURRENCY_MISMATCH",
        ),
        (
            transfer("to-self", from, from, 1),
            Code::InvalidArgument,
            "INVALID_REQUEST",
        ),
    ];
    for (request, code, expected) in cases {
        let first = client.transfer(request.clone()).await.unwrap_err();
        assert_eq!(
            (first.code(), reason(&first).as_str()),
            (code, expected),
            "{request:?}"
        );
        let again = client.transfer(request.clone()).await.unwrap_err();
        assert_eq!(again.message(), first.message());
        // Declines are stored and replayed; invalid requests never reach the database.
        let stored = code != Code::InvalidArgument;
        assert_eq!(replayed(again.metadata()), stored, "{request:?}");
        assert_eq!(
            db.key_rows(&request.idempotency_key).await,
            u64::from(stored)
        );
    }
    let missing = client
        .transfer(transfer("no-source-2", 999_999, to, 1))
        .await
        .unwrap_err();
    assert_eq!(
        crate::support::info(&missing, "account_id").as_deref(),
        Some("999999"),
        "the decline names the missing account"
    );
    assert_eq!((db.balance(from).await, db.balance(to).await), (100, 0));
    assert_eq!(
        db.count("SELECT COUNT(*) FROM entries WHERE kind IN (3, 4)")
            .await,
        0
    );
}
